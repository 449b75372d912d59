"""Where an mdl model's time goes on a GPU (issue #20): each selected GPU case's mdl passes,
called three ways (NumPy arrays in and out; the data left on the device, as the suite
calls it; the same without CUDA graphs, MDL_CUDA_GRAPHS=0), timed by the wall clock, then
run under PyTorch's profiler, whose CUPTI records every kernel and copy of the process:
mdl's own, cuBLAS's and the runtime's. For each pass it prints the wall time a call, the
GPU's busy time a call, the launches and copies a call, and the kernels and copies that
take the most GPU time.

    python3 -m benchmarks.gpu_profile                       # every LSTM row and generation
    python3 -m benchmarks.gpu_profile --only gpu-lstm-t35-b1-h128 --calls 50 --top 12

`--plain` only calls each pass (`--calls` times, the data on the device, no CUDA graphs, so
that each kernel is a launch of its own), for a profiler outside the process to watch:
Nsight Compute's `ncu` reads the hardware counters of each launch (`.ci/gpu ncu`).

Needs a CUDA GPU and PyTorch with CUDA; without them, a usage error (exit 2)."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass

from benchmarks.cases import Case, cases, select
from benchmarks.mdl_models import prebuild, setup

DEFAULT = ["lstm", "generation"]
WARMUPS = 3


@dataclass
class Activity:
    """One kind of GPU work in a profile: a kernel's or a copy's name, how many ran, and
    their time on the GPU in microseconds."""
    name: str
    count: int
    us: float


def gpu_activities(events) -> list[Activity]:
    """The GPU work of a profiler's key averages (`prof.key_averages()`), most time first:
    the events that ran on the device (kernels, copies, sets), by name."""
    out = []
    for e in events:
        us = getattr(e, "self_device_time_total", None)
        if us is None:  # PyTorch before 2.4 named it for CUDA
            us = getattr(e, "self_cuda_time_total", 0.0)
        if us > 0 and str(getattr(e, "device_type", "")).endswith("CUDA"):
            out.append(Activity(e.key, int(e.count), float(us)))
    return sorted(out, key=lambda a: -a.us)


def summary(title: str, wall_us: list[float], activities: list[Activity], calls: int,
            top: int) -> str:
    """The report of one pass called one way: wall and GPU time a call, then the top
    activities."""
    busy = sum(a.us for a in activities) / calls
    copies = [a for a in activities if a.name.lower().startswith("memcpy")]
    launches = sum(a.count for a in activities if a not in copies) / calls
    wall = statistics.median(wall_us)
    lines = [f"{title}: {wall:.1f} us a call (median of {len(wall_us)}), GPU busy "
             f"{busy:.1f} us ({100 * busy / wall:.0f}%), {launches:.1f} kernels and "
             f"{sum(a.count for a in copies) / calls:.1f} copies a call"]
    for a in activities[:top]:
        lines.append(f"    {a.us / calls:9.1f} us  {a.count / calls:6.1f}x  {a.name[:90]}")
    return "\n".join(lines)


WAYS = [(False, True), (True, True), (True, False)]  # (data on the device, CUDA graphs)


def made(case: Case, resident: bool, graphs: bool):
    """The case's mdl passes (benchmarks.mdl_models.setup), its model made with CUDA graphs
    or without (MDL_CUDA_GRAPHS, read when a model is made)."""
    before = os.environ.get("MDL_CUDA_GRAPHS")
    os.environ["MDL_CUDA_GRAPHS"] = "1" if graphs else "0"
    try:
        return setup(case, resident=resident)
    finally:
        os.environ.pop("MDL_CUDA_GRAPHS")
        if before is not None:
            os.environ["MDL_CUDA_GRAPHS"] = before


def profile(case: Case, resident: bool, graphs: bool, calls: int, top: int) -> list[str]:
    """The reports of each of the case's mdl passes, called one way."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    bench = made(case, resident, graphs)
    how = ("data on the device" if resident else "NumPy in and out") + \
        ("" if graphs else ", no CUDA graphs")
    reports = []
    for name, run in bench.passes.items():
        for _ in range(WARMUPS):
            run()
        wall = []
        for _ in range(calls):
            start = time.perf_counter()
            run()
            wall.append((time.perf_counter() - start) * 1e6)
        torch.cuda.synchronize()
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                run()
            torch.cuda.synchronize()
        reports.append(summary(f"{case.name} {name}, {how}", wall,
                               gpu_activities(prof.key_averages()), calls, top))
    return reports


def call_plainly(case: Case, calls: int) -> None:
    """Each of the case's mdl passes called `calls` times, the data on the device, each
    kernel launched on its own (MDL_CUDA_GRAPHS=0): what an outside profiler sees."""
    import torch
    bench = made(case, resident=True, graphs=False)
    for name, run in bench.passes.items():
        for _ in range(calls):
            run()
        torch.cuda.synchronize()
        print(f"{case.name} {name}: {calls} calls", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_profile",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", default=DEFAULT, metavar="NAME",
                        help="groups, case names or patterns of the GPU rows (default: "
                             "lstm generation)")
    parser.add_argument("--calls", type=int, default=20, help="calls timed and profiled")
    parser.add_argument("--top", type=int, default=8, help="activities listed a pass")
    parser.add_argument("--plain", action="store_true",
                        help="only call each pass, the data on the device and no CUDA graphs, "
                             "for ncu to watch (nothing timed or profiled here)")
    args = parser.parse_args(argv)
    try:
        import torch
        ready = torch.cuda.is_available()
    except ImportError:
        ready = False
    if not ready:
        print("python -m benchmarks.gpu_profile: error: it profiles on a CUDA GPU, through "
              "PyTorch's profiler: this machine has no GPU that PyTorch can use",
              file=sys.stderr)
        return 2
    try:
        chosen = select(cases(False, "cuda"), args.only)
    except ValueError as exc:
        print(f"python -m benchmarks.gpu_profile: error: {exc}", file=sys.stderr)
        return 2
    prebuild(chosen, len(os.sched_getaffinity(0)))
    if args.plain:
        for case in chosen:
            call_plainly(case, args.calls)
        return 0
    for case in chosen:
        for resident, graphs in WAYS:
            for report in profile(case, resident, graphs, args.calls, args.top):
                print(report, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
