"""The CPU target: C++ functions over one host arena, fused groups as loop nests (dims
merged where every operand allows, the innermost loop marked for vectorization), memory
and tapes through the runtime's helpers (cpp_runtime/mdl/), kernels calling
mdl/kernels.h and mdl/blas.h, whose products may multiply a right operand packed once
before a loop."""
from __future__ import annotations

import functools

from ..backend.element import assign as assign_element, compute, store
from ..backend.kernels import gemm_arguments, gemm_operand, gemm_sizes
from ..backend.lower import Fused, Kernel, Structured, root
from ..backend.nest import index as _index, merge, sum_strides
from ..backend.products import Products
from ..backend.target import Target
from ..compile.toolchain import HOST
from ..ir.shapes import Dim, numel
from ..ops.entry import entry

VECTORIZE = "MDL_VECTORIZE"  # an innermost loop without a local accumulator (vector_math.h)

# A fused loop of at least this many op-elements (elements x its ops) is split over the
# products' threads (mdl::split_threads in cpp_runtime/mdl/blas.h, one pool), its
# outermost loop shared out; below it, waking the second thread costs more than it saves
# (docs/build.md, "The BLAS").
PARALLEL_WORK = 1 << 16
# A split loop that is contiguous shares its elements in multiples of this: a vector's
# float lanes, so each thread's part starts on a cache line of its own.
SHARE_ALIGN = 16


def _packed_product(r, op, inputs, ins, outs, pack, accumulate: bool):
    """matmul's statements with its right operand packed before the loop (`pack`, whose
    layout it has: CpuTarget.pack); `accumulate`: added into the output's memory."""
    a, b = inputs
    m, n, k = gemm_sizes(r, a, b)
    ta, lda = gemm_operand(r, a)
    tb, ldb = gemm_operand(r, b)
    beta = f"{r.ctype(op.outputs[0])}({1 if accumulate else 0})"
    return [f"mdl::gemm_packed(m.packs[{pack.index}], {ta}, {m}, {n}, {k}, {ins[0]}, "
            f"{lda}, {tb}, {ins[1]}, {ldb}, {beta}, {outs[0]}, {n});"]


def _products(ins):
    """The product kernels in `ins` and in the blocks it holds."""
    if isinstance(ins, Kernel) and entry(ins.op).product:
        yield ins
    elif isinstance(ins, Products):
        yield from ins.kernels
    elif isinstance(ins, Structured):
        for block in ins.blocks:
            for x in block:
                yield from _products(x)


def _arm_product(r, kernel) -> str:
    """A product of a loop run at once with others, as mdl::ArmProduct (concurrent.h)."""
    a, b = kernel.inputs
    m, n, k = gemm_sizes(r, a, b)
    tb, _ = gemm_operand(r, b)
    packed = "true" if kernel.pack is not None else "false"
    return (f"{{mdl::on_calling_thread<{r.ctype(kernel.op.outputs[0])}>({packed}, {tb}, "
            f"{m}, {n}, {k}), ({m}) * ({n}) * ({k})}}")


def _one_element(r, x) -> bool:
    """Whether `x` is one element in memory: a single one, or a broadcast (every stride
    0) of a value of one element, which is there to read even where the broadcast has
    no elements (a batch of none); not a constant, which has no memory."""
    layout = r.layout(x)
    if layout.is_const:
        return False
    one = Dim.of(1)
    return numel(x.type.shape) == one or (
        bool(layout.strides) and all(s == Dim.of(0) for s in layout.strides)
        and numel(root(x, r.low.layouts).type.shape) == one)


class CpuTarget(Target):
    name = "cpu"
    toolchain = HOST
    packs_operands = True   # MKL keeps a loop's weights packed (cpp_runtime/mdl/blas.h)
    hands_over_results = True  # results handed to Python are NumPy's memory already
    skips_steps = True  # a loop's padding steps are not run (control_flow._skip_padding)
    groups_products = True  # split over the cores together (mdl::gemm_together, blas.h)
    runs_loops_concurrently = True  # one a thread (mdl::Arms, concurrent.h)
    flushes_denormals = True  # FTZ and DAZ while its code runs (mdl/denormals.h)
    preamble = ("mdl::FlushDenormals flush_denormals;  // while it runs: mdl/denormals.h",
                "mdl::ProductThreads product_threads;  // MKL's threads: blas.h")

    def __init__(self, sanitized: bool = False, profiled: bool = False):
        # a sanitized build marks dead slots, so that AddressSanitizer reports a read of
        # one (mdl::mark_slots, arena.h)
        self.sanitized = sanitized
        # a profiled build times its sites by the host's steady clock (Target.time_start)
        self.profiled = profiled

    def simd_math(self, fn: str) -> str:
        """mdl/vector_math.h's simd_ version, which Clang vectorizes too (std::'s under
        GCC)."""
        return f"mdl::simd_{fn}"

    def give_back(self, slot: str, size: str) -> list[str]:
        return [f"if (c.fresh) mdl::give_back({slot}, {size});"]

    def mark_slots(self, slots: list[int], count: int, live: bool) -> list[str]:
        if not self.sanitized:
            return []
        listed = ", ".join(map(str, slots))
        return [f"mdl::mark_slots(arena, off, {count}, total, {{{listed}}}, "
                f"{'true' if live else 'false'});"]

    def kernel(self, ins):
        if ins.pack is None:  # only products are packed
            return super().kernel(ins)
        return functools.partial(_packed_product, pack=ins.pack, accumulate=ins.accumulate)

    def products(self, r, kernels: list) -> list[str]:
        name = r.fresh("products")
        ctype = r.ctype(kernels[0].op.outputs[0])
        rows = [", ".join(gemm_arguments(r, k.op, k.inputs, [r.ptr(x) for x in k.inputs],
                                         [r.ptr(v) for v in k.op.outputs], k.accumulate))
                for k in kernels]
        return [f"const mdl::Product<{ctype}> {name}[] = {{",
                *(f"    {{{row}}}," for row in rows),
                "};",
                f"mdl::gemm_together({name}, {len(kernels)});"]

    def concurrent(self, r, ins, run) -> None:
        """Each arm a lambda run in an OpenMP section (`run(arm)` writes its loop): at once
        where mdl::Arms says so, else one after another; an arm's exception is thrown
        again after the region, which it may not leave. Arms learns the size of every
        product in them (mdl/concurrent.h says why)."""
        name = r.fresh("arms")
        products = ", ".join(_arm_product(r, k) for arm in ins.arms for k in _products(arm))
        r.emit(f"mdl::Arms {name}({len(ins.arms)}, {{{products}}});")
        r.emit(f"#pragma omp parallel sections num_threads({name}.threads) "
               f"if ({name}.threads > 1)")
        r.emit("{")
        r.depth += 1
        for k, arm in enumerate(ins.arms):
            r.emit("#pragma omp section")
            r.open(f"{name}.run({k}, [&]")
            run(arm)
            r.close(");")
        r.close()
        r.emit(f"{name}.rethrow();")

    def call(self, name: str) -> str:
        return f"mdl::{name}("

    def pack(self, r, pack) -> list[str]:
        """Pack a product's right operand (its memory before the loop: `pack.anchor`, laid
        out as the operand) for the products of a loop."""
        a, b = pack.kernel.inputs
        m, n, k = gemm_sizes(r, a, b)
        tb, ldb = gemm_operand(r, b)
        return [f"mdl::pack_b(m.packs[{pack.index}], {tb}, {m}, {n}, {k}, "
                f"{r.ptr(pack.anchor)}, {ldb});"]

    def arena(self, k: int, slots: int) -> list[str]:
        # guard: under AddressSanitizer, the redzone after every slot poisoned (arena.h)
        return [f"m.arenas[{k}].reserve(total);",
                f"char* arena = m.arenas[{k}].data(); (void)arena; (void)off;",
                *([f"m.arenas[{k}].guard(off, {slots}, total);"] if slots else [])]

    def elementwise(self, r, ins: Fused, inputs: list) -> None:
        operands = inputs + ins.written
        sums = {total.id: sum_strides(x, axes) for x, total, axes in ins.sums}
        # one-element operands (a step's mask bit, a scalar, one broadcast to the loop's
        # shape) are read once, before the loop: a load through a uint8_t pointer, or of
        # a float the loop's stores may alias, was read at every element, and GCC then
        # left the loop scalar (a mean's gradient times sign(x) in a `while`'s backward:
        # the ponder benchmark's training step 1.7x as long)
        hoisted: dict[int, str] = {}
        for x in inputs:
            if _one_element(r, x):
                hoisted[x.id] = r.fresh("s")
                r.emit(f"const {r.ctype(x)} {hoisted[x.id]} = {r.ptr(x)}[0];")

        def body(index, accumulators):
            names = compute(r, ins, index, hoisted)
            store(r, ins, index, names)
            for x, total, _ in ins.sums:
                r.emit(f"{accumulators[total.id]} += {names[x.id]};")
        self._loop_nest(r, ins.shape, operands + [t for _, t, _ in ins.sums], body, sums,
                        ops_per_element=len(ins.ops))

    def assign(self, r, dst, src) -> None:
        self._loop_nest(r, dst.type.shape, [dst, src],
                        lambda index, _: assign_element(r, dst, src, index))

    def scalar(self, pointer: str) -> str:
        return f"{pointer}[0]"

    def scratch(self, k: int, nbytes: str) -> str:
        return f"m.scratch[{k}].hold({nbytes})"

    def tape(self, k: int) -> str:
        return f"m.tapes[{k}]"

    def tape_push(self, k: int, pointer: str, nbytes: str) -> str:
        return f"m.tapes[{k}].push({pointer}, {nbytes});"

    # ---- loop nests ----
    def _loop_nest(self, r, shape: tuple[Dim, ...], operands: list, body,
                   sums: dict | None = None, ops_per_element: int = 0) -> None:
        """Nested loops over `shape`, neighbouring dims merged where every operand's
        strides allow; `body(index, accumulators)` gets each operand's index expression
        by value id. `sums` (value id -> strides, 0 on summed axes) are operands the body
        adds into (`accumulators`: value id -> what the body adds to), zeroed first: one
        summed along the innermost loop gets a local accumulator there, so that loop still
        vectorizes; an f32 one summed along an outer loop adds up in doubles
        (mdl::WideSums), rounded into it after the loops.
        `ops_per_element` (none: 0) weighs the loop's work: at PARALLEL_WORK and more,
        where the process has threads, its outermost loop that every sum keeps (none adds
        along it) is shared out over them: each total is then a thread's alone, added in
        the order one thread adds it (two threads adding into one would race)."""
        nest = merge(r, shape, operands, sums)
        wide = self._wide_sums(r, nest, sums or {})
        # (the wide ones are written whole from their doubles)
        self.zero(r, [nest.values[k] for k in sums or {} if k not in wide])
        work = numel(shape) * ops_per_element
        split = next((n for n in range(len(nest.dims))
                      if all(nest.strides[k][n] != Dim.of(0) for k in sums or {})), None)
        if split is None or not ops_per_element or (
                work.is_const and work.value < PARALLEL_WORK):
            self._loops(r, nest, body, sums, wide, None)
            self._round_wide_sums(r, nest, wide)
            return
        team = ("mdl::split_threads()" if work.is_const else
                f"{r.dim(work)} >= {PARALLEL_WORK} ? mdl::split_threads() : 1")
        # The loops once, a lambda of the split loop's range that both ways call (two
        # copies made a quarter to two fifths of a model's compile). It takes its values
        # by copy: read through references, a loop's invariants are not known to be, and
        # GCC left loops scalar that it vectorizes inline (a training forward and an
        # inference one then rounded differently). docs/build.md has the numbers.
        part, begin, end = r.fresh("part"), r.fresh("begin"), r.fresh("end")
        r.open(f"const auto {part} = [=, &m, &c](const int64_t {begin}, "
               f"const int64_t {end}) MDL_NOINLINE")
        self._loops(r, nest, body, sums, wide, (begin, end), split)
        r.close(";")
        r.open(f"if (const int team = {team}; team > 1)")
        r.emit("#pragma omp parallel num_threads(team)")
        r.emit("{")
        r.depth += 1
        r.emit("mdl::flush_denormals();")
        share, extent = r.fresh("share"), r.dim(nest.dims[split])
        align = SHARE_ALIGN if split == len(nest.dims) - 1 else 1
        r.emit(f"const mdl::Share {share}({extent}, {align});")
        r.emit(f"{part}({share}.begin, {share}.end);")
        r.close()
        r.close(" else {")
        r.depth += 1
        r.emit(f"{part}(0, {extent});")
        r.close()
        self._round_wide_sums(r, nest, wide)

    @staticmethod
    def _wide_sums(r, nest, sums: dict) -> dict[int, str]:
        """Value id -> the name of its doubles, for each f32 sum that adds along an outer
        loop (declared here, zeroed: one mdl::WideSums for them all)."""
        wide = {k: r.fresh("wide") for k in sums if r.ctype(nest.values[k]) == "float"
                and any(s == Dim.of(0) for s in nest.strides[k][:-1])}
        if wide:
            sizes = [f"({r.dim(numel(nest.values[k].type.shape))})" for k in wide]
            held = r.fresh("held")
            r.emit(f"const mdl::WideSums {held}({' + '.join(sizes)});")
            for n, name in enumerate(wide.values()):
                r.emit(f"double* const {name} = {held}.data() + {' + '.join(sizes[:n]) or 0};")
        return wide

    @staticmethod
    def _round_wide_sums(r, nest, wide: dict[int, str]) -> None:
        """Each wide sum's doubles rounded into its f32 total (contiguous, as sums are)."""
        for k, name in wide.items():
            i, total = r.fresh("i"), nest.values[k]
            r.emit(VECTORIZE)
            r.open(f"for (int64_t {i} = 0; {i} < {r.dim(numel(total.type.shape))}; ++{i})")
            r.emit(f"{r.ptr(total)}[{i}] = float({name}[{i}]);")
            r.close()

    def _loops(self, r, nest, body, sums: dict | None, wide: dict[int, str],
               bounds: tuple[str, str] | None, split: int = 0) -> None:
        """The loops of a merged `nest` (see _loop_nest); `wide`: the sums added up in
        doubles (_wide_sums); `bounds`: the names of the first and past-the-last index
        that loop `split` runs over (a thread's part), else every loop runs whole."""
        dims, merged, values = nest.dims, nest.strides, nest.values
        idx = [r.fresh("i") for _ in dims]
        inner = {k: r.fresh("acc") for k in sums or {} if dims and merged[k][-1] == Dim.of(0)}
        for n, (var, d) in enumerate(zip(idx, dims)):
            if n == len(dims) - 1:
                for k, acc in inner.items():  # a float's sum in double (kernels.h's Wide)
                    kind = "double" if r.ctype(values[k]) == "float" else r.ctype(values[k])
                    r.emit(f"{kind} {acc} = 0;")
                r.emit(f"#pragma omp simd reduction(+ : {', '.join(inner.values())})"
                       if inner else VECTORIZE)
            begin, end = bounds if bounds and n == split else ("0", r.dim(d))
            r.open(f"for (int64_t {var} = {begin}; {var} < {end}; ++{var})")
        if not dims:
            r.open("")
        base = {k: wide.get(k) or r.ptr(values[k]) for k in sums or {}}
        index = {k: _index(r, s, idx) for k, s in merged.items()}
        body(index, {k: inner.get(k) or f"{base[k]}[{index[k]}]" for k in sums or {}})
        for n in range(max(1, len(dims))):
            r.close()
            if n == 0:  # the innermost loop closed: its accumulators are added in
                for k, acc in inner.items():
                    r.emit(f"{base[k]}[{_index(r, merged[k][:-1], idx[:-1])}] += {acc};")


CPU = CpuTarget()
SANITIZED_CPU = CpuTarget(sanitized=True)
