"""Build times, measured side by side in one run: a bare pybind11+numpy module compiled
with `c++ -O3` (the yardstick the backend issue set), the runtime's one-time build, a
cold `mdlc build` of a model with the runtime already built (compiled in parts side by
side, and whole: `MDL_BUILD_JOBS=1`), and a cached `mdlc build`.

    python3 benchmarks/build_time.py [--reps 3] [--model examples/charlm.mdl]

Each repetition uses a fresh cache directory (cold builds really compile); prints a
Markdown table of medians in seconds and the ratio of the model build to the yardstick.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import pybind11

BARE = """#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
namespace py = pybind11;
PYBIND11_MODULE(bare, m) { m.def("total", [](py::array_t<float> a) { return a.size(); }); }
"""
REPO = Path(__file__).resolve().parents[1]


def seconds(cmd: list[str], env: dict | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def bare_module(work: Path) -> float:
    source = work / "bare.cpp"
    source.write_text(BARE)
    return seconds(["c++", "-O3", "-shared", "-fPIC", "-std=c++17",
                    f"-I{sysconfig.get_paths()['include']}", f"-I{pybind11.get_include()}",
                    str(source), "-o", str(work / "bare.so")])


def mdl_builds(work: Path, model: str, defines: list[str]) -> dict[str, float]:
    """The runtime once, a cold model build, the same compiled whole (under another module
    name: another key), and a cached build, in a fresh cache."""
    env = {**os.environ, "MDL_CACHE_DIR": str(work / "cache")}
    env.pop("MDL_BUILD_JOBS", None)
    runtime = seconds([sys.executable, "-c",
                       "from codegen.compile.runtime import build_runtime; build_runtime()"], env)
    mdlc = [sys.executable, "-m", "codegen.cli", "build", model, "-o", str(work / "out"),
            *defines]
    cold = seconds(mdlc, env)
    whole = seconds([*mdlc, "--name", "whole"], {**env, "MDL_BUILD_JOBS": "1"})
    return {"runtime": runtime, "cold": cold, "whole": whole, "cached": seconds(mdlc, env)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--model", default=str(REPO / "examples" / "charlm.mdl"))
    parser.add_argument("-D", dest="defines", action="append", default=[])
    args = parser.parse_args()
    rows: dict[str, list[float]] = {k: [] for k in ("bare", "runtime", "cold", "whole",
                                                    "cached")}
    for _ in range(args.reps):  # interleaved, so a drifting machine moves every row
        with tempfile.TemporaryDirectory() as tmp:
            rows["bare"].append(bare_module(Path(tmp)))
            built = mdl_builds(Path(tmp), args.model, [f"-D{d}" for d in args.defines])
            for key, value in built.items():
                rows[key].append(value)
    med = {k: statistics.median(v) for k, v in rows.items()}
    name = Path(args.model).name
    print(f"median of {args.reps}, {os.cpu_count()} cores\n")
    print("| what | seconds | / bare pybind11 module |\n| --- | --- | --- |")
    for key, label in (("bare", "bare pybind11+numpy module, `c++ -O3`"),
                       ("runtime", "mdl runtime, once per cache"),
                       ("cold", f"`mdlc build {name}`, cold (runtime built)"),
                       ("whole", "the same compiled whole (`MDL_BUILD_JOBS=1`)"),
                       ("cached", f"`mdlc build {name}`, cached")):
        print(f"| {label} | {med[key]:.2f} | {med[key] / med['bare']:.2f} |")


if __name__ == "__main__":
    main()
