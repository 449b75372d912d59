"""How the suite measures: every framework of a case set up in its own worker, its
outputs compared with mdl's on the same weights before anything is timed, then the
repetitions interleaved in rounds (each round runs every worker in turn, starting with a
different one), so that a machine that drifts moves every side alike. Medians.

Between two workers' turns the driver waits a moment (Plan.settle): BLAS and OpenMP
threads spin for a while after their work (OpenBLAS about 2**28 cycles by default), and
would take a core from the next worker; each turn also starts with one untimed call."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from benchmarks.cases import MDL, SGEMM, STEP, Case, flops
from benchmarks.pool import Pool, Process, WorkerError

TOLERANCE = 1e-4  # normwise relative, float32: same math agrees far closer than this


@dataclass(frozen=True)
class Plan:
    """How much to repeat: `reps` timed calls per pass and framework, spread over
    `rounds`; `warmups` untimed calls first; a generation rep times `step_calls` steps;
    `settle` seconds between two workers' turns; the memory cases take `memory_rounds`."""
    reps: int
    rounds: int
    warmups: int
    step_calls: int
    settle: float
    memory_rounds: int
    skip_compile: bool
    work: Path  # where workers leave the arrays of their checks

    def split(self, r: int) -> int:
        """The reps of round r."""
        return self.reps // self.rounds + (r < self.reps % self.rounds)


def rotated(items: list, r: int) -> list:
    """The order of round r: each round starts one further along."""
    k = r % len(items) if items else 0
    return items[k:] + items[:k]


def relative_error(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> float:
    """The largest normwise relative difference over the peer's arrays (its loss and
    gradients, or final states); the peer must cover every array of ours that is not all
    zeros (the gradient of a branch's condition is). The loss's difference is relative to
    `loss_scale` where ours gives one: a sum whose terms cancel is not known to more than
    eps times the size of its terms. Integer arrays (decoded tokens) must be equal: one
    token of another differs by inf."""
    lacking = {k for k, v in ours.items() if k != "loss_scale" and np.any(v)} - set(theirs)
    if lacking:
        raise WorkerError(f"the peer's check lacks {', '.join(sorted(lacking))}")

    def scale(k: str) -> float:
        return ours["loss_scale"] if k == "loss" and "loss_scale" in ours \
            else np.linalg.norm(theirs[k])

    def error(k: str) -> float:
        if np.issubdtype(ours[k].dtype, np.integer):  # tokens: equal, or another choice
            return 0.0 if np.array_equal(ours[k], theirs[k]) else float("inf")
        return float(np.linalg.norm(ours[k] - theirs[k]) / max(scale(k), 1e-30))
    return max(error(k) for k in theirs if k != "loss_scale")


def checked(proc: Process, case: Case, plan: Plan) -> dict[str, np.ndarray]:
    """The arrays of the worker's check (loss and gradients, or final states)."""
    path = plan.work / f"{case.name}-{proc.framework}.npz"
    proc.call("check", path=str(path))
    with np.load(path) as arrays:
        return dict(arrays)


def status_of(exc: WorkerError) -> str:
    """A row's status for a failed worker."""
    return str(exc) if exc.missing else f"failed: {exc}"


def _interleaved(live: dict[str, Process], passes: tuple[str, ...], plan: Plan,
                 calls: int, results: dict[str, dict]) -> dict[tuple[str, str], list[float]]:
    """The rounds; a worker that fails leaves them, its status saying why."""
    times = {(fw, p): [] for fw in live for p in passes}
    for r in range(plan.rounds):
        for fw in rotated(list(live), r):
            time.sleep(plan.settle)
            try:
                for p in passes:
                    reply = live[fw].call("time", pass_name=p, reps=plan.split(r), calls=calls)
                    times[fw, p] += reply["ms"]
            except WorkerError as exc:
                results[fw] = {"status": status_of(exc)}
                del live[fw]
    return times


def _set_up(case: Case, pool: Pool, plan: Plan, results: dict[str, dict]) -> dict[str, Process]:
    """The case in each framework's worker, mdl first; a peer whose outputs differ from
    mdl's is not timed."""
    live, reference = {}, None
    for fw in case.frameworks(plan.skip_compile):
        if fw != MDL and reference is None:
            results[fw] = {"status": "skipped: the mdl model failed"}
            continue
        try:
            proc = pool.get(fw)
            notes = proc.call("setup", case=case.name)["notes"]
            arrays = checked(proc, case, plan)
            if fw == MDL:
                reference = arrays
                results[fw] = {"status": "ok", **notes}
            else:
                error = relative_error(reference, arrays)
                ok = error <= TOLERANCE
                results[fw] = {"status": "ok" if ok else "outputs differ", "max_rel_err": error,
                               **notes}
                if not ok:
                    continue
            proc.call("warm", reps=plan.warmups)
            live[fw] = proc
        except WorkerError as exc:
            results[fw] = {"status": status_of(exc)}
    return live


def measure_case(case: Case, pool: Pool, plan: Plan, peak: float) -> list[dict]:
    """One row per pass of a timed case, every framework's median and its ratio."""
    results: dict[str, dict] = {}
    live = _set_up(case, pool, plan, results)
    calls = plan.step_calls if STEP in case.passes else 1
    times = _interleaved(live, case.passes, plan, calls, results)
    for proc in live.values():
        proc.call("release")
    rows = []
    for p in case.passes:
        work = flops(case, p)
        row = {fw: dict(r) for fw, r in results.items()}
        for fw in live:
            ms = statistics.median(times[fw, p])
            gflops = work / (ms * 1e-3) / 1e9
            row[fw].update(ms=ms, gflops=gflops, peak_fraction=gflops / peak)
        ours = row[MDL].get("ms")
        for fw, r in row.items():
            if fw != MDL and ours and "ms" in r:
                r["ratio"] = ours / r["ms"]
        rows.append({"case": case.name, "group": case.group, "dims": case.dims, "pass": p,
                     "flops": work, "results": row})
    return rows


def measure_peak(case: Case, pool: Pool, plan: Plan) -> dict:
    """sgemm GFLOP/s with one thread and with the run's threads, interleaved."""
    counts = sorted({1, pool.threads})
    live = {}
    try:
        for n in counts:
            live[str(n)] = proc = pool.fresh(SGEMM, n)
            proc.call("setup", case=case.name)
            proc.call("warm", reps=plan.warmups)
        # at least 10 reps: --quick's 2 of a 256-cube product (a fraction of a ms) once
        # gave 2 GFLOP/s of 170 on a busy machine, and rows of 134% of "the peak"
        times = _interleaved(live, ("sgemm",), replace(plan, reps=max(plan.reps, 10)), 1, {})
    finally:
        for proc in live.values():
            proc.close()
    gflops = {n: flops(case, "sgemm") / (statistics.median(times[n, "sgemm"]) * 1e-3) / 1e9
              for n in live}
    return {"n": case.dims["N"], "gflops": gflops}
