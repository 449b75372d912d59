"""Random well-typed expressions for the fuzzer's program generator
(tests/fuzz_generate.py). What they call is read from the primitive table and
`dsl.builtins` where those say enough (unary and binary elementwise functions,
comparisons, reductions, softmaxes, and each one's domain, found by probing its NumPy
reference); the rest are templates that make shapes fit (matmul, concat,
stack/transpose/reshape, split, index, slice, gather, one_hot, dropout, topk, losses,
calls of `linear`, and of the program's functions: tests/fuzz_functions.py). Every
expression is a primary (a name, a call or parenthesized), so it can be indexed or
combined as it is."""
from __future__ import annotations

import numpy as np
from fuzz_functions import Functions
from fuzz_scope import Var

from codegen.ir.shapes import TensorType
from codegen.ops.primitives import BINARY_SYMBOLS, TABLE, ShapeError
from dsl.builtins import BUILTINS
from dsl.formulas import ACTIVATIONS


def _result_dtype(name: str, arity: int) -> str | None:
    try:
        return TABLE[name].infer([TensorType("f64", ())] * arity, {})[0].dtype
    except ShapeError:
        return None


def _finite(name: str, *args: float) -> bool:
    if name in ACTIVATIONS:  # sugar, finite at every finite x
        return True
    with np.errstate(all="ignore"):
        out = TABLE[name].ref(None, {}, *(np.float64(a) for a in args))
    return bool(np.all(np.isfinite(out)))


UNARY = sorted([n for n in BUILTINS if n in TABLE and TABLE[n].elementwise
                and TABLE[n].arity == 1 and _result_dtype(n, 1) == "f64"] + list(ACTIVATIONS))
ARITH = sorted(n for n in BINARY_SYMBOLS if _result_dtype(n, 2) == "f64")
COMPARE = sorted(n for n in BINARY_SYMBOLS if _result_dtype(n, 2) == "bool")
POSITIVE_ARG = {n for n in UNARY if not _finite(n, -1.0)}          # log, sqrt
BOUNDED_ARG = {n for n in UNARY if not _finite(n, 1e4)}            # exp
POSITIVE_LEFT = {n for n in ARITH if not _finite(n, -1.0, 0.5)}    # pow's base
POSITIVE_RIGHT = {n for n in ARITH if not _finite(n, 1.0, 0.0)}    # div's divisor
BOUNDED_RIGHT = {n for n in ARITH if not _finite(n, 2.0, 1e4)}     # pow's exponent
REDUCTIONS = sorted(n for n, b in BUILTINS.items() if b.sig.names == ["x", "axis", "keepdims"])
# A reduction that is sugar (norm: sqrt(sum(x * x))) has no gradient where its argument
# is all zero, as a masked row of a loop with lengths is: give it positive arguments.
# (min is max's mirror, exact, and defined everywhere max is.)
POSITIVE_REDUCTION = {n for n in REDUCTIONS if n not in TABLE and n != "min"}
# softmax and log_softmax: (x, axis) keeping x's type (argmax, of the same arguments,
# gives integers: tests/fuzz_integers.py draws it)
SOFTMAXES = sorted(n for n, b in BUILTINS.items() if b.sig.names == ["x", "axis"]
                   and n in TABLE and TABLE[n].infer([TensorType("f64", (2,))], {"axis": 0})[0].dtype == "f64")


# The comparisons for equality. A float compared so meets a literal that no value a
# program computes with rounding ties: drawn against 0.5, `mean(softmax(x, axis = 1))`
# over two columns, 1/2 mathematically, was 0.5 in the reference and not on either
# target, which took the other branch (seed 664, Small664_15). The operand is still
# drawn, so that programs without such a comparison keep their text.
EQUALITY = {n for n in COMPARE if BINARY_SYMBOLS[n] in ("==", "!=")}
TIE_FREE = "(-0.3)"


def compared(name: str, right: str) -> str:
    """The right side of comparison `name`: `right`, or TIE_FREE for an equality."""
    return TIE_FREE if name in EQUALITY else right


def binary_text(name: str, left: str, right: str) -> str:
    symbol = BINARY_SYMBOLS[name]
    return f"{symbol}({left}, {right})" if symbol in BUILTINS else f"({left} {symbol} {right})"


LITERALS = ("0.5", "1.5", "0.25", "2.0", "(-0.5)", "0.1", "3")


class Expressions(Functions):
    """Draws expressions of a given shape."""

    FORMS = (("unary", 6), ("binary", 6), ("neg", 1), ("where", 2), ("clip", 1),
             ("matmul", 3), ("softmax", 1), ("reduce", 2), ("concat", 1), ("restack", 1),
             ("flatten", 1), ("transpose", 1), ("split", 1), ("index", 1), ("slice", 1),
             ("gather", 1), ("one_hot", 1), ("dropout", 1), ("topk", 1), ("call", 2),
             ("scaled", 1.5),
             ("encode", 1), ("linear", 1), ("loss", 2))

    def expr(self, shape: tuple, depth: int) -> str:
        """A float expression of exactly `shape`, always a primary (a name, a call, or
        parenthesized), so it can be indexed or combined without more parentheses."""
        if depth <= 0 or self.rng.random() < 0.2:
            return self.leaf(shape)
        if self.drawn_again() and self.rng.random() < 0.2:  # rare places: draw one often
            return self.form_dropout(shape, depth - 1) or self.leaf(shape)
        # newer forms, each decided on a stream of its own: a program that draws none of
        # them is the one its seed made before they came
        if shape and self.swaps.random() < 0.015:
            return self.scanned(self.form_swapaxes(shape, depth - 1), shape)
        if self.leading.random() < 0.015:
            called = self.form_leading(shape, depth - 1)
            if called is not None:
                return self.scanned(called, shape)
        return self.scanned(self.drawn(self.FORMS, "form_", shape, depth) or self.leaf(shape),
                            shape)

    def scanned(self, text: str, shape: tuple) -> str:
        """`text`, or now and then its running sums along one of its axes (from either
        end), decided on a stream of its own (self.scans): the text changes, no other
        draw of the program does. Sums of up to T values stay finite."""
        if not shape or self.scans.random() >= 0.06:
            return text
        self.cover("cumsum")
        axis = self.scans.randrange(-len(shape), len(shape))
        reverse = ", reverse = true" if self.scans.random() < 0.5 else ""
        return f"cumsum({text}, axis = {axis}{reverse})"

    def drawn(self, forms: tuple, prefix: str, shape: tuple, depth: int) -> str | None:
        """An expression of one of `forms` ((name, weight): the methods `prefix + name`),
        drawn by weight; None when four draws did not fit this shape."""
        names, weights = zip(*forms)
        for _ in range(4):
            form = self.rng.choices(names, weights)[0]
            out = getattr(self, prefix + form)(shape, depth - 1)
            if out is not None:
                return out
        return None

    def leaf(self, shape: tuple) -> str:
        found = self.floats(shape)
        if found and self.rng.random() < 0.85:
            return self.pick(found).name
        return self.make(shape)

    def make(self, shape: tuple) -> str:
        """A value of `shape` when no variable has it."""
        if not self.in_def and self.rng.random() < 0.25:
            return self.input(shape)
        everything = [v for v in self.visible().values()
                      if v.dtype == "f32" and v.name not in self.avoid]
        wider = [v for v in everything if v.shape[:-1] == shape and v.shape]
        if wider:
            red = self.pick(REDUCTIONS)
            v = self.pick(wider)
            return f"{red}({self.reduction_arg(red, v.name)}, axis = {len(shape)})"
        if len(shape) == 2 and self.floats(shape[::-1]):
            return f"transpose({self.pick(self.floats(shape[::-1])).name})"
        related = [v for v in everything if len(v.shape) == len(shape) and shape
                   and v.shape[:-1] == shape[:-1] and isinstance(v.shape[-1], int)]
        if related and isinstance(shape[-1], int):
            v = self.pick(related)
            if v.shape[-1] > shape[-1] and self.rng.random() < 0.5:
                a = self.rng.randint(0, v.shape[-1] - shape[-1])
                return f"{v.name}[{':, ' * (len(shape) - 1)}{a}:{a + shape[-1]}]"
            if len(shape) >= 2:
                return f"({v.name} @ {self.param((v.shape[-1], shape[-1]))})"
        if all(isinstance(d, int) for d in shape):
            return self.param(shape)
        if not self.in_def:
            return self.input(shape)
        return f"full[{', '.join(map(self.dim, shape))}](0.5)"

    def literal(self) -> str:
        """A number: a literal, or a float or int hyper-parameter by name."""
        named = self.hypers(float) + self.hypers(int)
        if named and self.rng.random() < 0.3:
            self.cover("hyper:value")
            return self.pick(named)
        return self.pick(LITERALS)

    def positive(self, text: str) -> str:
        """`text` made positive (and at least 0.5) without losing its gradient."""
        return self.pick([f"(sigmoid({text}) + 0.5)", f"exp(tanh({text}))",
                          f"(abs({text}) + 1.0)"])

    def reduction_arg(self, red: str, text: str) -> str:
        """`text` as the argument of reduction `red`, inside its domain."""
        return self.positive(text) if red in POSITIVE_REDUCTION else text

    def operand(self, shape: tuple, depth: int) -> str:
        """Something that broadcasts to `shape`: the shape, a suffix, a literal, a
        rank-0 value, or a reduction with keepdims."""
        r = self.rng.random()
        if r < 0.15:
            return self.literal()
        if r < 0.25:
            return self.expr((), depth)
        if shape and r < 0.4:
            self.cover("broadcast")
            return self.expr(shape[1:], depth)
        if shape and r < 0.48:
            red = self.pick(REDUCTIONS)
            self.cover("keepdims")
            arg = self.reduction_arg(red, self.expr(shape, depth))
            return f"{red}({arg}, axis = {len(shape) - 1}, keepdims = true)"
        return self.expr(shape, depth)

    def condition(self, shape: tuple, depth: int) -> str:
        """A bool expression that broadcasts to `shape`."""
        if not self.in_def and self.rng.random() < 0.1:
            self.cover("bool-input")
            return self.input(shape, "bool", "mask")
        f = self.pick(COMPARE)
        self.cover(f)
        left = self.expr(shape, depth)
        c = binary_text(f, left, compared(f, self.operand(shape, depth)))
        r = self.rng.random()
        if r < 0.1:
            return f"(not {c})"
        if r < 0.2:
            return f"({c} {self.pick(['and', 'or'])} {self.condition(shape, depth - 1)})"
        return c

    def scalar_condition(self, depth: int) -> str:
        steps = [v.name for v in self.visible().values() if v.fixed and not v.param
                 and v.shape == () and v.dtype == "f32"]
        if steps and self.rng.random() < 0.5:  # a loop's scalar step: out of the loop
            self.cover("if:step")
            e = self.pick(steps)
            f = self.pick(COMPARE)
            return binary_text(f, self.pick([e, f"tanh({e})", f"(2.0 * {e})"]),
                               compared(f, self.pick(["0.1", "0.5", "(-0.2)"])))
        with self.no_calls():
            red, f = self.pick(REDUCTIONS), self.pick(COMPARE)
            shape = self.pick([s for s in self.shapes() if s])
            arg = self.reduction_arg(red, self.expr(shape, depth))
            return binary_text(f, f"{red}({arg})",
                               compared(f, self.pick(["0.1", "0.5", "(-0.2)", "1.0"])))

    def form_unary(self, shape, d):
        f = self.pick(UNARY)
        self.cover(f)
        arg = self.expr(shape, d)
        if f in POSITIVE_ARG:
            arg = self.positive(arg)
        if f in BOUNDED_ARG:
            arg = f"tanh({arg})"
        return f"{f}({arg})"

    def form_neg(self, shape, d):
        self.cover("neg")
        return f"(-{self.expr(shape, d)})"

    def form_binary(self, shape, d):
        f = self.pick(ARITH)
        self.cover(f)
        if f not in POSITIVE_LEFT | POSITIVE_RIGHT | BOUNDED_RIGHT and self.rng.random() < 0.3:
            left, right = self.operand(shape, d), self.expr(shape, d)
        else:
            left, right = self.expr(shape, d), self.operand(shape, d)
        if f in POSITIVE_LEFT:
            left = self.positive(left)
        if f in POSITIVE_RIGHT:
            right = self.positive(right)
        if f in BOUNDED_RIGHT:
            right = f"tanh({right})"
        return binary_text(f, left, right)

    def form_where(self, shape, d):
        self.cover("where")
        cond = self.condition(shape if self.rng.random() < 0.7 else shape[1:], d)
        return f"where({cond}, {self.expr(shape, d)}, {self.operand(shape, d)})"

    def form_clip(self, shape, d):
        self.cover("clip")
        return f"clip({self.expr(shape, d)}, -0.5, 0.5)"

    def form_matmul(self, shape, d):
        if len(shape) < 2 or not isinstance(shape[-1], int):
            return None
        self.cover("matmul")
        # at times a variable on the right (a loop's state: another matrix every step,
        # never packed once as a weight is; a draw of its own, leaving other choices be)
        right = [v for v in self.visible().values() if v.dtype == "f32" and len(v.shape) == 2
                 and v.shape[1] == shape[-1] and isinstance(v.shape[0], int)
                 and v.name not in self.avoid]
        if right and self.operands.random() < 0.3:
            v = self.pick(right)
            self.cover("matmul:variable")
            return f"({self.expr(shape[:-1] + (v.shape[0],), d)} @ {v.name})"
        k = self.pick(self.widths)
        if len(shape) >= 3 and self.operands.random() < 0.3:
            # a batch of matrices by a batch of as many (attention's q @ k, bmm): both
            # operands computed, so that both get gradients
            self.cover("matmul:batched")
            right = self.expr(shape[:-2] + (k, shape[-1]), d)
            return f"({self.expr(shape[:-1] + (k,), d)} @ {right})"
        left = self.expr(shape[:-1] + (k,), d)
        return f"({left} @ {self.param((k, shape[-1]))})"

    def form_softmax(self, shape, d):
        if not shape:
            return None
        f = self.pick(SOFTMAXES)
        self.cover(f)
        axis = self.rng.randrange(len(shape))
        x = self.expr(shape, d)
        if f == "softmax" and self.rng.random() < 0.3:
            # scores masked out as attention masks them, whole rows at times: a row of
            # -1e9 once gave 1 everywhere (its log(sum) rounded away). Only softmax: its
            # result is bounded, where log_softmax's -1e9 would make later sin(...) noise.
            self.cover("softmax:masked")
            x = f"where({self.condition(shape, d - 1)}, {x}, -1000000000.0)"
        return f"{f}({x}, axis = {axis})"

    def form_reduce(self, shape, d):
        red = self.pick(REDUCTIONS)
        self.cover(red)
        if self.rng.random() < 0.4 and len(shape) < 3:
            self.cover("stack")
            axis = self.rng.randint(0, len(shape))
            items = [self.reduction_arg(red, self.expr(shape, d))
                     for _ in range(self.rng.randint(2, 3))]
            if len(set(items)) == 1:
                # copies of one value (a function's one argument, drawn each time): their
                # mean is the value again up to rounding, which two builds round apart, so
                # `x < mean(stack([x, x, x]))` came out true in one and false in the other
                # (seed 628, program 104). Shifted apart, no comparison sits on a tie.
                items = [f"({x} + {0.25 * k})" if k else x for k, x in enumerate(items)]
            return f"{red}(stack([{', '.join(items)}], axis = {axis}), axis = {axis})"
        wider = self.wider(shape)
        if wider is None:
            return None
        big, axes = wider
        return f"{red}({self.reduction_arg(red, self.expr(big, d))}{axes})"

    def wider(self, shape):
        """A shape that reduces to `shape`, and the reduction's axis argument."""
        b = self.batch()
        if not shape:
            return self.pick([s for s in self.shapes() if s]), ""
        if shape == (b,):
            return (b, self.pick(self.widths)), ", axis = 1"
        if len(shape) == 1 and not self.in_def and self.rng.random() < 0.3:
            return ("T", "B") + shape, ", axis = [0, 1]"
        if len(shape) == 1 and self.symbols and not self.in_def and self.rng.random() < 0.4:
            return (self.pick(self.symbols),) + shape, ", axis = 0"
        if len(shape) == 1:
            return (b,) + shape, ", axis = 0"
        if shape[0] == "B" and len(shape) == 2:
            return ("T",) + shape, ", axis = 0"
        return None

    def form_concat(self, shape, d):
        if not shape or not isinstance(shape[-1], int) or shape[-1] < 2:
            return None
        self.cover("concat")
        a = self.rng.randint(1, shape[-1] - 1)
        lead = shape[:-1]
        return (f"concat([{self.expr(lead + (a,), d)}, {self.expr(lead + (shape[-1] - a,), d)}]"
                f", axis = {len(shape) - 1})")

    def form_restack(self, shape, d):
        if len(shape) != 2 or not isinstance(shape[-1], int) or shape[-1] % 2:
            return None
        self.cover("reshape")
        half = (shape[0], shape[-1] // 2)
        return (f"reshape(transpose(stack([{self.expr(half, d)}, {self.expr(half, d)}]), "
                f"[1, 0, 2]), [{shape[0]}, {shape[1]}])")

    def form_flatten(self, shape, d):
        """Dims that are products and sums of T and B: a sequence flattened to its T*B rows
        (and back around a product, as a char LM's decoder is), reduced over them, or
        two sequences concatenated over time (2*T steps) and reduced."""
        if self.in_def:
            return None
        red = self.pick(REDUCTIONS)
        if len(shape) == 3 and shape[:2] == ("T", "B") and isinstance(shape[2], int):
            self.cover("reshape:rows")
            k = self.pick(self.widths)
            rows = f"reshape({self.expr(('T', 'B', k), d)}, [T * B, {self.dim(k)}])"
            return (f"reshape(({rows} @ {self.param((k, shape[2]))}), "
                    f"[T, B, {self.dim(shape[2])}])")
        if len(shape) == 1 and isinstance(shape[0], int):
            self.cover("reshape:rows")
            rows = f"reshape({self.expr(('T', 'B') + shape, d)}, [T * B, {self.dim(shape[0])}])"
            return f"{red}({self.reduction_arg(red, rows)}, axis = 0)"
        if len(shape) == 2 and shape[0] == "B":
            self.cover("concat:time")
            both = f"concat([{self.expr(('T',) + shape, d)}, {self.expr(('T',) + shape, d)}])"
            return f"{red}({self.reduction_arg(red, both)}, axis = 0)"
        return None

    def form_transpose(self, shape, d):
        if len(shape) != 2:
            return None
        self.cover("transpose")
        return f"transpose({self.expr(shape[::-1], d)})"

    def form_swapaxes(self, shape, d):
        """`swapaxes` of a value whose two axes are `shape`'s swapped (at times one axis
        with itself), each axis written from the front or from the end."""
        n = len(shape)
        a = self.swaps.randrange(n)
        b = a if self.swaps.random() < 0.25 else self.swaps.randrange(n)
        swapped = list(shape)
        swapped[a], swapped[b] = swapped[b], swapped[a]
        axes = [i - n if self.swaps.random() < 0.5 else i for i in (a, b)]
        self.cover("swapaxes")
        if a == b:
            self.cover("swapaxes:same")
        if min(axes) < 0:
            self.cover("swapaxes:negative")
        return f"swapaxes({self.expr(tuple(swapped), d)}, {axes[0]}, {axes[1]})"

    def form_split(self, shape, d):
        if not shape or not isinstance(shape[-1], int):
            return None
        self.cover("split")
        n = self.rng.randint(2, 3)
        with self.no_calls():   # a call here would come first in the text, last in counting
            whole = self.expr(shape[:-1] + (shape[-1] * n,), d)
        names = [self.fresh("q") for _ in range(n)]
        self.emit(f"{', '.join(names)} = split({whole}, {n}, axis = {len(shape) - 1})")
        for q in names:
            self.define(Var(q, shape))
        return self.pick([names[0], f"({names[0]} * {names[-1]})", f"({names[1]} - {names[0]})"])

    def form_topk(self, shape, d):
        """topk's values. Only the values: of floats a rounding apart, one build may pick
        the one and the other build the other (the integer form uses the indices too)."""
        drawn = self.topk_of(shape, d, self.expr, "topk")
        if drawn is None:
            return None
        self.define(Var(drawn[0], shape))
        return drawn[0]

    def topk_of(self, shape, d, draw, covered: str) -> tuple[str, str] | None:
        """Emits `v, i = topk(x, k)`, x drawn by `draw` (an expression of floats or of
        integers) with up to 3 more along the last axis than `shape`, whose size is k;
        the names of the values and indices, defined with `shape`, or None where the last
        axis is not a known size."""
        if not shape or not isinstance(shape[-1], int):
            return None
        self.cover(covered)
        with self.no_calls():
            whole = draw(shape[:-1] + (shape[-1] + self.rng.randint(0, 3),), d)
        values, indices = self.fresh("v"), self.fresh("i")
        axis = self.pick(["", f", axis = {len(shape) - 1}", ", axis = -1"])
        self.emit(f"{values}, {indices} = topk({whole}, {shape[-1]}{axis})")
        return values, indices

    def form_index(self, shape, d):
        if self.in_def:
            return None
        self.cover("index")
        if shape[:1] == ("B",) and len(shape) == 2:
            t = self.int_input((), "t") if self.rng.random() < 0.6 else "0"
            return f"{self.expr(('T',) + shape, d)}[{t}]"
        if len(shape) == 1 and isinstance(shape[0], int):
            lead = self.pick(("B",) + self.symbols)
            return f"{self.expr((lead,) + shape, d)}[0]"   # [0]: seeds keep their programs
        return None

    def form_slice(self, shape, d):
        if not shape or not isinstance(shape[-1], int):
            return None
        self.cover("slice")
        extra = self.rng.randint(1, 3)
        a = self.rng.randint(0, extra)
        src = self.expr(shape[:-1] + (shape[-1] + extra,), d)
        return f"{src}[{':, ' * (len(shape) - 1)}{a}:{a + shape[-1]}]"

    def form_gather(self, shape, d):
        if self.in_def or shape[:-1] not in (("B",), ("T", "B")) or not isinstance(shape[-1], int):
            return None
        self.cover("gather")
        table = self.expr((self.rng.randint(2, 5), shape[-1]), d)
        return f"{table}[{self.int_input(shape[:-1], 'ids' if len(shape) == 2 else 'tok')}]"

    def form_one_hot(self, shape, d):
        # its size is a number: a symbolic dim (B) can be used in shapes only
        if self.in_def or len(shape) != 2 or shape[0] != "B" or not isinstance(shape[1], int):
            return None
        self.cover("one_hot")
        return f"one_hot({self.int_input(('B',))}, {self.dim(shape[1])})"

    def form_dropout(self, shape, d):
        self.cover("dropout")
        if self.drawn_again():
            self.cover("dropout:drawn-again")
        return f"dropout({self.expr(shape, d)}, {self.pick(['0.1', '0.5'])})"

    def form_linear(self, shape, d):
        if self.in_def or self.calls_blocked or len(shape) != 2 or not isinstance(shape[1], int):
            return None
        self.cover("linear")
        k = self.pick(self.widths)
        arg = self.expr(shape[:-1] + (k,), d)
        return self.call_site("linear", ("linear", k, shape[1]),
                              f"linear({arg}, {self.dim(shape[1])})")

    def smoothing(self) -> str:
        """A cross_entropy's label smoothing, a third of the time."""
        if self.rng.random() >= 1 / 3:
            return ""
        self.cover("cross_entropy:smoothing")
        return f", label_smoothing = {self.pick(['0.1', '0.5', '1.0'])}"

    def form_loss(self, shape, d):
        if shape or self.in_def:
            return None
        r, c = self.rng.random(), self.pick(self.widths)
        if r < 0.35:
            self.cover("cross_entropy")
            text = f"cross_entropy({self.expr(('B', c), d)}, {self.int_input(('B',))}"
            return text + self.smoothing() + ")"
        if r < 0.6:
            self.cover("cross_entropy:lengths")
            logits = self.expr(("T", "B", c), d)
            return (f"cross_entropy({logits}, {self.int_input(('T', 'B'), 'tok')}, "
                    f"lengths = {self.lengths()}{self.smoothing()})")
        self.cover("mse")
        shape = self.pick([s for s in self.shapes() if s])
        return f"mse({self.expr(shape, d)}, {self.operand(shape, d)})"
