"""The .mdl lexer and coloured diagnostics. Every token of the grammar (its terminals,
read from dsl/grammar.lark through Lark) lexes as one token of its kind; every example
and standard library file lexes without an error token; the lexer is found by name
through its entry point; diagnostics are coloured on a terminal only, NO_COLOR and
FORCE_COLOR respected, and with the colours taken out read exactly as plain ones."""
from __future__ import annotations

import io
import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from lark.lexer import PatternStr
from pygments.lexers import find_lexer_class_for_filename, get_lexer_by_name
from pygments.token import (Comment, Error, Keyword, Name, Number, Operator, Punctuation,
                            String, Whitespace)

from codegen import cli
from codegen.ir.diagnostics import Diagnostic, Loc, Source
from codegen.ir.dtypes import DTYPES
from dsl import MdlError, check_source
from dsl.builtins import BUILTINS, INITIALIZERS, REGULARIZERS
from dsl.highlight import MdlLexer, Plain, TerminalPalette, palette_for
from dsl.parser import lark_parser

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "examples").glob("*.mdl")) + sorted((ROOT / "dsl/std").glob("*.mdl"))
ANSI = re.compile(r"\x1b\[[0-9;]*m")

# Examples of the grammar's regular-expression terminals, and the token kind each lexes
# as; the test below checks that this table covers exactly those terminals, and that
# each example is one the grammar's own pattern matches.
PATTERN_EXAMPLES = {
    "COMPARE": (["<=", ">=", "==", "!=", "<", ">"], Operator),
    "MUL_OP": (["*", "/", "%", "@"], Operator),
    "NAME": (["x", "_h2", "lengths", "Tiny"], Name),
    "FLOAT": (["1.5", "2.", ".5", "1e-3", "3.0E+2"], Number.Float),
    "INT": (["0", "42"], Number.Integer),
    "STRING": (['"std/rnn.mdl"', '""'], String),
    "COMMENT": (["# one LSTM step", "#"], Comment),
    "WS": ([" ", "\t\n  \r\f"], Whitespace),
}
WORDLIKE = re.compile(r"[A-Za-z_]\w*")


def tokens(text: str) -> list[tuple[object, str]]:
    return [(kind, value) for _, kind, value in MdlLexer().get_tokens_unprocessed(text)]


def terminals():
    return lark_parser().terminals


@pytest.mark.parametrize("terminal", [t for t in terminals() if isinstance(t.pattern,
                                                                           PatternStr)],
                         ids=lambda t: t.name)
def test_every_literal_token_of_the_grammar_lexes_as_one_token_of_its_kind(terminal):
    text = terminal.pattern.value
    (kind, value), = tokens(text)
    assert value == text
    if WORDLIKE.fullmatch(text):  # a keyword
        assert kind in Keyword or kind in Operator.Word, (text, kind)
    else:
        assert kind in Operator or kind in Punctuation, (text, kind)


def test_the_pattern_table_covers_every_other_token_of_the_grammar():
    patterns = {t.name: t.pattern.to_regexp() for t in terminals()
                if not isinstance(t.pattern, PatternStr)}
    assert set(PATTERN_EXAMPLES) == set(patterns)
    for name, (examples, _) in PATTERN_EXAMPLES.items():
        for text in examples:
            assert re.fullmatch(patterns[name], text), (name, text)


@pytest.mark.parametrize("name", sorted(PATTERN_EXAMPLES))
def test_every_pattern_token_lexes_as_one_token_of_its_kind(name):
    examples, expected = PATTERN_EXAMPLES[name]
    for text in examples:
        (kind, value), = tokens(text)
        assert value == text and kind in expected, (text, kind)


def test_the_front_ends_names_are_highlighted_as_built_in():
    for name in set(BUILTINS) | set(INITIALIZERS) | set(REGULARIZERS) | {"full"}:
        (kind, _), = tokens(name)
        assert kind in (Keyword.Type if name in DTYPES else Name.Builtin), name


@pytest.mark.parametrize("text,expected", [
    ("def lstm", [Keyword.Declaration, Whitespace, Name.Function]),
    ("model CharLM", [Keyword.Declaration, Whitespace, Name.Class]),
    ("scope scope", [Keyword, Whitespace, Name.Namespace]),
    ("linear(h, H) as recur", [Name.Function, Punctuation, Name, Punctuation, Whitespace,
                               Name, Punctuation, Whitespace, Keyword, Whitespace,
                               Name.Namespace]),
    ("format", [Name]),            # a name that begins with a keyword
    ("input_proj", [Name]),
    ("x ** 2", [Name, Whitespace, Operator, Whitespace, Number.Integer]),
])
def test_names_in_context(text, expected):
    assert [kind for kind, _ in tokens(text)] == expected


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_every_example_and_library_file_lexes_without_an_error_token(path):
    text = path.read_text()
    lexed = tokens(text)
    assert "".join(value for _, value in lexed) == text
    assert [v for kind, v in lexed if kind in Error] == []


def test_a_character_the_grammar_refuses_is_an_error_token():
    assert (Error, "$") in tokens("x = $y")


def test_the_lexer_is_found_by_name_and_file_name_through_its_entry_point():
    assert "mdl" in {e.name for e in entry_points(group="pygments.lexers")}
    assert type(get_lexer_by_name("mdl")) is MdlLexer
    assert find_lexer_class_for_filename("model.mdl") is MdlLexer


def test_pygmentize_highlights_a_model():
    done = subprocess.run([sys.executable, "-m", "pygments", "-l", "mdl", "-f", "terminal",
                           str(ROOT / "examples/charlm.mdl")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "\x1b[" in done.stdout
    assert ANSI.sub("", done.stdout) == (ROOT / "examples/charlm.mdl").read_text()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("env,tty,coloured", [
    ({}, False, False),
    ({}, True, True),
    ({"NO_COLOR": "1"}, True, False),
    ({"NO_COLOR": ""}, True, True),           # empty is unset (no-color.org)
    ({"FORCE_COLOR": "1"}, False, True),
    ({"FORCE_COLOR": "1", "NO_COLOR": "yes"}, False, False),
    ({"TERM": "dumb"}, True, False),
    ({"TERM": "dumb", "FORCE_COLOR": "1"}, False, True),
])
def test_colour_only_on_a_terminal_unless_told(env, tty, coloured):
    stream = Terminal() if tty else io.StringIO()
    assert isinstance(palette_for(stream, env), TerminalPalette) == coloured


SOURCE = Source("m.mdl", "model M() {\n  output y = x @ W + b\n}\n")


@pytest.mark.parametrize("diagnostic,colour", [
    (Diagnostic("`@` needs matching inner dims", Loc(SOURCE, 2, 16), label="x has 3 columns",
                notes=[("declared here", Loc(SOURCE, 1, 1)), ("no place", None)]), "1;31"),
    (Diagnostic("input `x` is never used", Loc(SOURCE, 2, 14, 1), "warning"), "1;33"),
])
def test_coloured_diagnostics_read_as_the_plain_ones(diagnostic, colour):
    plain = diagnostic.render()
    coloured = diagnostic.render(TerminalPalette())
    assert ANSI.sub("", coloured) == plain
    head, source, caret, *notes = coloured.split("\n")
    assert head.startswith("\x1b[1mm.mdl:2:") and f"\x1b[{colour}m{diagnostic.severity}:" in head
    assert re.search(r"\x1b\[[0-9;]*moutput", source)  # the keyword, coloured by the lexer
    assert caret.endswith("\x1b[0m") and "\x1b[1;32m" in caret
    assert all("\x1b[1;36mnote:" in n for n in notes)
    assert Plain().source("x") == "x" and diagnostic.render(Plain()) == plain


BAD = "model M() {\n  input x : f32[B, 3]\n  output y = x @ x\n}\n"


@pytest.mark.parametrize("env,tty,coloured", [
    ({}, True, True),
    ({}, False, False),
    ({"NO_COLOR": "1"}, True, False),
    ({"FORCE_COLOR": "1"}, False, True),
])
def test_mdlc_colours_errors_on_a_terminal(env, tty, coloured, tmp_path, monkeypatch, capsys):
    for key in ("NO_COLOR", "FORCE_COLOR", "TERM"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    bad = tmp_path / "bad.mdl"
    bad.write_text(BAD)
    stream = Terminal() if tty else None
    if stream is not None:
        monkeypatch.setattr(sys, "stderr", stream)
    assert cli.main(["check", str(bad)]) == 1
    err = stream.getvalue() if stream is not None else capsys.readouterr().err
    assert ("\x1b[" in err) == coloured
    with pytest.raises(MdlError) as caught:
        check_source(BAD, str(bad))
    assert ANSI.sub("", err).rstrip("\n") == caught.value.render()
    assert str(caught.value) == caught.value.render()  # str() never colours
