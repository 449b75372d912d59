"""The op tables: every structured op declares every rule, every backend hook is attached,
every op answers the same questions (`entry(op)`, codegen/ops/entry.py), and no module
outside the tables branches on an op's name (a typo there would silently switch a rule
or an optimization off)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from codegen.backend import render  # noqa: F401  (attaches the native hooks)
from codegen.ops.entry import OPS, OpEntry, entry
from codegen.ops.primitives import TABLE
from codegen.ops.structured import REQUIRED, STRUCTURED

CODEGEN = Path(__file__).resolve().parents[1] / "codegen"

# The tables: the primitives' entries, and how each lowers (attached by name, in groups).
TABLES = ("ops/primitives/", "backend/op_lowering.py")


@pytest.mark.parametrize("name", sorted(STRUCTURED))
def test_every_structured_op_declares_every_rule(name):
    rules = STRUCTURED[name]
    assert rules.name == name and rules.blocks
    for rule in (rules.verify, rules.reference, rules.grad, rules.trim, rules.rewrite):
        assert callable(rule)
    kind, lower, render_ = rules.extra["lower"]
    assert kind == "structured" and callable(lower) and callable(render_)
    for key, (kind, default) in rules.attrs.items():  # None: optional, absent by default
        assert default is REQUIRED or default is None or isinstance(default, kind), key


def test_one_registry_answers_for_every_op():
    assert set(OPS) == set(TABLE) | set(STRUCTURED)
    assert not set(TABLE) & set(STRUCTURED)
    for name, rules in OPS.items():
        assert isinstance(rules, OpEntry) and entry(name) is rules
        assert rules.extra.get("lower"), f"{name} has no lowering"
        for method in ("check", "evaluate", "gradient", "rewrite", "trim", "sets_dims"):
            assert callable(getattr(rules, method)), (name, method)
        assert isinstance(rules.blocks, tuple)


def test_the_declared_facts():
    """The facts the passes and the backend act on are declared where the ops are."""
    assert {n for n, r in OPS.items() if r.repeats} == {"for", "while"}
    assert {n for n, r in OPS.items() if r.branches} == {"if"}
    assert {n for n, r in OPS.items() if r.reduces} == {"sum", "max", "mean", "logsumexp"}
    assert {n for n, r in OPS.items() if r.product} == {"matmul"}
    assert {n for n, r in OPS.items() if r.accumulates} == {"add"}
    assert {n for n, r in OPS.items() if r.step_sum} == {"matmul", "sum_to", "add_n", "transpose",
                                                         "if"}
    # a view re-addresses its operand's elements; a ragged one (segments) pads them too
    assert {n for n, r in TABLE.items() if r.extra.get("ragged")} == {"segment"}
    assert all(TABLE[n].selects for n, r in TABLE.items()
               if r.extra["lower"][0] == "view" and not r.extra.get("ragged"))


def _branches(text: str) -> list[str]:
    """The places in `text` that test an op's name: `prim == "x"`, `prim != "x"`, a dict
    keyed by op names, or a tuple, list or set of op names."""
    found = [m.group(0) for m in re.finditer(r'prim\s*[!=]=\s*"(\w+)"', text)
             if m.group(1) in OPS]
    found += [m.group(1) for m in re.finditer(r'[{,]\s*("(\w+)"\s*:)', text)
              if m.group(2) in OPS]
    for m in re.finditer(r'[(\[{]\s*("\w+"\s*,\s*)+("\w+"\s*)?,?\s*[)\]}]', text):
        if all(n in OPS for n in re.findall(r'"(\w+)"', m.group(0))):
            found.append(m.group(0))
    return found


def test_no_module_outside_the_tables_branches_on_an_op_name():
    offenders = []
    for path in sorted(CODEGEN.rglob("*.py")):
        rel = path.relative_to(CODEGEN).as_posix()
        if rel.startswith(TABLES):
            continue
        offenders += [f"{rel}: {hit}" for hit in _branches(path.read_text())]
    assert not offenders, "\n".join(offenders)


def test_the_name_check_finds_what_it_looks_for():
    assert _branches('if op.prim == "matmul":') == ['prim == "matmul"']
    assert _branches('LOOPS = ("for", "while")') == ['("for", "while")']
    assert _branches('kinds = {"add": 1}') == ['"add":']
    assert _branches('b.emit("split", [v], {"axis": 0})') == []
    assert _branches('names = ("sum", "Sum")') == []
