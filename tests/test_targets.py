"""The backend's targets: every primitive says how it lowers (the same on every target),
and every target can emit every kernel primitive; the CLI offers exactly the targets
that exist; each target is built by its toolchain, and `--emulate` builds the cuda
target's very code for the CPU."""
from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from codegen.backend.lower import lowering_hook
from codegen.backend.module import generate
from codegen.backend.target import Target
from codegen.compile import toolchain
from codegen.cli import parser
from codegen.pipeline import differentiate, for_backends
from codegen.ir.graph import Init, Op, Regularizer
from codegen.ops.primitives import TABLE
from codegen.targets.cuda import CudaTarget
from codegen.targets.registry import TARGETS, target
from dsl import UsageError, check_source

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

KINDS = ("elementwise", "const", "view", "kernel")


@pytest.mark.parametrize("name", sorted(TABLE))
def test_every_primitive_has_one_lowering(name):
    hook = lowering_hook(Op(name, [], []))
    assert hook[0] in KINDS
    if TABLE[name].elementwise:  # fusable: computed in a loop nest, or no memory at all
        assert hook[0] in ("elementwise", "const")


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_every_target_emits_every_kernel(target):
    """Each kernel primitive's statements are shared (backend/kernels.py): every target
    finds them, through its own `kernel` hook (the CPU's packed products)."""
    assert isinstance(TARGETS[target], Target) and TARGETS[target].name == target
    kernels = {n for n in TABLE if lowering_hook(Op(n, [], []))[0] == "kernel"}
    missing = {n for n in kernels if "statements" not in TABLE[n].extra}
    assert not missing, f"no statements for {sorted(missing)}"
    for n in sorted(kernels):
        ins = SimpleNamespace(op=Op(n, [], []), accumulate=False, pack=None)
        assert callable(TARGETS[target].kernel(ins)), n


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_number_in_a_table_is_cpp_on_every_target(name):
    """A parameter's initializer and regularizer reach the module's table as C++ that means
    them, inf and nan too (the checker refuses those in a .mdl file; the emitter still
    writes no bare `inf`, which does not compile)."""
    graph = check_source("model M() { input x : f32[B, 3]; param w : f32[3]\n"
                         "output loss = mean(x * w); minimize loss }").graph
    param = graph.params["w"]
    param.init, param.regularizer = Init("uniform", (-math.inf, math.nan)), Regularizer(
        "l2", math.inf)
    sources = generate([(for_backends(graph), differentiate(graph), [])], "m", "f32",
                       target(name))
    table = next(line for text in sources.values() for line in text.splitlines()
                 if line.lstrip().startswith('{ "w", 1, param_'))
    assert '{ "uniform", -double(INFINITY), double(NAN) }' in table
    assert table.endswith("double(0x0.0p+0), double(INFINITY) },")


def test_the_cli_offers_the_registered_targets():
    build = parser()._subparsers._group_actions[0].choices["build"]
    target = next(a for a in build._actions if a.dest == "target")
    assert list(target.choices) == sorted(TARGETS)


@pytest.mark.parametrize("name, emulate, built_by", [
    ("cpu", False, toolchain.HOST),
    ("cuda", False, toolchain.NVCC),
    ("cuda", True, toolchain.EMULATED_CUDA),
])
def test_each_target_is_built_by_its_toolchain(name, emulate, built_by):
    chosen = target(name, emulate)
    assert chosen.name == name and chosen.toolchain is built_by
    assert chosen is TARGETS[name] or emulate


def test_the_emulated_target_is_the_cuda_target():
    """The same target as --target cuda: its code, headers and device table."""
    emulated = target("cuda", emulate=True)
    assert isinstance(emulated, CudaTarget) and emulated is not TARGETS["cuda"]
    assert (emulated.source, emulated.headers, emulated.device) == (
        TARGETS["cuda"].source, TARGETS["cuda"].headers, TARGETS["cuda"].device)


@pytest.mark.parametrize("name, emulate, message", [
    ("tpu", False, "unknown target 'tpu' (targets: cpu, cuda)"),
    ("tpu", True, "unknown target 'tpu'"),
    ("cpu", True, "--emulate is for --target cuda: it runs the cuda target's generated code "
                  "on the CPU"),
])
def test_a_wrong_target_is_a_usage_error(name, emulate, message):
    with pytest.raises(UsageError, match="^" + re.escape(message)):
        target(name, emulate)


def test_load_names_its_own_arguments(tmp_path):
    """load(emulate=True) with the cpu target said "--emulate is for --target cuda", the
    CLI's options; a Python caller gave neither."""
    from codegen.pipeline import load
    path = tmp_path / "m.mdl"
    path.write_text("model M(N = 2) {\n  input x : f32[B]\n  output y = x * N\n}\n")
    with pytest.raises(UsageError, match=r"^emulate=True is for target='cuda' \(here "
                                         r"target='cpu'\): it runs the cuda target's"):
        load(path, emulate=True)
    with pytest.raises(UsageError, match=r"^defines\['N'\] = None: a hyper-parameter takes "
                                         r"a number, True or False"):
        load(path, defines={"N": None})


def test_emulated_builds_compile_the_cuda_targets_sources_byte_for_byte(tmp_path):
    """What `mdlc emit --target cuda` writes is what an emulated build compiles: each in a
    process of its own (value names count up in a process). (`emit --emulate`, which
    this test once used, is refused: it changed nothing of the sources.)"""
    done = subprocess.run([sys.executable, "-m", "codegen.cli", "emit",
                           str(EXAMPLES / "charlm.mdl"), "--target", "cuda",
                           "-o", str(tmp_path / "cuda")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    emulated = tmp_path / "emulated"
    build = ("import sys; from pathlib import Path; "
             "from codegen.pipeline import BuildOptions, module_name_for, sources; "
             "f = sys.argv[1]; _, files = sources(f, module_name_for(f), "
             "BuildOptions('cuda', emulate=True), lambda d: None); "
             "[(Path(sys.argv[2]) / k).write_text(v) for k, v in files.items()]")
    emulated.mkdir()
    done = subprocess.run([sys.executable, "-c", build, str(EXAMPLES / "charlm.mdl"),
                           str(emulated)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for name in ("module.cpp", "kernels.cu"):
        assert (emulated / name).read_text() == (tmp_path / "cuda" / name).read_text()
