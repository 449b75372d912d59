"""Where `import "path"` finds a file: next to the importing file, else in the standard
library (dsl/std/). Kept apart from the parser so that the build index
(codegen/compile/index.py) follows imports as the front end does without loading it."""
from __future__ import annotations

from pathlib import Path

STD_ROOT = Path(__file__).parent  # `import "std/rnn.mdl"` finds dsl/std/rnn.mdl


def find_import(target: str, directory: Path | None) -> Path | None:
    """The file `import "target"` names from a file in `directory`: next to it, else in
    the standard library; None when neither has it."""
    for root in ([directory] if directory else []) + [STD_ROOT]:
        candidate = (root / target)
        if candidate.is_file():
            return candidate.resolve()
    return None
