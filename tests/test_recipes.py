"""docs/architecture.md's recipe "To add a primitive", followed on a throwaway primitive
declared here: softsign(x) = x / (1 + |x|), elementwise. Only the places the recipe
names are touched (the table, its lowering, a gradient-check case, a built-in
function); if any other module had to learn about it, a step below fails: the verifier,
the reference interpreter, autodiff and the passes, the gradient check, the language, the
generated code of every target against the reference, and its ONNX export run by
onnxruntime against the reference."""
from __future__ import annotations

import numpy as np
import pytest
import test_autodiff_primitives as gradients
from test_native import assert_training_matches, random_case

from codegen.backend.op_lowering import attach_lowering, ctype_of
from codegen.ops.entry import OPS
from codegen.ops.primitives import FLOATS, TABLE, primitive
from codegen.ops.primitives.core import same_dtype
from dsl import builtins, check_source

NAME = "recipe_softsign"

SOURCE = f"""
model Recipe(H = 3) {{
  input x : f64[B, 3]
  param W : f64[3, H] = normal(0, 1)
  y = {NAME}(x @ W)
  output y = y
  output loss = sum(y * y)
  minimize loss
}}"""


def _grad(b, op, cts):
    """d/dx x / (1 + |x|) = 1 / (1 + |x|)^2."""
    x = op.inputs[0]
    d = b.add(b.abs(x), b.const(1.0, x.type.dtype))
    return [b.div(cts[0], b.mul(d, d))]


@pytest.fixture(scope="module")
def softsign():
    """The recipe's steps 1, 2 and 4 (step 3, the gradient-check case, is the test
    below); undone afterwards, so that no other test sees the primitive."""
    @primitive(NAME, 1, elementwise=True, grad=_grad,                                # 1
               ref=lambda ctx, attrs, x: x / (1 + np.abs(x)),
               onnx=lambda g, op, xs: g.op("Div", xs[0], g.op(
                   "Add", g.const(1, op.inputs[0].type.dtype), g.op("Abs", xs[0]))))
    def _rule(types, attrs):
        same_dtype(types, "softsign", FLOATS)
        return [types[0]]
    attach_lowering(NAME, "elementwise", lambda a, op, r: (                        # 2
        f"({a[0]} / ({ctype_of(op, r)}(1) + {r.target.math('abs')}({a[0]})))"))
    builtins.unary(NAME)                                                           # 4
    yield
    for table in (TABLE, OPS, builtins.BUILTINS):
        del table[NAME]


def test_step_3_its_gradient_check_case(softsign, monkeypatch):
    monkeypatch.setitem(gradients.CASES, NAME, [([gradients.f(2, 3)], {})])
    gradients.test_every_primitive_has_a_case()
    gradients.test_gradient_matches_central_differences(NAME, [gradients.f(2, 3)], {},
                                                        False)


@pytest.mark.parametrize("target, emulate", [("cpu", False), ("cuda", True)],
                         ids=["cpu", "cuda-emulated"])
def test_every_target_computes_it_as_the_reference(softsign, tmp_path, target, emulate):
    from codegen.pipeline import load
    path = tmp_path / "recipe.mdl"
    path.write_text(SOURCE)
    graph = check_source(SOURCE, str(path), dtype="f64").graph
    assert NAME in {op.prim for op in graph.body.ops}
    module = load(path, target=target, emulate=emulate, dtype="f64",
                  name=f"recipe_{target}")
    m = module.Recipe(seed=3)
    inputs = random_case(graph, "f64")
    assert_training_matches(m, graph, inputs, 1e-10)


def test_its_onnx_export_runs_as_the_reference(softsign, tmp_path):
    import onnxruntime

    from codegen.export import export_onnx
    from codegen.reference import interpreter
    path = tmp_path / "recipe.mdl"
    path.write_text(SOURCE)
    graph = check_source(SOURCE, str(path), dtype="f64").graph
    params = interpreter.init_params(graph, seed=2)
    out = export_onnx(path, tmp_path / "recipe.onnx", dtype="f64", params=params)
    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    inputs = random_case(graph, "f64")
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, inputs)))
    want = interpreter.run(graph, inputs, params)
    for name in graph.outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, err_msg=name)
