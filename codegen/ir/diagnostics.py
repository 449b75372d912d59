"""Diagnostics: source locations, the error hierarchy, and their rendering.

Every error a user can cause in a .mdl file is an `MdlError` carrying a `Loc`; it
renders as `FILE:LINE:COL: error: MESSAGE`, the source line, and a caret under the spot,
as plain text or, through a palette (dsl/highlight.py), coloured for a terminal.
"""
from __future__ import annotations

import functools
import os
import sys
import unicodedata
import warnings
from contextlib import contextmanager
from pathlib import Path
from dataclasses import dataclass, field
from typing import Iterator


# The standard library's files (`import "std/rnn.mdl"`): dsl/std/
STD_LIBRARY = Path(__file__).resolve().parents[2] / "dsl" / "std"


@dataclass(frozen=True, eq=False)
class Source:
    """One source text and the name it is reported under. The text is kept as the lexer
    reads it: without a leading byte order mark, its line breaks "\n" (a "\r\n" or a
    lone "\r" becomes one, as Python's reading of a file makes them)."""

    path: str
    text: str

    def __post_init__(self):
        text = self.text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
        object.__setattr__(self, "text", text)

    @property
    def shown(self) -> str:
        """The path as messages and generated text write it: a file name that is not UTF-8
        (`loop\xff.mdl`, read by Python with surrogates) with its bytes escaped; writing
        it raw into a module's stub failed with UnicodeEncodeError."""
        return printable_path(self.path)

    @functools.cached_property
    def library_name(self) -> str | None:
        """`std/rnn.mdl` for a file of the standard library, else None."""
        try:
            return "std/" + Path(self.path).resolve().relative_to(STD_LIBRARY).as_posix()
        except (ValueError, OSError):
            return None

    def lines(self) -> tuple[str, ...]:
        """The lines as the lexer counts them: a line ends at "\n" alone (str.splitlines
        also ends one at a form feed, U+0085 or U+2028, which the lexer reads inside a
        line). Split once: a file of 40,000 warnings took 106 s splitting it again for
        each."""
        return self._lines

    @functools.cached_property
    def _lines(self) -> tuple[str, ...]:
        return tuple(self.text.removesuffix("\n").split("\n")) if self.text else ()

    def line(self, number: int) -> str:
        lines = self.lines()
        return lines[number - 1] if 0 < number <= len(lines) else ""


def printable_path(path: str) -> str:
    """`path` with the bytes of a name that is not UTF-8 escaped (`\xff`), and so its
    control and direction characters (`\n`, `\x1b`, `\u202e`): a newline in a file's name
    split `FILE:LINE:COL: error:` over two lines, and an escape was the terminal's."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        try:
            path = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a lone surrogate that is no escaped byte
            path = path.encode("utf-8", "backslashreplace").decode("utf-8")
    return path.translate(_ESCAPED)


@dataclass(frozen=True)
class Loc:
    """A 1-based line:column position in a source, spanning `length` characters."""

    source: Source
    line: int
    col: int
    length: int = 1

    def __str__(self) -> str:
        return f"{self.source.shown}:{self.line}:{self.col}"

    def __repr__(self) -> str:
        return f"Loc({self})"

    @property
    def line_place(self) -> str:
        """`m.mdl:6`: the file's name without its folders and the line, as a generated
        module's run-time errors name a place (an assert's loop or branch), which a module
        built elsewhere or shared must not carry its author's folders in."""
        return f"{Path(self.source.shown).name}:{self.line}"

    @property
    def brief(self) -> str:
        """`m.mdl:6:10`: line_place and the column (an index the model computes)."""
        return f"{self.line_place}:{self.col}"


class Plain:
    """How the parts of a rendered diagnostic look: as they are. A palette for
    terminals (dsl/highlight.py) colours the same parts."""

    def severity(self, text: str, severity: str) -> str:
        return text

    def location(self, text: str) -> str:
        return text

    def source(self, line: str) -> str:
        return line

    def caret(self, text: str) -> str:
        return text


PLAIN = Plain()


@dataclass
class Diagnostic:
    """One message at one place, with an optional caret label and located notes."""

    message: str
    loc: Loc | None = None
    severity: str = "error"
    label: str = ""
    notes: list[tuple[str, Loc | None]] = field(default_factory=list)

    def to_json(self) -> dict:
        """The diagnostic as `mdlc check --json` prints it: severity, message, place (file,
        1-based line and column, the caret's length; null where it has none) and notes."""
        return {"severity": self.severity, "message": self.message, **_place(self.loc),
                "notes": [{"message": text, **_place(loc)} for text, loc in self.notes]}

    def render(self, palette: Plain = PLAIN) -> str:
        where = palette.location(f"{self.loc}:") + " " if self.loc else ""
        out = [f"{where}{palette.severity(self.severity + ':', self.severity)} "
               f"{printable(self.message)}"]
        if self.loc:
            out += _excerpt(self.loc, self.label, palette)
        note = palette.severity("note:", "note")
        for text, loc in self.notes:
            text = printable(text)
            out.append(f"  {note} {loc}: {text}" if loc else f"  {note} {text}")
        return "\n".join(out)


def _place(loc: Loc | None) -> dict:
    if loc is None:
        return {"file": None, "line": None, "col": None, "length": None}
    return {"file": loc.source.shown, "line": loc.line, "col": loc.col, "length": loc.length}


EXCERPT_WIDTH = 100

# A control character of the source (a NUL, an escape) shown as one replacement
# character: the terminal then prints what the file holds, column for column. So is a
# mark that turns the direction of text (U+202E), which made the line read otherwise
_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_SHOWN = {c: "\ufffd" for c in [*range(0x20), *range(0x7f, 0xa0), *_BIDI]
          if c != ord("\t")}


# A control character a message quotes from the source (`unexpected character` of an
# escape) written as its code point: printed raw, it was the terminal's to act on
_NAMED = {c: f"U+{c:04X}" for c in _SHOWN if c not in (ord("\n"), ord("\r"))}


# ... and in a file's name, as Python writes it in a string (`\n`, `\x1b`, `\u202e`)
_ESCAPED = {c: repr(chr(c))[1:-1] for c in [*range(0x20), *range(0x7f, 0xa0), *_BIDI]}


def printable(text: str) -> str:
    """`text` with the control and direction characters it quotes from a source named
    (U+001B), not printed raw for the terminal to act on."""
    return text.translate(_NAMED)


def _width(text: str) -> int:
    """Columns `text` takes in a terminal: a wide character (CJK) two, a combining accent or
    a zero-width one (U+200B) none."""
    return sum(0 if unicodedata.combining(c) or unicodedata.category(c) in ("Me", "Cf")
               else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _excerpt(loc: Loc, label: str, palette: Plain) -> list[str]:
    line = loc.source.line(loc.line).rstrip("\n").expandtabs(1).translate(_SHOWN)
    if not line and loc.line > len(loc.source.lines()):
        return []
    gutter = " " * len(str(loc.line))
    col = loc.col
    if len(line) > EXCERPT_WIDTH:  # show a window around the spot, not a whole huge line
        start = max(0, min(col - 1 - EXCERPT_WIDTH // 2, len(line) - EXCERPT_WIDTH))
        line = ("..." if start else "") + line[start:start + EXCERPT_WIDTH] + "..."
        col = col - start + (3 if start else 0)
    width = max(1, min(loc.length, len(line) - col + 1, EXCERPT_WIDTH))
    # under the characters as a terminal shows them: wide ones take two columns
    caret = (" " * _width(line[:col - 1]) + "^" * max(1, _width(line[col - 1:col - 1 + width]))
             + (f" {label}" if label else ""))
    return [f" {loc.line} | {palette.source(line)}", f" {gutter} | {palette.caret(caret)}"]


def distinct(diagnostics) -> list[Diagnostic]:
    """The diagnostics without repeats, in order: a function's warning is found again in
    each model of a file that calls it, and is said once."""
    seen: dict[str, Diagnostic] = {}
    for d in diagnostics:
        seen.setdefault(d.render(), d)
    return list(seen.values())


class MdlWarning(UserWarning):
    """A checker's warning (`Diagnostic`, severity "warning") of a .mdl file that
    `codegen.load` built or `codegen.export_onnx` exported, issued through Python's warnings: its text is the rendered
    diagnostic, `diagnostic` the Diagnostic."""

    def __init__(self, diagnostic: Diagnostic):
        super().__init__(diagnostic)  # its only argument: it pickles, and is made again

    @property
    def diagnostic(self) -> Diagnostic:
        return self.args[0]

    def __str__(self) -> str:
        return self.diagnostic.render()


def warn_caller(diagnostics: list[Diagnostic]) -> None:
    """Issue each diagnostic as an MdlWarning at the first frame outside mdl's compiler
    (the user's line that called `codegen.load`, or codegen.pytorch's caller): Python's
    filters then show each there once, and `-W error` or `filterwarnings` apply."""
    for d in diagnostics:
        level, frame = 2, sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(_COMPILER):
            level, frame = level + 1, frame.f_back
        warnings.warn(MdlWarning(d), stacklevel=level)


# the packages whose frames warn_caller passes over: codegen/ and dsl/
_COMPILER = tuple(str(Path(__file__).parents[2] / name) + os.sep
                  for name in ("codegen", "dsl"))


def count(number: int, noun: str) -> str:
    """`1 value`, `2 values`: message text that reads right for any number."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


class MdlError(Exception):
    """Base of every error in user input; holds one or more diagnostics."""

    def __init__(self, message: str, loc: Loc | None = None, *, label: str = "",
                 notes: list[tuple[str, Loc | None]] | None = None):
        super().__init__(message)
        self.diagnostics = [Diagnostic(message, loc, "error", label, list(notes or []))]

    @property
    def loc(self) -> Loc | None:
        return self.diagnostics[0].loc

    @property
    def message(self) -> str:
        return self.diagnostics[0].message

    def render(self, palette: Plain = PLAIN) -> str:
        return "\n".join(d.render(palette) for d in self.diagnostics)

    def note_call(self, function: str, loc: Loc) -> None:
        """Record that the error was reached through a call of `function` at `loc`. An
        error inside the standard library is the call's to fix (`linear(x, 0)`): the
        user's call that reached it becomes its place, the library's line a note."""
        first = self.diagnostics[0]
        if loc == first.loc:
            return
        if _in_library(first.loc) and not _in_library(loc):
            line = first.loc.source.line(first.loc.line).strip()
            first.notes.insert(0, (f"found in the standard library, at `{line}`", first.loc))
            first.loc, first.label = loc, ""
        else:
            first.notes.append((f"in this call of `{function}`", loc))

    def __str__(self) -> str:
        return self.render()


def _in_library(loc: Loc | None) -> bool:
    return loc is not None and loc.source.library_name is not None


class MdlSyntaxError(MdlError):
    """The text does not parse."""


class MdlNameError(MdlError):
    """Unknown or misused names, scopes, sharing and imports."""


class MdlTypeError(MdlError):
    """Types, shapes, arity, and control-flow agreement."""


class MdlGradientError(MdlError):
    """A requested gradient does not exist."""


class MdlBuildError(MdlError):
    """The generated code did not build."""


class ErrorGroup(MdlError):
    """Several independent errors found in one run, reported together."""

    def __init__(self, errors: list[MdlError]):
        super().__init__(errors[0].message, errors[0].loc)
        self.errors = errors
        self.diagnostics = [d for e in errors for d in e.diagnostics]


def raise_all(errors: list[MdlError], stopped_at: int | None = None) -> None:
    """Raise the collected errors: one as itself, several as an ErrorGroup; where the
    checker stopped at `stopped_at` errors, a last note says more may follow."""
    if not errors:
        return
    error = errors[0] if len(errors) == 1 else ErrorGroup(errors)
    if stopped_at is not None:
        error.diagnostics.append(Diagnostic(
            f"mdl stops at {stopped_at} errors: fix these, and check again for any more",
            None, "note"))
    raise error


class UsageError(Exception):
    """A bad command-line request (unknown -D name, an unknown target, ...): exit
    status 2."""


@contextmanager
def writing(path) -> Iterator[None]:
    """A failure to write `path` (a folder that cannot be made, a file over a folder, no
    permission, a full disk) inside the block becomes a UsageError naming it."""
    try:
        yield
    except OSError as exc:
        # the file that failed, where the OS names one (em1/module.cpp, not em1)
        failed = exc.filename if isinstance(exc.filename, str) and exc.filename else path
        why = exc.strerror or exc
        if isinstance(exc, FileExistsError):  # a folder to make, with a file in its place
            blocking = next((p for p in [Path(failed), *Path(failed).parents]
                             if p.exists() and not p.is_dir()), None)
            if blocking is not None:
                failed, why = path, f"`{blocking}` is a file, not a folder"
        raise UsageError(f"cannot write `{failed}`: {why}") from None
