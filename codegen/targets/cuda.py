"""The CUDA target: the model's functions run on the host and queue work on the model's
stream; its memory (arenas, parameters, inputs, tapes) is device memory. A fused
elementwise group becomes a kernel (one thread per element of its merged index space, a
grid-stride loop) and its launch; a strided copy too. The kernels go to a source of their
own, kernels.cu, which nvcc compiles with the device header alone (mdl/cuda/device.h); the
functions that launch them, and the tables, to module.cpp, which the C++ compiler builds
with the CPU target's precompiled header, declaring each kernel as a function. Kernel
primitives call mdl/cuda/primitives.h (compiled into the runtime), products cuBLAS. A
branch or loop condition is read back to the host (`mdl::cuda::scalar`); a loop's branch
conditions that are steps of one of its sequences are read at once before it
(`mdl::cuda::read_steps`). The runtime owns the context (mdl::cuda::Context: stream, cuBLAS
handle, arenas, tapes) and checks after every function what device code found wrong with
the inputs."""
from __future__ import annotations

from ..backend.element import assign as assign_element, compute, store
from ..backend.kernels import DRAW
from ..backend.lower import Fused
from ..backend.nest import index as _index, merge, sum_strides
from ..backend.target import Target
from ..compile.toolchain import EMULATED_CUDA, NVCC
from ..ir.shapes import Dim, numel


SCALAR, TAPE, TAPE_PUSH = "mdl::cuda::scalar", "g.tape", "mdl::cuda::tape_push"
READ_STEPS = "mdl::cuda::read_steps"
# What a function's host code may do that rules out capturing it as a CUDA graph: read a
# value back from the device (a condition, an index offset) while the dry run cannot,
# use a tape, draw random numbers on the host (its counters would move twice). A loop's
# conditions there before the dry run (memory the function does not write, or computed
# from its inputs by a kernel queued even while dry, `launch_now`) are read in the dry
# run (`read_steps_before`).
HOST_WORK = tuple(f"{call}(" for call in (SCALAR, READ_STEPS, TAPE, TAPE_PUSH, DRAW))


class CudaTarget(Target):
    name = "cuda"
    source = "module.cpp"   # host code: the model's functions, which queue the kernels
    kernel_source = "kernels.cu"
    headers = ("mdl/cuda/runtime.h",)
    device = "&mdl::cuda_device"
    preamble = ("mdl::cuda::Context& g = mdl::cuda::context(m);  // stream, cuBLAS, arenas",
                "(void)g;")

    def __init__(self, emulate: bool = False, profiled: bool = False):
        # The same code either way: `emulate` builds it for the CPU (codegen/compile/toolchain.py).
        self.toolchain = EMULATED_CUDA if emulate else NVCC
        # a profiled build times its sites by events on the model's stream, the GPU's time
        # (mdl/cuda/profile.h), and runs no function as a CUDA graph
        self.profiled = profiled

    def time_start(self, start: str) -> list[str]:
        return [f"const std::size_t {start} = g.profiler.mark(g.stream);"]

    def time_stop(self, site: int, start: str) -> list[str]:
        return [f"g.profiler.add(m.profile[{site}], {start}, g.stream);"]

    def call(self, name: str) -> str:
        return f"mdl::cuda::{name}(g, "

    def arena(self, k: int, slots: int) -> list[str]:
        return [f"char* arena = g.arena({k}).hold(total); (void)arena; (void)off;"]

    def function(self, r, body: list[str]) -> str:
        """A function whose host code only queues work runs as a CUDA graph once a call
        repeats the last one's work (cpp_runtime/mdl/cuda/graph.h): its body runs dry
        first, then again or not at all, so it must neither read the device from the host
        nor change the host's state but by assignments it repeats alike."""
        if self.profiled or any(call in line for line in body for call in HOST_WORK):
            return super().function(r, body)
        wrapped = ["  static const char graph_site = 0;  // this function's graph in g.graphs",
                   "  for (mdl::cuda::GraphCall run(g.graphs, &graph_site, g.stream); "
                   "run.pass();) {",
                   *("  " + line for line in body), "  }"]
        return super().function(r, wrapped)

    def elementwise(self, r, ins: Fused, inputs: list) -> None:
        totals = [total for _, total, _ in ins.sums]
        # f32 totals add up in doubles (mdl/kernels.h's Wide, as the CPU's): a zeroed buffer
        # of them in g.staging, rounded into the totals once the kernel has run (added in
        # float, a column sum over 1M rows came out 1% short). Others are zeroed themselves.
        wide = {t.id: r.fresh("wide") for t in totals if r.ctype(t) == "float"}
        sizes = {t.id: f"({r.dim(numel(t.type.shape))})" for t in totals}
        if wide:
            held = r.fresh("held")
            r.emit(f"double* const {held} = reinterpret_cast<double*>(g.staging.hold("
                   f"sizeof(double) * ({' + '.join(sizes[k] for k in wide)})));")
            r.emit(self.fill(held, " + ".join(sizes[k] for k in wide), "0.0"))
            for n, (k, name) in enumerate(wide.items()):
                before_it = " + ".join(sizes[j] for j in list(wide)[:n]) or "0"
                r.emit(f"double* const {name} = {held} + {before_it};")
        self.zero(r, [t for t in totals if t.id not in wide])
        # A sum into one number is added up by each thread, then across its block, which
        # adds it into the total (mdl::cuda::add_across_block): one atomic add a block.
        # Other totals take an atomic add an element, spread over their elements.
        whole = {n: f"part{n}" for n, total in enumerate(totals)
                 if numel(total.type.shape) == Dim.of(1)}
        into = {t.id: wide.get(t.id) or r.ptr(t) for t in totals}

        def body(index):
            names = compute(r, ins, index, {})
            store(r, ins, index, names)
            for n, (x, total, _) in enumerate(ins.sums):
                added = f"double({names[x.id]})" if total.id in wide else names[x.id]
                if n in whole:
                    r.emit(f"{whole[n]} = mdl::plus({whole[n]}, {added});")
                else:  # threads of many elements add into one element of the total
                    r.emit(f"atomicAdd({into[total.id]} + {index[total.id]}, {added});")
        before = [f"{'double' if total.id in wide else r.ctype(total)} {whole[n]} = 0;"
                  for n, total in enumerate(totals) if n in whole]
        after = [f"mdl::cuda::add_across_block({into[total.id]}, {whole[n]});"
                 for n, total in enumerate(totals) if n in whole]
        self._launch(r, ins.shape, inputs + ins.written + totals, body,
                     {v.id for v in ins.written + totals},
                     {total.id: sum_strides(x, axes) for x, total, axes in ins.sums},
                     before, after, wide)
        for t in totals:
            if t.id in wide:
                r.emit(f"mdl::cuda::round_wide(g, {wide[t.id]}, {sizes[t.id]}, {r.ptr(t)});")

    def assign(self, r, dst, src) -> None:
        self._launch(r, dst.type.shape, [dst, src],
                     lambda index: assign_element(r, dst, src, index), {dst.id})

    def scalar(self, pointer: str) -> str:
        return f"{SCALAR}(g, {pointer})"

    def read_steps(self, pointer: str, count: str, stride: str, ready: bool) -> str:
        call = f"{READ_STEPS}_before" if ready else READ_STEPS
        return f"{call}(g, {pointer}, {count}, {stride})"

    def scratch(self, k: int, nbytes: str) -> str:
        return f"g.scratch({k}, {nbytes})"

    def tape(self, k: int) -> str:
        return f"{TAPE}({k})"

    def tape_push(self, k: int, pointer: str, nbytes: str) -> str:
        return f"{TAPE_PUSH}(g, {k}, {pointer}, {nbytes});"

    # ---- kernels ----
    def _launch(self, r, shape: tuple[Dim, ...], operands: list, body, written: set[int],
                sums: dict | None = None, before: list[str] = (),
                after: list[str] = (), wide: dict[int, str] | None = None) -> None:
        """A kernel computing `body(index)` at every element of `shape` (index: value id
        -> the operand's element index), and its launch on the model's stream. Dims the
        kernel needs that are known only at run time become its arguments; `written`:
        ids of the operands it stores into (the others are read through const pointers);
        `before` and `after`: each thread's statements around its loop over elements;
        `wide`: value id -> the doubles it passes in that operand's place (its sums')."""
        wide = wide or {}
        nest = merge(r, shape, operands, sums)
        name = f"{r.spec.name}_k{len(r.kernels)}"
        args: dict[str, str] = {}  # host expression of a dim -> the kernel's argument

        def dim(d: Dim) -> str:
            if d.is_const:
                return f"int64_t({d.value})"
            host = r.dims.expr(d)
            return args.setdefault(host, f"e{len(args)}")
        idx = [f"i{n}" for n in range(len(nest.dims))]
        with r.elsewhere(2, dim) as lines:
            if idx:
                r.emit("int64_t rest = at;")
            for n in reversed(range(1, len(idx))):  # row-major: the last dim varies fastest
                size = r.dim(nest.dims[n])
                r.emit(f"const int64_t {idx[n]} = rest % {size}; rest /= {size};")
            if idx:
                r.emit(f"const int64_t {idx[0]} = rest;")
            body({k: _index(r, s, idx) for k, s in nest.strides.items()})
        pointers = [v for v in nest.values.values() if not r.layout(v).is_const]
        params = ["const int64_t count"] + [
            f"double* {wide[v.id]}" if v.id in wide else
            f"{'' if v.id in written else 'const '}{r.ctype(v)}* {r.ptr(v)}" for v in pointers
        ] + [f"const int64_t {arg}" for arg in args.values()]
        # the kernel in kernels.cu; module.cpp, which the C++ compiler builds, declares it
        r.definitions.append(f"void {name}({', '.join(params)});")
        r.kernels.append("\n".join([
            f"__global__ void __launch_bounds__(mdl::cuda::kThreads) {name}(",
            "    " + ", ".join(params) + ") {",
            *("  " + line for line in before),
            # the grid-stride loop of every kernel (cpp_runtime/mdl/cuda/device.h)
            "  for (int64_t at = mdl::cuda::first_item(); at < count; "
            "at += mdl::cuda::item_stride()) {",
            *lines, "  }",
            *("  " + line for line in after), "}"]))
        count = r.fresh("count")
        call_args = [count] + [wide.get(v.id) or r.ptr(v) for v in pointers] + list(args)
        r.emit("{")
        r.depth += 1
        r.emit(f"const int64_t {count} = {r.dim(numel(shape))};")
        r.open(f"if ({count} > 0)")
        early = written & r.early  # conditions read before the function's other work
        r.launched_early |= early
        launch = "mdl::cuda::launch_now" if early else "mdl::cuda::launch"
        r.emit(f"{launch}({name}, mdl::cuda::blocks({count}), mdl::cuda::kThreads, "
               f"g.stream, {', '.join(call_args)});")
        r.emit(f'mdl::cuda::check_launch("launching {name}");')
        r.close()
        r.close()


CUDA_TARGET = CudaTarget()
EMULATED_CUDA_TARGET = CudaTarget(emulate=True)
