"""Elaboration: walks a checked-as-it-goes model and builds its IR graph. Functions are
inlined at each call, scopes and `share` resolve parameter names, every operation is
checked by the primitive table's shape rules. Errors are collected per statement so
that one run reports several independent ones."""
from __future__ import annotations

import math
import sys
from typing import Any

from codegen.ir.diagnostics import (Diagnostic, Loc, MdlError, MdlNameError, MdlTypeError,
                                    UsageError, count, raise_all)
from codegen.ir.dtypes import I32_MAX, I32_MIN, finite_in, fits_i32, literal
from codegen.ir.graph import (Block, Graph, Init, Op, Param, Regularizer, Value, use_counts,
                              walk_ops)
from codegen.ir.origins import block_origins
from codegen.ir.shapes import Dim
from codegen.ops.builder import Builder
from codegen.ops.entry import loop_steps
from codegen.ops.primitives import ShapeError
from codegen.ops.primitives.checks import MAX_STEPS

from . import nodes as n
from .builtins import BUILTINS, INITIALIZERS, REGULARIZERS, reserved
from .calls import Calls
from .control import ControlFlow, Counter, Enclosing, assigned_names
from .defines import define_value, defines_word, given, named
from .env import POISONED, Cascade, Const, Ctx, Poisoned
from .expressions import Expressions
from .printer import expr_text
from .program import Program
from .scopes import Scopes

MAX_ERRORS = 20
MODEL_ONLY = (n.InputDecl, n.OutputDecl, n.Minimize)
# Names a generated module's calls take besides the inputs: no input may have one.
CALL_KEYWORDS = {"training": "forward(training=...) says whether a call trains"}


class Elaborator(Expressions, Calls, ControlFlow):
    def __init__(self, program: Program, float_dtype: str = "f32"):
        self.program = program
        self.builtins = BUILTINS
        self.float_dtype = float_dtype
        self.scopes = Scopes()
        self.params: dict[str, Param] = {}
        self.param_of: dict[int, Param] = {}
        # the places each parameter's `uses` lists, for a membership test in O(1): a list's
        # made checking a parameter used 8000 times take 21 s
        self.use_places: dict[int, set[Loc]] = {}
        self.decl_call: dict[str, Loc | None] = {}  # the model-level call that declared it
        self.block = Block()
        self.root = self.block  # the model's body: not a loop's or a branch's
        # the loops and branches the statement being elaborated stands in, innermost last:
        # how an assert's error words where it stands, and the step or trip it names
        self.enclosing: list[Enclosing] = []
        # each assert's op: its error lacks the inputs its condition is computed from
        # until the model's whole body says them (a loop's body alone does not)
        self.asserts: list[Op] = []
        self.ctx = Ctx("model", {})
        self.call_stack: list[tuple[n.FuncDef, Loc]] = []
        self.inlined_calls = 0  # every call of a function the model inlines, nested or not
        self.errors: list[MdlError] = []
        self.warnings: list[Diagnostic] = []
        self.inputs: dict[str, Value] = {}
        self.input_locs: dict[str, Loc] = {}
        self.used: set[int] = set()
        # (name, value, where) of every single-name assignment of a tensor, for the warning
        # of one never used (_warn_unused)
        self.assigned: list[tuple[str, Value, Loc]] = []
        # (name, value id) of every read of a name bound to a tensor: an expression's, a
        # loop's or an `if`'s (its state, its results), for the warning of an alias never
        # read (`hs = r`, where r is read and hs is not: the value is used)
        self.name_reads: set[tuple[str, int]] = set()
        self.outputs: dict[str, Value] = {}
        self.loss: str | None = None
        # value id -> the lengths of the tokens it is a mean over (cross_entropy's), for
        # Graph.loss_tokens
        self.token_means: dict[int, Value] = {}
        # value id -> the dims it is a mean over (a whole `mean`, `mse`, a `cross_entropy`
        # without lengths), for Graph.loss_mean_dims
        self.means_over: dict[int, tuple[Dim, ...]] = {}
        self.top_level = False
        self.model_ctx: Ctx | None = None  # the model body's (a function's error names it)
        # (names, keyword, where, context) of each loop whose body runs, innermost last (a
        # name read before the loop gives it a value: the error says it is the loop's state)
        self.loop_names: list[tuple[set[str], str, Loc, Ctx]] = []
        self.hparams: set[str] = set()
        # while a hyper-parameter's default is read: every hyper-parameter's place (name ->
        # (index, where)) and the index of the one read, whose default cannot use later ones
        self.hparam_places: dict[str, tuple[int, Loc]] = {}
        self.reading_hparam = -1
        self.deciding = False  # in a `while` condition: `c or true` folds (expressions.py)
        # the assignments some read reaches, and the warnings of those none does: another
        # model calling the same function may read what this one leaves (check.file_warnings)
        self.read_at: set[Loc] = set()
        self.unused: list[Diagnostic] = []

    # ---- emission ----
    def emit(self, prim: str, inputs: list[Value], attrs: dict, loc: Loc | None,
             hint: str = "") -> list[Value]:
        try:
            return Builder(self.block, loc).typed(prim, inputs, attrs, hint, source=True)
        except ShapeError as exc:
            raise MdlTypeError(str(exc), loc) from None

    def note_name_read(self, name: str, value: Any) -> None:
        if isinstance(value, Value):
            self.name_reads.add((name, value.id))

    def note_use(self, value: Any, loc: Loc) -> None:
        if isinstance(value, Value):
            self.used.add(value.id)
            param = self.param_of.get(value.id)
            if param is not None:
                where = self.call_stack[0][1] if self.call_stack else loc
                places = self.use_places.get(id(param))
                if places is None:
                    places = self.use_places[id(param)] = set(param.uses)
                if where not in places:
                    places.add(where)
                    param.uses.append(where)

    def with_call_notes(self, exc: MdlError) -> MdlError:
        """Say through which calls (innermost first) an error inside a function was reached."""
        for fn, loc in reversed(self.call_stack):
            exc.note_call(fn.name.name, loc)
        return exc

    # ---- the model ----
    def model(self, m: n.ModelDef, defines: dict[str, Any]) -> Graph:
        hparams = self._hparams(m, defines)
        self.ctx = Ctx("model", {k: Const.of(v) for k, v in hparams.items()}, name=m.name.name,
                       body=m.body.stmts)
        self.model_ctx, self.hparams = self.ctx, set(hparams)
        self.top_level = True
        self.run_block(m.body.stmts)
        if not self.errors:
            self._final_checks(m)
            self._word_asserts()
        raise_all(_unique(self.errors)[:MAX_ERRORS],
                  MAX_ERRORS if len(self.errors) >= MAX_ERRORS else None)
        self._warn_unused()
        return Graph(m.name.name, hparams, self.inputs, self.params, self.block, self.outputs,
                     self.loss, self.input_locs, loss_tokens=self._loss_tokens(),
                     loss_mean_dims=self._loss_mean_dims())

    def _loss_tokens(self) -> str | None:
        """The input the minimized output is a mean over the tokens of (Graph.loss_tokens)."""
        lengths = self.token_means.get(self.outputs[self.loss].id) if self.loss else None
        return next((k for k, v in self.inputs.items() if v is lengths), None)

    def _loss_mean_dims(self) -> tuple[str, ...] | None:
        """The symbolic dims the minimized output is a mean over (Graph.loss_mean_dims): None
        where it is no whole mean, or a mean over a dim that is no single name (`T - 1`)."""
        dims = self.means_over.get(self.outputs[self.loss].id) if self.loss else None
        if dims is None or not all(d.is_const or _named(d) for d in dims):
            return None
        return tuple(str(d) for d in dims if not d.is_const)

    def _hparams(self, m: n.ModelDef, defines: dict[str, Any]) -> dict[str, Any]:
        names = [h.name.name for h in m.hparams]
        unknown = sorted(set(defines) - set(names))
        if unknown:
            raise UsageError(f"model `{m.name.name}` has no hyper-parameter "
                             f"{', '.join(unknown)} (it has {', '.join(names) or 'none'})")
        values: dict[str, Any] = {}
        known: dict[str, Any] = {}  # values as the defaults read them, one added each time
        self.hparam_places = {h.name.name: (i, h.name.loc) for i, h in enumerate(m.hparams)}
        for index, h in enumerate(m.hparams):
            name = h.name.name
            if name in values:
                raise MdlNameError(f"hyper-parameter `{name}` is declared twice", h.loc)
            self.check_bindable(name, h.name.loc, "name a hyper-parameter")
            # not a new dict of every value each time: 8000 hyper-parameters took 33 s
            self.ctx = Ctx("model", known)
            self.reading_hparam = index
            try:
                default = self.eval_single(h.value)
            finally:
                self.reading_hparam = -1
            if not isinstance(default, Const):
                raise MdlTypeError("a hyper-parameter's default must be known at compile time",
                                   h.value.loc)
            value = define_value(name, defines[name]) if name in defines else default.value
            if Const.of(value).kind != default.kind and not (
                    default.kind == "float" and Const.of(value).kind == "int"):
                raise UsageError(f"{given(name, defines[name])}: `{name}` is {default.kind} "
                                 f"(default {default})")
            if default.kind == "int" and not fits_i32(value):  # as a literal must
                if name not in defines:  # a default computed from a -D (`G = H + 1`)
                    said = f" is {value} with these {defines_word()}" if defines else \
                        f"'s default is {value}"  # no -D: the default itself (`2 ** 40`)
                    raise MdlTypeError(f"`{name}`{said}: an integer hyper-parameter must "
                                       f"fit in i32 ({I32_MIN} to {I32_MAX})", h.value.loc)
                raise UsageError(f"{given(name, defines[name])}: an integer hyper-parameter "
                                 f"must fit in i32 ({I32_MIN} to {I32_MAX})")
            if default.kind == "float":
                try:
                    value = float(value)
                except OverflowError:  # an int past a double (10**400): its own words
                    raise UsageError(f"{named(name)}: an integer of {len(str(abs(value)))} digits "
                                     "is out of range of a float hyper-parameter") from None
            values[name] = value
            known[name] = Const.of(values[name])
        return values

    def _final_checks(self, m: n.ModelDef) -> None:
        if not self.outputs:
            self.warnings.append(Diagnostic(f"model `{m.name.name}` has no outputs", m.loc,
                                            "warning"))

    def _word_asserts(self) -> None:
        """Each assert's error, now that the body is whole: with the inputs its condition
        is computed from (through the loops and branches around it)."""
        origins = block_origins(self.inputs, [self.root], steps=loop_steps)
        for op in self.asserts:
            source = origins.inputs_of(op.inputs[0])
            last = "after" if "after" in op.attrs else "what"  # the end of the error
            op.attrs[last] += f" (computed from {source})" if source else ""

    def _warn_unused(self) -> None:
        for text, loc in self.scopes.share_warnings():
            self.warnings.append(Diagnostic(text, loc, "warning"))
        dims = _dims_read(self.root, self.outputs.values())
        for name, value in self.inputs.items():
            # an input no op reads may still be the one to give the model a dim it uses
            # (`zeros[B, H]`)
            others = {d for k, v in self.inputs.items() if k != name for d in _symbols(v)}
            if value.id not in self.used and not (_symbols(value) & dims) - others:
                self.warnings.append(Diagnostic(f"input `{name}` is never used",
                                                self.input_locs[name], "warning"))
        for p in self.params.values():
            if not p.uses:
                self.warnings.append(Diagnostic(f"parameter `{p.name}` is never used", p.decl,
                                                "warning"))
        self._warn_unused_values()

    def _warn_unused_values(self) -> None:
        """A tensor assigned to a name that nothing reads: no op, no loop's or branch's
        result, no output. Where a function's value is its caller's too, the caller's
        assignment is named; an assignment in a function that runs at several calls is
        named once, and only where no call reads it."""
        read = set(use_counts(self.root)) | {v.id for v in self.outputs.values()
                                             if isinstance(v, Value)}
        # the names each value is bound to: more than one, and `hs = r` is an alias, read
        # or not by its own name (the value may be used by the other)
        names: dict[int, set[str]] = {}
        bound = [*self.inputs.items(), *((p.name, p.value) for p in self.params.values()),
                 *((name, value) for name, value, _ in self.assigned)]
        for name, value in bound:
            names.setdefault(value.id, set()).add(name)
        last: dict[int, tuple[str, Loc]] = {}
        for name, value, loc in self.assigned:  # in order: a caller's after its callee's
            last[value.id] = (name, loc)
        unused: dict[Loc, str] = {}
        read_at: set[Loc] = set()
        for vid, (name, loc) in last.items():
            if vid not in read:
                unused.setdefault(loc, name)
            elif len(names[vid]) == 1:
                read_at.add(loc)
        for name, value, loc in self.assigned:
            if len(names[value.id]) > 1 and value.id in read:
                if (name, value.id) in self.name_reads:
                    read_at.add(loc)
                else:
                    unused.setdefault(loc, name)
        for loc, name in unused.items():
            if loc not in read_at:
                self.unused.append(Diagnostic(f"`{name}` is assigned but never used", loc,
                                              "warning"))
                self.warnings.append(self.unused[-1])
        self.read_at = read_at

    # ---- statements ----
    def run_block(self, stmts: list[n.Stmt]) -> None:
        """Run statements; an error poisons what the statement assigns and moves on."""
        top, self.top_level = self.top_level, False
        try:
            for stmt in stmts:
                try:
                    if isinstance(stmt, MODEL_ONLY) and not (top and self.ctx.kind == "model"):
                        raise MdlTypeError(f"`{_keyword(stmt)}` must stand directly in the "
                                           "model body", stmt.loc)
                    getattr(self, "stmt_" + type(stmt).__name__)(stmt)
                except (MdlError, Cascade) as exc:
                    if isinstance(exc, MdlError):
                        self.errors.append(self.with_call_notes(exc))
                    for name in assigned_names([stmt], declarations=True):
                        self.ctx.env[name] = POISONED
                if len(self.errors) >= MAX_ERRORS:
                    return
        finally:
            self.top_level = top

    def stmt_Assign(self, s: n.Assign) -> None:
        for t in s.targets:
            self.check_bindable(t.name, t.loc)
        if isinstance(s.value, n.For):
            self.loop(s.value, s.targets)
            self._note_assigned(s.targets)
            return
        value = self.eval(s.value)
        if isinstance(value, list):
            raise MdlTypeError("a list cannot be assigned; lists are arguments of concat, "
                               "stack, reshape and transpose only", s.value.loc)
        values = value if isinstance(value, tuple) else (value,)
        if len(values) != len(s.targets):
            given = f"{count(len(values), 'value')} for {count(len(s.targets), 'target')}"
            called = s.value.func if isinstance(s.value, n.Call) else None
            if isinstance(called, n.Name) and len(values) > 1:
                given = (f"`{called.id}` gives {count(len(values), 'value')}, assigned to "
                         f"{count(len(s.targets), 'name')}: write a name for each "
                         f"(`{', '.join(_names(len(values)))} = {called.id}(...)`)")
            raise MdlTypeError(given, s.loc)
        for t, v in zip(s.targets, values):
            if isinstance(v, Value) and not v.hint:
                v.hint = t.name
            self.ctx.env[t.name] = v
        self._note_assigned(s.targets)

    def _note_assigned(self, targets: list[n.Ident]) -> None:
        """Remember a tensor assigned to one name (not `_name`: the way to say a value is
        left unused on purpose), for the warning of a value never used. Unpacking (`i, f, g,
        o = split(...)`) takes what it is given, and is not checked."""
        value = self.ctx.env.get(targets[0].name)
        if len(targets) == 1 and not targets[0].name.startswith("_") and isinstance(value, Value):
            self.assigned.append((targets[0].name, value, targets[0].loc))

    def check_bindable(self, name: str, loc: Loc, what: str = "be assigned") -> None:
        """The one rule of every binding (an assignment, an input, a parameter, a
        hyper-parameter, a function's argument, a loop variable, a new symbolic dim): a
        name of a built-in, a function or a symbolic dim cannot be bound; `what` says which
        binding (`be assigned`, `name an input`, ...)."""
        if reserved(name) or name in self.program.functions:
            raise MdlNameError(f"`{name}` is a function and cannot {what}", loc)
        if name in self.ctx.dims:
            raise MdlNameError(f"`{name}` is a symbolic dim and cannot {what}", loc)

    def stmt_InputDecl(self, s: n.InputDecl) -> None:
        name = s.name.name
        if name in self.ctx.env:
            raise MdlNameError(f"`{name}` is already defined", s.name.loc)
        if name in CALL_KEYWORDS:
            raise MdlNameError(f"an input cannot be named `{name}`: {CALL_KEYWORDS[name]}",
                               s.name.loc)

        def new_dim(dim_name: str, axis: int, loc: Loc) -> Dim:
            self.check_bindable(dim_name, loc, "name a symbolic dim")
            self.ctx.dims[dim_name] = Dim.of(dim_name)
            return self.ctx.dims[dim_name]
        value = Value(self.eval_type(s.type, new_dim), name)
        self.check_bindable(name, s.name.loc, "name an input")  # after the dims its type binds
        self.inputs[name] = value
        self.input_locs[name] = s.name.loc
        self.ctx.env[name] = value

    def stmt_OutputDecl(self, s: n.OutputDecl) -> None:
        name = s.name.name
        if name in self.outputs:
            raise MdlNameError(f"output `{name}` is declared twice", s.name.loc)
        if name in self.inputs:
            raise MdlNameError(f"output `{name}` has the name of an input", s.name.loc)
        if s.value is not None:
            self.check_bindable(name, s.name.loc, "name an output")
            value = self.eval_single(s.value)
        else:
            value = self.lookup(name, s.name.loc)
        value = self.to_tensor(value, s.loc)
        self.outputs[name] = value
        self.ctx.env[name] = value

    def stmt_Minimize(self, s: n.Minimize) -> None:
        name = s.name.name
        if self.loss is not None:
            raise MdlTypeError(f"a model minimizes one output; `{self.loss}` already is",
                               s.name.loc)
        if isinstance(self.ctx.env.get(name), Poisoned):
            raise Cascade
        if name not in self.outputs:
            raise MdlNameError(f"`minimize {name}` needs an output: declare `output {name} "
                               "= ...` first", s.name.loc)
        t = self.outputs[name].type
        if not (t.is_float and t.rank == 0):
            raise MdlTypeError(f"the minimized output must be a float scalar, `{name}` is {t}",
                               s.name.loc)
        self.loss = name

    def stmt_ParamDecl(self, s: n.ParamDecl) -> None:
        ptype = self.eval_type(s.type)
        full = self.scopes.declare(s.name.name)
        attrs = self.scopes.frame.attrs
        init = self.eval_init(s.init) if s.init is not None else attrs.init
        if init is None:
            init = Init("xavier") if ptype.rank >= 2 else Init("zeros")
        if init.kind in ("xavier", "orthogonal") and ptype.rank < 2:
            raise MdlTypeError(f"`{init.kind}` needs a parameter of rank 2 or more, got "
                               f"{ptype}", (s.init or s.type).loc)
        if not ptype.is_float:
            raise MdlTypeError(f"parameters are float tensors, got {ptype}", s.type.loc)
        past = [a for a in init.args if not finite_in(a, ptype.dtype)]
        if past:  # every weight was inf (or the draws half inf)
            raise MdlTypeError(f"`{init}` holds {literal(past[0])}, past the range of "
                               f"{ptype.dtype}: the weights of this {ptype} would be inf",
                               (s.init or s.name).loc)
        if not all(d.is_const for d in ptype.shape):
            raise MdlTypeError(f"a parameter's shape must be known at compile time, got "
                               f"{ptype}", s.type.loc)
        existing = self.params.get(full)
        if existing is None:
            existing = Param(full, Value(ptype, s.name.name), init, attrs.trainable,
                             attrs.regularizer, s.name.loc)
            self.decl_call[full] = self.call_stack[0][1] if self.call_stack else None
            self.params[full] = existing
            self.param_of[existing.value.id] = existing
        elif existing.value.type != ptype:
            raise self._param_conflict(full, ptype, existing, s.name.loc)
        elif ((s.init is not None and init != existing.init)
              or (existing.trainable, existing.regularizer) != (attrs.trainable,
                                                                attrs.regularizer)):
            where, notes = self._redeclared_at(full, existing, s.name.loc)
            self.warnings.append(Diagnostic(
                f"parameter `{full}` is declared again with init {init}, trainable "
                f"{str(attrs.trainable).lower()}, regularizer {attrs.regularizer or 'none'}; "
                f"the first declaration's ({existing.init}, "
                f"{str(existing.trainable).lower()}, {existing.regularizer or 'none'}) applies",
                where, "warning", notes=notes))
        self.check_bindable(s.name.name, s.name.loc, "name a parameter")
        self.ctx.env[s.name.name] = existing.value

    def _redeclared_at(self, full: str, existing: Param, loc: Loc) -> tuple[Loc, list]:
        """Where a second declaration of `full` is reported, and its notes: a function's
        `param` is the same line at both calls, so the user's calls are named (the note
        pointed at the very line the warning did)."""
        first_call = self.decl_call.get(full)
        this_call = self.call_stack[0][1] if self.call_stack else None
        if this_call is None:
            return loc, [("first declared here", existing.decl)]
        return this_call, [("the declaration, in the function", loc),
                           ("first declared by the call here", first_call or existing.decl)]

    def _param_conflict(self, full: str, ptype, existing: Param, loc: Loc) -> MdlError:
        """Two declarations of one parameter disagree; point at the user's call sites."""
        first_call, this_call = self.decl_call.get(full), (
            self.call_stack[0][1] if self.call_stack else None)
        before = f"the call at {first_call}" if first_call else f"{existing.decl}"
        where = this_call or loc
        notes = [(f"declared here as {ptype}", loc)] if this_call else []
        notes.append((f"first declared here as {existing.value.type}", existing.decl))
        return MdlTypeError(f"parameter `{full}` is declared as {ptype} here but as "
                            f"{existing.value.type} by {before}", where, notes=notes)

    def eval_init(self, e: n.Expr) -> Init:
        name, args, loc = _call_parts(e)
        if name not in INITIALIZERS:
            raise MdlTypeError("an initializer is one of " + ", ".join(INITIALIZERS), e.loc)
        if len(args) != INITIALIZERS[name]:
            raise MdlTypeError(f"`{name}` takes {INITIALIZERS[name]} arguments, got "
                               f"{len(args)}", loc)
        values = tuple(float(self._number(a)) for a in args)
        if name == "uniform" and not values[0] < values[1]:
            raise MdlTypeError(f"uniform(a, b) needs a < b, got {values[0]} and {values[1]}",
                               loc)
        if name == "normal" and not values[1] > 0:
            raise MdlTypeError(f"normal(mean, std) needs std > 0, got {values[1]}", loc)
        return Init(name, values)

    def _number(self, e: n.Expr) -> float:
        """An initializer's or a regularizer's argument: a finite compile-time number (the
        module's tables hold it, and an inf or nan would fill or decay every weight)."""
        v = self.eval_single(e)
        if not (isinstance(v, Const) and v.kind in ("int", "float")):
            raise MdlTypeError("expected a number known at compile time", e.loc)
        if not math.isfinite(v.value):
            raise MdlTypeError(f"expected a finite number, got {v}", e.loc)
        return v.value

    def stmt_ScopeStmt(self, s: n.ScopeStmt) -> None:
        attrs: dict[str, Any] = {}
        for kw in s.attrs:
            if kw.name in attrs:
                raise MdlTypeError(f"scope attribute `{kw.name}` is given twice", kw.loc)
            attrs[kw.name] = self._scope_attr(kw)
        with self.scopes.enter(s.name.name, **attrs):
            self.run_block(s.body.stmts)

    def _scope_attr(self, kw: n.Kwarg) -> Any:
        if kw.name == "init":
            return self.eval_init(kw.value)
        if kw.name == "trainable":
            v = self.eval_single(kw.value)
            if not (isinstance(v, Const) and v.kind == "bool"):
                raise MdlTypeError("`trainable` must be true or false", kw.value.loc)
            return v.value
        if kw.name == "regularizer":
            name, args, loc = _call_parts(kw.value)
            if name not in REGULARIZERS or len(args) != 1:
                raise MdlTypeError("a regularizer is l1(strength) or l2(strength)", loc)
            strength = float(self._number(args[0]))
            if strength < 0:
                raise MdlTypeError("a regularizer's strength must be >= 0", args[0].loc)
            return Regularizer(name, strength)
        raise MdlTypeError(f"unknown scope attribute `{kw.name}` (scopes take init, "
                           "regularizer and trainable)", kw.loc)

    def stmt_Share(self, s: n.Share) -> None:
        pairs = [(tuple(i.name for i in p.source),
                  tuple(i.name for i in p.target) if p.target is not None else (), p.loc)
                 for p in s.pairs]
        sources = [p[0] for p in pairs]
        for i, p in enumerate(pairs):
            if p[0] in sources[:i]:
                raise MdlNameError(f"`{'.'.join(p[0])}` is shared twice in one block", p[2])
        with self.scopes.share(pairs):
            self.run_block(s.body.stmts)

    def stmt_Assert(self, s: n.Assert) -> None:
        """A check of the call's data: an `assert` op the passes keep, which raises a
        ValueError with the text made here (the condition, the message, where it stands,
        the inputs it is computed from) where any element of the condition is false. In a
        loop's or a branch's body it checks each step the body runs (a row's padding
        steps are not run) and nothing where the body does not run."""
        cond = self.eval_single(s.cond)
        text = expr_text(s.cond)
        said = f"{s.message}: `{text}`" if s.message else f"assertion `{text}`"
        here = self.enclosing[-1] if self.enclosing else Enclosing()
        inside = f" {here.text}" if here.text else ""
        if isinstance(cond, Const) and cond.kind == "bool":
            if cond.value:
                return
            if not inside:  # it runs on every call
                raise MdlTypeError(f"{said} is always false", s.cond.loc)
            cond = self.to_tensor(cond, s.cond.loc)  # an error where the body runs
        if isinstance(cond, Const) or cond.type.dtype != "bool":
            got = cond.kind if isinstance(cond, Const) else cond.type
            raise MdlTypeError(f"an `assert` condition must be bool (a comparison, as "
                               f"`x > 0.0`), got {got}", s.cond.loc)
        where = f"{self.call_stack[-1][0].name.name}: " if self.call_stack else ""
        attrs = {"what": f"{where}{said} is false{inside}", "said": where + said + inside}
        numbered = _numbered(cond, here)
        operands = [cond]
        if numbered:  # the loops' steps or trips go between `what` and `after`'s parts
            parts, steps = [f"{where}{said} is false "], []
            for k, (words, counter) in enumerate(here.levels):
                parts[-1] += ", in " if k else "in "
                if counter in numbered:  # "step ", then " of the `for` at m.mdl:6"
                    parts[-1] += counter.counted[0]
                    parts.append(counter.counted[1])
                    steps.append(counter.value)
                else:
                    parts[-1] += words
            # one string with a NUL before each number's text in generated code
            # (mdl/faults.h): a NUL in a part would end it early, so it is spelt out
            parts = [part.replace("\0", "\\0") for part in parts]
            operands.append(self._steps(steps, numbered, s.loc))
            attrs.update(what=parts[0], after="\0".join(parts[1:]))
        done, = self.emit("assert", operands, attrs, s.loc)
        self.asserts.append(next(op for op in self.block.ops if done in op.outputs))

    def _steps(self, steps: list[Value], counters: list[Counter], loc: Loc) -> Value:
        """The steps or trips of an assert's loops, innermost first, as one operand: the
        one itself, or stacked on a last axis (a row's each, where a `for` has lengths:
        the others' broadcast to its rows)."""
        if len(steps) == 1:
            return steps[0]
        rows = next((c.rows for c in counters if c.rows is not None), None)
        if rows is not None:
            steps = [v if v.type.rank else self.emit("broadcast_to", [v], {"shape": (rows,)},
                                                     loc)[0] for v in steps]
        return self.emit("stack", steps, {"axis": steps[0].type.rank}, loc)[0]

    def stmt_Yield(self, s: n.Yield) -> None:
        levels = self.enclosing[-1].levels if self.enclosing else ()
        inner = levels[0][0] if levels else ""
        if any("`for`" in words for words, _ in levels) and "`for`" not in inner:
            block = "an `if`, assign it to a name in both branches" if "branch" in inner \
                else "a `while`, assign it to a name there"
            raise MdlTypeError(f"`yield` must stand directly in the `for`'s body: for a "
                               f"value of {block} and yield that name after it", s.loc)
        raise MdlTypeError("`yield` must stand directly in the body of a `for` whose "
                           "values are assigned (`hs = for ...`)", s.loc)

    def stmt_Return(self, s: n.Return) -> None:
        raise MdlTypeError("`return` must be the last statement of a function", s.loc)


def _numbered(cond: Value, here: Enclosing) -> list[Counter]:
    """The loops around an assert of `cond` whose step or trip its error numbers,
    innermost first, at most MAX_STEPS of them: each loop but a `for` with lengths whose
    condition is not of its rows (reversed, each row is at a step of its own, and a step
    past every row's length, which a condition of the whole step judges, holds no row's
    step): that one is "a step of the `for` at ...", unnumbered."""
    loops = [c for _, c in here.levels if c is not None and (
        c.rows is None or (cond.type.rank and cond.type.shape[0] == c.rows))]
    return loops[:MAX_STEPS]


def _names(k: int) -> list[str]:
    """`a`, `b`, ...: names for an example of unpacking k values."""
    return [chr(ord("a") + i) for i in range(k)] if k <= 26 else [f"v{i}" for i in range(k)]


def _keyword(stmt: n.Stmt) -> str:
    return {n.InputDecl: "input", n.OutputDecl: "output", n.Minimize: "minimize"}[type(stmt)]


def _call_parts(e: n.Expr) -> tuple[str, list[n.Expr], Loc]:
    """(name, positional args, loc) of `name` or `name(args)`; anything else is `?`."""
    if isinstance(e, n.Name):
        return e.id, [], e.loc
    if isinstance(e, n.Call) and isinstance(e.func, n.Name) and not e.kwargs:
        return e.func.id, e.args, e.loc
    return "?", [], e.loc


def _unique(errors: list[MdlError]) -> list[MdlError]:
    seen, out = set(), []
    for e in errors:
        key = (str(e.loc), e.message)
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


def elaborate(program: Program, model: n.ModelDef, defines: dict[str, Any],
              float_dtype: str = "f32") -> tuple[Graph, list[Diagnostic], Elaborator]:
    """The model's IR graph, the warnings found and the elaborator that found them (its
    `read_at` and `unused`), or raise MdlError."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20000))
    try:
        el = Elaborator(program, float_dtype)
        graph = el.model(model, defines)
        return graph, el.warnings, el
    finally:
        sys.setrecursionlimit(limit)


def _named(dim: Dim) -> bool:
    """A dim that is one declared name (`B`), not an expression of names (`T - 1`)."""
    return len(dim.terms) == 1 and dim.terms[0][1] == 1 and len(dim.terms[0][0]) == 1 \
        and isinstance(dim.terms[0][0][0], str)


def _symbols(v: Value) -> set[str]:
    """The symbolic dims of a value's shape."""
    return {s for d in v.type.shape for s in d.symbols}


def _dims_read(root: Block, outputs) -> set[str]:
    """The symbolic dims a model's ops and outputs use: in the shapes of the values its
    ops make (`zeros[B, H]`, `range(T)`) and of its outputs, and as a number (`x / T`: an
    op's attribute)."""
    found: set[str] = set()

    def note(thing) -> None:
        if isinstance(thing, Dim):
            found.update(thing.symbols)
        elif isinstance(thing, (list, tuple)):
            for item in thing:
                note(item)

    for op in walk_ops(root):
        for v in op.outputs:
            note(v.type.shape)
        for attr in op.attrs.values():
            note(attr)
    for v in outputs:
        if isinstance(v, Value):
            note(v.type.shape)
    return found
