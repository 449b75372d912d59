"""Symbolic dims (codegen/ir/shapes.py): polynomials over source dims and typed run-time
sizes, ceil-divisions and trip counts, as tables of (dim, environment, value, text), and
their C++ rendering."""
from __future__ import annotations

import numpy as np
import pytest

from codegen.backend.cexpr import DimNames
from codegen.ir.dtypes import DTYPES
from codegen.ir.graph import is_dynamic
from codegen.ir.shapes import (CeilDiv, Dim, DimError, TensorType, TripCount, ceil_div,
                               contiguous_strides, numel, signed)
from codegen.transforms.tapes import nbytes

T, B = Dim.of("T"), Dim.of("B")
TRIPS = TripCount.fresh()

CASES = [  # (dim, env, value, printed)
    (T * B + 2, {"T": 5, "B": 3}, 17, "B*T + 2"),
    (ceil_div(T, 4), {"T": 9}, 3, "ceil(T/4)"),
    (ceil_div(T, 4), {"T": 8}, 2, "ceil(T/4)"),
    (ceil_div(2 * T, 3) * B, {"T": 4, "B": 2}, 6, "B*ceil(2*T/3)"),
    (ceil_div(Dim.of(10), 4), {}, 3, "3"),
    (ceil_div(T, 1), {"T": 7}, 7, "T"),
    (Dim.of(TRIPS) * B, {TRIPS: 4, "B": 3}, 12, f"B*trips#{TRIPS.id}"),
]


@pytest.mark.parametrize("dim, env, value, text", CASES, ids=[c[3] for c in CASES])
def test_dims_evaluate_and_print(dim, env, value, text):
    assert dim.evaluate(env) == value
    assert str(dim) == text


def test_run_time_sizes_are_typed_symbols():
    segments = ceil_div(T, 4)
    assert segments == Dim.of(CeilDiv(T, 4)) and segments != ceil_div(T, 2)
    assert hash(segments) == hash(ceil_div(T, 4))
    assert is_dynamic(segments) and is_dynamic(Dim.of(TRIPS)) and not is_dynamic(T * B)
    assert TripCount.fresh() != TRIPS
    with pytest.raises(DimError):
        Dim.of(TRIPS).evaluate({"T": 3})  # known only once the loop has run
    assert B * ceil_div(T, 4) == ceil_div(T, 4) * B  # monomials in one order


SUBSTITUTIONS = [  # (dim, env, result): a ceil-division of a replaced operand is computed
    (ceil_div(T, 4), {"T": B * 8}, 2 * B),
    (ceil_div(T, 4), {"B": 3}, ceil_div(T, 4)),
    (ceil_div(T, 4) * B, {"T": 10}, 3 * B),
    (ceil_div(T + 1, 2), {"T": 2 * B - 1}, B),
    (Dim.of(TRIPS) + T, {TRIPS: T}, 2 * T),
]


@pytest.mark.parametrize("dim, env, result", SUBSTITUTIONS, ids=[str(c[0]) for c in SUBSTITUTIONS])
def test_substitute(dim, env, result):
    assert dim.substitute(env) == result


def test_products_and_strides():
    assert numel([T, B, Dim.of(4)]) == 4 * T * B and numel([]) == Dim.of(1)
    assert contiguous_strides([T, B, Dim.of(4)]) == (4 * B, Dim.of(4), Dim.of(1))


def test_cpp_renders_a_ceil_division_from_its_operand_and_trips_from_the_model():
    names = DimNames(["T", "B"])
    assert names.expr(ceil_div(T, 4) * B) == "(d1*(((d0) + 3) / 4))"
    assert names.expr(Dim.of(TRIPS)) == "(m.dyn[0])"
    assert names.dynamic == [TRIPS]


SIZES = [  # (type, dims, bytes): run-time sizes evaluated like any dim
    (TensorType.of("f32", (ceil_div(T, 4), B)), {"T": 9, "B": 2}, 4 * 3 * 2),
    (TensorType.of("bool", (TRIPS, 3)), {TRIPS: 5}, 15),
    (TensorType.of("f64", ()), {}, 8),
    # a tape of a branch that does not run at these dims (ops/structured/if_op.py)
    (TensorType.of("f32", (T - 1, B)), {"T": 0, "B": 2}, 0),
]


@pytest.mark.parametrize("type_, dims, size", SIZES, ids=[str(c[0]) for c in SIZES])
def test_tensor_bytes(type_, dims, size):
    assert nbytes(type_, dims) == size


@pytest.mark.parametrize("dim, may_be_negative", [
    (T - 1, True), (T * B - B, True), (T * B + 2, False), (Dim.of(TRIPS) - 1, False)])
def test_a_size_some_dims_make_negative_is_signed(dim, may_be_negative):
    """What the call checks before it runs, or where the branch making it starts."""
    assert signed(dim) == may_be_negative


@pytest.mark.parametrize("name", list(DTYPES))
def test_dtype_table_agrees_with_numpy(name):
    d = DTYPES[name]
    assert np.dtype(d.numpy).itemsize == d.itemsize
    assert (np.dtype(d.numpy).kind == "f") == d.is_float
