"""Writing a picture: DOT text needs nothing more; images need Graphviz's `dot`, and its
absence is said with the ways to install it."""
from __future__ import annotations

from pathlib import Path

import graphviz

from dsl import UsageError

from ..ir.diagnostics import writing

FORMATS = {".dot": None, ".gv": None, ".svg": "svg", ".png": "png", ".pdf": "pdf"}
INSTALL_DOT = ("Graphviz's `dot` program is needed to write {suffix} files and was not "
               "found on PATH; install Graphviz (Debian/Ubuntu: `apt-get install graphviz`, "
               "macOS: `brew install graphviz`, conda: `conda install -c conda-forge "
               "graphviz`), or write DOT text with `-o {stem}.dot`")


def write(dot: graphviz.Digraph, out: str | Path) -> None:
    """Write `dot` to `out` in the format its suffix names (UsageError for another
    suffix, for a missing `dot`, or a file that cannot be written)."""
    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in FORMATS:
        raise UsageError(f"cannot tell the format of `{out}`: name it "
                         + ", ".join(f"*{s}" for s in FORMATS))
    if FORMATS[suffix] is None:
        data = dot.source.encode()
    else:
        try:
            data = dot.pipe(format=FORMATS[suffix])
        except graphviz.ExecutableNotFound:
            raise UsageError(INSTALL_DOT.format(suffix=suffix, stem=out.stem)) from None
    with writing(out):
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
