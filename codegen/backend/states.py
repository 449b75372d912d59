"""A loop's states updated where they live: the instruction of a step that computes a
state's new value writes it into the state's own buffer, and the copy at the end of every
step goes.

A `for` keeps each state in its output's buffer; its body reads the state there (the state
argument is a view of it) and leaves the new value in a result that the step's end copies
back (control_flow._render_for). Where the new value is computed once a step by a fused
loop (lower.Fused) or a product (lower.Kernel), and nothing after that reads the old
value, it can be written straight into the state's buffer. A fused loop may read the old
value itself, element by element at the elements it writes: each element is read before
it is written (same index, same thread or GPU thread); a product must not read it. Then:

- a new value in memory of its own becomes a view of the state's buffer;
- a new value stored elsewhere (its step's row of a stacked yield) is also stored into
  the state's buffer by the same fused loop (`Fused.also`);
- a yield of the old state (what a training forward keeps for its backward) is stored by
  that fused loop too where it reads the old state, else copied just before the writer.

A `while`'s body block is such a step too; a tape of its old state is copied before the
writer (update_while).

An LSTM's inference and backward steps copy nothing at their end, and its training
forward keeps one of its four copies (docs/native.md).
"""
from __future__ import annotations

from ..ir.graph import Value
from ..ir.shapes import contiguous_strides, numel
from ..ops.entry import entry
from .lower import Copy, Fused, Kernel, Layout, Structured, root
from .plan import reads


def update_in_place(instrs: list, layouts: dict[int, Layout], dim) -> None:
    """Update the states of every loop in `instrs` (nested too) in place where it is safe
    (the loops whose entry names a hook: `extra["states"]`, a `for`'s `update_for`);
    `dim(d)`: a dim as C++ (the renderer's)."""
    for ins in instrs:
        if isinstance(ins, Structured):
            for block in ins.blocks:
                update_in_place(block, layouts, dim)
            hook = entry(ins.op).extra.get("states")
            if hook is not None:
                hook(ins, layouts, dim)


def update_for(loop: Structured, layouts: dict[int, Layout], dim) -> None:
    """A `for`'s states (control_flow.py attaches it to the `for` entry). A yield of the
    old state is stored into its step's row of the stacked output before the state is
    written; the step's end then skips it (`extra["stored"]`)."""
    op = loop.op
    n_seq, n_state = op.attrs["n_seq"], op.attrs["n_state"]

    def keep_old(k: int, arg: Value) -> Value:
        slot = Value(arg.type, arg.hint)
        layouts[slot.id] = Layout(op.outputs[k],
                                  f"{loop.extra['step']} * {dim(numel(arg.type.shape))}",
                                  contiguous_strides(arg.type.shape))
        loop.extra.setdefault("stored", set()).add(k)
        return slot
    _update(loop, loop.blocks[0], op.blocks[0].args[n_seq:], loop.extra["results"][0],
            op.outputs[:n_state], layouts, keep_old, stores_old=True)


def update_while(loop: Structured, layouts: dict[int, Layout], dim) -> None:
    """A `while`'s states (control_flow.py attaches it to the `while` entry), in its body
    block (the condition's block only reads them, before the body). A tape of the old
    state is copied into memory of its own before the state is written, and pushed from
    there at the trip's end."""
    op = loop.op
    results = loop.extra["results"][1]

    def keep_old(k: int, arg: Value) -> Value:
        slot = Value(arg.type, arg.hint)
        layouts[slot.id] = Layout(None, None, contiguous_strides(arg.type.shape))
        results[k] = slot
        return slot
    n_state = len(op.inputs)
    _update(loop, loop.blocks[1], op.blocks[1].args, results, op.outputs[:n_state], layouts,
            keep_old, stores_old=False)


def _update(loop: Structured, body: list, args: list, results: list, states: list,
            layouts: dict[int, Layout], keep_old, stores_old: bool) -> None:
    """Write each state's new value into its buffer where it is safe. `body`: the lowered
    block that computes them, from the state `args`; `results`: its results, the new
    states first, then what the step keeps (yields, tapes); `keep_old(k, arg)`: the memory
    result k, the old state, is to be kept in before the state is written; `stores_old`:
    whether a fused loop may store it there (else it is copied)."""
    n_state = len(states)
    for i in range(n_state):
        state, arg, new = states[i], args[i], results[i]
        if layouts[new.id].is_const or layouts[new.id].base is state:  # in place already
            continue
        at = _writer(body, new, state, layouts)
        if at is None:
            continue
        # every other reader of the old state: the instructions after the writer, and the
        # step's results (what it keeps and the states it copies at the step's end). The
        # state's buffer may itself lie in another (an outer loop's yield): any read of
        # that one counts.
        memory = root(state, layouts)
        kept = [(k, y) for k, y in enumerate(results)
                if k != i and root(y, layouts) is memory]
        if any(k < n_state or y is not arg for k, y in kept) \
                or memory.id in _reads(body[at + 1:], layouts):
            continue
        writer = body[at]
        fused = writer if isinstance(writer, Fused) else None
        reads_arg = fused is not None and any(x is arg for o in fused.ops for x in o.inputs)
        moved = []
        for k, _ in kept:  # the old state kept: stored by the loop, or copied first
            slot = keep_old(k, arg)
            if reads_arg and stores_old:
                fused.also.append((slot, arg))
            else:
                moved.append(Copy(slot, arg))
        body[at:at] = moved
        if layouts[new.id].base is None:
            layouts[new.id] = Layout(state, None, contiguous_strides(new.type.shape))
        else:  # stored elsewhere too (its step's row of a yield)
            into = Value(new.type, new.hint)
            layouts[into.id] = Layout(state, None, contiguous_strides(new.type.shape))
            fused.also.append((into, new))
            loop.extra.setdefault("stored", set()).add(i)


def _writer(body: list, new: Value, state: Value, layouts) -> int | None:
    """The index of the instruction of the step that computes `new` where it may write it
    into the state's buffer: a fused loop reading the state only at the elements it
    writes, or a kernel (a product) that does not read the state and whose result has
    memory of its own; else None."""
    for k, ins in enumerate(body):
        if isinstance(ins, Fused) and any(v is new for v in ins.stores):
            ok = (_same_elements(layouts, new, state, ins.shape)
                  and _reads_only_in_step(ins, state, layouts))
            return k if ok else None
        if isinstance(ins, Kernel) and any(v is new for v in ins.op.outputs):
            ok = (len(ins.op.outputs) == 1 and not ins.accumulate
                  and layouts[new.id].base is None
                  and _same_elements(layouts, new, state, new.type.shape)
                  and root(state, layouts).id not in _reads([ins], layouts))
            return k if ok else None
    return None


def _same_elements(layouts, new: Value, state: Value, shape) -> bool:
    """Whether `new` is an element-for-element image of `state` computed over `shape`:
    same shape, contiguous, each element at the index the state's element has."""
    lay = layouts[new.id]
    contiguous = contiguous_strides(new.type.shape)
    return (new.type.shape == state.type.shape == tuple(shape)
            and new.type.dtype == state.type.dtype
            and tuple(lay.strides) == contiguous and lay.valid is None
            and tuple(layouts[state.id].strides) == contiguous)


def _reads_only_in_step(fused: Fused, state: Value, layouts) -> bool:
    """Whether every read of the state's memory by `fused` is of the element it writes:
    the whole state, as its loop indexes its stores (same shape, no offset)."""
    memory = root(state, layouts)
    for o in fused.ops:
        for x in o.inputs:
            lay = layouts.get(x.id)
            if lay is None or lay.is_const or root(x, layouts) is not memory:
                continue
            if not (x.type.shape == state.type.shape and _is_whole(x, state, layouts)):
                return False
    return True


def _is_whole(x: Value, state: Value, layouts) -> bool:
    """Whether `x` is the state's memory as it lies: views of it (or of such views) with
    no offset and contiguous strides, not another part of a buffer the state lies in."""
    while x is not state:
        lay = layouts[x.id]
        if lay.base is None or lay.offset is not None \
                or tuple(lay.strides) != contiguous_strides(x.type.shape):
            return False
        x = lay.base
    return True


def _reads(instrs: list, layouts) -> set[int]:
    """The memory (root value ids) that `instrs` read, nested blocks and results included."""
    out: set[int] = set()
    for ins in instrs:
        if isinstance(ins, Structured):
            read = list(ins.op.inputs)
            for block, results in zip(ins.blocks, ins.extra["results"]):
                out |= _reads(block, layouts)
                read += results
        else:
            read = reads(ins, layouts)
        out.update(root(v, layouts).id for v in read
                   if v.id in layouts and not layouts[v.id].is_const)
    return out
