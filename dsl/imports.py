"""Which files a file imports (`import "path"`) and where each is found: next to the
importing file, else in the standard library (dsl/std/). Kept apart from the parser so
that the build index (codegen/compile/index.py) follows imports as the front end does
without loading it."""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from codegen.ir.diagnostics import UsageError

STD_ROOT = Path(__file__).parent  # `import "std/rnn.mdl"` finds dsl/std/rnn.mdl

# The most a source file may hold: /dev/zero (or a runaway generated file) was read
# until memory ran out
MAX_SOURCE_BYTES = 64 << 20

# What a source that is no regular file held (a pipe: `mdlc graph <(gen.py)`), by its path
# as given: a command reads its file more than once (to check, then to draw), and the
# second read of a pipe finds it empty
_READ_ONCE: dict[str, bytes] = {}


def source_bytes(path: str | Path) -> bytes:
    """The bytes of the source file at `path`, at most MAX_SOURCE_BYTES + 1 of them (the
    caller refuses more); OSError as open raises it."""
    if str(path) in _READ_ONCE:
        return _READ_ONCE[str(path)]
    with open(path, "rb") as f:
        data = f.read(MAX_SOURCE_BYTES + 1)
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            _READ_ONCE[str(path)] = data
    return data

# grammar.lark's tokens that may hold the text `import` or a quote without being the
# keyword or a string (a name, a number, a string, a comment); any other character is a
# token of its own. Whitespace and comments are ignored, as the lexer ignores them.
TOKEN = re.compile(r'"[^"\n]*"|#[^\n]*|[A-Za-z_][A-Za-z0-9_]*'
                   r'|([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+'
                   r'|[0-9]+|\S')


def imported_paths(text: str) -> list[str]:
    """The paths of a file's `import "path"` declarations, read token by token as the
    parser's lexer reads them (anywhere on a line, across comments), without the parser:
    what the parsed module's `imports` hold for a file that parses."""
    paths: list[str] = []
    after_import = False
    for match in TOKEN.finditer(text):
        token = match.group()
        if token.startswith("#"):
            continue
        if after_import and token.startswith('"'):
            paths.append(token[1:-1])
        after_import = token == "import"
    return paths


def main_directory(path: str | Path) -> Path:
    """Where the main file's imports are found from: the directory of its path as given (a
    file named through a symbolic link imports next to the link), or the working directory
    for a text that names no file."""
    p = Path(path)
    return p.parent if p.exists() else Path.cwd()


def find_import(target: str, directory: Path | None) -> Path | None:
    """The file `import "target"` names from a file in `directory`: next to it, else in
    the standard library; None when neither has it."""
    for root in ([directory] if directory else []) + [STD_ROOT]:
        candidate = (root / target)
        try:
            if candidate.is_file():
                return candidate.resolve()
        except OSError:  # a name too long for the file system (ENAMETOOLONG): not there
            continue
    return None


def closure(path: Path) -> dict[str, str] | None:
    """The text of a .mdl file and of everything it imports, by resolved path, found as
    the front end finds imports (dsl/program.py: the main file's next to its path as given,
    a symbolic link's own directory); None where an import is not found (the full check
    reports it) or a file is past MAX_SOURCE_BYTES. OSError and UnicodeDecodeError as
    reading raises them."""
    texts: dict[str, str] = {}
    pending = [(path.resolve(), main_directory(path))]
    while pending:
        p, directory = pending.pop()
        if str(p) in texts:
            continue
        data = source_bytes(p)
        if len(data) > MAX_SOURCE_BYTES:  # refused by the full build; not read token by
            return None                   # token first (64 MiB: a minute and a half)
        texts[str(p)] = data.decode("utf-8")
        for target in imported_paths(texts[str(p)]):
            found = find_import(target, directory)
            if found is None:
                return None
            pending.append((found, found.parent))
    return texts


def not_the_source(out, source, option: str, params=None) -> None:
    """Refuse to write `out` (given as `option`) where it would replace the .mdl file
    `source` it is made from (`mdlc export m.mdl --onnx m.mdl` overwrote the model), a file
    that imports (`lib.mdl`), or the checkpoint `params` it reads (the trained weights)."""
    def same(path) -> bool:
        try:
            return os.path.exists(out) and os.path.samefile(out, path)
        except (OSError, ValueError, TypeError):  # a source that is no file (a text)
            return False

    if same(source):
        raise UsageError(f"{option} {out} is the model's source file: writing it would "
                         "replace the model; give another path")
    try:
        imported = list(closure(Path(source)) or {})[1:]
    except (OSError, ValueError, TypeError):  # a text, a file that is not UTF-8: none read
        imported = []
    if any(same(path) for path in imported):
        raise UsageError(f"{option} {out} is a file the model imports: writing it would "
                         "replace that source; give another path")
    if params is not None and isinstance(params, (str, os.PathLike)) and same(params):
        raise UsageError(f"{option} {out} is the checkpoint the parameters come from: "
                         "writing it would replace the trained weights; give another path")
