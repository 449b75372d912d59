"""Where the compiler's non-Python files live. A source checkout keeps `templates/` and
`cpp_runtime/` at its top level (the layout the README shows); a wheel ships them inside
the `codegen` package (pyproject.toml maps them there), so an installed mdl finds them
next to this file."""
from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # codegen/


def _data(name: str) -> Path:
    installed = PACKAGE / name
    return installed if installed.is_dir() else PACKAGE.parent / name


TEMPLATES_DIR = _data("templates")
RUNTIME_DIR = _data("cpp_runtime")
