"""Random well-typed .mdl programs for the differential fuzzer (tests/fuzz_programs.py).

A program is one model, plus the functions it defines, written as source text so that
the front end is exercised too. Its expressions come from tests/fuzz_expressions.py;
its statements add the structured constructs: `for` (zipped, reversed, over rows, over
a `range`, beside a step index `range(T)`, `lengths`, `recompute`, `checkpoint = k`,
nested, with yields), `if` / `else if` / `else`, `while`, `scope` (re-entered: shared
parameters), `share`, the standard cells, and an `assert` that holds. tests/fuzz_scope.py keeps track of what is in scope, so that every program is
well-typed by construction: a program the front end rejects is a bug here. Values stay
finite: a loop's state is updated through a squashing function, so it grows at most
linearly with the steps, and a while's trips are bounded by a counter.
"""
from __future__ import annotations

import random
import re
import zlib
from collections import Counter
from dataclasses import dataclass

from fuzz_expressions import COMPARE, REDUCTIONS, binary_text, compared
from fuzz_integers import INPUT_PREFIX, Integers
from fuzz_scope import CONTROL, Var
from fuzz_source import Program, Stmt

CELLS = {"lstm": 2, "gru": 1, "milstm": 2, "ln_lstm": 2}  # std/rnn.mdl: the states each carries
SCOPES = ("s0", "s1", "s2")


@dataclass(frozen=True)
class Size:
    statements: tuple[int, int]   # at the top level of the model
    expr_depth: int               # operators nested in an assignment
    body: int                     # most statements besides the state updates in a loop


SIZES = {"small": Size((2, 3), 2, 1), "large": Size((3, 5), 3, 2)}
# what a falsifiable assert bounds data by (inputs are drawn from N(0, 1)): no value a
# computation lands on exactly, so a build in f32 and the reference agree which side
BOUNDS = (1.3, 1.7, 2.2, 2.9)


class Generator(Integers):
    """Draws one program; `rng` decides everything, so a (seed, index, size) names it."""

    def __init__(self, rng: random.Random, name: str, size: Size):
        super().__init__(rng, name)
        self.size = size
        # draws of its own, so that choosing whether a branch mirrors the other leaves
        # every other choice of the program (and earlier seeds' programs) as it was
        self.mirrors = random.Random(f"mirror:{name}")
        # and whether a branch in a for that stores runs a while (deeper than `depth`
        # reaches otherwise): its tapes are the for's too (if_op.py)
        self.nests = random.Random(f"nest:{name}")
        self.operands = random.Random(f"operand:{name}")  # a product's right operand
        self.checks = random.Random(f"check:{name}")      # whether an assert ends the body
        self.inner_checks = random.Random(f"inner-check:{name}")  # and a loop's or branch's
        self.starts = random.Random(f"range-start:{name}")  # range(start, stop) to a dim
        self.falsifiable = random.Random(f"falsifiable:{name}")  # a body's assert may fail
        self.guards = random.Random(f"guard:{name}")  # an `if T > k` guarding a size T - k
        # a loop's yield of a comparison (a bool sequence, put back in time order where
        # the loop is reversed), and such a sequence an output
        self.bool_yields = random.Random(f"bool-yield:{name}")

    # ---- the program ------------------------------------------------------------------
    def generate(self) -> Program:
        for _ in range(self.rng.randint(*self.size.statements)):
            self.statement(depth=2)
        self.finish()
        self.s_assert()
        return self.program

    def s_assert(self) -> None:
        """A third of the programs end their body with an assert that holds whatever a
        value of theirs holds (NaN and inf too), drawn apart: the rest of a program is
        the one its seed always made. Every build checks it on every call, the passes keep
        it, and a build that judged it false would raise where the reference does not."""
        if self.checks.random() >= 1 / 3:
            return
        values = [v for v in self.frames[0].vars.values() if v.dtype in ("f32", "i32", "bool")]
        if not values:
            return
        v = values[self.checks.randrange(len(values))].name
        said = ', "holds for every value"' if self.checks.random() < 0.5 else ""
        self.emit(f"assert {v} == {v} or {v} != {v}{said}")
        self.cover("assert")

    def s_inner_assert(self, kind: str) -> None:
        """A quarter of the bodies of loops and branches end with an assert, most of them
        one that holds for every value, as the body's last one does (drawn apart as
        well): each step, branch or trip that runs checks it, and a pass that dropped or
        moved it wrongly would make a build raise where the reference does not (or
        crash). A third bound input data, and fail on some calls."""
        if self.inner_checks.random() >= 1 / 4:
            return
        values = [v for v in self.visible().values() if v.dtype in ("f32", "i32", "bool")]
        if not values:
            return
        v = values[self.inner_checks.randrange(len(values))].name
        # a third of them (a stream of their own) may fail: a bound on an input's values
        # or on a step of them (abs: exact in f32 and f64), which the reference and the
        # build must refuse alike, word for word (the same step or trip and position)
        data = [u for u in self.visible().values()
                if u.dtype == "f32" and u.fixed and not u.param]
        if data and self.falsifiable.random() < 1 / 3:
            u = data[self.falsifiable.randrange(len(data))].name
            bound = self.falsifiable.choice(BOUNDS)
            # abs: gradcheck's inputs would keep within a bound on the data itself
            self.emit(f"assert abs({u}) < {bound}, \"within {bound} in the {kind}\"")
            self.cover("assert:falsifiable")
        else:
            self.emit(f"assert {v} == {v} or {v} != {v}, \"holds in the {kind}\"")
        self.cover(f"assert:in-{kind}")
        if sum(f.kind in ("for", "while") for f in self.frames) > 1:
            self.cover("assert:nested-loops")  # its error numbers each loop's step or trip

    def finish(self) -> None:
        top = [v for v in self.frames[0].vars.values() if v.dtype == "f32" and not v.fixed]
        for _ in range(self.rng.randint(0, 2)):
            self.output(top)
        counts = [v for v in self.frames[0].vars.values() if v.dtype == "i32" and not v.fixed]
        if counts and self.rng.random() < 0.6:   # an integer output, compared exactly
            self.program.outputs.append(f"output {self.pick(counts).name}")
            self.cover("int:output")
        masks = [v for v in self.frames[0].vars.values() if v.dtype == "bool" and not v.fixed]
        if masks and self.bool_yields.random() < 0.8:  # a loop's bool yields, exactly too
            self.program.outputs.append(f"output {self.bool_yields.choice(masks).name}")
            self.cover("bool:output")
        terms = [self.term(v) for i, v in enumerate(top)
                 if i >= len(top) - 2 or self.rng.random() < 0.5]
        if self.rng.random() < 0.3 or not terms:
            terms.append(self.expr((), 2))
        self.program.loss = terms

    def output(self, top: list[Var]) -> None:
        taken = {line.split()[1] for line in self.program.outputs}
        free = [v for v in top if v.name not in taken]
        if free and self.rng.random() < 0.5:
            self.program.outputs.append(f"output {self.pick(free).name}")
        else:
            shape = self.pick(self.shapes())
            self.program.outputs.append(f"output {self.fresh('o')} = {self.expr(shape, 2)}")
        self.cover("output")

    def term(self, v: Var) -> str:
        if not v.shape:
            return self.pick([v.name, f"({v.name} * {v.name})"])
        red = self.pick(REDUCTIONS)
        return self.pick([f"{red}({self.reduction_arg(red, v.name)})",
                          f"mean({v.name} * {v.name})"])

    # ---- statements -------------------------------------------------------------------
    def statement(self, depth: int) -> None:
        if self.guards.random() < 0.05 and not any(f.kind in ("for", "while")
                                                   for f in self.frames):
            return self.s_guarded_if(depth)
        kinds = [("assign", 4), ("update", 3), ("count", 1)]
        if depth > 0:
            # a while right in a for that stores keeps its tapes there (ragged): twice as
            # likely there as elsewhere
            kinds += [("for", 4), ("if", 2), ("while", 3 if self.in_storing_for() else 1.5),
                      ("scope", 1), ("share", 0.7), ("static_if", 1)]
        names, weights = zip(*kinds)
        getattr(self, f"s_{self.rng.choices(names, weights)[0]}")(depth)

    def s_assign(self, depth: int) -> None:
        shape = self.pick(self.shapes())
        name = self.fresh("a")
        self.emit(f"{name} = {self.expr(shape, self.size.expr_depth)}")
        self.define(Var(name, shape))

    def s_count(self, depth: int) -> None:
        """An i32 variable (tests/fuzz_integers.py)."""
        shape = self.pick(self.shapes())
        name = self.fresh("c")
        self.emit(f"{name} = {self.int_expr(shape, self.size.expr_depth)}")
        self.define(Var(name, shape, "i32"))

    def s_update(self, depth: int, outer_only: bool = False) -> None:
        mine = self.frames[-1].vars
        targets = [v for v in self.visible().values() if self.assignable(v)
                   and not (outer_only and v.name in mine)]
        if not targets:
            if not outer_only:
                self.s_assign(depth)
            return
        v = self.pick(targets)
        if any(f.kind in CONTROL for f in self.frames[self.home(v.name) + 1:]):
            self.cover("state")
        self.emit(f"{v.name} = {self.update(v)}")

    def update(self, v: Var) -> str:
        """A new value for `v`: inside loops always squashed, so state stays bounded (an
        i32 one wraps around instead)."""
        if v.dtype == "i32":
            return self.int_update(v)
        looped = any(f.kind in ("for", "while") for f in self.frames)
        depth = self.size.expr_depth
        steps = [x for x in self.visible().values() if x.fixed and x.name.startswith("e")
                 and x.dtype == "f32"
                 and len(x.shape) == 2 and isinstance(x.shape[1], int)
                 and x.shape[:1] == v.shape[:1]]
        r = self.rng.random()
        if steps and len(v.shape) == 2 and isinstance(v.shape[1], int) and r < 0.3:
            x = self.pick(steps)
            self.cover("rnn-update")
            return (f"tanh(({x.name} @ {self.param((x.shape[1], v.shape[1]))}) + "
                    f"({v.name} @ {self.param((v.shape[1], v.shape[1]))}))")
        if r < 0.5:
            return f"{self.pick(['tanh', 'sigmoid', 'sin'])}({self.expr(v.shape, depth)})"
        if r < 0.7:
            return f"(0.5 * {v.name} + 0.5 * tanh({self.expr(v.shape, depth)}))"
        with self.avoiding(v.name):
            step = self.expr(v.shape, depth)
        return f"({v.name} + tanh({step}))" if looped else f"({v.name} + {step})"

    def s_for(self, depth: int) -> None:
        seqs, steps, dtypes, lead, tags = self.sequences()
        sequence = "rows" not in tags
        lengths = (sequence and "steps" not in tags and "range" not in tags
                   and self.rng.random() < 0.4)
        options = [f"lengths = {self.lengths()}"] if lengths else []
        r = self.rng.random()
        if r < 0.15:
            options.append("recompute")
        elif r < 0.35:
            options.append(f"checkpoint = {self.rng.randint(1, 3)}")
        tags += [o.split()[0] for o in options]
        if any(f.kind == "for" for f in self.frames):
            tags.append("nested")
        control = [f.kind for f in self.frames if f.kind in CONTROL]
        if "checkpoint" in tags and control and set(control) == {"if"}:
            tags.append("checkpoint-in-if")
        cell = (self.pick(list(CELLS)) if sequence and dtypes[0] == "f32"
                and self.rng.random() < 0.3 else None)
        states = self.states(lengths, cell)
        yields = self.rng.randint(1, 2) if self.rng.random() < 0.6 else 0
        loop_vars = [self.fresh("e") for _ in seqs]
        checkpoint = any(o.startswith("checkpoint") for o in options)
        recompute = checkpoint or "recompute" in options
        with self.frame("for", lengths=lengths, checkpoint=checkpoint,
                        recompute=recompute) as body:
            for e, shape, dtype in zip(loop_vars, steps, dtypes):
                self.define(Var(e, shape, dtype, fixed=True))
            if "steps" in tags and self.rng.random() < 0.6:  # a branch the step picks
                self.s_if(depth - 1)
            for _ in range(self.rng.randint(0, self.size.body)):
                self.statement(depth - 1)
            # a for in an if in no loop (depth 1) keeps its whiles' tapes too: one at times
            if depth == 1 and self.in_storing_for() and self.nests.random() < 0.5:
                self.s_while(0)
            if cell:
                self.cell(cell, loop_vars[0], steps[0], states[:CELLS[cell]])
            for v in states[CELLS[cell] if cell else 0:]:
                self.emit(f"{v.name} = {self.update(v)}")
            if self.rng.random() < 0.4:
                self.statement(depth - 1)
            self.s_inner_assert("for")
            shapes = [self.pick(self.yield_shapes(lengths)) for _ in range(yields)]
            kinds = ["i32" if self.rng.random() < 0.2 else "f32" for _ in shapes]
            values = [self.int_expr(s, 2) if k == "i32" else self.expr(s, 2)
                      for s, k in zip(shapes, kinds)]
            for k, kind in enumerate(kinds):
                if kind == "f32" and self.bool_yields.random() < 0.15:
                    f = self.bool_yields.choice(COMPARE)
                    bound = self.bool_yields.choice(["0.1", "0.5", "(-0.2)"])
                    values[k], kinds[k] = binary_text(f, values[k], compared(f, bound)), "bool"
        names = [self.fresh("y") for _ in shapes]
        for name, shape, kind in zip(names, shapes, kinds):
            self.define(Var(name, (lead,) + shape, kind))
            if kind == "i32":
                self.cover("for:int-yield")
            if kind == "bool":
                self.cover("for:bool-yield")
        head = "for " + ", ".join(f"{e} in {s}" for e, s in zip(loop_vars, seqs))
        self.emit(Stmt(head + Stmt.OPTIONS + " {", [body.block], ["}"], options, names,
                       values))
        for tag in ["for"] + tags + (["yield"] if names else []):
            self.cover(tag if tag == "for" else f"for:{tag}")

    def sequences(self):
        """What a for iterates: sequence texts, step shapes and dtypes, the leading dim,
        tags ("rows" for a loop over the rows of a value, which takes no lengths)."""
        seq_vars = [v for v in self.visible().values() if v.dtype == "f32"
                    and len(v.shape) == 3 and v.shape[:2] == ("T", "B")]
        if self.rng.random() < 0.15:
            rows = [v for v in self.visible().values() if v.dtype == "f32"
                    and len(v.shape) in (1, 2) and not (v.fixed and v.param)]
            if rows:
                v = self.pick(rows)
                return [v.name], [v.shape[1:]], ["f32"], v.shape[0], ["rows"]
        if self.rng.random() < 0.05:  # a count: `for i in range(n)`, a number of steps
            n = self.pick(self.widths)
            return [f"range({self.dim(n)})"], [()], ["i32"], n, ["rows", "range"]
        seqs, steps, dtypes, tags = [], [], [], []
        for _ in range(1 if self.rng.random() < 0.7 else 2):
            r = self.rng.random()
            dtypes.append("f32")
            if r < 0.1:   # integers (tests/fuzz_integers.py), a step of them at a time
                shape = self.pick([("T", "B"), ("T", "B", self.pick(self.widths))])
                ints = [v for v in self.ints(shape) if v.fixed]
                seqs.append(self.pick(ints).name if ints and self.rng.random() < 0.5
                            else self.input(shape, "i32", INPUT_PREFIX))
                steps.append(shape[1:])
                dtypes[-1] = "i32"
                tags.append("ints")
            elif r < 0.25:
                w = self.pick(self.widths)
                table = self.param((self.rng.randint(2, 5), w))
                seqs.append(f"{table}[{self.int_input(('T', 'B'), 'tok')}]")
                steps.append(("B", w))
                tags.append("gather")
            elif r < 0.4 and seq_vars:
                v = self.pick(seq_vars)
                seqs.append(f"{v.name}[:, :, 0:1]")
                steps.append(("B", 1))
                tags.append("slice")
            else:
                v = self.pick(seq_vars) if seq_vars and r < 0.75 else None
                name = v.name if v else self.input(("T", "B", self.pick(self.widths)))
                seqs.append(name)
                steps.append(self.visible()[name].shape[1:])
        if self.rng.random() < 0.2:  # a number a step beside them (a sign that picks a branch)
            seqs.append(self.input(("T",), "f32", "sg"))
            steps.append(())
            dtypes.append("f32")
            tags.append("steps")
        if self.rng.random() < 0.1:  # the step's index beside them, or the index and k
            k = self.starts.randint(-3, 3) if self.starts.random() < 0.5 else 0
            seqs.append(f"range({k}, T {'-' if k < 0 else '+'} {abs(k)})" if k else "range(T)")
            if k:
                self.cover("for:range-from")
            steps.append(())
            dtypes.append("i32")
            tags.append("range")
        if len(seqs) > 1:
            tags.append("zip")
        if self.rng.random() < 0.3:
            seqs = [f"reversed({s})" for s in seqs]
            tags.append("reversed")
        return seqs, steps, dtypes, "T", tags

    def yield_shapes(self, lengths: bool) -> list[tuple]:
        shapes = [s for s in self.shapes() if len(s) < 3]
        return [s for s in shapes if s[:1] == ("B",)] if lengths else shapes

    def states(self, lengths: bool, cell: str | None) -> list[Var]:
        """The loop's state: the cell's states first, then others; existing variables
        where they fit, else new ones before the loop."""
        out: list[Var] = []
        shapes = [("B", self.pick(self.widths))] * CELLS[cell] if cell else []
        for _ in range(self.rng.randint(0 if cell else 1, 2)):
            shapes.append(self.pick(self.yield_shapes(lengths)))
        for shape in shapes:
            # a cell's states are floats; the others may be i32 variables
            out.append(self.state(shape, lengths, out, ints=len(out) >= CELLS.get(cell, 0)))
        return out

    def state(self, shape: tuple, lengths: bool, taken: list[Var], ints: bool) -> Var:
        fits = [v for v in self.visible().values() if v.shape == shape and self.assignable(v)
                and v not in taken and (not lengths or shape[:1] == ("B",))
                and (v.dtype == "f32" or ints)]
        if fits and self.rng.random() < 0.5:
            return self.pick(fits)
        name = self.fresh("h")
        # zeros[B, w] names B, which only an input binds (a loop over a parameter's rows
        # may come before any input has it): else an expression, which makes one
        named = {d for t in self.program.inputs.values() for d in re.split(r"[\[\], ]+", t)}
        bound = all(isinstance(d, int) or d in named for d in shape)
        init = f"zeros[{', '.join(map(self.dim, shape))}]" if shape and self.rng.random() < 0.5 \
            and bound else self.expr(shape, 2)
        self.emit(f"{name} = {init}")
        self.define(Var(name, shape))
        return self.frames[-1].vars[name]

    def cell(self, cell: str, x: str, step: tuple, states: list[Var]) -> None:
        if self.calls_blocked:
            return
        self.cover(cell)
        width = states[0].shape[1]
        if len(step) != 2 or not isinstance(step[1], int):
            return
        args = ", ".join([x] + [v.name for v in states])
        if cell == "milstm" and self.rng.random() < 0.5:
            args += ", forget_bias = 1.0"
        text = self.call_site(cell, (cell, step[1], width), f"{cell}({args})")
        self.emit(f"{', '.join(v.name for v in states)} = {text}")

    def s_if(self, depth: int) -> None:
        conds = [self.scalar_condition(1)]
        if self.rng.random() < 0.25:
            conds.append(self.scalar_condition(1))
        has_else = self.rng.random() < 0.6
        both = has_else and self.rng.random() < 0.3
        shape = self.pick(self.shapes())
        joined = self.fresh("u") if both else None
        bodies = []
        for _ in range(len(conds) + has_else):
            with self.frame("if") as branch:
                for _ in range(self.rng.randint(0, 1)):
                    self.statement(depth - 1)
                if depth == 1 and self.while_keeps_tapes() and self.nests.random() < 0.5:
                    self.s_while(0)
                self.s_update(depth, outer_only=True)
                if joined:
                    self.emit(f"{joined} = {self.expr(shape, 2)}")
                self.s_inner_assert("if")
            bodies.append(branch.block)
        if has_else and len(conds) == 1 and self.mirrors.random() < 0.25:
            bodies[1] = [mirrored(s) for s in bodies[0]]
            self.cover("if:mirrored")
        if joined:
            self.define(Var(joined, shape))
            self.cover("if:joined")
        closers = [f"}} else if {c} {{" for c in conds[1:]] + (["} else {"] if has_else else [])
        self.emit(Stmt(f"if {conds[0]} {{", bodies, closers + ["}"]))
        self.cover("if")
        if has_else:
            self.cover("if:else")
        if len(conds) > 1:
            self.cover("if:else-if")

    def s_guarded_if(self, depth: int) -> None:
        """An `if` on T (in no loop: its sizes are checked where the branch starts) whose
        branch makes a size T - k (`xs[k:] - xs[:-k]`, a loop over it), so that calls
        at T up to k take the other branch (`else if T > k - 1` for k = 2 at times).
        The program's `few_steps` asks the comparison for such a T too."""
        g = self.guards
        seqs = [v for v in self.visible().values() if v.dtype == "f32"
                and len(v.shape) == 3 and v.shape[:2] == ("T", "B")]
        xs = self.pick(seqs).name if seqs and g.random() < 0.7 else self.input(
            ("T", "B", self.pick(self.widths)))
        w = self.visible()[xs].shape[2]
        ks = [2, 1] if g.random() < 0.3 else [g.randint(1, 2)]
        olds = [v for v in self.visible().values() if v.shape == ("B", w)
                and v.dtype == "f32" and self.assignable(v)]
        target = self.pick(olds).name if olds and g.random() < 0.4 else None
        joined = target or self.fresh("u")
        bodies = []
        for k in ks:
            with self.frame("if") as branch:
                if g.random() < 0.3:
                    self.statement(depth - 1)
                self.emit(f"{joined} = {self.steps_apart(xs, w, k)}")
            bodies.append(branch.block)
        if target is None or g.random() < 0.5:
            with self.frame("if") as branch:
                red = self.pick(REDUCTIONS)
                whole = self.pick([f"{red}({self.reduction_arg(red, xs)}, axis = 0)",
                                   self.expr(("B", w), 2)])
                self.emit(f"{joined} = {whole}")
            bodies.append(branch.block)
        conds = [g.choice([f"T > {k}", f"T >= {k + 1}", f"{k} < T"]) for k in ks]
        if g.random() < 0.2:
            conds[0] = f"{conds[0]} and {self.scalar_condition(1)}"
            self.cover("if:guard-and")
        if target is None:
            self.define(Var(joined, ("B", w)))
        closers = [f"}} else if {c} {{" for c in conds[1:]]
        closers += ["} else {"] * (len(bodies) - len(ks)) + ["}"]
        self.emit(Stmt(f"if {conds[0]} {{", bodies, closers))
        self.program.few_steps = max(self.program.few_steps, *ks)
        self.cover("if:guard")
        if len(ks) > 1:
            self.cover("if:guard-chain")

    def steps_apart(self, xs: str, w: int, k: int) -> str:
        """A value of [B, w] made of `xs`'s T - k steps (k and more: only where T > k):
        differences k steps apart reduced over time, or a loop over them."""
        g = self.guards
        tail = self.pick([f"({xs}[{k}:] - {xs}[:-{k}])", f"({xs}[{k}:] * {xs}[:T - {k}])",
                          f"{xs}[{k}:]"])
        if g.random() < 0.3:
            self.cover("if:guard-loop")
            h = self.fresh("h")
            self.emit(f"{h} = tanh({xs}[{k - 1}])")
            self.define(Var(h, ("B", w)))
            e, steps = self.fresh("e"), self.fresh("d")
            self.emit(f"{steps} = {tail}")   # a for steps through a name
            seq = steps if g.random() < 0.6 else f"reversed({steps})"
            update = f"tanh(({e} @ {self.param((w, w))}) + ({h} @ {self.param((w, w))}))"
            self.emit(Stmt(f"for {e} in {seq} {{", [[Stmt(f"{h} = {update}")]], ["}"]))
            return h
        red = self.pick(REDUCTIONS)
        return f"{red}({self.reduction_arg(red, tail)}, axis = 0)"

    def s_static_if(self, depth: int) -> None:
        """An `if` on a compile-time condition: only the branch it takes is checked, so
        the others are text that would not check (unknown names, wrong shapes, a
        parameter that clashes); the variables the taken branch assigns are visible after
        it."""
        if self.in_def:
            return self.s_if(depth)
        cond, value = self.static_condition()
        with self.frame("static") as taken:
            for _ in range(self.rng.randint(1, 2)):
                self.statement(depth - 1)
        r = self.rng.random()
        if value and r < 0.3:
            bodies, closers = [taken.block], ["}"]
        elif value and r < 0.7:
            bodies, closers = [taken.block, self.unchecked()], ["} else {", "}"]
        elif value:   # an `else if` whose condition is never looked at
            bodies = [taken.block, self.unchecked(), self.unchecked()]
            closers = ["} else if mean(nosuch) > 0.0 {", "} else {", "}"]
        elif r < 0.6:
            bodies, closers = [self.unchecked(), taken.block], ["} else {", "}"]
        else:
            second = self.static_condition(want=True)[0]
            bodies = [self.unchecked(), taken.block, self.unchecked()]
            closers = [f"}} else if {second} {{", "} else {", "}"]
        self.emit(Stmt(f"if {cond} {{", bodies, closers))
        self.cover("static-if")

    def static_condition(self, want: bool | None = None) -> tuple[str, bool]:
        """A compile-time condition on the hyper-parameters (or literals), and its value
        (`want`: drawn until it has that value)."""
        while want is not None:
            text, value = self.static_condition()
            if value == want:
                return text, value
        atoms: list[tuple[str, bool]] = [("true", True), ("false", False)]
        atoms += [(n, self.program.hypers[n][0]) for n in self.hypers(bool)] * 3
        for n in self.hypers(int):
            v, k = self.program.hypers[n][0], self.rng.randint(2, 5)
            op = self.pick(["<", ">=", "==", "!="])
            atoms += [(f"{n} {op} {k}", {"<": v < k, ">=": v >= k, "==": v == k,
                                         "!=": v != k}[op])] * 2
        text, value = self.pick(atoms)
        r = self.rng.random()
        if r < 0.2:
            return (f"not ({text})" if " " in text else f"not {text}"), not value
        if r < 0.4:
            other, second = self.pick(atoms)
            if self.rng.random() < 0.5:
                return f"({text} and {other})", value and second
            return f"({text} or {other})", value or second
        return text, value

    def unchecked(self) -> list[Stmt]:
        """A branch a compile-time `if` does not take: well-formed, but it would not
        check (and a call in it must not advance the call-site counters)."""
        name = self.fresh("a")
        lines = [self.pick([f"{name} = nosuch({name})",
                            f"{name} = zeros[2, 3] @ zeros[4, 5]",
                            "param w0 : f32[7, 9]",
                            f"{name} = linear(undefined, 3)"])]
        if self.rng.random() < 0.5:
            lines.append(f"{name} = linear({name}, 2) + {self.pick(['x0', 'p0', 'W0'])}")
        return [Stmt(line) for line in lines]

    def s_while(self, depth: int) -> None:
        k = self.fresh("k")
        self.emit(f"{k} = 0")
        self.define(Var(k, (), "i32", fixed=True))   # only its own `k = k + 1` moves it
        states = [v for v in self.visible().values() if self.assignable(v) and v.dtype == "f32"]
        state = self.pick(states) if states and self.rng.random() < 0.9 else None
        cond = f"{k} < {self.rng.randint(1, 3)}"
        if state and self.rng.random() < 0.7:
            red, f = self.pick(REDUCTIONS), self.pick(COMPARE)
            test = binary_text(f, f"{red}({self.reduction_arg(red, state.name)})",
                               compared(f, self.pick(["0.1", "0.5", "1.0"])))
            if self.rng.random() < 0.3:
                test = f"({test} or {self.scalar_condition(0)})"
            # the counter bounds the trips whatever the state does
            cond = f"{cond} and {test}" if self.rng.random() < 0.7 else f"{test} and {cond}"
        with self.frame("while") as body:
            if self.rng.random() < 0.5:
                self.statement(depth - 1)
            if state:
                self.emit(f"{state.name} = {self.update(state)}")
            self.emit(f"{k} = {k} + 1")
            self.s_inner_assert("while")
        self.emit(Stmt(f"while {cond} {{", [body.block], ["}"]))
        self.cover("while")
        if any(f.kind in CONTROL for f in self.frames):
            self.cover("while:nested")
        if self.in_storing_for():
            self.cover("while:in-for")
            control = [f.kind for f in self.frames if f.kind in CONTROL]
            if "if" in control[control.index("for"):]:
                self.cover("while:in-if-in-for")
            if "if" in control[:control.index("for")]:
                self.cover("while:in-for-in-if")
        elif any(f.kind == "while" for f in self.frames) and self.while_keeps_tapes():
            self.cover("while:in-while")
        elif self.while_keeps_tapes():
            self.cover("while:in-if")

    def s_scope(self, depth: int, name: str | None = None) -> None:
        name = name or self.pick(SCOPES)
        attrs = self.pick(["", "", " (init = normal(0, 0.3))", " (trainable = false)",
                           " (regularizer = l2(0.01), init = uniform(-0.3, 0.3))"])
        if attrs:
            self.cover("scope:attrs")
        with self.frame("scope", path=self.path() + (name,), counters=Counter()) as body:
            for _ in range(self.rng.randint(1, 2)):
                self.pool_param()
            for _ in range(self.rng.randint(1, 2)):
                self.statement(depth - 1)
        self.emit(Stmt(f"scope {name}{attrs} {{", [body.block], ["}"]))
        self.cover("scope")

    def s_share(self, depth: int) -> None:
        if any(f.shares for f in self.frames):   # one at a time: no cycles to avoid
            return self.s_scope(depth)
        target, source = self.rng.sample(SCOPES, 2)
        base = self.path()
        with self.frame("share", shares={base + (source,): base + (target,)}) as body:
            for name in (target, source) if self.rng.random() < 0.5 else (source, target):
                self.s_scope(depth - 1 if depth > 1 else 1, name)
        self.emit(Stmt(f"share ({source} = {target}) {{", [body.block], ["}"]))
        self.cover("share")


def generate(seed: int, index: int, size: str = "small") -> Program:
    """Program `index` of `seed`: the same text on every machine and run."""
    name = f"{size.capitalize()}{seed}_{index}"
    program = Generator(random.Random(name), name, SIZES[size]).generate()
    program.seed = zlib.crc32(name.encode())
    return program


def mirrored(stmt: Stmt) -> Stmt:
    """An else branch's copy of a then branch's statement, so that a weight the branch
    uses is used alike in both (the `if`'s sum over a loop's steps: one product for
    both). A copy word for word: swapping its tanh and sigmoid (other math, the same
    products) gave `log(tanh(x) + 0.5)` for the generator's `log(sigmoid(x) + 0.5)`, out
    of the domain it keeps (seed 644, `Small644_18`); the tests of
    tests/test_time_batching.py vary the math around alike products instead."""
    return Stmt(stmt.head, [[mirrored(s) for s in body] for body in stmt.bodies],
                list(stmt.closers), list(stmt.options), list(stmt.targets),
                list(stmt.yields))
