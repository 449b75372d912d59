"""The table of structured ops: every entry declares every rule, every backend hook is
attached, and no pass keeps a table of its own."""
from __future__ import annotations

from pathlib import Path

import pytest

from codegen.backend import render  # noqa: F401  (attaches the native hooks)
from codegen.ops.structured import REQUIRED, STRUCTURED

CODEGEN = Path(__file__).resolve().parents[1] / "codegen"


@pytest.mark.parametrize("name", sorted(STRUCTURED))
def test_every_structured_op_declares_every_rule(name):
    entry = STRUCTURED[name]
    assert entry.name == name and entry.blocks
    for rule in (entry.verify, entry.reference, entry.grad, entry.trim, entry.rewrite):
        assert callable(rule)
    lower, render_ = entry.extra["native"]
    assert callable(lower) and callable(render_)
    for key, (kind, default) in entry.attrs.items():  # None: optional, absent by default
        assert default is REQUIRED or default is None or isinstance(default, kind), key


def test_only_the_table_names_structured_ops():
    """Outside codegen/ops/structured/ and the backend's hooks, no module branches on a
    structured op's name (builders of new loops may still name the op they make)."""
    offenders = []
    for path in CODEGEN.rglob("*.py"):
        if "structured" in path.parts or path.name == "structured.py":
            continue
        text = path.read_text()
        for name in STRUCTURED:
            for pattern in (f'prim == "{name}"', f'"{name}": '):
                if pattern in text:
                    offenders.append(f"{path.relative_to(CODEGEN)}: {pattern}")
    assert not offenders
