"""`for`, `if` and `while`: their state, branch agreement and yields, built as
structured IR ops that own blocks."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

from codegen.ir.diagnostics import Loc, MdlTypeError, count
from codegen.ir.graph import Block, Op, Value, outer_reads, use_counts
from codegen.ir.shapes import MAX_RANK, Dim, TensorType

from . import nodes as n
from .env import Cascade, Const, Poisoned, Unavailable
from .printer import expr_text

LOOP_OPTIONS = ("lengths", "recompute", "checkpoint")


class Counter:
    """Which step of a `for` (its sequences' index t) or which trip of a `while` (0, 1,
    ...) the loop's body runs, for the errors of the asserts in it: an i32 value of the
    body, made when the first one asks (`value`), so that a loop without asserts is as it
    was. `counted` is its words around the number ("step ", " of the `for` at m.mdl:6").
    With `lengths` it is one per row, `rows` of them (i32[B]: each row's own t, reversed
    too)."""

    def __init__(self, counted: tuple[str, str], make, rows: Dim | None = None):
        self.counted, self.rows = counted, rows
        self._make, self._value = make, None

    @property
    def value(self) -> Value:
        if self._value is None:
            self._value = self._make()
        return self._value


@dataclass(frozen=True)
class Enclosing:
    """Where the statement being elaborated stands, as its asserts' errors word it: the
    loops and branches around it, innermost first (`levels`), each its words ("a step of
    the `for` at m.mdl:6", "the `if` branch at m.mdl:8") and, for a loop, its `counter`
    (None for a branch). Empty at the model's level."""
    levels: tuple[tuple[str, Counter | None], ...] = ()

    @property
    def text(self) -> str:
        """All of them, no step numbered: "in the `if` branch at m.mdl:8, in a step of
        the `for` at m.mdl:6"; "" at the model's level."""
        return ", ".join(f"in {words}" for words, _ in self.levels)


def assigned_names(stmts: list[n.Stmt], declarations: bool = False) -> list[str]:
    """Names a statement list assigns, nested blocks included, in first-assignment order;
    with `declarations`, also the names that param and input declarations bind."""
    out: list[str] = []
    for name, _, _ in assignments(stmts, declarations):
        if name not in out:
            out.append(name)
    return out


def assignments(stmts: list[n.Stmt],
                declarations: bool = False) -> list[tuple[str, Loc, str]]:
    """Each name a statement list assigns (nested blocks included), where, and the word
    for how ("assigned", "declared"), in the order of the source; with `declarations`, the
    names that param and input declarations bind too."""
    out: list[tuple[str, Loc, str]] = []
    stack = list(reversed(stmts))
    while stack:
        s = stack.pop()
        children: list[n.Stmt] = []
        if isinstance(s, n.Assign):
            out.extend((t.name, t.loc, "assigned") for t in s.targets)
            if isinstance(s.value, n.For):
                children = s.value.body.stmts
        elif isinstance(s, n.OutputDecl) or (declarations and isinstance(
                s, (n.ParamDecl, n.InputDecl))):
            out.append((s.name.name, s.name.loc,
                        "assigned" if isinstance(s, n.OutputDecl) else "declared"))
        elif isinstance(s, (n.For, n.While, n.ScopeStmt, n.Share)):
            children = s.body.stmts
        elif isinstance(s, n.If):
            children = s.then.stmts + (s.orelse.stmts if s.orelse else [])
        stack.extend(reversed(children))
    return out


class ControlFlow:
    """Mixin of the Elaborator: structured control flow."""

    @contextmanager
    def _in_block(self, block: Block, env: dict, inside: str = "",
                  counter: Counter | None = None):
        """Emit into `block` with `env` as the variables, then restore both; `inside` says
        where the block runs, for the errors of the asserts in it ("a step of the `for` at
        m.mdl:6"), and `counter` which step or trip, where the block is a loop's body."""
        saved = self.block, self.ctx.env
        self.block, self.ctx.env = block, env
        around = self.enclosing[-1] if self.enclosing else Enclosing()
        if inside:
            around = Enclosing(((inside, counter),) + around.levels)
        self.enclosing.append(around)
        try:
            yield
        finally:
            self.block, self.ctx.env = saved
            self.enclosing.pop()

    @contextmanager
    def _assigning(self, names: list[str], keyword: str, loc: Loc):
        """While a loop's body runs: the names it assigns, so that reading one before the
        loop gives it a value is told it is the loop's state (lookup's error)."""
        self.loop_names.append((set(names), keyword, loc, self.ctx))
        try:
            yield
        finally:
            self.loop_names.pop()

    def _state(self, names: list[str], loc: Loc) -> dict[str, Value]:
        """The variables that exist before a loop and that its body assigns."""
        state: dict[str, Value] = {}
        for name in names:
            v = self.ctx.env.get(name)
            if isinstance(v, Poisoned):
                raise Cascade
            self.note_name_read(name, v)
            if isinstance(v, (Value, Const)):
                state[name] = self.to_tensor(v, loc)
        return state

    def _new_state(self, env: dict, state: dict[str, Value], what: str, loc: Loc) -> list[Value]:
        out = []
        for name, before in state.items():
            v = env[name]
            if isinstance(v, Poisoned):
                raise Cascade
            self.note_name_read(name, v)
            if isinstance(v, Const):
                v = self.to_tensor(v, loc, before.type)
            if not isinstance(v, Value) or v.type != before.type:
                got = v.type if isinstance(v, Value) else "something else"
                raise MdlTypeError(f"{what} state `{name}` changes type: {before.type} before, "
                                   f"{got} after one step (state keeps its type)", loc)
            out.append(v)
        return out

    def _note_initial_uses(self, state: dict[str, Value], blocks: list[Block],
                           args: list[Value]) -> None:
        """A state's value before a loop is used when the loop reads its state: when
        `blocks` read the argument that holds it (`args`, one per state, in order) or
        carry it through unchanged."""
        read = {vid for block in blocks for vid in use_counts(block)}
        for before, arg in zip(state.values(), args):
            if arg.id in self.used or arg.id in read:
                self.used.add(before.id)

    def _leave(self, names: list[str], keep: set[str], before: dict, where: str,
               loc: Loc) -> None:
        """Names a body assigned that do not live on after it become unavailable."""
        for name in names:
            if name not in keep:
                if name in before:
                    self.ctx.env[name] = before[name]
                else:
                    self.ctx.env[name] = Unavailable(f"`{name}` is defined only inside the "
                                                     f"{where}", loc)

    # ---- for ----
    def stmt_For(self, s: n.For) -> None:
        self.loop(s, None)

    def loop(self, s: n.For, targets: list[n.Ident] | None) -> None:
        opts = self._loop_options(s)
        seqs = [self._sequence(b) for b in s.bindings]
        if len({b.reversed for b in s.bindings}) > 1:
            raise MdlTypeError("the sequences of one loop run in one direction: reverse all "
                               "of them or none", s.bindings[0].loc)
        steps = seqs[0].type.shape[0]
        for b, x in zip(s.bindings, seqs):
            if x.type.shape[0] != steps:
                raise MdlTypeError(f"zipped sequences need one length: `{expr_text(b.seq)}` "
                                   f"is {x.type}, `{expr_text(s.bindings[0].seq)}` is "
                                   f"{seqs[0].type}", b.seq.loc)
        for b in s.bindings:
            self.check_bindable(b.var.name, b.var.loc, "name a loop variable")
        loop_vars = [b.var.name for b in s.bindings]
        if len(set(loop_vars)) != len(loop_vars):
            raise MdlTypeError("loop variables must differ", s.bindings[0].loc)
        lengths, batch = self._lengths(opts, seqs, s)
        body_names = assigned_names(s.body.stmts)
        state = self._state([x for x in body_names if x not in loop_vars], s.loc)
        body = Block([Value(x.type.with_shape(x.type.shape[1:]), v) for x, v in
                      zip(seqs, loop_vars)] + [Value(v.type, k) for k, v in state.items()])
        env = dict(self.ctx.env)
        env.update(zip(loop_vars + list(state), body.args))
        yields: list[Value] = []
        hidden: list[Value] = []  # the step index, a sequence of the loop's if an assert asks
        outer = self.block

        def step_index() -> Value:
            saved, self.block = self.block, outer
            try:
                index = self.emit("range", [], {"n": steps, "start": 0, "step": 1}, s.loc)[0]
                if batch is not None:  # a row a sequence: each row's own t (lengths)
                    column = self.emit("reshape", [index], {"shape": (steps, Dim.of(1))},
                                       s.loc)[0]
                    rows = self.emit("full", [], {"shape": (steps, batch), "value": 0,
                                                  "dtype": "i32"}, s.loc)[0]
                    index = self.emit("add", [column, rows], {}, s.loc)[0]
            finally:
                self.block = saved
            hidden.append(index)
            arg = Value(index.type.with_shape(index.type.shape[1:]), "step")
            body.args.insert(len(seqs), arg)
            return arg

        counter = Counter(("step ", f" of the `for` at {s.loc.line_place}"), step_index,
                          rows=batch)
        with self._in_block(body, env, f"a step of the `for` at {s.loc.line_place}", counter), \
                self._assigning(body_names, "for", s.loc):
            for stmt in s.body.stmts:
                if isinstance(stmt, n.Yield):
                    yields = self._yield(stmt, targets, yields)
                else:
                    self.run_block([stmt])
            new_state = self._new_state(env, state, "loop", s.loc)
        seqs = seqs + hidden
        if targets is not None and not yields:
            if _misplaced_yield(s.body.stmts):  # reported where it stands
                raise Cascade
            raise MdlTypeError("this loop's values are assigned, so its body needs a `yield`",
                               s.loc)
        if batch is not None:
            for what, v in list(zip(state, new_state)) + [("yield", y) for y in yields]:
                if v.type.rank == 0 or v.type.shape[0] != batch:
                    per_row = {"i32": f"full[{batch}](0)", "bool": f"full[{batch}](false)"}.get(
                        v.type.dtype, f"zeros[{batch}]")
                    hint = (f" (each row stops at its own length, so a count or a flag is one "
                            f"per row: `{per_row}`)" if v.type.rank == 0 and what != "yield"
                            else "")
                    raise MdlTypeError(f"with lengths, loop state and yields are rows per "
                                       f"sequence: `{what}` is {v.type}, its first dim should "
                                       f"be {batch}{hint}", s.loc)
        body.results = new_state + yields
        self._note_initial_uses(state, [body], body.args[len(seqs):])  # seqs: the hidden too
        stacked = [Value(TensorType(y.type.dtype, (steps,) + y.type.shape)) for y in yields]
        for y, t in zip(yields, stacked):
            if t.type.too_many_dims() is not None:
                raise MdlTypeError(f"this loop stacks its yield of {y.type} over its steps, "
                                   f"into {t.type.rank} dims; a value has at most "
                                   f"{MAX_RANK}", s.loc)
        outputs = [Value(v.type, k) for k, v in state.items()] + stacked
        attrs = {"n_seq": len(seqs), "n_state": len(state),
                 "reversed": s.bindings[0].reversed, "has_lengths": lengths is not None,
                 "recompute": "recompute" in opts, "checkpoint": opts.get("checkpoint", 0)}
        inputs = seqs + list(state.values()) + ([lengths] if lengths is not None else [])
        self.block.ops.append(Op("for", inputs, outputs, attrs, [body], s.loc))
        before = dict(self.ctx.env)
        self._leave(body_names + loop_vars, set(state), before, "loop body", s.loc)
        self.ctx.env.update(zip(state, outputs))
        for t, v in zip(targets or [], stacked):
            v.hint = t.name
            self.ctx.env[t.name] = v

    def _loop_options(self, s: n.For) -> dict:
        opts: dict = {}
        for o in s.options:
            if o.name not in LOOP_OPTIONS:
                hint = ""
                if o.value is None and len(s.bindings) == 1:
                    b = s.bindings[-1]
                    seq = expr_text(b.seq)
                    hint = (f"; to loop over `{seq}({o.name})`, bind it to a name "
                            f"first: `ys = {seq}({o.name})`, then `for {b.var.name} in "
                            "ys`")
                raise MdlTypeError(f"unknown loop option `{o.name}` (options are lengths = L, "
                                   f"recompute, checkpoint = k){hint}", o.loc)
            if o.name in opts:
                raise MdlTypeError(f"loop option `{o.name}` is given twice", o.loc)
            if (o.name == "recompute") != (o.value is None):
                form = "recompute" if o.name == "recompute" else f"{o.name} = ..."
                raise MdlTypeError(f"write the loop option as `{form}`", o.loc)
            opts[o.name] = o
        if "recompute" in opts and "checkpoint" in opts:
            raise MdlTypeError("`recompute` and `checkpoint` exclude each other",
                               opts["checkpoint"].loc)
        if "checkpoint" in opts:
            k = self.eval_single(opts["checkpoint"].value)
            if not (isinstance(k, Const) and k.kind == "int" and k.value >= 1):
                raise MdlTypeError("`checkpoint = k` needs a compile-time integer k >= 1",
                                   opts["checkpoint"].value.loc)
            opts["checkpoint"] = k.value
        return opts

    def _sequence(self, b: n.Binding) -> Value:
        x = self.eval_single(b.seq)
        if not isinstance(x, Value) or x.type.rank == 0:
            what = x.type if isinstance(x, Value) else f"the scalar {x}"
            raise MdlTypeError(f"`for` iterates over the first dim of a tensor; "
                               f"`{expr_text(b.seq)}` is {what}", b.seq.loc)
        return x

    def _lengths(self, opts: dict, seqs: list[Value], s: n.For):
        if "lengths" not in opts:
            return None, None
        e = opts["lengths"].value
        lengths = self.eval_tensor(e)
        first = seqs[0].type
        if first.rank < 2:
            raise MdlTypeError(f"with lengths, sequences are [T, B, ...]; got {first}",
                               s.bindings[0].seq.loc)
        batch = first.shape[1]
        rows = lengths.type.shape[0] if lengths.type.rank == 1 else None
        if rows != batch and any(x.type.rank > 1 and x.type.shape[1] == rows for x in seqs):
            batch = rows  # lengths and another sequence agree: the first one is wrong
        for b, x in zip(s.bindings, seqs):  # each row runs its own steps
            if x.type.rank < 2 or x.type.shape[1] != batch:
                hint = (f" (a row's own step count is a state: `i = full[{batch}](0)` before "
                        "the loop, `i = i + 1` in it)" if x.type.dtype == "i32"
                        and x.type.rank == 1 else "")
                raise MdlTypeError(f"with lengths, every sequence is [T, {batch}, ...], a row "
                                   f"a sequence: `{expr_text(b.seq)}` is {x.type}{hint}",
                                   b.seq.loc)
        if lengths.type != TensorType("i32", (batch,)):
            hint = ""
            if rows is not None and rows == first.shape[0] != batch:  # batch first
                seq = expr_text(s.bindings[0].seq)
                perm = ", ".join(map(str, [1, 0, *range(2, first.rank)]))
                hint = (f": a `for` steps over the first dim of `{seq}` and takes its second "
                        f"as the rows; for batch-first data, bind `transpose({seq}, [{perm}])` "
                        "to a name and loop over that")
            raise MdlTypeError(f"lengths must be i32[{batch}] (one per sequence), got "
                               f"{lengths.type}{hint}", e.loc)
        return lengths, batch

    def _yield(self, y: n.Yield, targets, yields) -> list[Value]:
        if targets is None:
            raise MdlTypeError("a `for` statement has no values to yield; assign the loop: "
                               "`hs = for ...`", y.loc)
        if yields:
            raise MdlTypeError("a loop body has exactly one `yield`", y.loc)
        if len(y.values) != len(targets):
            raise MdlTypeError(f"the loop yields {count(len(y.values), 'value')} for "
                               f"{count(len(targets), 'target')}", y.loc)
        return [self.eval_tensor(v) for v in y.values]

    # ---- if ----
    def stmt_If(self, s: n.If) -> None:
        cond = self.eval_single(s.cond)
        if isinstance(cond, Const):
            if cond.kind != "bool":
                raise MdlTypeError(f"an `if` condition must be bool, got {cond}", s.cond.loc)
            chosen = s.then if cond.value else s.orelse
            self.run_block(chosen.stmts if chosen else [])
            return
        if cond.type != TensorType("bool", ()):
            raise MdlTypeError(f"an `if` condition must be a bool scalar, got {cond.type} "
                               "(for elementwise choice use where(c, a, b))", s.cond.loc)
        branches = [s.then.stmts, s.orelse.stmts if s.orelse else []]
        names = assigned_names(branches[0] + branches[1])
        before = dict(self.ctx.env)
        results: list[dict] = []
        blocks = []
        for stmts, branch in zip(branches, ("the `if` branch", "the `else` branch")):
            block, env = Block(), dict(before)
            with self._in_block(block, env, f"{branch} at {s.loc.line_place}"):
                self.run_block(stmts)
            results.append(env)
            blocks.append(block)
        assigned = [set(assigned_names(b)) for b in branches]
        outputs, carried = [], []
        for name in names:
            vals = [r.get(name) for r in results]
            if any(isinstance(v, Poisoned) for v in vals):
                raise Cascade
            for v in vals:
                self.note_name_read(name, v)
            if not all(isinstance(v, (Value, Const)) for v in vals):
                side = "then" if name in assigned[0] else "else"
                self.ctx.env[name] = Unavailable(
                    f"`{name}` is assigned only in the {side} branch of the `if` at {s.loc}; "
                    "assign it in both branches to use it after", s.loc)
                continue
            carried.append((name, vals))
        for name, vals in carried:
            like = next((v.type for v in vals if isinstance(v, Value)), None)
            tensors = []
            for block, v in zip(blocks, vals):
                with self._in_block(block, dict(before)):
                    tensors.append(self.to_tensor(v, s.loc, like))
            if tensors[0].type != tensors[1].type:  # a branch not assigning it keeps it
                said = [f"after the {side} branch" if name in assigned[k] else
                        f"before the `if` (kept where its condition is {kept})"
                        for k, (side, kept) in enumerate((("then", "true"), ("else", "false")))]
                raise MdlTypeError(f"`{name}` is {tensors[0].type} {said[0]} but "
                                   f"{tensors[1].type} {said[1]}", s.loc)
            outputs.append((name, tensors))
        for i, block in enumerate(blocks):
            block.results = [t[i] for _, t in outputs]
        values = [Value(t[0].type, name) for name, t in outputs]
        self.block.ops.append(Op("if", [cond], values, {}, blocks, s.loc))
        self.ctx.env.update({name: v for (name, _), v in zip(outputs, values)})

    # ---- while ----
    def stmt_While(self, s: n.While) -> None:
        names = assigned_names(s.body.stmts)
        state = self._state(names, s.loc)
        if not state:
            raise MdlTypeError("this `while` assigns no variable that exists before it, so "
                               "its condition can never change", s.loc)
        cond_block = Block([Value(v.type, k) for k, v in state.items()])
        env = dict(self.ctx.env)
        env.update(zip(state, cond_block.args))
        with self._in_block(cond_block, env), self._assigning(names, "while", s.loc):
            self.deciding = True  # `c or true` folds to true: refused below, as never ending
            try:
                cond = self.eval_single(s.cond)
            finally:
                self.deciding = False
            if isinstance(cond, Const) and cond.kind == "bool":
                raise MdlTypeError(f"this `while` condition is always {cond}: " + (
                    "the loop would never end" if cond.value else "its body would never run"),
                    s.cond.loc)
            if not (isinstance(cond, Value) and cond.type == TensorType("bool", ())):
                got = cond.type if isinstance(cond, Value) else cond
                raise MdlTypeError(f"a `while` condition must be a bool scalar that depends on "
                                   f"the loop state, got {got}", s.cond.loc)
            if not _depends_on(cond_block, cond, cond_block.args):
                raise MdlTypeError(
                    f"this `while` condition reads none of the variables its body assigns "
                    f"({', '.join(state)}), so no trip can change it: once true, the loop "
                    "would never end", s.cond.loc)
        cond_block.results = [cond]
        body = Block([Value(v.type, k) for k, v in state.items()])
        env = dict(self.ctx.env)
        env.update(zip(state, body.args))
        first: list[Value] = []  # the trip count, a state of the loop's if an assert asks
        outer = self.block

        def trip_count() -> Value:
            saved, self.block = self.block, outer
            try:
                first.append(self.emit("full", [], {"shape": (), "value": 0, "dtype": "i32"},
                                       s.loc)[0])
            finally:
                self.block = saved
            cond_block.args.append(Value(first[0].type, "trip"))
            body.args.append(Value(first[0].type, "trip"))
            return body.args[-1]

        counter = Counter(("trip ", f" of the `while` at {s.loc.line_place}"), trip_count)
        with self._in_block(body, env, f"a trip of the `while` at {s.loc.line_place}", counter), \
                self._assigning(names, "while", s.loc):
            self.run_block(s.body.stmts)
            body.results = self._new_state(env, state, "while", s.loc)
            if first:  # the next trip's number, at the end of this one
                one = self.emit("full", [], {"shape": (), "value": 1, "dtype": "i32"},
                                s.loc)[0]
                body.results.append(self.emit("add", [body.args[-1], one], {}, s.loc)[0])
        self._note_initial_uses(state, [body], body.args)
        self._note_initial_uses(state, [cond_block], cond_block.args)
        outputs = [Value(v.type, k) for k, v in state.items()]
        trips = [Value(v.type, "trip") for v in first]
        self.block.ops.append(Op("while", list(state.values()) + first, outputs + trips, {},
                                 [cond_block, body], s.loc))
        before = dict(self.ctx.env)
        self._leave(names, set(state), before, "while body", s.loc)
        self.ctx.env.update(zip(state, outputs))


def _depends_on(block: Block, value: Value, args: list[Value]) -> bool:
    """Whether `value`, made in `block`, is computed from any of `args` (the ops' inputs
    and what their own blocks read from outside them)."""
    derived = {a.id for a in args}
    for op in block.ops:
        if any(v.id in derived for v in outer_reads(op)):
            derived.update(v.id for v in op.outputs)
    return value.id in derived




def _misplaced_yield(stmts: list[n.Stmt]) -> bool:
    """Whether a `yield` stands in a block nested in these statements, an `if`'s, a
    `while`'s, a `scope`'s or a `share`'s (an error of its own: the loop's missing yield
    would say it again); an inner `for`'s yields are its own."""
    for stmt in stmts:
        blocks = [stmt.then, stmt.orelse] if isinstance(stmt, n.If) else \
            [stmt.body] if isinstance(stmt, (n.While, n.ScopeStmt, n.Share)) else []
        for block in filter(None, blocks):
            if any(isinstance(inner, n.Yield) for inner in block.stmts) or \
                    _misplaced_yield(block.stmts):
                return True
    return False
