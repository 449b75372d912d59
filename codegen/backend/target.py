"""A target: what one kind of machine decides about the emitted code. Lowering, fusion,
views and the memory plan are shared (lower.py, plan.py); the renderer (render.py,
control_flow.py) walks the lowered instructions and asks its target for every piece that
differs between machines: the function's preamble and arena, how a fused elementwise
group's elements are visited (a loop nest on a CPU, a kernel and its launch on a GPU),
how memory is copied and filled, where parameters, inputs, results and saved values live,
how a scalar is read on the host (a branch condition), where tapes live, and how a
runtime function is called. Scalars (types, literals, math functions) are spelled alike
on every target, C++ that nvcc compiles too; a target whose compiler differs overrides
`ctype`, `literal` or `math`. Its `Toolchain` (codegen/compile/toolchain.py) builds what
it generates.

Each kernel primitive's statements are shared (backend/kernels.py, `extra["statements"]`):
the runtime of every target has the same functions with the same arguments, and the
target spells the call (`call`). To add a target: subclass `Target` in targets/<name>.py,
give its runtime those functions, and register it in targets/registry.py.
"""
from __future__ import annotations

import abc
import functools
from typing import Callable

from ..ir.dtypes import DTYPES
from ..ir.graph import Value
from ..ir.shapes import numel
from ..ops.primitives import TABLE
from . import kernels as _kernels  # noqa: F401  (attaches extra["statements"])
from .cexpr import c_float


class Target(abc.ABC):
    name: str
    toolchain: object  # the Toolchain building its code (codegen/compile/toolchain.py)
    source: str = "module.cpp"   # the generated file's name (its language)
    # A GPU target's second source: the kernels its functions launch (r.kernels), compiled
    # by the device compiler; None where there are none.
    kernel_source: str | None = None
    headers: tuple[str, ...] = ()  # what generated code includes after mdl/python.h
    # The runtime's mdl::Device of its models (model.h): where their memory lives.
    device: str = "&mdl::host_device"
    # Whether loop-invariant right operands of products are packed once before their
    # loop (backend/pack.py); the target's `pack` and its `kernel` then agree.
    packs_operands: bool = False
    # A function's first statements after its signature (the context its code runs in).
    preamble: tuple[str, ...] = ()
    # Whether results handed to Python may be computed in memory of their own that the
    # caller hands over uncopied (host memory: model.h's Call::result_memory).
    hands_over_results: bool = False

    # Whether runs of independent products become one `products` call (backend/products.py).
    groups_products: bool = False

    # Whether loops that share no memory run at once (backend/concurrent.py), as the
    # target's `concurrent` writes them.
    runs_loops_concurrently: bool = False

    # Whether a loop reads a step's flag on the host to skip the step (a `for`'s `skip`)
    # where the host cannot tell a padding step from the segment's view: where flags live
    # in device memory, reading one costs a wait, and the step runs.
    skips_steps: bool = False

    # Whether its code flushes denormals (cpp_runtime/mdl/denormals.h): then the arguments
    # of log and pow, which libm reads by their bits, are flushed as the arithmetic reads
    # them (mdl::flushed).
    flushes_denormals: bool = False

    # Whether its code times each site (a profiled build: backend/profile.py), as the
    # target's `time_start` and `time_stop` write it.
    profiled: bool = False

    # ---- scalars ----
    def ctype(self, dtype: str) -> str:
        return DTYPES[dtype].ctype

    def math(self, fn: str) -> str:
        return "std::" + fn

    def simd_math(self, fn: str) -> str:
        """The libm function `fn` (or mdl/scalar.h's `softplus`) as a loop calls it where a
        compiler may have no vector version of it (op_lowering.py says which)."""
        return "mdl::softplus" if fn == "softplus" else self.math(fn)

    def literal(self, value, dtype: str) -> str:
        """A C++ literal of `value` in `dtype`, exact for floats (hex floats round-trip)."""
        if dtype == "bool":
            return "1" if value else "0"
        if dtype == "i32":
            return f"int32_t({int(value)})"
        return c_float(value, self.ctype(dtype))

    # ---- kernels ----
    def kernel(self, ins) -> Callable:
        """The statements of a lowered kernel (lower.Kernel) on this target:
        lines(r, op, inputs, in_ptrs, out_ptrs) -> [C++ statements]. A product with
        `ins.accumulate` adds itself into its output's memory (its loop's state)."""
        lines = TABLE[ins.op.prim].extra["statements"]
        return functools.partial(lines, accumulate=True) if ins.accumulate else lines

    @abc.abstractmethod
    def call(self, name: str) -> str:
        """The start of a call of runtime function `name`, up to its first argument (the
        runtime's kernels take the same arguments on every target; backend/kernels.py)."""

    def products(self, r, kernels: list) -> list[str]:
        """The statements of products that read none of each other's results, run as one
        call (backend/products.py); targets with `groups_products` override it."""
        raise TypeError(f"the {self.name} target groups no products")

    def pack(self, r, pack) -> list[str]:
        """Statements packing `pack.kernel`'s right operand into the model's pack buffer
        `pack.index`; targets with `packs_operands` override it."""
        raise TypeError(f"the {self.name} target packs no operands")

    # Generated functions take the runtime's State (`m`) and Call (`c`) on every target
    # (cpp_runtime/mdl/model.h); on a GPU their pointers are device memory.
    def parameter(self, index: int) -> str:
        """A pointer to the model's parameter `index` (its own, or one it shares)."""
        return f"m.param[{index}]"

    def input(self, k: int, ctype: str) -> str:
        """A pointer to the call's input k."""
        return f"static_cast<{ctype}*>(c.inputs[{k}])"

    def output(self, k: int) -> str:
        """The lvalue receiving a pointer to the call's result k (an output or gradient)."""
        return f"c.outputs[{k}]"

    def saved(self, k: int) -> str:
        """The lvalue holding value k that a training forward keeps for its backward."""
        return f"m.saved[{k}]"

    def mark_slots(self, slots: list[int], count: int, live: bool) -> list[str]:
        """Statements marking the memory plan's `slots` (of `count`, at `off[...]` in
        `arena`) live or dead as their values are defined and die (plan.Lifetimes): a
        sanitized build's, for AddressSanitizer; none by default."""
        return []

    def time_start(self, start: str) -> list[str]:
        """A profiled build's statements starting to time a site, into the C++ name
        `start`: the host's steady clock (mdl/model.h), which times what the host runs."""
        return [f"const uint64_t {start} = mdl::profile_clock();"]

    def time_stop(self, site: int, start: str) -> list[str]:
        """A profiled build's statements adding the time since `start` to `site`'s count."""
        return [f"mdl::profile_add(m.profile[{site}], {start});"]

    def give_back(self, slot: str, size: str) -> list[str]:
        """Statements giving the memory of a dead arena slot (`slot`, `size` bytes) back to
        the system in a call that hands its results over (`hands_over_results`), before the
        rest of the call allocates them; none where results are not handed over."""
        return []

    def concurrent(self, r, ins, run) -> None:
        """The loops of a group that may run at once (lower.Concurrent, made where
        `runs_loops_concurrently`), each written through `r` by `run(arm)`: here one
        after another, as they were in the program."""
        for arm in ins.arms:
            run(arm)

    # ---- functions ----
    def function(self, r, body: list[str]) -> str:
        """The whole text of the function `r.spec` whose statements are `body`: its
        signature, the dims, the arena its memory plan `r.plan` lays out; before it, what
        the renderer placed there (`r.definitions`: a GPU target's kernels)."""
        spec, slots = r.spec, r.plan.slots
        head = [f"void {spec.name}(Model& m, Call& c) {{", "  (void)m; (void)c;",
                *("  " + line for line in self.preamble)]
        head += ["  " + line for line in spec.prologue]
        head += ["  " + line for line in memory_check([*slots, *r.sized], len(r.dims.user))]
        head += [f"  std::size_t off[{max(1, len(slots))}];", "  std::size_t total = 0;"]
        head += [f"  off[{i}] = total; total += mdl::slot_bytes({size});"
                 for i, size in enumerate(slots)]
        head += ["  " + line for line in self.arena(spec.arena, len(slots))]
        return "\n\n".join(r.definitions + ["\n".join(head + body + ["}"])])

    @abc.abstractmethod
    def arena(self, k: int, slots: int) -> list[str]:
        """Statements making `arena` point at `total` bytes of the model's arena k
        (the memory plan's `slots` slots lie at `off[...]` in it)."""

    def fused(self, r, ins) -> None:
        """Emit a lower.Fused group: its memory, then `elementwise`."""
        for v in ins.allocs + ins.written:
            r.define_owned(v)
        produced = ins.produced
        inputs = list({x.id: x for op in ins.ops for x in op.inputs
                       if x.id not in produced}.values())
        self.elementwise(r, ins, inputs)

    def zero(self, r, totals: list[Value]) -> None:
        """Each of `totals` (sums a fused group adds into) set to 0 before it is added to."""
        for t in totals:
            r.emit(self.fill(r.ptr(t), r.dim(numel(t.type.shape)), r.literal(0, t.type.dtype)))

    @abc.abstractmethod
    def elementwise(self, r, ins, inputs: list[Value]) -> None:
        """Compute every element of the fused group `ins` (backend/element.py's `compute`),
        store `ins.stores` and add into its sums, which it zeroes first (or adds up apart,
        in doubles, and writes once done); `inputs`: the values it reads."""

    @abc.abstractmethod
    def assign(self, r, dst: Value, src: Value) -> None:
        """Emit dst = src elementwise: `dst` a view (possibly strided), `src` any layout
        of a broadcastable shape, or a constant."""

    @abc.abstractmethod
    def scalar(self, pointer: str) -> str:
        """An expression reading element 0 of `pointer` on the host (a branch or loop
        condition)."""

    def read_steps(self, pointer: str, count: str, stride: str, ready: bool) -> str | None:
        """An expression of a host array holding elements 0, stride, ... (`count` of them)
        of `pointer`: a loop's branch conditions, read at once before the loop where
        reading one on the host waits for a device; None where reading one a step costs
        no more (host memory). `ready`: the function does not write that memory."""
        return None

    def copy(self, dst: str, src: str, count: str) -> str:
        """A statement copying `count` contiguous elements (the runtime's `copy`)."""
        return f"{self.call('copy')}{dst}, {src}, {count});"

    def fill(self, dst: str, count: str, value: str) -> str:
        """A statement setting `count` contiguous elements to `value` (`fill`)."""
        return f"{self.call('fill')}{dst}, {count}, {value});"

    @abc.abstractmethod
    def scratch(self, k: int, nbytes: str) -> str:
        """An expression: scratch buffer k of the model, holding at least `nbytes` bytes
        (a value sized at run time, render.Renderer._late_values), as a char pointer."""

    @abc.abstractmethod
    def tape(self, k: int) -> str:
        """An lvalue: the model's tape k (a while loop's pushes, a for's ragged yield),
        whose `steps` (mdl::StepRows) are host memory on every target."""

    def tape_clear(self, k: int) -> str:
        """A statement emptying tape k before the loop that fills it runs."""
        return f"{self.tape(k)}.clear();"

    @abc.abstractmethod
    def tape_push(self, k: int, pointer: str, nbytes: str) -> str:
        """A statement appending `nbytes` bytes at `pointer` to tape k."""

    def tape_data(self, k: int, ctype: str) -> str:
        """An expression: tape k's records as one array of `ctype`."""
        return f"reinterpret_cast<{ctype}*>({self.tape(k)}.data())"

    def tape_hold(self, k: int, nbytes: str) -> str:
        """An expression: tape k made exactly `nbytes` long, as a char pointer (a ragged
        yield written in place, at the rows of a sequence laid out alike)."""
        return f"{self.tape(k)}.hold({nbytes})"

    def tape_steps(self, k: int) -> str:
        """An lvalue: where each step's rows begin in tape k, a for's ragged yield."""
        return f"{self.tape(k)}.steps"


def memory_check(sizes: list[str], user_dims: int) -> list[str]:
    """Statements refusing a call whose dims would overflow the function's byte counts
    (`sizes`, int64_t expressions of the dims d0, d1, ...): zero-size inputs can bind a dim
    to any size NumPy allows. The same expressions are computed first with the dims as
    doubles, shadowing them, where nothing overflows (mdl::check_memory, arena.h)."""
    if not sizes or not user_dims:
        return []
    return ["{  // the dims as doubles: byte counts that would overflow int64_t are refused",
            *(f"  const double d{i} = double(c.dims[{i}]); (void)d{i};" for i in range(user_dims)),
            f"  mdl::check_memory({' + '.join(f'double({s})' for s in sizes)});",
            "}"]
