"""One framework's worker process, so that no two frameworks ever share a process:

    python -m benchmarks.worker FRAMEWORK --threads N [--quick]

The driver (benchmarks/pool.py) sends one JSON request a line on stdin; each gets one
JSON reply a line. The first reply says whether the framework could be imported. What
the libraries print goes to stderr (the driver's log), never into the replies."""
from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from benchmarks.cases import COMPILE, JAX, MDL, SCRIPT, SGEMM, TORCH, TRAIN, by_name

# framework: (module, its setup function, the distribution whose version it reports)
FRAMEWORKS = {
    MDL: ("benchmarks.mdl_models", "setup", "mdl"),
    TORCH: ("benchmarks.torch_models", "eager", "torch"),
    SCRIPT: ("benchmarks.torch_models", "scripted", "torch"),
    COMPILE: ("benchmarks.torch_models", "compiled", "torch"),
    JAX: ("benchmarks.jax_models", "setup", "jax"),
    SGEMM: ("benchmarks.sgemm", "setup", "numpy"),
}
MIB = 1024 * 1024
# Training steps a memory case times after its first (their median): one step of a T=1000
# model moved 0.9-1.5x between runs of the same code on a 2-core machine.
MEMORY_STEPS = 5


class Worker:
    """Holds the framework's setup function and the current case's Bench."""

    def __init__(self, framework: str, quick: bool):
        module, function, self.distribution = FRAMEWORKS[framework]
        self.setup_fn = getattr(importlib.import_module(module), function)
        self.quick = quick
        self.bench = None

    def setup(self, case: str) -> dict:
        self.release()
        self.bench = self.setup_fn(by_name(case, self.quick))
        return {"notes": self.bench.notes}

    def release(self) -> dict:
        """Frees the case, so that an idle worker holds no memory while others run."""
        self.bench = None
        gc.collect()
        return {}

    def check(self, path: str) -> dict:
        np.savez(path, **{k: np.asarray(v) for k, v in self.bench.check().items()})
        return {}

    def warm(self, reps: int) -> dict:
        for run in self.bench.passes.values():
            for _ in range(reps):
                run()
        return {}

    def time(self, pass_name: str, reps: int, calls: int) -> dict:
        """`reps` times, in ms per call, each over `calls` calls in a row, after one
        untimed call (other workers ran since this one's last turn)."""
        run, times = self.bench.passes[pass_name], []
        run()
        for _ in range(reps):
            times.append(_ms(run, calls))
        return {"ms": times}

    def memory(self) -> dict:
        """Growth of the peak resident set over the resident set before the first training
        step, through 1 + MEMORY_STEPS steps (the peak is reached by the second), and the
        median time of the steps after the first."""
        Path("/proc/self/clear_refs").write_text("5")  # resets the peak (VmHWM) to now
        before = _status_kib("VmRSS")
        run = self.bench.passes[TRAIN]
        run()
        times = []
        for _ in range(MEMORY_STEPS):
            times.append(_ms(run))
        return {"growth_mib": (_status_kib("VmHWM") - before) * 1024 / MIB,
                "step_ms": statistics.median(times)}


    def alternate(self, cases: list[str], rounds: int) -> dict:
        """Training steps of several cases' models, all set up in this process, one step
        of each in turn, `rounds` times (each round starting one further along, after one
        untimed step of each): ms per step by case, round by round. A machine's slow spell
        then lands on every case alike, which separate processes cannot give."""
        self.release()
        runs = {c: self.setup_fn(by_name(c, self.quick)).passes[TRAIN] for c in cases}
        for run in runs.values():
            run()
        times: dict[str, list[float]] = {c: [] for c in cases}
        for r in range(rounds):
            k = r % len(cases)
            for c in cases[k:] + cases[:k]:
                times[c].append(_ms(runs[c]))
        return {"ms": times}


def _ms(run, calls: int = 1) -> float:
    """Milliseconds a call of `run`, over `calls` calls in a row."""
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) * 1e3 / calls


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _limit_threads(n: int) -> None:
    """Pins the process to n of its CPUs (the driver checked that it has n): the one limit
    every framework obeys (XLA's CPU thread pool ignores the XLA_FLAGS said to limit it,
    and sizes itself by affinity). The driver also sets OMP/MKL/OPENBLAS_NUM_THREADS;
    torch gets set_num_threads."""
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:n])


def _version(distribution: str) -> str:
    if distribution == "mdl":
        from codegen.compile.cache import CODEGEN_VERSION
        return f"code generator {CODEGEN_VERSION}"
    return sys.modules[distribution].__version__


def serve(framework: str, threads: int, quick: bool, replies) -> None:
    """Answers requests until `quit` or the end of stdin."""
    def reply(message: dict) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()
    try:
        _limit_threads(threads)
        worker = Worker(framework, quick)
    except ImportError as exc:
        reply({"error": f"not installed ({exc.name or exc})", "missing": True})
        return
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    reply({"distribution": worker.distribution, "version": _version(worker.distribution)})
    for line in sys.stdin:
        request = json.loads(line)
        op = request.pop("op")
        if op == "quit":
            return
        try:
            reply(getattr(worker, op)(**request))
        except Exception as exc:  # a failed case is a row that says so, not a dead run
            traceback.print_exc()
            reply({"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("framework", choices=sorted(FRAMEWORKS))
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # prints of libraries: to the log
    sys.stdout = sys.stderr
    serve(args.framework, args.threads, args.quick, replies)


if __name__ == "__main__":
    main()
