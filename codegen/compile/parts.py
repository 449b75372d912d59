"""A generated module compiled in parts, side by side: its source marks each function, and
the tables with the module's entry point, as a unit (`#if MDL_PART(unit)` ... `#endif`,
templates/module.cpp.j2); a part is one compile of the whole file with `-DMDL_SPLIT` and
`-DMDL_IN_<unit>` for each of its units, so that the others fall away before the compiler
parses them, and the parts' objects are linked into the module. Compiled whole, without
those flags, the file is every unit at once (what `mdlc emit`'s CMake project builds).

How many parts: one a core this process may run on (`MDL_BUILD_JOBS` sets it), but no more
than the module's units, and each with at least a toolchain's `part_bytes` of code, since
each part parses the headers again. The units are dealt out largest first, each to the part
with the least code so far."""
from __future__ import annotations

import os
import re

from ..ir.diagnostics import MdlBuildError

# A unit's opening and closing lines, as templates/module.cpp.j2 writes them.
UNIT = re.compile(r"^#if MDL_PART\((\w+)\)\n(.*?)^#endif", re.M | re.S)
JOBS_VARIABLE = "MDL_BUILD_JOBS"


def units(text: str) -> dict[str, int]:
    """The units a generated source marks, each with its size in bytes (a unit written in
    several places, the tables, counts them all); none in a file without marks."""
    sizes: dict[str, int] = {}
    for m in UNIT.finditer(text):
        sizes[m.group(1)] = sizes.get(m.group(1), 0) + len(m.group(2))
    return sizes


def build_jobs() -> int:
    """Compiles a build may run at once: `MDL_BUILD_JOBS`, else the cores this process may
    run on."""
    value = os.environ.get(JOBS_VARIABLE)
    if value is None:
        return len(os.sched_getaffinity(0))
    if not value.isdigit() or int(value) < 1:
        raise MdlBuildError(f"{JOBS_VARIABLE}={value!r}: expected a whole number of compiles "
                            f"to run at once, 1 or more")
    return int(value)


def split(sizes: dict[str, int], jobs: int, part_bytes: int) -> list[list[str]]:
    """The units of each part: as many parts as `jobs` allows with at least `part_bytes`
    of code each (one part holding every unit where that is one), the largest units dealt
    first, each to the part with the least code so far."""
    count = max(1, min(jobs, len(sizes), sum(sizes.values()) // max(1, part_bytes)))
    parts: list[list[str]] = [[] for _ in range(count)]
    loads = [0] * count
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        k = loads.index(min(loads))
        parts[k].append(name)
        loads[k] += sizes[name]
    return parts


def defines(part: list[str]) -> list[str]:
    """The compiler's flags that make one compile of the source this part."""
    return ["-DMDL_SPLIT", *(f"-DMDL_IN_{name}" for name in part)]
