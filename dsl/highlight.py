"""Colour for .mdl text: a Pygments lexer (registered as `mdl` through the
`pygments.lexers` entry point, so `pygmentize -l mdl`, Sphinx and MkDocs find it), and
the palette that colours diagnostics on a terminal.

The lexer follows dsl/grammar.lark: its keywords, operators, numbers, strings and
comments; built-in functions, initializers and dtypes are named by the front end's own
tables. tests/test_highlight.py derives every token of the grammar and checks that each
lexes as what it is.
"""
from __future__ import annotations

import os
from typing import TextIO

from pygments import highlight
from pygments.formatters import TerminalFormatter
from pygments.lexer import RegexLexer, bygroups, words
from pygments.token import (Comment, Keyword, Name, Number, Operator, Punctuation, String,
                            Whitespace)

from codegen.ir.diagnostics import Plain
from codegen.ir.dtypes import DTYPES

from .builtins import BUILTINS, CREATORS, INITIALIZERS, REGULARIZERS

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
DECLARATIONS = ("input", "output", "param")
KEYWORDS = ("scope", "share", "for", "in", "reversed", "while", "if", "else", "yield",
            "return", "minimize", "as", "assert")
WORD_OPERATORS = ("and", "or", "not")
CONSTANTS = ("true", "false")
BUILTIN_NAMES = tuple(sorted((set(BUILTINS) | set(INITIALIZERS) | set(REGULARIZERS)
                              | set(CREATORS)) - set(DTYPES)))


class MdlLexer(RegexLexer):
    """The .mdl language (mdl's models of recurrent networks)."""

    name = "mdl"
    aliases = ["mdl"]
    filenames = ["*.mdl"]
    mimetypes = ["text/x-mdl"]

    tokens = {
        "root": [
            (r"[ \t\f\r\n]+", Whitespace),
            (r"#[^\n]*", Comment.Single),
            (r'"[^"\n]*"', String.Double),
            (rf"(def)(\s+)({IDENT})", bygroups(Keyword.Declaration, Whitespace, Name.Function)),
            (rf"(model)(\s+)({IDENT})", bygroups(Keyword.Declaration, Whitespace, Name.Class)),
            (rf"(scope|as)(\s+)({IDENT})", bygroups(Keyword, Whitespace, Name.Namespace)),
            (words(("import",), suffix=r"\b"), Keyword.Namespace),
            (words(("def", "model") + DECLARATIONS, suffix=r"\b"), Keyword.Declaration),
            (words(KEYWORDS, suffix=r"\b"), Keyword),
            (words(WORD_OPERATORS, suffix=r"\b"), Operator.Word),
            (words(CONSTANTS, suffix=r"\b"), Keyword.Constant),
            (words(tuple(DTYPES), suffix=r"\b"), Keyword.Type),
            (words(BUILTIN_NAMES, suffix=r"\b"), Name.Builtin),
            (r"([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+",
             Number.Float),
            (r"[0-9]+", Number.Integer),
            (rf"{IDENT}(?=\s*\()", Name.Function),
            (IDENT, Name),
            (r"\*\*|//|->|<=|>=|==|!=|[-+*/%@<>=]", Operator),
            (r"\.\.\.", Punctuation),  # a function type's leading dims: f32[..., I]
            (r"[()\[\]{},;:.]", Punctuation),
        ],
    }


SGR = {"error": "1;31", "warning": "1;33", "note": "1;36", "location": "1", "caret": "1;32"}


def _sgr(code: str, text: str) -> str:
    return f"\x1b[{code}m{text}\x1b[0m"


class TerminalPalette(Plain):
    """Diagnostics on a terminal: `error:` red, `warning:` yellow, `note:` cyan, the
    location bold, the caret green, the source line highlighted by the lexer."""

    def __init__(self):
        self.lexer = MdlLexer()
        self.formatter = TerminalFormatter()

    def severity(self, text: str, severity: str) -> str:
        return _sgr(SGR.get(severity, "1"), text)

    def location(self, text: str) -> str:
        return _sgr(SGR["location"], text)

    def source(self, line: str) -> str:
        return highlight(line, self.lexer, self.formatter).rstrip("\n")

    def caret(self, text: str) -> str:
        return _sgr(SGR["caret"], text)


def palette_for(stream: TextIO, environ: dict[str, str] | None = None) -> Plain:
    """The palette for diagnostics written to `stream`: colours on a terminal, plain
    text elsewhere. As CPython decides for its own tracebacks: a non-empty NO_COLOR
    turns colour off, else a non-empty FORCE_COLOR turns it on, else TERM=dumb turns it
    off, else a stream that is a terminal gets it."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR"):
        return Plain()
    if env.get("FORCE_COLOR"):
        return TerminalPalette()
    if env.get("TERM") == "dumb":
        return Plain()
    isatty = getattr(stream, "isatty", None)
    return TerminalPalette() if isatty is not None and isatty() else Plain()
