"""Expressions: names, literals, operators, indexing, paths. Compile-time scalars fold
here; everything else becomes IR ops through `emit`, checked by the primitive table."""
from __future__ import annotations

import difflib
import math
from typing import Any, Callable

import numpy as np

from codegen.ir.diagnostics import Loc, MdlNameError, MdlTypeError
from codegen.ir.dtypes import DTYPES, FLOATS, NUMERIC, finite_in, fits_i32
from codegen.ir.graph import Value
from codegen.ir.shapes import Dim, DimError, TensorType
from codegen.ops.primitives import TABLE

from . import nodes as n
from .builtins import CREATORS
from .control import assignments
from .printer import expr_text
from .env import Cascade, Const, Poisoned, Unavailable

VERBS = {"assigned": "assigns", "declared": "declares"}  # control.assignments's words

BINARY_PRIMS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "//": "floordiv", "%": "mod",
                "**": "pow", "@": "matmul",
                "<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne",
                "and": "and", "or": "or"}


class Expressions:
    """Mixin of the Elaborator: evaluating expressions."""

    # ---- entry points ----
    def eval(self, e: n.Expr):
        """A Value, a Const, a tuple (several results) or a list (a list literal)."""
        method = getattr(self, "eval_" + type(e).__name__)
        return method(e)

    def eval_Slice(self, e: n.Slice):
        raise MdlTypeError("a slice `a:b` only selects inside an index, as in `x[:, 0:2]`; "
                           "here it stands for a value", e.loc)

    def eval_single(self, e: n.Expr) -> Value | Const:
        v = self.eval(e)
        if isinstance(v, tuple):
            raise MdlTypeError(f"this call returns {len(v)} values; unpack them with "
                               f"`a, b = ...`", e.loc)
        if isinstance(v, list):
            raise MdlTypeError("a list can only be an argument of concat, stack, reshape, "
                               "transpose or axis=", e.loc)
        return v

    def eval_tensor(self, e: n.Expr, like: TensorType | None = None) -> Value:
        return self.to_tensor(self.eval_single(e), e.loc, like)

    def to_tensor(self, v: Value | Const, loc: Loc, like: TensorType | None = None) -> Value:
        """A Const becomes a rank-0 tensor of `like`'s dtype (weak typing) or its own."""
        if isinstance(v, Value):
            return v
        dtype = self.const_dtype(v, like, loc)
        self.check_finite(v, dtype, loc)
        return self.emit("full", [], {"shape": (), "value": v.value, "dtype": dtype}, loc)[0]

    def check_finite(self, v: Const, dtype: str, loc: Loc) -> None:
        """A float constant that `dtype` holds as a finite number, else an error at it (it
        was inf, silently: a number or `full[...](v)`)."""
        if v.kind == "float" and not finite_in(v.value, dtype):
            if not math.isfinite(v.value):  # a hyper-parameter given as nan or inf (load's
                # defines): "nan ... where it would be inf" said what it is not
                raise MdlTypeError(f"{v} is not a finite number", loc)
            raise MdlTypeError(f"{v} is past the range of {dtype}, where it would be inf",
                               loc)

    def const_dtype(self, c: Const, like: TensorType | None, loc: Loc) -> str:
        if like is None:
            return {"int": "i32", "float": self.float_dtype, "bool": "bool"}[c.kind]
        ok = {"int": NUMERIC, "float": FLOATS, "bool": ("bool",)}[c.kind]
        if like.dtype not in ok:
            raise MdlTypeError(f"the {c.kind} constant {c} cannot combine with {like}", loc)
        return like.dtype

    # ---- leaves ----
    def eval_IntLit(self, e: n.IntLit):
        if not fits_i32(e.value):  # 2**31 reaches here only without a minus in front
            raise MdlTypeError(f"integer literal {e.value} does not fit in i32", e.loc)
        return Const(e.value, "int")

    def eval_FloatLit(self, e: n.FloatLit):
        return Const(e.value, "float")

    def eval_BoolLit(self, e: n.BoolLit):
        return Const(e.value, "bool")

    def eval_ListLit(self, e: n.ListLit):
        return [self.eval_single(item) for item in e.items]

    def eval_Name(self, e: n.Name):
        return self.lookup(e.id, e.loc)

    def lookup(self, name: str, loc: Loc):
        env = self.ctx.env
        if name in env:
            v = env[name]
            if isinstance(v, Poisoned):
                raise Cascade
            if isinstance(v, Unavailable):
                raise MdlNameError(v.why, loc, notes=[("defined here", v.loc)] if v.loc else [])
            self.note_use(v, loc)
            self.note_name_read(name, v)
            return v
        if name in self.ctx.dims:
            dim = self.ctx.dims[name]
            if dim.is_const:
                return Const(dim.value, "int")
            # its size in this call, an i32 scalar (`assert ids < R`, `f32(T)`)
            return self.emit("full", [], {"shape": (), "value": dim, "dtype": "i32"}, loc,
                             name)[0]
        if name in self.builtins or name in self.program.functions:
            raise MdlTypeError(f"`{name}` is a function; call it with (...)", loc)
        raise MdlNameError(f"unknown name `{name}`" + (
            self._outside(name) or self._state_first(name) or self._later(name, loc)
            or self._later_hparam(name) or self._suggest(name)), loc)

    def _later_hparam(self, name: str) -> str:
        """A hyper-parameter's default naming one declared after it (`H = G * 2, G = 4`)."""
        index, at = self.hparam_places.get(name, (-1, None))
        if self.reading_hparam < 0 or index <= self.reading_hparam:
            return ""
        return (f": hyper-parameter `{name}` is declared after this one (column {at.col}); "
                f"a default can use only the hyper-parameters before it")

    def _later(self, name: str, loc: Loc) -> str:
        """A name the body assigns (or declares) after the place it is read."""
        for assigned, at, how in assignments(self.ctx.body, declarations=True):
            if assigned == name and at.source is loc.source and \
                    (at.line, at.col) > (loc.line, loc.col):
                return (f": it is {how} at line {at.line}, after this read; a name is read "
                        f"after the statement that {VERBS[how]} it")
        return ""

    def _state_first(self, name: str) -> str:
        """A name a loop around assigns, read before it has a value: meant as the loop's
        state, which must exist before the loop (`h = gru(x, h)` with no `h` before)."""
        for names, keyword, where, ctx in reversed(self.loop_names):
            if name in names and ctx is self.ctx:  # not a function's name its caller loops on
                return (f": the `{keyword}` at line {where.line} assigns it, but a loop's "
                        f"state needs a value before the loop: assign `{name}` before it "
                        f"(`{name} = zeros[...]`)")
        return ""

    def _outside(self, name: str) -> str:
        """Where a function's unknown name is the model's own (a hyper-parameter, a dim, a
        value): a function sees its arguments only, which a QA pass had to find out."""
        model = self.model_ctx
        if self.ctx.kind != "function" or model is None:
            return ""
        head = ": a function sees its own arguments and names only, not the model's"
        if name in self.hparams:
            return f"{head} hyper-parameter `{name}`; pass it as an argument (`{name} : int`)"
        if name in model.dims and name not in model.env:
            return (f"{head} dim `{name}`; an argument's type binds it (`x : f32[{name}, ...]`),"
                    f" or pass it as one (`{name} : int`) where it is a constant")
        if name in model.env:
            what = "input" if name in self.inputs else "value"
            return f"{head} {what} `{name}`; pass it as an argument"
        return ""

    def _suggest(self, name: str) -> str:
        close = difflib.get_close_matches(name, [k for k in self.ctx.env], n=1)
        return f"; did you mean `{close[0]}`?" if close else ""

    def eval_Path(self, e: n.Path):
        parts = []
        node: n.Expr = e
        while isinstance(node, n.Path):
            parts.append(node.attr.name)
            node = node.base
        if not isinstance(node, n.Name):
            raise MdlTypeError("only parameters can be named with `a.b` paths", e.loc)
        parts.append(node.id)
        parts.reverse()
        here = self.scopes.frame.path
        for k in range(len(here), -1, -1):
            full = self.scopes.param_name(parts[-1], here[:k] + tuple(parts[:-1]))
            if full in self.params:
                value = self.params[full].value
                self.note_use(value, e.loc)
                return value
        raise MdlNameError(f"no parameter `{'.'.join(parts)}` is visible from scope "
                           f"`{'/'.join(here) or '(root)'}`", e.loc)

    # ---- operators ----
    def eval_Unary(self, e: n.Unary):
        x = self.eval_single(e.operand)
        if e.op == "not":
            if isinstance(x, Const):
                self._const_kind(x, ("bool",), "`not`", e.loc)
                return Const(not x.value, "bool")
            return self.emit("not", [x], {}, e.loc)[0]
        if isinstance(x, Const):
            self._const_kind(x, ("int", "float"), "unary `-`", e.loc)
            return Const(-x.value, x.kind)
        return self.emit("neg", [x], {}, e.loc)[0]

    def eval_Binary(self, e: n.Binary):
        a = self.eval_single(e.left)
        b = self.eval_single(e.right)
        if isinstance(a, Const) and isinstance(b, Const):
            return self.fold(e.op, a, b, e.loc)
        # `c or true` in a `while` condition: refused as never ending. Elsewhere it stays a
        # tensor's `or`: folded, an `if` on it was decided when compiling, its other branch
        # never checked and a name one branch assigns readable after it
        decided = _decided(e.op, a, b) if self.deciding else None
        if decided is not None:
            return decided
        like = a.type if isinstance(a, Value) else b.type
        prim = BINARY_PRIMS[e.op]
        if (prim == "pow" and isinstance(b, Const) and b.value == 0.5
                and isinstance(a, Value) and a.type.is_float):
            # sqrt, as PyTorch's and NumPy's `x ** 0.5` and what GCC makes of a vectorized
            # pow(x, 0.5), but not of a scalar one: pow(-inf, 0.5) is inf, sqrt's NaN
            return self.emit("sqrt", [a], {}, e.loc)[0]
        if prim == "matmul" and isinstance(b, Value) and b.type.rank > 2:
            prim = "bmm"  # a batch of matrices on the right: one product a matrix
        return self.emit(prim, [self.to_tensor(a, e.left.loc, like),
                                self.to_tensor(b, e.right.loc, like)], {}, e.loc)[0]

    def fold(self, op: str, a: Const, b: Const, loc: Loc) -> Const:
        if op in ("and", "or"):
            for c in (a, b):
                self._const_kind(c, ("bool",), f"`{op}`", loc)
            return Const(a.value and b.value if op == "and" else a.value or b.value, "bool")
        kinds = {"//": ("int",), "%": ("int",), "==": ("int", "float", "bool"),
                 "!=": ("int", "float", "bool")}.get(op, ("int", "float"))
        for c in (a, b):
            self._const_kind(c, kinds, f"`{op}`", loc)
        if op == "@":
            raise MdlTypeError("`@` needs tensors, got two scalars", loc)
        if op == "/":
            if b.value == 0:
                raise MdlTypeError("division by zero", loc)
            exact = a.kind == b.kind == "int" and a.value % b.value == 0
            value = a.value // b.value if exact else a.value / b.value
        else:
            value = _fold_by_table(op, a, b, loc)
        # Overflow (1e308 * 10.0) is refused where it happens, as log(0) is (fold_unary):
        # a non-finite number has no C++ literal in a table and no use as a size or an
        # initializer's argument. An operand that is already inf or nan (-D C=inf) may go
        # on: the places that need a finite number refuse it.
        if (isinstance(value, float) and not math.isfinite(value)
                and math.isfinite(a.value) and math.isfinite(b.value)):
            raise MdlTypeError(f"{a} {op} {b} has no finite value", loc)
        return Const.of(value)

    def _const_kind(self, c: Const, kinds: tuple[str, ...], what: str, loc: Loc) -> None:
        if c.kind not in kinds:
            raise MdlTypeError(f"{what} is not defined for {c.kind} {c}", loc)

    # ---- indexing ----
    def eval_Index(self, e: n.Index):
        if isinstance(e.base, n.Name) and e.base.id in CREATORS:
            if e.base.id == "full":
                raise MdlTypeError("`full[...]` needs its value: `full[B, H](0.5)`", e.loc)
            shape = tuple(self.eval_size(d) for d in e.subscripts)
            value = CREATORS[e.base.id]
            return self.emit("full", [], {"shape": shape, "value": value,
                                          "dtype": self.float_dtype}, e.loc)[0]
        x = self.eval_tensor(e.base)
        subs = e.subscripts
        if not isinstance(subs[0], n.Slice):
            self._check_dim_index(subs[0], x)
        if len(subs) == 1 and not isinstance(subs[0], n.Slice):
            i = self.eval_single(subs[0])
            if isinstance(i, Value) and i.type.rank > 0:
                return self.emit("gather", [x, i], {}, e.loc)[0]
            return self.emit("index", [x, self._index_value(i, x, subs[0].loc)], {}, e.loc)[0]
        if not isinstance(subs[0], n.Slice):
            first = self.eval_single(subs[0])
            if isinstance(first, Value):
                x = self.emit("index", [x, first], {}, e.loc)[0]
                return self._slices(x, subs[1:], e.loc)
        return self._slices(x, subs, e.loc)

    def _check_dim_index(self, e: n.Expr, x: Value) -> None:
        """`a[B]` of an axis of length B: an index of dims only, out of range whatever the
        dims are (it passed, and every call raised the IndexError)."""
        if not self._of_dims_only(e):
            return
        d = self.eval_dim(e)
        if d.is_const or not x.type.rank:
            return
        size = x.type.shape[0]
        past = size - d  # the index is in range where this is positive; with no term of
        # dims that grows, it is largest where every dim is 1
        if all(c <= 0 for m, c in past.terms if m) and sum(c for _, c in past.terms) <= 0:
            raise MdlTypeError(f"index {d} is out of range for {x.type}: its first axis has "
                               f"length {size}, indices 0 to {size - 1}", e.loc)

    def _of_dims_only(self, e: n.Expr) -> bool:
        """Whether `e` is written of literals and dims only (`B - 1`), so that eval_dim
        reads it without evaluating anything the model computes."""
        if isinstance(e, n.IntLit):
            return True
        if isinstance(e, n.Name):
            return e.id not in self.ctx.env and e.id in self.ctx.dims
        if isinstance(e, n.Unary) and e.op == "-":
            return self._of_dims_only(e.operand)
        if isinstance(e, n.Binary) and e.op in "+-*":
            return self._of_dims_only(e.left) and self._of_dims_only(e.right)
        return False

    def _index_value(self, i, x: Value, loc: Loc) -> Value:
        if isinstance(i, Const):
            self._const_kind(i, ("int",), "an index", loc)
            value = i.value
            if x.type.rank and x.type.shape[0].is_const:
                size = x.type.shape[0].value
                if not -size <= value < size:
                    raise MdlTypeError(f"index {value} is out of range for {x.type}", loc)
                value %= size
            elif value < 0:  # `xs[-1]` is xs[T - 1]: at T = 0 an IndexError, as that one's
                value = x.type.shape[0] + value
            return self.emit("full", [], {"shape": (), "value": value, "dtype": "i32"}, loc)[0]
        return i

    def _slices(self, x: Value, subs: list[n.Expr], loc: Loc) -> Value:
        if len(subs) > x.type.rank:
            raise MdlTypeError(f"{len(subs)} subscripts for {x.type}", loc)
        starts, stops, drop = [], [], []
        for axis, s in enumerate(subs):
            size = x.type.shape[axis]
            where = f"axis {axis} of {x.type}, of length {size}"
            if isinstance(s, n.Slice):
                start = self._bound(s.start, size, Dim.of(0), where)
                stop = self._bound(s.stop, size, size, where)
            else:
                start = self._bound(s, size, None, where)
                stop = start + 1
                drop.append(axis)
            # out of range whatever the dims (1:B+1, B:2*B of an axis of length B, inside it
            # only where B is 0); what depends on them is checked at the call
            # (ops/entry.py, call_bounds)
            below = [all(c <= 0 for _, c in d.terms) and d.terms
                     and not (d.is_const and d.value >= 0)
                     for d in (start, stop - start, size - stop)]
            if (below[0] or below[2]) and axis in drop:  # an index, as on the first axis
                raise MdlTypeError(f"index {self.eval_dim(s)} is out of range for {where}",
                                   s.loc)
            if below[0] or below[2]:
                raise MdlTypeError(f"slice {start}:{stop} is out of range for axis {axis} of "
                                   f"{x.type}", s.loc)
            if below[1]:  # both bounds in range (it said "out of range" too)
                raise MdlTypeError(f"slice {start}:{stop} of axis {axis} of {x.type} ends "
                                   f"before it starts (an empty slice is written a:a)", s.loc)
            starts.append(start)
            stops.append(stop)
        out = self.emit("slice", [x], {"starts": tuple(starts), "stops": tuple(stops)}, loc)[0]
        if drop:
            shape = tuple(d for i, d in enumerate(out.type.shape) if i not in drop)
            out = self.emit("reshape", [out], {"shape": shape}, loc)[0]
        return out

    def _bound(self, e: n.Expr | None, size: Dim, default: Dim | None, where: str) -> Dim:
        """A slice's bound (or an index, `default` None) as written at `e`, counted from
        the start of the axis `where` names, of length `size`."""
        if e is None:
            return default
        d = self.eval_dim(e)
        if d.is_const and size.is_const and d.value < -size.value:  # `x[:, -4:-5]` named
            what = "bound" if default is not None else "index"      # the slice 0:-1
            raise MdlTypeError(f"{what} {d.value} is out of range for {where}", e.loc)
        if d.is_const and d.value < 0:  # from the end: `x[:-1]` of an axis of length T is
            d = d + size                # x[0:T - 1], refused at a call where T is 0
        elif not d.is_const and all(c <= 0 for _, c in d.terms):
            raise MdlTypeError(f"a bound that is never positive ({d}) would count from the "
                               f"end, as only a constant one does: write it from the start "
                               f"(the axis has length {size})", e.loc)
        return d

    # ---- dims and types ----
    def eval_dim(self, e: n.Expr) -> Dim:
        """A dim: an integer expression of literals, hyper-parameters and symbolic dims."""
        if isinstance(e, n.Name) and e.id in self.ctx.dims:
            return self.ctx.dims[e.id]
        if isinstance(e, n.Binary) and e.op in "+-*/":
            a, b = self.eval_dim(e.left), self.eval_dim(e.right)
            try:
                if e.op == "/":
                    return a.exact_div(b)
                return {"+": a + b, "-": a - b, "*": a * b}[e.op]
            except DimError as exc:
                raise MdlTypeError(f"{exc}: `/` in dims must divide exactly", e.loc)
        if isinstance(e, n.Unary) and e.op == "-":
            return -self.eval_dim(e.operand)
        if isinstance(e, n.Binary) and e.op in ("//", "%", "**"):
            a, b = self.eval_single(e.left), self.eval_single(e.right)
            if not (isinstance(a, Const) and isinstance(b, Const)):  # `B // 2`: B named a dim
                raise MdlTypeError(f"`{e.op}` does not apply to symbolic dims: a dim is made "
                                   "with +, -, * and a / that divides exactly (`2 * B / 2`)",
                                   e.loc)
        v = self.eval_single(e)
        if isinstance(v, Const) and v.kind == "int":
            return Dim.of(v.value)
        if isinstance(v, Value):  # `a[:, i]`: the error called i "a dim"
            raise MdlTypeError(f"this needs an integer known at compile time (a literal, a "
                               f"hyper-parameter or a symbolic dim), not a value the model "
                               f"computes ({v.type}); such a value indexes the first axis "
                               f"only (`a[i]`, `a[i, 1:3]`)", e.loc)
        got = ""
        if isinstance(v, Const) and v.kind in ("float", "bool"):  # `G = H / 3`, 2.67
            named = f"`{e.id}` is" if isinstance(e, n.Name) else "this is"
            value = str(v.value).lower() if v.kind == "bool" else f"{v.value:g}"
            got = f": {named} the {v.kind} {value}" + (
                " (an integer `/` that does not divide makes a float; `//` floors)"
                if v.kind == "float" and isinstance(e, n.Name) else "")
        raise MdlTypeError("a dim must be an integer known at compile time (a literal, a "
                           f"hyper-parameter or a symbolic dim){got}", e.loc)

    def eval_size(self, e: n.Expr) -> Dim:
        """A dim that sizes a tensor (`zeros[...]`, `reshape`'s shape, `range(n)`)."""
        return positive(self.eval_dim(e), e.loc, lambda: self._numbers_in(e))

    def _numbers_in(self, e: n.Expr) -> str:
        """The compile-time numbers a dim is written with, as a message names them
        (`K = 0`: a hyper-parameter `-D K=0` set, an int argument), "" if none."""
        found = {x.id: f"{x.id} = {self.ctx.env[x.id]}" for x in dim_names(e)
                 if isinstance(self.ctx.env.get(x.id), Const)}
        return ", ".join(found.values())

    def dtype_of(self, name: str, loc: Loc) -> str:
        if name not in DTYPES:
            raise MdlTypeError(f"unknown type `{name}` (types are {', '.join(DTYPES)})", loc)
        return self.float_dtype if name in FLOATS and self.float_dtype == "f64" \
            else name

    def eval_type(self, t: n.TypeExpr, bind_unknown=None,
                  leading: tuple[Dim, ...] | None = None) -> TensorType:
        """A tensor type; a bare unknown dim name is passed to `bind_unknown(name, axis)`
        (its axis among the named dims). A type written `f32[..., I]` starts with the dims
        `leading`, which only a function's argument or result has."""
        dtype = self.dtype_of(t.name, t.loc)
        if t.leading and leading is None:
            raise MdlTypeError("`...` (any leading dims) is for the type of a function's "
                               "argument or result; here every dim is named", t.loc)
        shape = list(leading or ()) if t.leading else []
        for axis, d in enumerate(t.dims or []):
            if (bind_unknown and isinstance(d, n.Name) and d.id not in self.ctx.dims
                    and d.id not in self.ctx.env):
                shape.append(bind_unknown(d.id, axis, d.loc))
            else:
                if bind_unknown:
                    self._unbound_in_dim(d)
                shape.append(self.eval_dim(d))
            positive(shape[-1], d.loc, lambda: self._numbers_in(d))
        declared = TensorType(dtype, tuple(shape))
        if (why := declared.too_many_dims() or declared.too_large()) is not None:
            raise MdlTypeError(why, t.loc)
        return declared

    def _unbound_in_dim(self, d: n.Expr) -> None:
        """An input's dim made of others (`B * 2`) that names, first, a new symbolic dim:
        the error says where one is introduced (not an "unknown name", which reads as a
        typo; a name close to a known one stays that, with its suggestion)."""
        for e in dim_names(d):
            if (e.id not in self.ctx.dims and e.id not in self.ctx.env
                    and not self._suggest(e.id)):
                self.check_bindable(e.id, e.loc, "name a symbolic dim")
                raise MdlNameError(
                    f"unknown name `{e.id}`: a symbolic dim is introduced where it stands "
                    f"alone as a dim of an input (`f32[{e.id}, ...]`); a dim made of others "
                    f"(`{expr_text(d)}`) uses those of an earlier input or an earlier axis",
                    e.loc)


def dim_names(d: n.Expr):
    """The names a dim's expression reads (`B * K`: B, K), in the order written."""
    stack = [d]
    while stack:
        e = stack.pop()
        if isinstance(e, (n.Binary, n.Unary)):
            stack.extend(reversed(e.children()))
        elif isinstance(e, n.Name):
            yield e


def positive(size: Dim, loc: Loc, numbers: Callable[[], str] | None = None) -> Dim:
    """`size`, a dim written to size a tensor: one known when compiling must be 1 or more
    (a symbolic one may be 0 in a call; one made by subtracting is checked at the call,
    unless it has no positive term: `-T` is never above 0). `numbers` gives the
    compile-time numbers it is written with (`K = 0`), which the message names (asked
    only then)."""
    if size.is_const and size.value < 1:
        named = numbers() if numbers else ""
        raise MdlTypeError(f"dims must be positive, got {size}"
                           + (f" ({named})" if named else ""), loc)
    if not size.is_const and all(c <= 0 for _, c in size.terms):
        # symbols are 0 or more, so a dim of no positive term is never above 0
        names = ", ".join(sorted(str(s) for s in size.symbols))
        raise MdlTypeError(f"dims must be positive, got {size} (0 or less whatever "
                           f"{names} is)", loc)
    return size


def _fold_by_table(op: str, a: Const, b: Const, loc: Loc):
    """`a op b` of two compile-time numbers by the primitive's NumPy reference on Python
    numbers (exact integers)."""
    text = f"{_operand(a)} {op} {_operand(b)}"
    if (op == "**" and isinstance(a.value, int) and isinstance(b.value, int)
            and abs(a.value) > 1 and b.value * math.log2(abs(a.value)) > 64):
        # out of range before it is computed: 10 ** 10 ** 10 took memory without end
        raise MdlTypeError(f"{text} is out of range", loc)
    try:
        with np.errstate(all="ignore"):
            value = TABLE[BINARY_PRIMS[op]].ref(None, {}, np.asarray(a.value, dtype=object),
                                                np.asarray(b.value, dtype=object))
        value = value.item() if isinstance(value, np.generic) else value
    except OverflowError:
        raise MdlTypeError(f"{text} is out of range", loc) from None
    except ZeroDivisionError:
        raise MdlTypeError("division by zero", loc) from None
    except ValueError as exc:
        raise MdlTypeError(f"cannot compute {text} at compile time: {exc}", loc) from None
    if isinstance(value, complex):
        raise MdlTypeError(f"{text} is not a real number", loc)
    if isinstance(value, int) and abs(value) > 2**62:
        raise MdlTypeError(f"{text} is out of range", loc)
    return value


def _operand(c: Const) -> str:
    """A compile-time number as an operand of a binary operator: a negative one in
    parentheses, as `(-8.0) ** 0.5` is written (`-8.0 ** 0.5` is -(8.0 ** 0.5))."""
    return f"({c})" if isinstance(c.value, (int, float)) and c.value < 0 else str(c)


def _decided(op: str, a: Any, b: Any) -> Const | None:
    """`c or true` is true and `c and false` false, for a bool scalar `c` (the compile-time
    bool decides them, as it does an `if`): a tensor's `or` keeps its shape."""
    if op not in ("and", "or"):
        return None
    for value, const in ((a, b), (b, a)):
        if (isinstance(const, Const) and const.kind == "bool" and isinstance(value, Value)
                and value.type == TensorType("bool", ()) and const.value == (op == "or")):
            return const
    return None
