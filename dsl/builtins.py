"""Built-in functions of the language: each binds its arguments, checks their kinds and
emits primitives (sugar such as clip, norm and mse is lowered to primitives here; the
activations and the minima, formulas of primitives, in dsl/formulas.py)."""
from __future__ import annotations

import math

import numpy as np

from codegen.ir.diagnostics import Loc, MdlTypeError
from codegen.ir.dtypes import DTYPES, FLOATS
from codegen.ir.graph import PENALTIES, Value
from codegen.ir.shapes import Dim, TensorType, broadcast_shapes
from codegen.ops.builder import Builder
from codegen.ops.primitives import TABLE, ShapeError
from codegen.ops.primitives.core import cast_hint
from codegen.ops.primitives.nn import token_weights

from . import nodes as n
from .env import Const
from .registry import (BUILTINS, axes, axis, builtin, const, number, of_dtype, tensor,
                       tensor_list)

# The complete table (this module's built-ins and dsl/formulas.py's, which it imports
# below), what the elaborator, the lexer and the tests read
__all__ = ["BUILTINS", "CREATORS", "INITIALIZERS", "REGULARIZERS", "fold_unary", "full_of",
           "reserved"]

# The built-ins written with brackets, `zeros[B, H]`, `ones[H]`, `full[B, H](v)`, and
# their fill value (full's is its argument): dsl/expressions.py evaluates them.
CREATORS = {"zeros": 0.0, "ones": 1.0, "full": None}


def reserved(name: str) -> bool:
    """Whether `name` is a built-in's, which no binding and no function may take (a
    variable named `zeros` made `zeros[B, H]` index it instead)."""
    return name in BUILTINS or name in CREATORS


# ---- elementwise ----
def fold_unary(name: str, value: Const, loc: Loc) -> Const:
    """A compile-time scalar through a unary primitive (1.0 / sqrt(H) is a constant): the
    primitive table's NumPy reference computes it; an integer stays one where the
    primitive is defined on i32 and the result is whole (abs(-3) is 3)."""
    prim = TABLE[name]
    with np.errstate(all="ignore"):
        result = float(prim.ref(None, {}, np.float64(value.value)))
    if not math.isfinite(result):
        raise MdlTypeError(f"{name}({value}) has no finite value", loc)
    keeps_int = value.kind == "int" and result.is_integer() and _defined_on_i32(prim)
    return Const.of(int(result) if keeps_int else result)


def _defined_on_i32(prim) -> bool:
    try:
        prim.infer([TensorType("i32", ())], {})
        return True
    except ShapeError:
        return False


def unary(name: str) -> None:
    """Expose the elementwise primitive `name` of one operand as the built-in function
    `name(x)` (constant operands fold)."""
    def run(el, a, call):
        value, loc = a["x"]
        if isinstance(value, Const) and value.kind in ("int", "float"):
            return fold_unary(name, value, loc)
        return el.emit(name, [tensor(el, a["x"])], {}, call.loc)[0]
    builtin(name, "x")(run)


for _name in ("exp", "log", "tanh", "sigmoid", "relu", "sqrt", "abs", "sin", "cos",
              "log1p", "expm1", "softplus", "erf", "erfc", "stop_gradient"):
    unary(_name)


def _pair(el, a, b):
    """Two operands of one dtype: a tensor's, else, for two numbers of which one is a float
    (`maximum(0.5, 1)`), the model's float type, as `0.5 + 1` is a float (the int was
    made an i32 and the pair refused, naming dtypes the user never wrote)."""
    like = a[0].type if isinstance(a[0], Value) else b[0].type if isinstance(b[0], Value) else None
    if like is None and {getattr(a[0], "kind", None), getattr(b[0], "kind", None)} == {
            "int", "float"}:
        like = TensorType(el.float_dtype, ())
    return tensor(el, a, like), tensor(el, b, like)


def binary(name: str) -> None:
    """Expose the elementwise primitive `name` of two operands as `name(x, y)`."""
    builtin(name, "a", "b")(lambda el, a, call: el.emit(name, list(_pair(el, a["a"], a["b"])),
                                                       {}, call.loc)[0])


binary("maximum")
binary("minimum")


@builtin("where", "cond", "a", "b")
def _where(el, a, call):
    x, y = _pair(el, a["a"], a["b"])
    return el.emit("where", [tensor(el, a["cond"]), x, y], {}, call.loc)[0]


@builtin("clip", "x", "lo", "hi")
def _clip(el, a, call):
    """minimum(maximum(x, lo), hi) with PyTorch's clamp's gradient: all of it to x at a
    bound (maximum and minimum share a tie's), to lo or hi past them, none where the
    result is NaN; NaN stays NaN, a
    NaN bound's too (as maximum's and minimum's, PyTorch's clamp and NumPy's clip: x < NaN
    is false, so a NaN lo or hi was passed over). A bound known when compiling is finite
    (a NaN there is an error), and an i32 one never NaN: they need no test."""
    x = tensor(el, a["x"])
    lo, hi = tensor(el, a["lo"], x.type), tensor(el, a["hi"], x.type)
    loc = call.loc

    def past(compare: str, value: Value, bound: Value, given) -> Value:
        beyond = el.emit(compare, [value, bound], {}, loc)[0]
        if isinstance(given, Const) or bound.type.dtype not in FLOATS:
            return beyond
        unordered = el.emit("ne", [bound, bound], {}, loc)[0]
        return el.emit("or", [beyond, unordered], {}, loc)[0]

    raised = el.emit("where", [past("lt", x, lo, a["lo"][0]), lo, x], {}, loc)[0]
    clipped = el.emit("where", [past("gt", raised, hi, a["hi"][0]), hi, raised], {}, loc)[0]
    if x.type.dtype not in FLOATS:
        return clipped
    # a NaN result (of x or a bound) sends no gradient back, PyTorch's: it was all to the
    # NaN operand (x's NaN passed both `where`s)
    nan = el.emit("ne", [clipped, clipped], {}, loc)[0]
    held = el.emit("stop_gradient", [clipped], {}, loc)[0]
    return el.emit("where", [nan, held, clipped], {}, loc)[0]


def _cast(dtype: str) -> None:
    def run(el, a, call):
        target = el.dtype_of(dtype, call.loc)
        # an integer constant cast to a float is that float: f32(2 ** 31) went through
        # i32 first, where it does not fit
        given = a["x"][0]
        float_of_int = isinstance(given, Const) and given.kind == "int" and target in FLOATS
        x = tensor(el, a["x"], TensorType(target, ()) if float_of_int else None)
        return x if x.type.dtype == target else el.emit("cast", [x], {"dtype": target},
                                                        call.loc)[0]
    builtin(dtype, "x")(run)


for _name in DTYPES:
    _cast(_name)


# ---- reductions ----
def _reduction(name: str) -> None:
    def run(el, a, call):
        x = tensor(el, a["x"])
        attrs = {"axes": axes(a["axis"], x.type.rank),
                 "keepdims": const(a["keepdims"], "bool", "keepdims")}
        out = el.emit(name, [x], attrs, call.loc)[0]
        if name == "mean" and out.type.rank == 0:  # what data-parallel shards weigh by
            el.means_over[out.id] = tuple(x.type.shape)
        return out
    builtin(name, "x", "axis", "keepdims", axis=None, keepdims=Const(False, "bool"))(run)


for _name in ("sum", "mean", "max", "logsumexp"):
    _reduction(_name)


@builtin("norm", "x", "axis", "keepdims", axis=None, keepdims=Const(False, "bool"))
def _norm(el, a, call):
    """sqrt(sum(x * x)), whose derivative at x = 0 is 0 (PyTorch's), not NaN: sqrt's
    infinite slope at 0 times the squares' 0 made a zero row's gradient NaN, and an
    optimizer step with it every weight. The root reads 1 where the sum is 0, and the
    result there is 0; a NaN sum stays NaN."""
    x = of_dtype(el, a["x"], "norm", FLOATS)
    loc = call.loc
    attrs = {"axes": axes(a["axis"], x.type.rank),
             "keepdims": const(a["keepdims"], "bool", "keepdims")}
    squares = el.emit("sum", [el.emit("mul", [x, x], {}, loc)[0]], attrs, loc)[0]
    zero = el.emit("eq", [squares, number(el, 0.0, squares, loc)], {}, loc)[0]
    safe = el.emit("where", [zero, number(el, 1.0, squares, loc), squares], {}, loc)[0]
    root = el.emit("sqrt", [safe], {}, loc)[0]
    return el.emit("where", [zero, number(el, 0.0, squares, loc), root], {}, loc)[0]


def _softmax(name: str) -> None:
    def run(el, a, call):
        x = tensor(el, a["x"])
        return el.emit(name, [x], {"axis": axis(a["axis"], x.type.rank)}, call.loc)[0]
    builtin(name, "x", "axis", axis=Const(-1, "int"))(run)


_softmax("softmax")
_softmax("log_softmax")


@builtin("argmax", "x", "axis", axis=Const(-1, "int"))
def _argmax(el, a, call):
    x = tensor(el, a["x"])
    if x.type.rank == 0:
        raise MdlTypeError(f"`argmax` needs a tensor of rank 1 or more, got {x.type}",
                           a["x"][1])
    return el.emit("argmax", [x], {"axis": axis(a["axis"], x.type.rank)}, call.loc)[0]


@builtin("cumsum", "x", "axis", "reverse", reverse=Const(False, "bool"))
def _cumsum(el, a, call):
    """Running sums along `axis` (torch.cumsum, jnp.cumsum); `reverse`: from its end."""
    x = tensor(el, a["x"])
    if x.type.rank == 0:
        raise MdlTypeError(f"`cumsum` needs a tensor of rank 1 or more, got {x.type}",
                           a["x"][1])
    reverse = const(a["reverse"], "bool", "`reverse`")
    return el.emit("cumsum", [x], {"axis": axis(a["axis"], x.type.rank),
                                   "reverse": bool(reverse)}, call.loc)[0]


@builtin("cross_entropy", "logits", "targets", "lengths", "label_smoothing", lengths=None,
         label_smoothing=Const(0.0, "float"))
def _cross_entropy(el, a, call):
    """The mean negative log-likelihood of the targets, over the real tokens with
    `lengths`; with `label_smoothing = e`, PyTorch's: (1 - e) times it plus e times the
    mean over those tokens of -log p averaged over the classes (the loss against a
    target spread uniformly over them)."""
    smoothing = const(a["label_smoothing"], "float", "`label_smoothing`")
    if not 0 <= smoothing <= 1:
        raise MdlTypeError(f"`label_smoothing` must be in [0, 1], got {smoothing}",
                           a["label_smoothing"][1])
    inputs = [tensor(el, a["logits"]), tensor(el, a["targets"])]
    if a["lengths"][0] is not None:
        inputs.append(tensor(el, a["lengths"]))
    # lengths outside [0, T] are refused naming them, as a loop's are
    named = {"lengths_name": inputs[2].hint or "lengths"} if len(inputs) == 3 else {}
    loss = el.emit("cross_entropy", inputs, named, call.loc)[0]
    if smoothing != 0:
        loss = _smoothed(el, loss, inputs, float(smoothing), call.loc)
    if len(inputs) == 3:  # a mean over the real tokens: what data-parallel shards weigh by
        el.token_means[loss.id] = inputs[2]
    else:  # a mean over the logits' rows
        el.means_over[loss.id] = tuple(inputs[0].type.shape[:-1])
    return loss


def _smoothed(el, loss: Value, inputs: list[Value], e: float, loc: Loc) -> Value:
    """(1 - e) * loss + e * (the real tokens' mean of -mean(log_softmax(logits))), the
    mean weighted as cross_entropy's own (token_weights). Its operands are typed
    already: what it emits is ours to get right (a Builder, not the user's checks)."""
    logits, targets, *lengths = inputs
    b, rank, dtype = Builder(el.block, loc), logits.type.rank, logits.type.dtype
    per_token = b.mean(b.log_softmax(logits, axis=rank - 1), axes=(rank - 1,), keepdims=False)
    if lengths:  # padded tokens left out, not weighed by 0: NaN or inf logits there made
        # the loss NaN (PyTorch's ignore_index leaves them out; so does cross_entropy's own)
        per_token = b.where(b.seq_mask(targets, lengths[0]), per_token, b.const(0, dtype))
    weights = token_weights(b, targets, lengths[0] if lengths else None, dtype)
    uniform = b.sum(b.mul(per_token, weights), axes=tuple(range(rank - 1)), keepdims=False)
    return b.sub(b.mul(loss, b.const(1.0 - e, dtype)), b.mul(uniform, b.const(e, dtype)))


@builtin("mse", "a", "b")
def _mse(el, a, call):
    x, y = _pair(el, a["a"], a["b"])
    if x.type.dtype != y.type.dtype:  # its `-`'s words named no `-` of the user's
        raise MdlTypeError(f"`mse` takes two tensors of one dtype, got {x.type} and "
                           f"{y.type} ({cast_hint([x.type.dtype, y.type.dtype])})",
                           call.loc)
    if broadcast_shapes(x.type.shape, y.type.shape) is None:  # the same, of its shapes
        raise MdlTypeError(f"`mse` takes two tensors whose shapes broadcast, got {x.type} "
                           f"and {y.type} (NumPy's rules: the last dims are matched first)",
                           call.loc)
    diff = el.emit("sub", [x, y], {}, call.loc)[0]
    sq = el.emit("mul", [diff, diff], {}, call.loc)[0]
    loss = el.emit("mean", [sq], {"axes": tuple(range(sq.type.rank)), "keepdims": False},
                   call.loc)[0]
    el.means_over[loss.id] = tuple(sq.type.shape)
    return loss


@builtin("dropout", "x", "p")
def _dropout(el, a, call):
    p = const(a["p"], "float", "the dropout probability")
    if not 0 <= p < 1:
        raise MdlTypeError(f"the dropout probability must be in [0, 1), got {p}", a["p"][1])
    return el.emit("dropout", [tensor(el, a["x"])], {"p": float(p)}, call.loc)[0]


# ---- structure ----
@builtin("concat", "xs", "axis", axis=Const(0, "int"))
def _concat(el, a, call):
    xs = tensor_list(el, a["xs"])
    return el.emit("concat", xs, {"axis": axis(a["axis"], xs[0].type.rank)}, call.loc)[0]


@builtin("stack", "xs", "axis", axis=Const(0, "int"))
def _stack(el, a, call):
    xs = tensor_list(el, a["xs"])
    return el.emit("stack", xs, {"axis": axis(a["axis"], xs[0].type.rank + 1)}, call.loc)[0]


@builtin("topk", "x", "k", "axis", axis=Const(-1, "int"))
def _topk(el, a, call):
    """The k largest values and their indices: two results (the rule checks k and the
    axis's size)."""
    x = tensor(el, a["x"])
    if x.type.rank == 0:
        raise MdlTypeError(f"`topk` needs a tensor of rank 1 or more, got {x.type}",
                           a["x"][1])
    k = const(a["k"], "int", "the number of values `k`")
    return tuple(el.emit("topk", [x], {"axis": axis(a["axis"], x.type.rank), "k": k},
                         call.loc))


@builtin("split", "x", "parts", "axis", axis=Const(0, "int"))
def _split(el, a, call):
    x = tensor(el, a["x"])
    parts = const(a["parts"], "int", "the number of parts")
    if parts < 1 or parts > 4096:
        raise MdlTypeError(f"cannot split into {parts} parts", a["parts"][1])
    return tuple(el.emit("split", [x], {"axis": axis(a["axis"], x.type.rank), "parts": parts},
                         call.loc))


@builtin("reshape", "x", "shape", raw=("shape",))
def _reshape(el, a, call):
    x = tensor(el, a["x"])
    node, loc = a["shape"]
    if not isinstance(node, n.ListLit):
        raise MdlTypeError("reshape needs a list of dims: reshape(x, [T*B, H])", loc)
    return el.emit("reshape", [x], {"shape": tuple(el.eval_size(d) for d in node.items)},
                   call.loc)[0]


@builtin("transpose", "x", "perm", perm=None)
def _transpose(el, a, call):
    x = tensor(el, a["x"])
    value, loc = a["perm"]
    if value is None:
        perm = tuple(reversed(range(x.type.rank)))
    elif isinstance(value, list):
        perm = tuple(const((v, loc), "int", "a permutation entry") for v in value)
    else:
        raise MdlTypeError("transpose needs a list for its permutation: [1, 0, 2]", loc)
    return el.emit("transpose", [x], {"perm": perm}, call.loc)[0]


@builtin("swapaxes", "x", "a", "b")
def _swapaxes(el, a, call):
    """`x` with axes a and b exchanged (NumPy's swapaxes, PyTorch's transpose(x, a, b)); of
    negative axes, any rank: `swapaxes(k, -1, -2)` in a function on `f32[..., N, D]`."""
    x = tensor(el, a["x"])
    first, second = axis(a["a"], x.type.rank), axis(a["b"], x.type.rank)
    perm = list(range(x.type.rank))
    perm[first], perm[second] = second, first
    return el.emit("transpose", [x], {"perm": tuple(perm)}, call.loc)[0]


@builtin("one_hot", "ids", "n")
def _one_hot(el, a, call):
    count = const(a["n"], "int", "the number of classes")
    if count < 1:
        raise MdlTypeError(f"one_hot needs at least one class, got {count}", a["n"][1])
    return el.emit("one_hot", [tensor(el, a["ids"])], {"n": count, "dtype": el.float_dtype},
                   call.loc)[0]


@builtin("range", "start", "stop", "step", raw=("start", "stop", "step"), stop=None,
         step=None)
def _range(el, a, call):
    """Python's range as an i32 tensor: `range(n)`, 0 to n - 1, n a dim (a literal, a
    hyper-parameter, or a symbolic dim bound by the call, as in `zeros[n]`);
    `range(start, stop)`, start to stop - 1, of dims (`range(1, T)`: T - 1 values, a size
    the call must not make negative); `range(start, stop, step)` of compile-time
    integers."""
    (start, loc), (stop, _), (step, step_loc) = a["start"], a["stop"], a["step"]
    if stop is None:
        if step is not None:
            raise MdlTypeError("`range` with a step needs its start and stop too: "
                               "range(start, stop, step)", step_loc)
        return el.emit("range", [], {"n": el.eval_size(start), "start": 0, "step": 1},
                       call.loc)[0]
    first, last = el.eval_dim(start), el.eval_dim(stop)
    by = Dim.of(1) if step is None else el.eval_dim(step)
    if by.is_const and by.value == 0:
        raise MdlTypeError("`range` needs a step other than 0", step.loc)
    if first.is_const and last.is_const and by.is_const:
        length = len(range(first.value, last.value, by.value))
        return el.emit("range", [], {"n": Dim.of(length), "start": first.value,
                                     "step": by.value}, call.loc)[0]
    if not (by.is_const and by.value == 1):
        if by.is_const and by.value == -1:  # counting down: the loop's own direction
            raise MdlTypeError(f"a `range` whose start or stop the call binds counts up, by "
                               f"1; a `for` counts down over `reversed(range({last + 1}, "
                               f"{first + 1}))`: {first}, {first - 1}, ..., {last + 1}",
                               step.loc)
        begin = first.value if first.is_const else "start"
        raise MdlTypeError(f"a `range` whose start or stop the call binds counts by 1, not "
                           f"by {by} (its length would divide a size): `{begin} + {by} * "
                           f"range(n)` takes n values by {by}", step.loc)
    # stop - start values; a start the call binds is added to range(stop - start)
    length = last - first
    if length.is_const and length.value < 0:  # Python's would be empty at every call
        raise MdlTypeError(f"`range` of {length} values: its stop is below its start",
                           call.loc)
    count = el.emit("range", [], {"n": length, "start": first.value if first.is_const else 0,
                                  "step": 1}, call.loc)[0]
    if first.is_const:
        return count
    offset = el.emit("full", [], {"shape": (), "value": first, "dtype": "i32"}, loc)[0]
    return el.emit("add", [count, offset], {}, call.loc)[0]


def full_of(el, dims: list[n.Expr], arg, loc: Loc) -> Value:
    """`full[dims](v)`: a tensor of the given shape filled with a compile-time v."""
    value, vloc = arg
    if not isinstance(value, Const):
        raise MdlTypeError("full[...](v) needs a compile-time value", vloc)
    shape = tuple(el.eval_size(d) for d in dims)
    dtype = el.const_dtype(value, None, vloc)
    el.check_finite(value, dtype, vloc)
    return el.emit("full", [], {"shape": shape, "value": value.value, "dtype": dtype}, loc)[0]


INITIALIZERS = {"zeros": 0, "ones": 0, "xavier": 0, "orthogonal": 0, "constant": 1,
                "uniform": 2, "normal": 2}
REGULARIZERS = PENALTIES  # l1(strength), l2(strength): a scope's regularizer


from . import formulas  # noqa: E402,F401 (registers the built-ins written as formulas)
