"""Every model of examples/ that minimizes something: its gradient graph verifies, and
its reference gradients match central differences (small dims, random inputs)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ir_helpers import TOLERANCE, check_model_grads, joint, random_params

from codegen.reference import gradcheck
from dsl import check_file
from dsl.program import load_program, read_source

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
DIMS = {"T": 3, "B": 2, "S": 4}


def models():
    for path in sorted(EXAMPLES.glob("*.mdl")):
        for name in load_program(read_source(str(path)), str(path)).models:
            yield pytest.param(path, name, id=f"{path.stem}-{name}")


def example_inputs(graph) -> dict:
    """Floats at random, lengths from T down, other integers (ids, labels) the two
    smallest values their uses and asserts allow, 0 and 1 mostly."""
    rng = np.random.default_rng(0)
    excluded: dict[str, set[int]] = {}
    bounds = gradcheck.integer_bounds(graph, DIMS, excluded)
    out = {}
    for name, v in graph.inputs.items():
        shape = tuple(d.evaluate(DIMS) for d in v.type.shape)
        if v.type.is_float:
            out[name] = rng.normal(size=shape)
        elif name == "lengths":
            out[name] = np.linspace(DIMS["T"], 1, num=shape[0]).astype(np.int32)
        else:
            lo, hi = bounds.get(name, (0, 2))
            lo = max(lo, 0)
            allowed = [k for k in range(lo, min(hi, lo + 3)) if k not in excluded.get(name, ())]
            out[name] = rng.choice(allowed[:2], size=shape).astype(np.int32)
    return out


@pytest.mark.parametrize("path, name", list(models()))
def test_example_gradients(path, name):
    graph = check_file(str(path), model=name, dtype="f64").graph
    if graph.loss is None:
        pytest.skip(f"{name} minimizes nothing")
    joint(graph)
    params = random_params(graph, scale=0.1)
    assert check_model_grads(graph, example_inputs(graph), params, directions=2) < TOLERANCE
