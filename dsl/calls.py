"""Calls: built-ins, and user functions inlined at each call site in a child scope."""
from __future__ import annotations

import difflib

from codegen.ir.diagnostics import Loc, MdlError, MdlNameError, MdlTypeError, count
from codegen.ir.dtypes import FLOATS
from codegen.ir.graph import Value
from codegen.ir.shapes import Dim, TensorType

from . import nodes as n
from .builtins import BUILTINS, INITIALIZERS, REGULARIZERS, full_of
from .env import Cascade, Const, Ctx, Poisoned
from .expressions import dim_names
from .printer import expr_text
from .signature import Signature

MAX_CALL_DEPTH = 64
# Every call inlines its function's body, so a function calling another twice, nested,
# doubles a model's size at each level; the examples' models inline at most 14 calls.
MAX_INLINED_CALLS = 5000
SCALAR_KINDS = {"int": ("int",), "bool": ("bool",), "i32": ("int",),
                **{name: ("int", "float") for name in FLOATS}}


class Calls:
    """Mixin of the Elaborator: evaluating calls."""

    def eval_Call(self, e: n.Call):
        func = e.func
        if (isinstance(func, n.Index) and isinstance(func.base, n.Name)
                and func.base.id == "full"):
            if len(e.args) != 1 or e.kwargs or e.as_name:
                raise MdlTypeError("`full[dims](v)` takes one value", e.loc)
            return full_of(self, func.subscripts, (self.eval_single(e.args[0]), e.args[0].loc),
                           e.loc)
        if not isinstance(func, n.Name):
            raise MdlTypeError("only functions can be called", e.loc)
        name = func.id
        if name in BUILTINS:
            if e.as_name is not None:
                raise MdlTypeError(f"`as` names the scope of a function call; the built-in "
                                   f"`{name}` opens none", e.as_name.loc)
            b = BUILTINS[name]
            return b.run(self, b.sig.bind(f"`{name}`", e, self.eval), e)
        if name in self.program.functions:
            return self.call_function(self.program.functions[name], e)
        if name in INITIALIZERS or name in REGULARIZERS:
            raise MdlTypeError(f"`{name}` is an initializer or regularizer; it belongs after "
                               "`param W : T =` or in a scope's attributes", e.loc)
        if name in self.ctx.env:
            raise MdlTypeError(f"`{name}` is a variable, not a function", e.loc)
        known = list(BUILTINS) + list(self.program.functions)
        close = difflib.get_close_matches(name, known, n=1)
        raise MdlNameError(f"unknown function `{name}`"
                           + (f"; did you mean `{close[0]}`?" if close else ""), e.loc)

    def call_function(self, fn: n.FuncDef, call: n.Call):
        name = fn.name.name
        chain = [f for f, _ in self.call_stack]
        if fn in chain:
            path = " -> ".join([f.name.name for f in chain[chain.index(fn):]] + [name])
            raise MdlTypeError(f"recursive call of `{name}` ({path}): functions are inlined, so "
                               "recursion is not supported", call.loc)
        if len(self.call_stack) >= MAX_CALL_DEPTH:
            raise MdlTypeError(f"calls are nested more than {MAX_CALL_DEPTH} deep", call.loc)
        self._count_inlined(name, call.loc)
        sig = Signature([a.name.name for a in fn.args],
                        {a.name.name: a.default for a in fn.args if a.default is not None})
        bound = sig.bind(f"`{name}`", call, self.eval)
        scope_name = self.scopes.call_scope_name(name, call.as_name.name if call.as_name else None)
        outer_ctx, outer_top = self.ctx, self.top_level
        outer_deciding = self.deciding
        inner = Ctx("function", {}, {}, name, fn.body.stmts)
        self.call_stack.append((fn, call.loc))
        try:
            for arg in fn.args:
                value, loc = bound[arg.name.name]
                if isinstance(value, n.Expr):  # a default: evaluated with nothing in scope
                    self.ctx = Ctx("function", {}, {}, name)
                    # a default that does not fit is shown where it is written (the
                    # note names the call): the call's caret showed no such value
                    value, loc = self.eval_single(value), value.loc
                self.ctx = inner
                inner.env[arg.name.name] = self._bind_arg(fn, arg, value, loc)
                # after its type, which may bind a dim of its name (`a : f32[a]`)
                self.check_bindable(arg.name.name, arg.name.loc, "name an argument")
            self.deciding = False  # its own statements: `c or true` not folded
            with self.scopes.enter(scope_name):
                self.run_block(fn.body.stmts[:-1])
                return self._returned(fn, fn.body.stmts[-1])
        except MdlError as exc:
            exc.note_call(name, call.loc)
            raise
        finally:
            self.call_stack.pop()
            self.ctx, self.top_level = outer_ctx, outer_top
            self.deciding = outer_deciding

    def _count_inlined(self, name: str, loc: Loc) -> None:
        """Count one more inlined call; the call that crosses the limit is the error, and
        every call after it stops its statement silently (its error is reported)."""
        self.inlined_calls += 1
        if self.inlined_calls > MAX_INLINED_CALLS + 1:
            raise Cascade
        if self.inlined_calls > MAX_INLINED_CALLS:
            raise MdlTypeError(f"this call of `{name}` takes the model past "
                               f"{MAX_INLINED_CALLS} inlined calls: functions are inlined at "
                               "every call, so a function calling another twice doubles the "
                               "model at each level of calls", loc)

    def _bind_arg(self, fn: n.FuncDef, arg: n.Arg, value, loc: Loc):
        t = arg.type
        what = f"argument `{arg.name.name}` of `{fn.name.name}`"
        if isinstance(value, (list, tuple)):
            raise MdlTypeError(f"{what} takes one value", loc)
        if t.dims is None:
            if t.name not in SCALAR_KINDS:
                self.dtype_of(t.name, t.loc)
            if isinstance(value, Const):
                if value.kind not in SCALAR_KINDS[t.name]:
                    raise MdlTypeError(f"{what} is {t.name}, got {value.kind} {value}", loc)
                return Const.of(float(value.value)) if t.name in FLOATS else value
            if t.name == "int":
                raise MdlTypeError(f"{what} is an `int` known at compile time, got a tensor "
                                   f"{value.type}", loc)
            expected = TensorType(self.dtype_of(t.name, t.loc), ())
            if value.type != expected:
                raise MdlTypeError(f"{what} is {expected}, got {value.type}", loc)
            return value
        if (isinstance(value, Const) and t.leading and not t.dims
                and value.kind in SCALAR_KINDS.get(t.name, ())):
            # `f32[...]` takes a rank-0 tensor, so a number as one (`swish(2.0)`, as
            # `silu(2.0)`)
            number = Const.of(float(value.value)) if t.name in FLOATS else value
            value = self.to_tensor(number, loc, TensorType(self.dtype_of(t.name, t.loc), ()))
        if isinstance(value, Const):
            raise MdlTypeError(f"{what} is a tensor {t.name}[{_dims_text(t)}], got the scalar "
                               f"{value}", loc)
        self._match_type(what, t, value.type, loc)
        return value

    def _match_type(self, what: str, t: n.TypeExpr, actual: TensorType, loc: Loc) -> None:
        """Check `actual` against a declared type, binding the dims it introduces (and,
        for `f32[..., I]`, the leading dims, which every such argument shares)."""
        dtype = self.dtype_of(t.name, t.loc)
        named = len(t.dims)
        if (actual.dtype != dtype or actual.rank < named
                or (actual.rank != named and not t.leading)):
            # the rank note only where the rank is what is short: `f64[..., K]` given
            # an f32[B, 4] differs in its dtype alone
            note = _rank_note(t) if actual.rank < named else ""
            raise MdlTypeError(f"{what} is {t.name}[{_dims_text(t)}]{note}, got {actual}", loc)
        lead = actual.shape[:actual.rank - named]
        if t.leading and self.ctx.leading is not None and lead != self.ctx.leading:
            bound = (f"[{', '.join(map(str, self.ctx.leading))}]" if self.ctx.leading
                     else "no dims")
            raise MdlTypeError(
                f"{what} is {t.name}[{_dims_text(t)}], where `...` is {bound} as "
                f"{self.ctx.leading_from} bound it, got {actual}", loc)

        def bind(dim_name: str, axis: int, dloc: Loc) -> Dim:
            self.check_bindable(dim_name, dloc, "name a symbolic dim")
            self.ctx.dims[dim_name] = actual.shape[len(lead) + axis]
            self.ctx.dims_from[dim_name] = (what, actual)
            return actual.shape[len(lead) + axis]
        declared = self.eval_type(t, bind, lead if t.leading else None)
        if t.leading and self.ctx.leading is None:
            self.ctx.leading, self.ctx.leading_from = lead, what
        for axis, (want, got) in enumerate(zip(declared.shape, actual.shape)):
            if want != got:  # the type as written, and as the dims bound so far make it
                written = t.dims[axis - len(lead)] if axis >= len(lead) else None
                raise MdlTypeError(f"{what} is {t.name}[{_dims_text(t)}], here {declared}, "
                                   f"got {actual}: dim {axis} differs"
                                   f"{self._bound_by(written, what)}", loc)

    def _bound_by(self, written: n.Expr | None, what: str) -> str:
        """Which earlier argument bound the dims of a differing axis (`lstm(h, x, c)`
        blamed `c`, whose H the swapped `h` had bound): '' where none did."""
        said = [f"{name.id} = {self.ctx.dims[name.id]} as {arg} bound it (given {given})"
                for name in (dim_names(written) if written is not None else ())
                if name.id in self.ctx.dims_from
                for arg, given in [self.ctx.dims_from[name.id]] if arg != what]
        return f": {'; '.join(dict.fromkeys(said))}" if said else ""

    def _returned(self, fn: n.FuncDef, ret: n.Return):
        values = []
        for e in ret.values:
            v = self.eval_single(e)
            if isinstance(v, Poisoned):
                raise Cascade
            values.append((v, e.loc))
        if fn.returns and len(fn.returns) != len(values):
            raise MdlTypeError(f"`{fn.name.name}` declares {count(len(fn.returns), 'result')} "
                               f"but returns {len(values)}", ret.loc)
        out = []
        for i, (v, loc) in enumerate(values):
            if fn.returns:
                declared = self._return_type(fn, fn.returns[i])
                v = self.to_tensor(v, loc, declared) if isinstance(v, Const) else v
                if isinstance(v, Value) and v.type != declared:
                    t = fn.returns[i]
                    written = t.name if t.dims is None else f"{t.name}[{_dims_text(t)}]"
                    here = f", here {declared}" if written != str(declared) else ""
                    raise MdlTypeError(f"`{fn.name.name}` declares result {i + 1} as "
                                       f"{written}{here}, but returns {v.type}", loc)
            out.append(v)
        return out[0] if len(out) == 1 else tuple(out)

    def _return_type(self, fn: n.FuncDef, t: n.TypeExpr) -> TensorType:
        def unbound(dim_name: str, axis: int, loc: Loc) -> Dim:
            raise MdlTypeError(f"dim `{dim_name}` in the result type of `{fn.name.name}` is "
                               "not bound by its arguments", loc)
        # a result's `...` is an argument's (program.py checks that one has it)
        return self.eval_type(t, unbound, self.ctx.leading)


def _dims_text(t: n.TypeExpr) -> str:
    return ", ".join((["..."] if t.leading else []) + [expr_text(d) for d in t.dims or []])


def _rank_note(t: n.TypeExpr) -> str:
    """How many dims a `...` type takes, where that is not plain from it."""
    return f" (of {count(len(t.dims), 'dim')} or more)" if t.leading and t.dims else ""
