"""docs/language.md is checked: every ```mdl block that holds a model checks cleanly,
every ```mdl-error block fails with the message given after it, and the page mentions
every keyword, built-in, initializer and loop option of the language."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from doc_blocks import Block, blocks
from dsl import MdlError, UsageError, check_source
from dsl.builtins import BUILTINS, INITIALIZERS

DOC = Path(__file__).resolve().parent.parent / "docs" / "language.md"
MODEL = re.compile(r"^\s*model\s+(\w+)", re.MULTILINE)
LANGUAGES = ("mdl", "mdl-error", "text")


BLOCKS = blocks(DOC.read_text(), "docs/language.md")
MDL = [b for b in BLOCKS if b.lang == "mdl"]
ERRORS = [b for b in BLOCKS if b.lang == "mdl-error"]


def test_fences_are_known_languages():
    assert [b.id for b in BLOCKS if b.lang not in LANGUAGES] == []
    assert len(MDL) >= 15 and len(ERRORS) >= 15


def where(block: Block) -> str:
    return f"docs/language.md#L{block.line}"


@pytest.mark.parametrize("block", MDL, ids=lambda b: b.id)
def test_mdl_block_checks(block):
    models = MODEL.findall(block.text)
    if not models:  # a file of functions only: it must still parse and load
        with pytest.raises(UsageError, match="defines no model"):
            check_source(block.text, where(block))
        return
    for model in models:
        try:
            cm = check_source(block.text, where(block), model=model)
        except MdlError as exc:
            pytest.fail(f"{block.id}, model {model}:\n{exc.render()}")
        assert not cm.warnings, "\n".join(w.render() for w in cm.warnings)


@pytest.mark.parametrize("block", ERRORS, ids=lambda b: b.id)
def test_mdl_error_block_fails_as_documented(block):
    with pytest.raises(MdlError) as info:
        check_source(block.text, where(block))
    assert block.expected in info.value.render()


def _mentioned(name: str, text: str) -> bool:
    """`name` appears inside some `code span` of the page."""
    return any(re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", span)
               for span in re.findall(r"`([^`\n]+)`", text))


STD = DOC.parent.parent / "dsl" / "std"
STD_FUNCTIONS = {name for f in STD.glob("*.mdl")
                 for name in re.findall(r"^def\s+(\w+)", f.read_text(), re.MULTILINE)}
KEYWORDS = ("model def input output param scope share for in reversed while if else yield "
            "return minimize import as and or not true false").split()


@pytest.mark.parametrize("name", sorted(set(BUILTINS) | set(INITIALIZERS) | set(KEYWORDS)
                                        | {"full", "lengths", "recompute", "checkpoint",
                                           "l1", "l2", "trainable", "regularizer", "init",
                                           "int"} | STD_FUNCTIONS))
def test_every_construct_is_documented(name):
    assert _mentioned(name, DOC.read_text()), f"docs/language.md never mentions `{name}`"


SECTIONS = ("Files and lexical rules", "Imports", "Models and hyper-parameters",
            "Types and dims", "Variables and assignment", "Parameters and initializers",
            "Scopes and attributes", "share", "Functions and call scoping",
            "for: recurrence over a sequence", "if", "while", "assert", "Expressions",
            "Built-in functions", "The standard library", "Diagnostics")


def test_sections():
    headings = re.findall(r"^## (.+)$", DOC.read_text(), re.MULTILINE)
    assert headings == list(SECTIONS)


LITERALS = {  # the lexical rules the page states, at their edges
    "2147483647": None, "-2147483648": None, "2147483648": "does not fit in i32",
    "1e308": None, "1e309": "out of range", "1.": None, ".5": None, "2E5": None,
    "0" * 4400 + "7": None, "9" * 4400: "an integer of 4400 digits does not fit in i32",
}


@pytest.mark.parametrize("literal", list(LITERALS),
                         ids=[t if len(t) < 20 else f"{t[0]}x{len(t)}" for t in LITERALS])
def test_literal_limits(literal):
    source = f"model L() {{\n  input x : f32[3]\n  n = {literal}\n  output y = sum(x)\n}}\n"
    expected = LITERALS[literal]
    if expected is None:
        check_source(source, "t.mdl")
        return
    with pytest.raises(MdlError) as info:
        check_source(source, "t.mdl")
    assert expected in info.value.message and str(info.value.loc).startswith("t.mdl:3:")
