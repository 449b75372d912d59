"""`for`, `if` and `while` as native control flow.

Loop state lives in the op's own outputs (the state buffers): the body reads them
through its state args and the final state needs no copy. Per-step slices of a sequence
are views at offset t (a step of a sequence's segments past its data: a zero-padded
copy, render.Renderer.view); a yield the body computes is computed in its step's row of the
stacked output (placed there by lowering), other yields are copied there, and a new
state is written into its buffer by the step where it can be (states.py); a step the
`for`'s `skip` flags say does nothing (a segment's padding) is not run, where the target
reads flags on the host. Loops
with lengths never get here: the pipeline rewrites them into plain loops over
sequences in step order with a mask (codegen/ops/structured/for_op.py), the one
implementation of lengths besides the reference's. A `while` pushes its tape values
every trip onto growable tapes and records its trip count in the model.

Each op's lowering and rendering are attached to its entry in the table of structured
ops as `extra["lower"] = ("structured", lower, render)`, as a primitive's lowering is to
its entry (backend/lower.py asks every op's entry alike); the renderer's target writes every
machine-specific statement, so these serve every target."""
from __future__ import annotations

from ..ir.graph import IRError, Op, use_counts, walk_ops
from ..ir.shapes import Dim, contiguous_strides, numel, ragged_rows
from ..ops.entry import branch_bounds, constant, entry
from ..ops.structured import STRUCTURED
from ..ops.structured.for_op import laid_like
from ..ops.structured.if_op import no_rows, ragged_count
from ..ops.structured.for_sink import accumulations
from .lower import Layout, Lowering, Structured, lowering_kind
from .states import update_for, update_while


def _lower_for(low: Lowering, op: Op, ins: Structured, out: list) -> None:
    if op.attrs["has_lengths"]:  # the pipeline lowers lengths (codegen/ops/structured/for_op.py)
        raise IRError("a for with lengths reached the backend; transforms/prepare.py rewrites it")
    n_seq, n_state = op.attrs["n_seq"], op.attrs["n_state"]
    body = op.blocks[0]
    for v in op.outputs:
        low.own(v)
        if ragged_rows(v.type):  # a ragged yield: a tape, growable memory of the model
            low.unplanned.add(v.id)
    ins.extra["overwritten"] = {v.id for v in op.outputs[:n_state]}
    ins.extra["early"] = set(range(n_state, len(body.results)))  # yields: before the state
    made = {v.id for o in body.ops if lowering_kind(o) in ("elementwise", "kernel", "structured")
            for v in o.outputs}
    for out, y in zip(op.outputs[n_state:], body.results[n_state:]):
        if ragged_rows(out.type):  # pushed onto its tape at the step's end
            continue
        if y.id in made and y.id not in low.placed:  # computed by the body: in its step's row
            low.placed[y.id] = Layout(out, f"{ins.extra['step']} * "
                                      f"{low.cx.dim(numel(y.type.shape))}",
                                      contiguous_strides(y.type.shape))
            ins.extra["in_place"][y.id] = out
    _accumulate_in_place(low, body, op, ins)
    for i, (arg, seq) in enumerate(zip(body.args[:n_seq], op.inputs[:n_seq])):
        lay = low.layouts[seq.id]
        if lay.is_const:  # a uniform sequence (a constant cotangent): each step is it too
            low.layouts[arg.id] = Layout(const=lay.const)
            continue
        if ragged_rows(seq.type):  # step t's rows begin at a row the tape noted
            offset = f"{_first_row(ins, i)} * {low.cx.dim(lay.strides[0])}"
            low.layouts[arg.id] = Layout(seq, offset, lay.strides)  # (rows and all)
            continue
        offset = f"{ins.extra['step']} * {low.cx.dim(lay.strides[0])}"
        data, padded = (None if n is None else f"({n}) - {offset}"
                        for n in (lay.valid, lay.padded))
        low.layouts[arg.id] = Layout(seq, offset, lay.strides[1:], data=data, padded=padded)
    for arg, state in zip(body.args[n_seq:], op.outputs[:n_state]):
        low.layouts[arg.id] = Layout(state, None, low.layouts[state.id].strides)


def _first_row(ins: Structured, i: int) -> str:
    """The C++ name of the row where the step's rows of the loop's ragged sequence i begin
    (_render_for defines it every step)."""
    return f"{ins.extra['step']}_first{i}"


def _accumulate_in_place(low: Lowering, body, op: Op, ins: Structured) -> None:
    """A state updated as s + p and read nowhere else (a weight's gradient accumulated
    over the steps of a recompute loop's backward) is updated in its own buffer: a
    product p adds itself into it (BLAS beta = 1; the add is folded away), any other p
    is added by the fused loop writing over s. Neither is copied back every step."""
    n_seq, n_state = op.attrs["n_seq"], op.attrs["n_state"]
    producers = {v.id: o for o in body.ops for v in o.outputs}
    for i, s, r, add, p in accumulations(body, n_seq, n_state, low.uses):
        if r.id in low.placed or p is s or p.type.shape != r.type.shape \
                or s.type.shape != r.type.shape:
            continue
        state = op.outputs[i]
        where = Layout(state, None, contiguous_strides(r.type.shape))
        product = producers.get(p.id)
        if product is not None and entry(product).product and low.uses.get(p.id) == 1 \
                and p.id not in low.placed:
            low.placed[p.id] = where
            low.accumulating.add(id(product))
            low.folded[id(add)] = p
        else:
            low.placed[r.id] = where
        ins.extra["in_place"][r.id] = state


def _lower_if(low: Lowering, op: Op, ins: Structured, out: list) -> None:
    """A branch's result computed in the branch is computed in the if's output; a
    constant result is written there by the branch (`extra["constants"]`). An output
    sized by a run-time count (a while's tape, kept by the for around the if or by the
    if in no loop; a for's ragged yield, kept by the if in no loop) is no memory of its
    own but a pointer to the branch's result (_render_if)."""
    for v in op.outputs:
        low.own(v)
        if ragged_count(v.type):
            low.unplanned.add(v.id)
    ins.extra["constants"] = True
    for block in op.blocks:
        made = {v.id for o in block.ops
                if lowering_kind(o) in ("elementwise", "kernel", "structured") for v in o.outputs}
        for v, y in zip(op.outputs, block.results):
            if ragged_count(v.type):
                continue
            if y.id in made and y.id not in low.placed and low.uses.get(y.id) == 1:
                low.placed[y.id] = Layout(v, None, contiguous_strides(y.type.shape))
                ins.extra["in_place"][y.id] = v


def _lower_while(low: Lowering, op: Op, ins: Structured, out: list) -> None:
    n_state = len(op.inputs)
    for v in op.outputs[:n_state]:
        low.own(v)
    for v in op.outputs[n_state:]:  # tapes: growable memory of the model, not the arena
        low.own(v)
        low.unplanned.add(v.id)
    # a trip's tape values are pushed before its states are written: they may be views
    # of the old state
    ins.extra["early"] = set(range(n_state, len(op.blocks[1].results)))
    for block in op.blocks:
        for arg, state in zip(block.args, op.outputs[:n_state]):
            low.layouts[arg.id] = Layout(state, None, low.layouts[state.id].strides)


# ---- rendering ---------------------------------------------------------------------------
def render_structured(r, ins: Structured) -> None:
    entry(ins.op).extra["lower"][2](r, ins)


def _render_for(r, ins: Structured) -> None:
    op = ins.op
    n_seq, n_state = op.attrs["n_seq"], op.attrs["n_state"]
    states, stacked = op.outputs[:n_state], op.outputs[n_state:]
    ragged = _RaggedYields(r, ins)
    for v in op.outputs:
        if not ragged_rows(v.type):
            r.define_owned(v)
    for state, init in zip(states, op.inputs[n_seq:n_seq + n_state]):
        r.assign(state, init)
    body = op.blocks[0]
    steps = r.dim(op.inputs[0].type.shape[0])
    ragged.open(steps)
    s, t = r.fresh("s"), ins.extra["step"]
    _conditions_on_host(r, op, steps, t)
    r.open(f"for (int64_t {s} = 0; {s} < {steps}; ++{s})")
    r.emit(f"const int64_t {t} = {f'{steps} - 1 - {s}' if op.attrs['reversed'] else s};")
    r.emit(f"(void){t};")
    _poll_interrupt(r)
    _ragged_steps(r, ins, t)
    for arg in body.args:
        if not r.layout(arg).is_const:  # a step of a uniform sequence needs no memory
            r.view(arg)
    counts = _skip_padding(r, op, stacked, t, ragged.counted())
    outer = r.drawing
    if counts:  # the step's draws count where this flag and an outer loop's say so
        r.drawing = f"{outer} && {counts}" if outer else counts
    r.instructions(ins.blocks[0])
    r.drawing = outer
    results = ins.extra["results"][0]
    # the yields first: a yield may read the state
    for k, (out, y) in enumerate(zip(stacked, results[n_state:]), n_state):
        if not ragged.keep(k - n_state, y, t) and not _already_in(r, ins, k, y, out):
            size = r.dim(numel(y.type.shape))
            r.emit(r.target.copy(f"{r.ptr(out)} + {t} * {size}", r.ptr(y), size))
    for k, (state, new) in enumerate(zip(states, results[:n_state])):
        if not _already_in(r, ins, k, new, state):
            r.emit(r.target.copy(r.ptr(state), r.ptr(new), r.dim(numel(state.type.shape))))
    r.block_ended(ins, 0)
    r.close()
    ragged.close()


class _RaggedYields:
    """A `for`'s ragged yields (docs/ir.md), each a tape of the model: where each step's
    rows begin noted in its `steps` (mdl::StepRows). One laid out as a sequence of the
    loop (for_op.laid_like) takes that sequence's steps, holds its bytes at once and is
    written at the sequence's rows; another is pushed onto, step by step, by a while of
    the body where nothing else reads the while's tape (_pushed_onto), else by the step's
    end."""

    def __init__(self, r, ins: Structured):
        op = ins.op
        self.r, self.ins = r, ins
        self.stacked = op.outputs[op.attrs["n_state"]:]
        self.tapes = {k: r.tape_index(v) for k, v in enumerate(self.stacked)
                      if ragged_rows(v.type)}
        self.like = {k: i for k in self.tapes
                     if (i := laid_like(op, self.stacked[k])) is not None}
        self.pushed = _pushed_onto(op, {k: tape for k, tape in self.tapes.items()
                                        if k not in self.like})
        r.pushed_onto.update(self.pushed)

    def open(self, steps: str) -> None:
        """Before the loop: each tape emptied, or held whole where laid out as a
        sequence (the yield's pointer defined then)."""
        r, tg = self.r, self.r.target
        for k, tape in self.tapes.items():
            if k not in self.like:
                r.emit(tg.tape_clear(tape))
                r.emit(f"{tg.tape_steps(tape)}.reset({steps});")
                continue
            v = self.stacked[k]
            seq = tg.tape_steps(r.tape_of(self.ins.op.inputs[self.like[k]]))
            r.emit(f"{tg.tape_steps(tape)} = {seq};")
            nbytes = f"sizeof({r.ctype(v)}) * {seq}.total() * {r.dim(numel(v.type.shape[1:]))}"
            r.emit(f"auto* {r.ptr(v)} = reinterpret_cast<{r.ctype(v)}*>("
                   f"{tg.tape_hold(tape, nbytes)});")

    def counted(self) -> dict:
        """For _skip_padding: the tapes whose steps the loop counts (None for one laid out
        as a sequence, whose rows that sequence decides)."""
        return {k: None if k in self.like else tape for k, tape in self.tapes.items()}

    def keep(self, k: int, y, t: str) -> bool:
        """Keeps the step's yield k, `y`, where it is ragged (else False)."""
        r, tg = self.r, self.r.target
        if k in self.like:
            out = self.stacked[k]
            at = f"{_first_row(self.ins, self.like[k])} * {r.dim(numel(out.type.shape[1:]))}"
            r.emit(tg.copy(f"{r.ptr(out)} + {at}", r.ptr(y), r.dim(numel(y.type.shape))))
            return True
        if k not in self.tapes:
            return False
        tape = self.tapes[k]
        if y.id not in self.pushed:
            r.emit(tg.tape_push(tape, r.ptr(y), f"sizeof({r.ctype(y)}) * "
                                                f"{r.dim(numel(y.type.shape))}"))
        r.emit(f"{tg.tape_steps(tape)}.end({t}, {r.dim(y.type.shape[0])});")
        return True

    def close(self) -> None:
        """After the loop: each yield's rows in all, and its pointer."""
        r, tg = self.r, self.r.target
        for k, tape in self.tapes.items():
            v = self.stacked[k]
            r.emit(f"{r.dim(v.type.shape[0])} = {tg.tape_steps(tape)}.total();")
            if k not in self.like:
                r.emit(f"auto* {r.ptr(v)} = {tg.tape_data(tape, r.ctype(v))};")


def _pushed_onto(op: Op, ragged: dict[int, int]) -> dict[int, int]:
    """The ragged yields (value id -> the loop's tape) that a while of the body pushes
    onto the loop's tape itself, trip by trip, rather than onto one of its own that the
    step's end would copy: each a tape of a while of the body that nothing else in the
    body reads, or an output of an if of the body that is such a tape in every branch
    that yields rows (the while's tape is in the map too)."""
    body, n_state = op.blocks[0], op.attrs["n_state"]
    reads = use_counts(body)
    out: dict[int, int] = {}
    for k, tape in ragged.items():
        y = body.results[n_state + k]
        behind = _tapes_behind(body, y, reads)
        if behind and not any(v.id in out for v in behind):
            out.update((v.id, tape) for v in behind)
    return out


def _tapes_behind(block, v, reads: dict[int, int]) -> list | None:
    """The values whose rows `v`, read once in `block` (and the blocks inside it), holds:
    [v] for a while's tape; for an if's output, those of its branches' results (none for
    a branch's no rows); None where v is anything else."""
    if reads.get(v.id) != 1:
        return None
    made = next((o for o in block.ops if v in o.outputs), None)
    if made is None:
        return None
    if entry(made).extra.get("pushes"):
        return [v] if made.outputs.index(v) >= len(made.inputs) else None
    if not entry(made).branches:
        return None
    j, found = made.outputs.index(v), [v]
    for branch in made.blocks:
        result = branch.results[j]
        if result.type == no_rows(v.type):
            continue
        inner = _tapes_behind(branch, result, reads)
        if inner is None:
            return None
        found += inner
    return found


def _ragged_steps(r, ins: Structured, t: str) -> None:
    """Step t of each ragged sequence of the loop: where its rows begin in the tape that
    holds them (_first_row), and their count, the trip count its rows are sized by."""
    op = ins.op
    counted = set()  # trip counts set this step (a while's tapes share theirs)
    for i, (seq, arg) in enumerate(zip(op.inputs[:op.attrs["n_seq"]], op.blocks[0].args)):
        if ragged_rows(seq.type) is None:
            continue
        steps = f"{r.target.tape_steps(r.tape_of(seq))}"
        r.emit(f"const int64_t {_first_row(ins, i)} = {steps}.first({t});")
        if arg.type.shape[0] not in counted:
            counted.add(arg.type.shape[0])
            r.emit(f"{r.dim(arg.type.shape[0])} = {steps}.rows({t});")


def _conditions_on_host(r, op: Op, steps: str, t: str) -> None:
    """The body's branches whose condition is a step of one of the loop's sequences
    (for_hoist.py moves conditions computed from steps alone there): where the target
    reads a condition on the host by waiting for a device, the whole sequence is read at
    once before the loop, and step t's branch reads element t of that copy."""
    for cond, seq in step_conditions(op):
        if cond.id in r.on_host:
            continue
        lay = r.layout(seq)
        if lay.is_const or lay.valid is not None:  # uniform, or a padded segment's steps
            continue
        ready = seq.id in r.spec.external or seq.id in r.launched_early
        read = r.target.read_steps(r.ptr(seq), steps, r.dim(lay.strides[0]), ready)
        if read is None:
            return
        name = r.fresh("conditions")
        r.emit(f"const auto {name} = {read};")
        r.on_host[cond.id] = f"{name}[{t}]"


def early_conditions(block, external: set[int]) -> set[int]:
    """The condition sequences of `block`'s loops (those _conditions_on_host reads) that
    the function computes pointwise from what it is given alone (inputs, parameters,
    constants): a target may compute and read them before the rest of its work (the CUDA
    target, in a graph call's dry run)."""
    producers = {v.id: op for op in block.ops for v in op.outputs}
    known: dict[int, bool] = {}

    def given(v) -> bool:
        if v.id in external:
            return True
        op = producers.get(v.id)
        if op is None or len(op.outputs) != 1 or op.blocks:
            return False
        if v.id not in known:
            pointwise = entry(op).elementwise and not entry(op).random
            known[v.id] = constant(op) or (pointwise and all(given(x) for x in op.inputs))
        return known[v.id]
    return {seq.id for op in block.ops for _, seq in step_conditions(op)
            if seq.id not in external and given(seq)}


def step_conditions(loop: Op) -> list[tuple]:
    """(condition, sequence) for each branch of `loop`'s body whose condition is a step of
    one of the loop's sequences; none for an op that is no loop over sequences."""
    steps = entry(loop).steps  # a loop's sequences and its variables (a `for`'s)
    if steps is None:
        return []
    sequence_of = {arg.id: seq for seq, arg in steps(loop)}
    return [(o.inputs[0], sequence_of[o.inputs[0].id]) for o in loop.blocks[0].ops
            if entry(o).branches and o.inputs[0].id in sequence_of]


def _already_in(r, ins: Structured, k: int, v, buffer) -> bool:
    """Whether a loop step's result k, `v`, is in `buffer` (its state, or its row of a
    stacked yield) when the step ends: computed there (a view of it, placed by the
    lowering, _accumulate_in_place or states.py), or stored there too by the fused loop
    that computes it (states.py records those in extra["stored"])."""
    return r.layout(v).base is buffer or k in ins.extra.get("stored", ())


def _skip_padding(r, op: Op, stacked: list, t: str, ragged: dict) -> str | None:
    """A step whose flag in the `skip` sequence is false (a padding step of a segment)
    leaves the states as they are and yields zeros, and the step only writes the zeros.
    The flags are a segment of a mask true at every step of the sequence
    (for_op._nest), so where the segment knows how many of its steps hold data (a view's
    Layout.data, or a padded copy's Layout.padded), a step is padding when it lies past
    them: the host knows it without reading a flag. Else, where the target reads flags
    on the host cheaply, it reads the step's. Otherwise the step runs: its zero
    cotangents make every gradient it adds zero, unless the body is singular where its
    inputs are zero (`log(x)`, `sqrt(x)`: 0 * inf), and it must draw no random numbers (a
    dropout's): every later step would draw other numbers than the reference's, which
    skips the step (a reversed loop's padding steps come first). So a loop that draws
    reads its flag on the host even where that waits, and the flag is returned: a C++
    bool, whether the step's draws count. A ragged yield (`ragged`: its index among the
    yields -> its tape, None for one laid out as a sequence, whose rows that sequence
    decides) gets no rows for a step that does not run."""
    skip = op.attrs.get("skip", -1)
    if skip < 0:
        return None
    lay = r.layout(op.inputs[skip])
    data = lay.data if lay.data is not None else lay.padded
    flag = f"({t} < ({data}))" if data is not None else r.scalar(op.blocks[0].args[skip])
    if data is None and not r.target.skips_steps:
        if not streams(op):
            return None
        real = r.fresh("real")
        r.emit(f"const bool {real} = {flag};")
        return real
    r.open(f"if (!{flag})")
    for k, out in enumerate(stacked):
        if k in ragged:
            if ragged[k] is not None:
                r.emit(f"{r.target.tape_steps(ragged[k])}.end({t}, 0);")
            continue
        size = r.dim(numel(out.type.shape[1:]))
        r.emit(r.target.fill(f"{r.ptr(out)} + {t} * {size}", size, f"{r.ctype(out)}(0)"))
    r.emit("continue;")
    r.close()
    return None


def streams(op: Op) -> set[int]:
    """The random streams the blocks of the structured op `op` draw from (their random
    ops' `salt`s) or whose positions they move (a loop drawing again: rng_skip's): none
    for a loop whose steps draw nothing."""
    return {o.attrs["salt"] for block in op.blocks for o in walk_ops(block)
            if getattr(entry(o), "random", False) or "salt" in o.attrs}


def _refusals(r, op: Op, k: int, block) -> list:
    """What branch k (`block`) of the if `op` refuses where it starts, in no loop (in a
    loop's body its sizes are checked with the loop's: ops/entry.py, guarded_ifs): what
    the checked graph's branch k of the if at its place does, in the reference's words
    and order (module.branch_words), then any other size of its own that the dims could
    make negative (branch_bounds)."""
    if r.loops_open:
        return []
    words = r.branch_words.get((op.loc, k), {})
    own = [(text, d) for text, d in branch_bounds(block, r.dims.user) if d not in words]
    return sorted((text, d) for d, text in words.items()) + own


def _render_if(r, ins: Structured) -> None:
    """Each branch starts by refusing dims that make one of its sizes negative
    (_refusals); an output it yields no rows of (no_rows: a value the other branch
    makes, which only the backward's same branch reads) it leaves as it is, but for the
    count of a while's trips or a for's rows, which it sets to 0."""
    op = ins.op
    for v in op.outputs:
        if ragged_count(v.type):  # the branch's rows: none where no while (or for) ran
            r.emit(f"{r.ctype(v)}* {r.ptr(v)} = nullptr;")
        else:
            r.define_owned(v)
    r.open(f"if ({r.scalar(op.inputs[0])})")
    for k, (block, lowered, results) in enumerate(zip(op.blocks, ins.blocks,
                                                      ins.extra["results"])):
        if k == 1:
            r.close(" else {")
            r.depth += 1
        for text, d in _refusals(r, op, k, block):
            r.emit(f"{r.dims_fit(text, d)};")
        r.instructions(lowered)
        for out, res in zip(op.outputs, results):
            if res.type == no_rows(out.type):  # the while (or for, or value) was not made
                if ragged_count(out.type):
                    r.emit(f"{r.dim(out.type.shape[0])} = 0;")
            elif ragged_count(out.type):
                r.emit(f"{r.ptr(out)} = {r.ptr(res)};")
                if ragged_rows(out.type):  # a for's ragged yield: its tape's steps
                    r.tape_aliases[out.id] = res.id
            elif r.layout(res).is_const:
                r.assign(out, res)
            elif r.layout(res).base is not out:  # else computed in place
                r.emit(r.target.copy(r.ptr(out), r.ptr(res), r.dim(numel(out.type.shape))))
        r.block_ended(ins, k)
    r.close()


def _poll_interrupt(r) -> None:
    """A loop's step or trip starts by polling for Ctrl-C (mdl::poll_interrupt,
    cpp_runtime/mdl/interrupts.h), which throws KeyboardInterrupt out of the call: on the
    cuda target, out of a CUDA graph's dry run or capture too, which GraphCall's
    destructor ends (mdl/cuda/graph.h)."""
    r.emit("mdl::poll_interrupt();")


def _render_while(r, ins: Structured) -> None:
    op = ins.op
    n_state = len(op.inputs)
    states, tapes = op.outputs[:n_state], op.outputs[n_state:]
    for v in states:
        r.define_owned(v)
    for state, init in zip(states, op.inputs):
        r.assign(state, init)
    tape_ids = [r.pushed_onto.get(v.id) for v in tapes]
    trips = r.fresh("trips")
    r.emit(f"int64_t {trips} = 0;")
    tg = r.target
    starts = {}  # a loop's tape this pushes onto: where this run's records begin
    for j, (k, v) in enumerate(zip(tape_ids, tapes)):
        if k is not None:
            starts[j] = r.fresh("start")
            r.emit(f"const std::size_t {starts[j]} = {tg.tape(k)}.used();")
            continue
        tape_ids[j] = r.tape_index(v)
        r.emit(tg.tape_clear(tape_ids[j]))
        if ragged_rows(v.type):  # each trip's rows noted as it ends
            r.emit(f"{tg.tape_steps(tape_ids[j])}.reset(0);")
    r.open("while (true)")
    _poll_interrupt(r)
    for arg in op.blocks[0].args + op.blocks[1].args:
        r.view(arg)
    r.instructions(ins.blocks[0])
    r.emit(f"if (!{r.scalar(ins.extra['results'][0][0])}) break;")
    r.block_ended(ins, 0)
    r.instructions(ins.blocks[1])
    results = ins.extra["results"][1]
    for k, v, out in zip(tape_ids, results[n_state:], tapes):
        r.emit(tg.tape_push(k, r.ptr(v), f"sizeof({r.ctype(v)}) * {r.dim(numel(v.type.shape))}"))
        if ragged_rows(out.type):
            r.emit(f"{tg.tape_steps(k)}.add({r.dim(v.type.shape[0])});")
    for k, (state, new) in enumerate(zip(states, results[:n_state])):
        if not _already_in(r, ins, k, new, state):
            r.emit(tg.copy(r.ptr(state), r.ptr(new), r.dim(numel(state.type.shape))))
    r.block_ended(ins, 1)
    r.emit(f"++{trips};")
    r.close()
    if tapes:
        r.emit(f"{r.dim(Dim.of(op.attrs['trips']))} = {trips};")
    for j, (k, v) in enumerate(zip(tape_ids, tapes)):
        if ragged_rows(v.type):  # the trips' rows in all
            r.emit(f"{r.dim(v.type.shape[0])} = {tg.tape_steps(k)}.total();")
        data = tg.tape_data(k, r.ctype(v))
        if j in starts:
            data = f"reinterpret_cast<{r.ctype(v)}*>({tg.tape(k)}.data() + {starts[j]})"
        r.emit(f"auto* {r.ptr(v)} = {data};")


# (kind, lower, render): how each lowers (backend/lower.py asks every op's entry alike)
def _outermost_chains_interrupts(render):
    """A loop with none around it starts by chaining the Ctrl-C handler again where a
    handler installed after the module's import replaced it (mdl::keep_interrupt_handler:
    one sigaction call, 94 ns, once a loop rather than once a step)."""
    def rendered(r, ins: Structured) -> None:
        if r.loops_open == 0:
            r.emit("mdl::keep_interrupt_handler();")
        r.loops_open += 1
        try:
            render(r, ins)
        finally:
            r.loops_open -= 1
    return rendered


STRUCTURED["for"].extra["lower"] = ("structured", _lower_for,
                                    _outermost_chains_interrupts(_render_for))
STRUCTURED["for"].extra["states"] = update_for  # its states written in place (states.py)
STRUCTURED["if"].extra["lower"] = ("structured", _lower_if, _render_if)
STRUCTURED["while"].extra["lower"] = ("structured", _lower_while,
                                      _outermost_chains_interrupts(_render_while))
STRUCTURED["while"].extra["states"] = update_while
STRUCTURED["while"].extra["pushes"] = True  # its tapes, trip by trip (onto a loop's: _pushed_onto)
