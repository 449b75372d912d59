"""A loop's branch conditions on the cuda target (docs/cuda.md, "Branch conditions"): a
condition computed from a step's inputs alone moves out of the loop (for_hoist.py), the
loop reads all of them to the host at once instead of one a step, and a function that
reads them so runs as a CUDA graph. On the emulated device, or on a GPU with
MDL_TEST_DEVICE=gpu; against the cpu target on the same weights."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest
from source_files import source_file

from codegen.cli import main as mdlc
from codegen.compile.options import BuildOptions
from codegen.ir.graph import walk_ops
from codegen.pipeline import check, for_backends, load

ON_GPU = os.environ.get("MDL_TEST_DEVICE") == "gpu"
SOURCE = """\
import "std/rnn.mdl"

# the benchmark's GRU with an `if`: a step's sign picks the branch
model StepIf(H = 8) {
  input xs : f32[T, B, H]; input signs : f32[T]; input weights : f32[T, B, H]
  param P : f32[H, H] = uniform(-0.3, 0.3)
  h = zeros[B, H]
  hs = for x in xs, s in signs {
    if s > 0.0 { v = tanh(x @ P) } else { v = 0.5 * x }
    h = gru(v, h)
    yield h
  }
  output loss = sum(hs * weights)
  minimize loss
}

# a condition reduced from a step: it moves out as a reduction over each step's axes
model MeanIf(H = 8) {
  input xs : f32[T, B, H]; input weights : f32[T, B, H]
  param P : f32[H, H] = uniform(-0.3, 0.3)
  h = zeros[B, H]
  hs = for x in xs {
    if mean(x) > 0.0 { v = tanh(x @ P) } else { v = 0.5 * x }
    h = gru(v, h)
    yield h
  }
  output loss = sum(hs * weights)
  minimize loss
}

# a condition that reads the state: it stays in the loop, read a step at a time
model StateIf(H = 8) {
  input xs : f32[T, B, H]; input weights : f32[T, B, H]
  param W : f32[H, H] = uniform(-0.3, 0.3)
  h = zeros[B, H]
  hs = for x in xs {
    if sum(h) > 0.0 { h = tanh(x @ W + h) } else { h = tanh(x - h) }
    yield h
  }
  output loss = sum(hs * weights)
  minimize loss
}
"""
T, B, H = 7, 3, 8


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return source_file(tmp_path_factory, "conditions.mdl", SOURCE)


def loop_if(source, model: str):
    """The prepared forward's `for` whose body holds an `if`, and that `if`."""
    graph = for_backends(check(source, BuildOptions("cuda", "f64", {}, model, []))[0])
    for op in walk_ops(graph.body):
        if op.prim == "for":
            branches = [o for o in op.blocks[0].ops if o.prim == "if"]
            if branches:
                return op, branches[0]
    raise AssertionError("no loop with a branch")


@pytest.mark.parametrize("model", ["StepIf", "MeanIf"])
def test_a_condition_from_a_step_alone_becomes_a_sequence_of_the_loop(source, model):
    loop, branch = loop_if(source, model)
    n_seq = loop.attrs["n_seq"]
    assert branch.inputs[0] in loop.blocks[0].args[:n_seq]  # a step of a sequence
    condition = loop.inputs[loop.blocks[0].args.index(branch.inputs[0])]
    assert condition.type.dtype == "bool" and condition.type.rank == 1  # bool[T]


def test_a_condition_that_reads_the_state_stays_in_the_loop(source):
    loop, branch = loop_if(source, "StateIf")
    assert branch.inputs[0] not in loop.blocks[0].args  # computed from the state


def functions(source, model: str, out) -> dict[str, str]:
    """The generated cuda code of `model`'s functions: name -> body."""
    from test_cuda import _nvcc_missing
    if (why := _nvcc_missing()) is not None:  # a cuda emit's CMake project names cuBLAS
        pytest.skip(f"no CUDA toolkit: {why}")
    assert mdlc(["emit", str(source), "--target", "cuda", "--model", model,
                 "-o", str(out)]) == 0
    code = (out / "module.cpp").read_text()
    return dict(re.findall(r"^void (\w+)\(Model& m, Call& c\) \{(.*?)\n\}\n", code,
                           re.S | re.M))


def test_conditions_are_read_once_a_loop_and_in_a_graph_s_dry_run(source, tmp_path):
    """The generated code. StepIf's functions compute their conditions from an input
    alone (`signs > 0.0`): the kernel runs even in a graph call's dry run (launch_now),
    which reads them once, so every function runs as a CUDA graph, and none reads a
    condition a step. MeanIf's forwards compute theirs by a reduction, which is not
    queued while dry: they read them once a loop, and are no graphs. StateIf's read
    theirs a step at a time (they read the state). Their backwards read what the
    forward kept, once, in a graph."""
    code = functions(source, "StepIf", tmp_path / "step")
    for name in ("infer_0", "train_0", "backward_0"):
        assert code[name].count("mdl::cuda::read_steps_before(") == 1, name
        assert "GraphCall" in code[name] and "mdl::cuda::scalar(" not in code[name], name
    for name in ("infer_0", "train_0"):
        assert code[name].count("mdl::cuda::launch_now(") == 1, name
    mean = functions(source, "MeanIf", tmp_path / "mean")
    for name in ("infer_0", "train_0"):  # a reduction's kernel is not queued while dry
        assert mean[name].count("mdl::cuda::read_steps(") == 1, name
        assert "mdl::cuda::scalar(" not in mean[name] and "GraphCall" not in mean[name]
    state = functions(source, "StateIf", tmp_path / "state")
    for name in ("infer_0", "train_0"):
        assert "mdl::cuda::scalar(" in state[name] and "GraphCall" not in state[name]
    for backward in (mean["backward_0"], state["backward_0"]):
        assert backward.count("mdl::cuda::read_steps_before(") == 1
        assert "GraphCall" in backward


@pytest.fixture(scope="module")
def modules(source):
    """The file's module on the cuda target and on the cpu, f64."""
    where = "gpu" if ON_GPU else "emulated"
    return (load(source, target="cuda", emulate=not ON_GPU, dtype="f64",
                 name=f"conditions_{where}"), load(source, dtype="f64", name="conditions_cpu"))


@pytest.mark.parametrize("model", ["StepIf", "MeanIf", "StateIf"])
def test_training_matches_the_cpu_and_the_backward_replays_for_the_same_branches(
        modules, model, monkeypatch):
    """Calls on the same inputs take the same branches: the backward's graph is captured
    at the second such call and replayed at the third. Other branches run as they are,
    correctly, and the graph serves the next call that takes its branches."""
    monkeypatch.setenv("MDL_CUDA_EMULATOR", "deferred")  # a missing wait reads poison
    cuda, cpu = getattr(modules[0], model)(seed=0), getattr(modules[1], model)(seed=0)
    cuda.set_params({k: np.array(v) for k, v in cpu.params.items()})
    rng = np.random.default_rng(0)

    def case(signs):
        out = {"xs": rng.normal(size=(T, B, H)), "weights": rng.normal(size=(T, B, H))}
        return {**out, "signs": signs} if model == "StepIf" else out
    same = np.where(np.arange(T) % 3 == 2, -1.0, 1.0)
    first, repeated = case(rng.choice([-1.0, 1.0], T)), case(same)
    for k, inputs in enumerate([first, repeated, repeated, repeated, case(-same), repeated]):
        want = cpu.forward(**inputs, training=True)
        grads = cpu.backward()
        got = cuda.forward(**inputs, training=True)
        np.testing.assert_allclose(got["loss"], want["loss"], rtol=1e-12, err_msg=f"call {k}")
        for name, g in cuda.backward().items():
            np.testing.assert_allclose(g, grads[name], rtol=1e-10, atol=1e-12,
                                       err_msg=f"call {k}: {name}")
    graphs = cuda.cuda_graphs
    # captured at call 2, replayed at calls 3 and 5; call 4's signs take other branches
    # (the others' inputs may happen to take the same). StepIf: the training forward and
    # the backward; the others: the backward.
    if model == "StepIf":
        assert graphs == {"captured": 2, "replayed": 4}
    else:
        assert graphs["captured"] == 1 and graphs["replayed"] >= 2
