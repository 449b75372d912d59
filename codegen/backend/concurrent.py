"""Independent loops run at once: a bidirectional LSTM's two directions, and their two
backward loops, one a core.

A loop's step is a chain of small products and elementwise work, each waiting for the
one before: split over the cores, every step forks and joins the threads, and a step at
B = 1 is too small to split at all. Two loops that share no memory have no such chain
between them. Where the target runs loops concurrently (`Target.runs_loops_concurrently`),
each group of them becomes one `Concurrent` instruction, its loops the arms, which the
runtime runs one a thread where their products run on the calling thread there
(cpp_runtime/mdl/concurrent.h says when), and one after another otherwise. A
BiLSTM-CRF tagger's training step at B = 1, H = 128 took 0.78x the time on two cores
(docs/build.md, "Loops that share no memory run at once").

The pass runs on a function's top-level instructions after lowering, packing and
grouping products. A later loop joins an earlier one's group when it writes no memory
that the group's loops, or the instructions that must stay after them, read or write,
and reads none they write (memory as the roots of views: a view is its buffer; a
structured op reads what it copies out of its blocks too). A view's instruction writes
no memory but defines the view, so it counts as writing the view itself, and whatever
reads the view reads both: a loop that starts from `x[0]`, where the index stays after
the group (an arm before it may raise), stays after it too. The instructions between
them that are free to (no such conflict) move before the group, in their order. Of two
that may raise (an assert, an index: `_faults`), a call raises the first in the
program's order, so neither moves past the other: the arms raise in their order, and one
between them that may raise stays after the group unless no arm before it may. Loops
that draw random numbers run at once only from streams of their own (the salts of their
random ops; the renderer opens the streams first, so that no thread inserts into the
model's map of them), and never before an instruction that keeps its place and draws
from one of theirs or asks where it stands (an `rng_position` before the loop it is
asked for, whose memory a group's loop happens to share: it reads the stream's count,
which the loop moves, and is tied to the loop by nothing else). A loop that learns a
dim as it runs (a `while` keeping its trips and tapes for the backward, in the model) is
never an arm, and an instruction that
learns a dim keeps its place. The memory plan keeps every value an arm touches alive
until the group ends (plan.py), so no arm reuses memory another still uses.
"""
from __future__ import annotations

from ..ir.graph import walk_ops
from ..ops.entry import entry
from .control_flow import streams
from .lower import Concurrent, Copy, Fused, Kernel, Layout, Structured, View, root
from .plan import reads
from .products import Products


def run_concurrently(instrs: list, layouts: dict[int, Layout]) -> list:
    """`instrs` with each group of independent loops as one `Concurrent`, the
    instructions the later loops need moved before it."""
    touches = {id(ins): _touches(ins, layouts) for ins in instrs}  # once each
    faults = {id(ins) for ins in instrs if _faults(ins)}
    out = list(instrs)
    i = 0
    while i < len(out):
        if _arm(out[i]):
            out, i = _group(out, i, touches, faults)
        i += 1
    return out


def _group(instrs: list, i: int, touches: dict, faults: set[int]) -> tuple[list, int]:
    """Gathers the loops after `instrs[i]` that can run beside it (`touches`: each
    instruction's (reads, writes), by id; `faults`: the ids of those that may raise);
    returns the new list and the index of the group in it."""
    arms = [instrs[i]]
    drawn = streams(instrs[i].op)
    # (reads, writes) of the arms and of the instructions that must stay after them
    touched = [touches[id(instrs[i])]]
    free: list = []  # may run before the group
    kept: set[int] = set()  # the streams of the instructions that stay after the group
    # whether an arm may raise, and whether an instruction that stays after the group
    # may: a later one that may raise too is not moved before them
    armed, stays = id(instrs[i]) in faults, False
    joined_at = i
    for j in range(i + 1, len(instrs)):
        ins = instrs[j]
        t = touches[id(ins)]
        raises, clash = id(ins) in faults, any(_conflict(t, u) for u in touched)
        if (not clash and _arm(ins) and not streams(ins.op) & (drawn | kept)
                and not (raises and stays)):
            arms.append(ins)
            drawn |= streams(ins.op)
            touched.append(t)
            armed |= raises
            joined_at = j
        elif clash or raises and (armed or stays):
            touched.append(t)
            kept |= _streams(ins)
            stays |= raises
        else:
            free.append(ins)
    if len(arms) == 1:
        return instrs, i
    moved = {id(x) for x in arms} | {id(x) for x in free}
    # instructions past the last arm keep their places
    before = [x for x in instrs[i + 1:joined_at] if id(x) in moved and x not in arms]
    rest = [x for x in instrs[i + 1:joined_at + 1] if id(x) not in moved]
    head = instrs[:i] + before
    return head + [Concurrent(arms)] + rest + instrs[joined_at + 1:], len(head)


def _faults(ins) -> bool:
    """Whether `ins` may raise on the call's data (an op of it `faults`: an index out of
    range, an assert): of two such, a call raises the first in the program's order, so
    the pass never moves one past the other (the arms of a group raise in their order).
    A fused group's ops are elementwise and a copy has none: neither may."""
    if isinstance(ins, Products):
        return any(map(_faults, ins.kernels))
    op = getattr(ins, "op", None)  # a kernel's, a view's (an `index`), a loop's or branch's
    return op is not None and any(entry(x).faults for x in _ops(op))


def _streams(ins) -> set[int]:
    """The random streams an instruction draws from or asks the position of: a loop's,
    or a random kernel's own (a dropout, an rng_position)."""
    op = getattr(ins, "op", None)
    if op is None:
        return set()
    return streams(op) | ({op.attrs["salt"]} if entry(op).random else set())


def _arm(ins) -> bool:
    """Whether `ins` is a loop that may run beside others: nothing in it learns a dim (a
    `while` keeping its trips for the backward)."""
    return isinstance(ins, Structured) and entry(ins.op).repeats and not any(
        entry(op).sets_dims(op) for op in _ops(ins.op))


def _ops(op):
    """`op` and every op in its blocks."""
    yield op
    for block in op.blocks:
        yield from walk_ops(block)


def _conflict(a, b) -> bool:
    """Whether two instructions' (reads, writes) of memory roots forbid reordering them;
    None (an instruction that learns a dim) conflicts with every other."""
    if a is None or b is None:
        return True
    (ra, wa), (rb, wb) = a, b
    return bool(wa & (rb | wb) or wb & ra)


def _touches(ins, layouts: dict[int, Layout]):
    """The roots of the memory `ins` reads and writes, as id sets; None for an
    instruction that learns a dim as it runs (every later size may depend on it)."""
    def roots(values) -> set[int]:
        # a value's own id too: a view's instruction defines its name (below), and one
        # that reads the view may not run before it, though the view writes no memory
        return {root(v, layouts).id for v in values} | {v.id for v in values}

    if isinstance(ins, Structured):
        if any(entry(op).sets_dims(op) for op in _ops(ins.op)):
            return None
        got_r, got_w = roots(ins.op.inputs), roots(ins.op.outputs)
        got_r |= roots(p.anchor for p in ins.extra.get("packs", []))
        # what the op copies out of its blocks: a branch may yield a value from outside it
        got_r |= roots(v for results in ins.extra["results"] for v in results)
        for block in ins.blocks:
            for x in block:
                t = _touches(x, layouts)
                if t is None:
                    return None
                got_r |= t[0]
                got_w |= t[1]
        return got_r, got_w
    if isinstance(ins, Products):
        got = [_touches(k, layouts) for k in ins.kernels]
        return set().union(*(r for r, _ in got)), set().union(*(w for _, w in got))
    if isinstance(ins, View):  # "writes" the view itself: its readers come after it
        return roots([layouts[ins.value.id].base]), {ins.value.id}
    if isinstance(ins, Fused):
        return (roots(reads(ins, layouts)),
                roots(ins.written + ins.allocs + [t for _, t, _ in ins.sums]))
    if isinstance(ins, Copy):
        return roots([ins.src]), roots([ins.dst])
    if isinstance(ins, Kernel):
        return roots(reads(ins, layouts)), roots(ins.op.outputs)
    raise TypeError(f"not an instruction: {ins}")
