"""The bookkeeping of the fuzzer's program generator (tests/fuzz_generate.py): the
variables in scope and their shapes, which of them a loop or branch may reassign, the
scope path and `share` remapping of every parameter, and the names the front end gives
call sites, so that every program it writes is well-typed by construction."""
from __future__ import annotations

import random
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field

from fuzz_source import Program, Stmt

POOL = ("w0", "w1")                           # parameter names that scopes reuse
CONTROL = ("for", "if", "while")


def storing_for(control: list) -> bool:
    """Whether the frames of loops and branches `control` (outermost first) are ifs or
    none, a for without recompute or checkpoint and then only ifs."""
    loops = [i for i, f in enumerate(control) if f.kind != "if"]
    return len(loops) == 1 and control[loops[0]].kind == "for" \
        and not control[loops[0]].recompute


def keeps_tapes(control: list) -> bool:
    """Whether a while inside the frames `control` keeps its tapes for the backward (so a
    dropout in it keeps its masks): in a for that stores or in a while (either in ifs or
    in none), or in ifs in no loop, at any depth of ifs (the if outputs them)."""
    loops = [f for f in control if f.kind != "if"]
    return storing_for(control) or (bool(control) and not loops) or (
        len(loops) == 1 and loops[0].kind == "while")
OPEN = ("scope", "share", "static")           # blocks whose variables stay visible after


def type_text(shape: tuple, dtype: str = "f32") -> str:
    return dtype + (f"[{', '.join(map(str, shape))}]" if shape else "")


@dataclass
class Var:
    name: str
    shape: tuple
    dtype: str = "f32"
    fixed: bool = False      # inputs, parameters, loop variables: read, never reassigned
    param: bool = False


@dataclass
class Frame:
    kind: str                          # model, def, scope, share, static (the branch a
    #                                    compile-time `if` takes), for, if, while
    path: tuple = ()                   # the scope path of parameters declared here
    counters: Counter | None = None    # call-site counters of a naming block
    lengths: bool = False              # a for with lengths: its state leads with B
    checkpoint: bool = False           # a for with checkpoint: its length is known at run time
    recompute: bool = False            # a for with recompute (or checkpoint): its body re-runs
    shares: dict = field(default_factory=dict)   # absolute source -> target path
    vars: dict = field(default_factory=dict)
    block: list = field(default_factory=list)    # the statements emitted here


class Names:
    """What is in scope while a program is drawn; `rng` decides every choice."""

    def __init__(self, rng: random.Random, name: str):
        self.rng = rng
        # whether an expression becomes its running sums (fuzz_expressions.py's
        # `scanned`): draws of their own, so every other choice stays as it was
        self.scans = random.Random(f"scan:{name}")
        self.swaps = random.Random(f"swap:{name}")       # and whether one swaps two axes
        self.leading = random.Random(f"leading:{name}")  # or calls a function of `...`
        self.program = Program(name)
        self.widths = sorted(rng.sample([2, 3, 4, 5], 2))
        self.program.hypers = self.draw_hypers()
        self.symbols = ("S",) if rng.random() < 0.3 else ()   # a symbolic dim besides T, B
        self.frames = [Frame("model", counters=Counter(), block=self.program.body)]
        self.fresh_counts: Counter = Counter()
        self.sites: dict[tuple, tuple] = {}   # resolved full name -> signature
        self.avoid: set[str] = set()
        self.calls_blocked = 0

    # ---- helpers -----------------------------------------------------------------------
    def pick(self, items):
        return items[self.rng.randrange(len(items))]

    def cover(self, tag: str) -> None:
        self.program.covered[tag] += 1

    def fresh(self, prefix: str) -> str:
        self.fresh_counts[prefix] += 1
        return f"{prefix}{self.fresh_counts[prefix] - 1}"

    def emit(self, stmt: Stmt | str) -> None:
        self.frames[-1].block.append(stmt if isinstance(stmt, Stmt) else Stmt(stmt))

    def define(self, var: Var) -> None:
        self.frames[-1].vars[var.name] = var

    def visible(self) -> dict[str, Var]:
        out: dict[str, Var] = {}
        for f in self.frames:
            out.update(f.vars)
        return out

    def home(self, name: str) -> int:
        return max(i for i, f in enumerate(self.frames) if name in f.vars)

    def floats(self, shape: tuple) -> list[Var]:
        return [v for v in self.visible().values()
                if v.dtype == "f32" and v.shape == shape and v.name not in self.avoid]

    @property
    def in_def(self) -> bool:
        return self.frames[0].kind == "def"

    def batch(self) -> str:
        return "N" if self.in_def else "B"

    def shapes(self) -> list[tuple]:
        """The shapes values are usually drawn at: batches, vectors, scalars, sequences."""
        b = self.batch()
        out = [(b, w) for w in self.widths] * 3 + [(w,) for w in self.widths] + [(), (b,)]
        if self.in_def:
            return out
        return out + [("T", "B", w) for w in self.widths] + [
            (s, w) for s in self.symbols for w in self.widths]

    def path(self) -> tuple:
        return self.frames[-1].path

    def resolve(self, path: tuple) -> tuple:
        """A scope path after the active `share` pairs (longest source first)."""
        shares = {}
        for f in self.frames:
            shares.update(f.shares)
        for _ in range(len(shares) + 1):
            hits = [s for s in shares if path[:len(s)] == s]
            if not hits:
                break
            source = max(hits, key=len)
            path = shares[source] + path[len(source):]
        return path

    def assignable(self, v: Var) -> bool:
        """Whether `v` may be reassigned here: a loop with lengths carries only state
        that leads with B."""
        if v.fixed or v.dtype not in ("f32", "i32"):
            return False
        return all(v.shape[:1] == ("B",) for f in self.frames[self.home(v.name) + 1:]
                   if f.kind == "for" and f.lengths)

    def can_bind(self, name: str) -> bool:
        """Whether a parameter may take `name`: a name seen outside a loop or branch
        would become its state."""
        if name not in self.visible():
            return True
        return not any(f.kind in CONTROL for f in self.frames[self.home(name) + 1:])

    @contextmanager
    def frame(self, kind: str, **fields):
        parent = self.frames[-1]
        f = Frame(kind, path=fields.pop("path", parent.path), **fields)
        self.frames.append(f)
        try:
            yield f
        finally:
            self.frames.pop()
            if kind in OPEN:   # their variables stay visible after them
                parent.vars.update(f.vars)

    @contextmanager
    def no_calls(self):
        self.calls_blocked += 1
        try:
            yield
        finally:
            self.calls_blocked -= 1

    @contextmanager
    def avoiding(self, name: str):
        self.avoid.add(name)
        try:
            yield
        finally:
            self.avoid.discard(name)

    def in_storing_for(self) -> bool:
        """Whether the innermost loop is a for without recompute or checkpoint, inside no
        other loop (in ifs or none), with only ifs between it and here: a while here keeps
        its tapes in the for, a ragged yield."""
        return storing_for([f for f in self.frames if f.kind in CONTROL])

    def while_keeps_tapes(self) -> bool:
        """Whether a while here keeps its tapes for the backward (keeps_tapes)."""
        return keeps_tapes([f for f in self.frames if f.kind in CONTROL])

    def drawn_again(self) -> bool:
        """Whether a dropout here is drawn again in the backward (regions.py: a loop of
        run-time length, a while or a for with checkpoint, inside another loop or branch,
        whose values its backward cannot keep, so it runs again at the forward's stream
        positions; until 2026-11-29 autodiff refused it). Not so for a while whose one
        enclosing loop is a for that stores or a while (inside no other loop, in its body
        or in ifs there), or that is in ifs in no loop: it keeps its tapes
        (keeps_tapes), masks too; nor for a for with checkpoint in ifs in no loop, which
        keeps its masks as at the top level (the if outputs them)."""
        def again(i: int, f: Frame) -> bool:
            above = [g for g in self.frames[:i] if g.kind in CONTROL]
            if f.kind == "while" and keeps_tapes(above):
                return False
            if f.checkpoint and all(g.kind == "if" for g in above):
                return False
            return (f.kind == "while" or f.checkpoint) and bool(above)
        return any(again(i, f) for i, f in enumerate(self.frames))

    # ---- hyper-parameters ----------------------------------------------------------------
    def draw_hypers(self) -> dict:
        """The model's hyper-parameters, name -> (value, default's text), in order: ints
        equal to the widths (a later one may be arithmetic on an earlier one: `2 * W0`,
        an exact `/` stays an int), a float and a bool. Dims and literals of those values
        are then written by name at random (`dim`), and `static_if` tests them."""
        out: dict = {}
        if self.rng.random() < 0.35:
            return out
        for i, w in enumerate(self.widths):
            if self.rng.random() < 0.7:
                out[f"W{i}"] = (w, str(w))
        ints = [(n, v) for n, (v, _) in out.items()]
        if ints and self.rng.random() < 0.6:
            n, v = self.pick(ints)
            w = self.pick(self.widths)
            forms = [(f"{n} + {w - v}", w > v), (f"{n} - {v - w}", v > w),
                     (f"2 * {n}", 2 * v == w), (f"{n} * {n} - {v * v - w}", v * v > w),
                     (f"(2 * {n} + {2 * (w - v)}) / 2", w > v), (f"{w * v} / {n}", True)]
            out["G"] = (w, self.pick([f for f, ok in forms if ok]))
        if self.rng.random() < 0.6:
            value = self.pick([0.5, 0.25, 1.5])
            out["SCALE"] = (value, str(value))
        if self.rng.random() < 0.7:
            value = self.rng.random() < 0.5
            out["FLAG"] = (value, "true" if value else "false")
        return out

    def hypers(self, kind: type) -> list[str]:
        """The hyper-parameters of a kind (int, float, bool) visible here: none in a
        function, whose body sees only its arguments."""
        if self.in_def:
            return []
        return [n for n, (v, _) in self.program.hypers.items() if type(v) is kind]

    def dim(self, d) -> str:
        """A dim as text: an int sometimes by the name of a hyper-parameter that holds it."""
        names = [n for n in self.hypers(int) if self.program.hypers[n][0] == d]
        if names and self.rng.random() < 0.5:
            self.cover("hyper:dim")
            return self.pick(names)
        return str(d)

    def type_text(self, shape: tuple, dtype: str = "f32") -> str:
        return type_text(tuple(self.dim(d) for d in shape), dtype)

    # ---- inputs, parameters, call sites ------------------------------------------------
    def input(self, shape: tuple, dtype: str = "f32", prefix: str = "x") -> str:
        name = self.fresh(prefix)
        self.program.inputs[name] = self.type_text(shape, dtype)
        self.frames[0].vars[name] = Var(name, shape, dtype, fixed=True)
        self.cover(f"input:{dtype}" + (":scalar" if not shape else ""))
        for s in set(shape) & set(self.symbols):
            self.cover(f"dim:{s}")
        return name

    def int_input(self, shape: tuple, prefix: str = "ids") -> str:
        have = [v.name for v in self.visible().values()
                if v.dtype == "i32" and v.fixed and v.shape == shape and v.name.startswith(prefix)]
        return self.pick(have) if have and self.rng.random() < 0.7 else self.input(
            shape, "i32", prefix)

    def lengths(self) -> str:
        name = self.int_input(("B",), "lens")
        self.program.lengths.add(name)
        return name

    def init(self, shape: tuple) -> str:
        inits = ["", " = normal(0, 0.5)", " = uniform(-0.5, 0.5)", " = constant(0.3)"]
        if len(shape) >= 2:
            inits += [" = xavier", " = orthogonal"]
        return self.pick(inits)

    def param(self, shape: tuple) -> str:
        reuse = [v for v in self.floats(shape) if v.param]
        if reuse and self.rng.random() < 0.4:
            self.cover("param:reused")
            return self.pick(reuse).name
        name = self.fresh("p")
        self.emit(f"param {name} : {self.type_text(shape)}{self.init(shape)}")
        self.define(Var(name, shape, fixed=True, param=True))
        if any(f.kind == "for" for f in self.frames):
            self.cover("param:in-loop")
        return name

    def pool_param(self) -> str:
        """A parameter under a reused name: the same full name again (a scope entered
        again, or mapped by `share`) is the same parameter."""
        for _ in range(4):
            local = self.pick(POOL)
            full = self.resolve(self.path() + (local,))
            known = self.sites.get(full)
            if known is not None and known[0] != "param" or not self.can_bind(local):
                continue
            if known:
                _, shape, init = known
            else:
                shape = self.pick([(w,) for w in self.widths]
                                  + [(a, b) for a in self.widths for b in self.widths])
                init = self.init(shape)
            self.cover("param:shared" if known else "param:scoped")
            self.sites[full] = ("param", shape, init)
            self.emit(f"param {local} : {self.type_text(shape)}{init}")
            self.define(Var(local, shape, fixed=True, param=True))
            return local
        return self.param((self.pick(self.widths),))

    def call_site(self, fn: str, signature: tuple, text: str) -> str:
        """`text` (a call of `fn`) named as the front end will name it: its scope takes the
        next counter of the enclosing block, or `as NAME`, and must not meet another
        function's parameters under the same full name."""
        counters = next(f.counters for f in reversed(self.frames) if f.counters is not None)
        pool = ["cs0", "cs1"]
        again = [n for n in pool if self.sites.get(self.resolve(self.path() + (n,))) == signature]
        name = self.pick(again) if again and self.rng.random() < 0.5 else \
            self.pick(pool) if self.rng.random() < 0.3 else None
        if name is None:
            n = counters[fn]
            default = fn if n == 0 else f"{fn}_{n}"
            if self.sites.get(self.resolve(self.path() + (default,)), signature) == signature:
                counters[fn] += 1
            else:
                name = self.fresh("site")
        elif self.sites.get(self.resolve(self.path() + (name,)), signature) != signature:
            name = self.fresh("site")
        full = self.resolve(self.path() + ((name or default),))
        self.cover("call:shared" if full in self.sites else "call")
        self.sites[full] = signature
        return f"({text} as {name})" if name else text
