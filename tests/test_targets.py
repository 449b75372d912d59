"""The backend's targets: every primitive says how it lowers (the same on every target),
and every target can emit every kernel primitive; the CLI offers exactly the targets
that exist."""
from __future__ import annotations

import pytest

from codegen.backend.lower import lowering_hook
from codegen.backend.target import Target
from codegen.backend.targets import TARGETS
from codegen.cli import parser
from codegen.ir import Op
from codegen.primitives import TABLE

KINDS = ("elementwise", "const", "view", "kernel")


@pytest.mark.parametrize("name", sorted(TABLE))
def test_every_primitive_has_one_lowering(name):
    hook = lowering_hook(Op(name, [], []))
    assert hook[0] in KINDS
    if TABLE[name].elementwise:  # fusable: computed in a loop nest, or no memory at all
        assert hook[0] in ("elementwise", "const")


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_every_target_emits_every_kernel(target):
    assert isinstance(TARGETS[target], Target) and TARGETS[target].name == target
    kernels = {n for n in TABLE if lowering_hook(Op(n, [], []))[0] == "kernel"}
    missing = {n for n in kernels if target not in TABLE[n].extra}
    assert not missing, f"target {target} cannot emit {sorted(missing)}"


def test_the_cli_offers_the_registered_targets():
    build = parser()._subparsers._group_actions[0].choices["build"]
    target = next(a for a in build._actions if a.dest == "target")
    assert list(target.choices) == sorted(TARGETS)
