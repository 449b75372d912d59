"""i32 values in the fuzzer's programs (tests/fuzz_generate.py): integer inputs whose
values reach i32's ends (tests/fuzz_compare.py draws them), arithmetic that wraps around
past them, the elementwise functions and reductions the primitive table defines for
i32, `argmax`, `topk`, `range`, comparisons, `where`, and the casts between i32, floats
and bool.
Integers enter the float expressions through `f32(...)` and conditions, and leave them
through `i32(...)` of a bounded float (a float near an integer boundary would truncate to
either side in two builds); they are variables of their own, a loop's state and outputs."""
from __future__ import annotations

from fuzz_expressions import COMPARE, REDUCTIONS, Expressions, binary_text
from fuzz_scope import Var

from codegen.ir.shapes import TensorType
from codegen.ops.primitives import BINARY_SYMBOLS, TABLE, ShapeError
from dsl.builtins import BUILTINS


def _takes_i32(name: str, arity: int, shape: tuple = (), **attrs) -> bool:
    try:
        return TABLE[name].infer([TensorType("i32", shape)] * arity, attrs)[0].dtype == "i32"
    except ShapeError:
        return False


INT_BINARY = sorted(n for n in BINARY_SYMBOLS if _takes_i32(n, 2))  # + - * // % maximum minimum
INT_UNARY = sorted(n for n in BUILTINS if n in TABLE and TABLE[n].elementwise
                   and TABLE[n].arity == 1 and _takes_i32(n, 1))       # abs relu
# The reductions that keep an i32 (`mean` and `logsumexp` are of floats; `norm` is sugar)
INT_REDUCTIONS = [n for n in REDUCTIONS if n in TABLE
                  and _takes_i32(n, 1, (2,), axes=(0,), keepdims=False)] + ["min"]  # max's mirror
# Literals that meet i32's ends: 46341 squared and 65536 times 65536 are past them
INT_LITERALS = ("1", "2", "3", "(-1)", "7", "46341", "65536", "2147483647", "(-2147483647)")
# What a float is scaled by before `i32(tanh(x) * k)`: small, so that a float's last bits
# seldom decide the integer, and halfway between two, so that a saturated tanh does not: an
# f32 tanh of 12 is 1 exactly, which times 3.0 truncated to 3 where the reference's f64
# 0.99999999 gave 2 (seed 1134's program 19, at B = 25)
CAST_SCALES = ("2.5", "99.5")
INPUT_PREFIX = "n"   # i32 inputs the generator adds for arithmetic, not for indexing


class Integers(Expressions):
    """Expressions of i32 values, and the float ones that use them."""

    FORMS = Expressions.FORMS + (("integer", 1.5),)
    INT_FORMS = (("binary", 6), ("neg", 1), ("unary", 1.5), ("clip", 0.5), ("where", 1),
                 ("reduce", 1.5), ("argmax", 1), ("topk", 0.5), ("cast", 1.5), ("truth", 0.5),
                 ("range", 0.5))

    def ints(self, shape: tuple) -> list[Var]:
        return [v for v in self.visible().values()
                if v.dtype == "i32" and v.shape == shape and v.name not in self.avoid]

    def int_expr(self, shape: tuple, depth: int) -> str:
        """An i32 expression of exactly `shape`, always a primary."""
        self.cover("int")
        if depth > 0 and self.rng.random() > 0.25:
            return self.scanned(self.drawn(self.INT_FORMS, "int_", shape, depth)
                                or self.int_leaf(shape), shape)
        return self.int_leaf(shape)

    def int_leaf(self, shape: tuple) -> str:
        found = self.ints(shape)
        if found and self.rng.random() < 0.8:
            return self.pick(found).name
        if not self.in_def:
            return self.input(shape, "i32", INPUT_PREFIX)
        return self.int_cast(shape, 0)   # a function's body has only its float argument

    def int_operand(self, shape: tuple, depth: int) -> str:
        """Something i32 that broadcasts to `shape`: a literal, a scalar, a suffix."""
        r = self.rng.random()
        if r < 0.25:
            return self.pick(INT_LITERALS)
        if r < 0.35:
            return self.int_expr((), depth)
        if shape and r < 0.5:
            return self.int_expr(shape[1:], depth)
        return self.int_expr(shape, depth)

    def int_condition(self, shape: tuple, depth: int) -> str:
        """A bool of `shape` from integers: a comparison, or bool() of one."""
        self.cover("int:compare")
        if self.rng.random() < 0.2:
            return f"bool({self.int_expr(shape, depth)})"
        f = self.pick(COMPARE)
        return binary_text(f, self.int_expr(shape, depth), self.int_operand(shape, depth))

    # ---- i32 forms ----------------------------------------------------------------------
    def int_binary(self, shape, d):
        f = self.pick(INT_BINARY)
        self.cover(f"int:{f}")
        return binary_text(f, self.int_expr(shape, d), self.int_operand(shape, d))

    def int_neg(self, shape, d):
        self.cover("int:neg")
        return f"(-{self.int_expr(shape, d)})"

    def int_unary(self, shape, d):
        f = self.pick(INT_UNARY)
        self.cover(f"int:{f}")
        return f"{f}({self.int_expr(shape, d)})"

    def int_clip(self, shape, d):
        self.cover("int:clip")
        return f"clip({self.int_expr(shape, d)}, -3, 5)"

    def int_where(self, shape, d):
        self.cover("int:where")
        cond_shape = shape if self.rng.random() < 0.7 else shape[1:]
        cond = (self.int_condition(cond_shape, d) if self.rng.random() < 0.5
                else self.condition(cond_shape, d))
        return f"where({cond}, {self.int_expr(shape, d)}, {self.int_operand(shape, d)})"

    def int_reduce(self, shape, d):
        wider = self.wider(shape)
        if wider is None:
            return None
        red = self.pick(INT_REDUCTIONS)
        self.cover(f"int:{red}")
        big, axes = wider
        return f"{red}({self.int_expr(big, d)}{axes})"

    def int_argmax(self, shape, d):
        """argmax or argmin along one axis of integers: exact on both sides, where two floats a
        rounding apart could tie in one build and not in the other."""
        wider = self.wider(shape)
        if wider is None or "[" in wider[1] or not (wider[1] or len(wider[0]) == 1):
            return None
        f = self.pick(["argmax", "argmin"])
        self.cover(f"int:{f}")
        big, axis = wider
        return f"{f}({self.int_expr(big, d)}{axis or ', axis = 0'})"

    def int_topk(self, shape, d):
        """topk of integers: its values and indices, exact on both sides (as argmax's)."""
        drawn = self.topk_of(shape, d, self.int_expr, "int:topk")
        if drawn is None:
            return None
        values, indices = drawn
        self.define(Var(values, shape, "i32"))
        self.define(Var(indices, shape, "i32"))
        return self.pick([values, indices, f"({values} - {indices})"])

    def int_range(self, shape, d):
        """Python's range along the last axis: `range(n)` of a size or a symbolic dim, or
        `range(start, stop, step)` of numbers."""
        if not shape:
            return None
        n = shape[-1]
        self.cover("int:range")
        counts = f"range({self.dim(n)})"
        if isinstance(n, int) and self.rng.random() < 0.5:
            start, step = self.rng.randint(-3, 3), self.pick([1, 2, -1, -3])
            counts = f"range({start}, {start + step * n}, {step})"
        return f"({self.int_expr(shape, d)} + {counts})"

    def int_cast(self, shape, d):
        self.cover("int:cast")
        return f"i32(tanh({self.expr(shape, d)}) * {self.pick(CAST_SCALES)})"

    def int_truth(self, shape, d):
        self.cover("int:truth")
        return f"i32({self.int_condition(shape, d)})"

    def int_update(self, v: Var) -> str:
        """A new value for the i32 variable `v`: it may grow without bound, since it wraps."""
        self.cover("int:update")
        with self.avoiding(v.name):
            step = self.int_operand(v.shape, 1)
        return self.pick([f"({v.name} + {step})", f"({v.name} * 3 + {step})",
                          f"maximum({v.name}, {step})", f"({v.name} - {step})"])

    # ---- where floats meet them -----------------------------------------------------
    def form_integer(self, shape, d):
        """A float from integers, of the size of the other floats (about 1): a float of
        i32's size makes `sin` of it depend on its last bits, which two builds round
        apart (sin(mse(x, h) - f32(n) * 0.001) was 3% off in f32 at n = 2**31 - 1), and
        one of a thousand saturates a tanh whose gradient is then rounding noise (a
        loop's W 7e-9 off in f64). The integers themselves are outputs, compared
        exactly."""
        self.cover("int:float")
        r = self.rng.random()
        if r < 0.15:
            return f"f32({self.int_condition(shape, d)})"
        n = self.int_expr(shape, d)
        return self.pick([f"f32(clip({n}, -3, 3))", f"tanh(f32({n}))",
                          f"(f32(clip({n}, -1000, 1000)) * 0.001)", f"tanh(f32({n}) * 0.001)"])

    def condition(self, shape: tuple, depth: int) -> str:
        if self.rng.random() < 0.15:
            return self.int_condition(shape, depth)
        return super().condition(shape, depth)

    def scalar_condition(self, depth: int) -> str:
        if self.rng.random() < 0.15:
            with self.no_calls():
                red, f = self.pick(INT_REDUCTIONS), self.pick(COMPARE)
                self.cover("int:branch")
                shape = self.pick([s for s in self.shapes() if s])
                return binary_text(f, f"{red}({self.int_expr(shape, depth)})",
                                   self.pick(["0", "3", "(-2)"]))
        return super().scalar_condition(depth)
