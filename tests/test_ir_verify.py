"""The verifier accepts what the front end and autodiff make and refuses broken IR, saying
what is wrong and showing the op; the printer and `mdlc emit --ir` show the IR."""
from __future__ import annotations

import pytest
from ir_helpers import CONTROL, joint, model, rnn_model

from codegen import cli
from codegen.ir.graph import IRError, Op, Value, walk_ops
from codegen.ir.shapes import TensorType
from codegen.ops.printer import format_graph
from codegen.ops.verify import verify

LOOP = rnn_model("lstm(x, h, c)", "(lengths = lengths)", True, state="h, c")


def first(graph, prim: str) -> Op:
    return next(op for op in walk_ops(graph.body) if op.prim == prim)


def last_op_first(g):
    g.body.ops.insert(0, g.body.ops.pop())


def define_twice(g):
    g.body.ops.append(g.body.ops[0])


def retype(g):
    op = first(g, "matmul")
    op.outputs[0].type = op.outputs[0].type.with_dtype("f32")


def extra_body_arg(g):
    first(g, "for").blocks[0].args.append(Value(TensorType.of("f64", ()), "extra"))


def leak_from_body(g):
    inner = first(g, "for").blocks[0].ops[0].outputs[0]
    g.outputs["leak"] = inner


def mismatch_branches(g):
    op = first(g, "if")
    op.blocks[1].results = op.blocks[1].results[:0] + [op.inputs[0]]


def float_condition(g):
    op = first(g, "while")
    op.blocks[0].results = [op.blocks[0].args[0]]


def unknown_primitive(g):
    first(g, "tanh").prim = "tanhh"


def wrong_tape_count(g):
    first(g, "for").attrs["n_tape"] = 99


def unknown_attribute(g):
    first(g, "for").attrs["reverse"] = True


def ill_typed_attribute(g):
    first(g, "for").attrs["checkpoint"] = True


def missing_attribute(g):
    del first(g, "for").attrs["n_state"]


def ill_typed_if_attribute(g):
    first(g, "if").attrs["n_tape"] = 1.0


def trips_as_a_string(g):
    first(g, "while").attrs["trips"] = "trips#3"


BROKEN = [
    (LOOP, last_op_first, "read before it is defined"),
    (LOOP, define_twice, "defined twice"),
    (LOOP, retype, "outputs should be f64"),
    (LOOP, extra_body_arg, "for body args are the step slices, then the states"),
    (LOOP, leak_from_body, "which the body does not define"),
    (CONTROL["if inside for"], mismatch_branches, "if branches yield the if's output types"),
    (CONTROL["while and if at the top"], float_condition, "a while cond takes the state"),
    (LOOP, unknown_primitive, "unknown op `tanhh`"),
    (LOOP, wrong_tape_count, "n_tape counts trailing yields"),
    (LOOP, unknown_attribute, "`for` has no attribute `reverse`"),
    (LOOP, ill_typed_attribute, "`for` attribute `checkpoint` should be int, got True"),
    (LOOP, missing_attribute, "`for` needs attribute `n_state`"),
    (CONTROL["if inside for"], ill_typed_if_attribute,
     "`if` attribute `n_tape` should be int, got 1.0"),
    (CONTROL["while and if at the top"], trips_as_a_string,
     "`while` attribute `trips` should be TripCount, got 'trips#3'"),
]


@pytest.mark.parametrize("src, breaks, message", BROKEN, ids=[b[1].__name__ for b in BROKEN])
def test_the_verifier_refuses_broken_ir(src, breaks, message):
    graph = model(src)
    verify(graph)
    breaks(graph)
    with pytest.raises(IRError, match=message.replace("(", r"\(").replace(")", r"\)")):
        verify(graph)


def test_errors_show_the_op():
    graph = model(LOOP)
    retype(graph)
    with pytest.raises(IRError) as info:
        verify(graph)
    assert "= matmul(%x" in str(info.value)


@pytest.mark.parametrize("name", sorted(CONTROL))
def test_gradient_graphs_verify(name):
    verify(joint(model(CONTROL[name])))


def test_the_printer_shows_blocks_types_and_gradients():
    text = format_graph(joint(model(LOOP)))
    assert text.startswith("model M(H=3, E=2)\n  input xs = %xs")
    assert "= for(" in text and "\n    body(" in text and "seq_order(" in text
    assert "n_tape=" in text and "\n  grad param lstm/W = %" in text
    assert "f64[T, B, 3]" in text


def test_mdlc_emit_ir(tmp_path, capsys):
    path = tmp_path / "m.mdl"
    path.write_text(LOOP)
    assert cli.main(["emit", "--ir", str(path), "-D", "H=5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("model M(H=5, E=2)") and "grad param" not in out
    assert cli.main(["emit", "--ir", "--grad", "--dtype", "f64", str(path)]) == 0
    assert "grad input xs = %" in capsys.readouterr().out


def test_values_print_with_their_hint_and_id():
    v = Value(TensorType.of("f32", (2,)), "h")
    assert repr(v) == f"%h{v.id}: f32[2]"
