"""The memory cases: each loop option's LSTM training step in a fresh mdl worker per
round (a process's peak resident set only grows, so a measurement needs a process of its
own): growth of the peak resident set, and the gradients compared with those of the model
that stores its activations. Their times come from one more worker that holds every
option's model and runs their training steps in turn (`alternate`): each step's median,
and the median over rounds of its ratio to the stored model's step of the same round. On
a 2-core VM whose speed moved 1.2-1.6x from minute to minute, separate processes gave
`checkpoint = 32` 1.30x and 1.57x the stored model's time in two runs of one hour."""
from __future__ import annotations

import statistics
import sys

from benchmarks.cases import MDL, Case
from benchmarks.measure import TOLERANCE, Plan, checked, relative_error, rotated, status_of
from benchmarks.pool import Pool, WorkerError

ALTERNATE_ROUNDS = 9  # steps of each loop option timed in turn, one process


def measure_memory(cases: list[Case], pool: Pool, plan: Plan) -> list[dict]:
    """One row per case, medians over the rounds, the options in a different order each
    round."""
    runs: dict[str, list[dict]] = {c.name: [] for c in cases}
    checks, failed = {}, {}
    for r in range(plan.memory_rounds):
        for case in rotated(cases, r):
            if case.name in failed:
                continue
            print(f"  {case.name}, round {r + 1}", file=sys.stderr)
            try:
                proc = pool.fresh(MDL)
                try:
                    proc.call("setup", case=case.name)
                    runs[case.name].append(proc.call("memory"))
                    if case.name not in checks:
                        checks[case.name] = checked(proc, case, plan)
                finally:
                    proc.close()
            except WorkerError as exc:
                failed[case.name] = status_of(exc)
    rows = [_row(c, runs[c.name], failed.get(c.name)) for c in cases]
    times = _alternated([c.name for c, row in zip(cases, rows) if row["status"] == "ok"], pool)
    for row in rows:
        if row["case"] in times:
            row["steps_in_turn"] = times[row["case"]]
            row["step_ms"] = statistics.median(times[row["case"]])
    stored = next((row for row, c in zip(rows, cases)
                   if c.loop == "stored" and row["status"] == "ok"), None)
    for row in rows:
        if stored and row["status"] == "ok":
            _versus(row, stored, checks[stored["case"]], checks[row["case"]])
            if row["case"] in times and stored["case"] in times:
                row["vs_stored"]["time_ratio"] = statistics.median(
                    t / s for t, s in zip(times[row["case"]], times[stored["case"]]))
    return rows


def _alternated(names: list[str], pool: Pool) -> dict[str, list[float]]:
    """Each case's step times from one worker running them in turn (empty if it fails:
    the rows keep their own processes' times)."""
    if not names:
        return {}
    print("  the loop options' steps in turn", file=sys.stderr)
    try:
        proc = pool.fresh(MDL)
        try:
            return proc.call("alternate", cases=names, rounds=ALTERNATE_ROUNDS)["ms"]
        finally:
            proc.close()
    except WorkerError as exc:
        print(f"  not timed in turn: {status_of(exc)}", file=sys.stderr)
        return {}


def _row(case: Case, runs: list[dict], failure: str | None) -> dict:
    row = {"case": case.name, "group": case.group, "loop": case.loop, "dims": case.dims}
    if failure:
        return {**row, "status": failure}
    return {**row, "status": "ok",
            "growth_mib": statistics.median(r["growth_mib"] for r in runs),
            "step_ms": statistics.median(r["step_ms"] for r in runs),
            "runs": [[r["growth_mib"], r["step_ms"]] for r in runs]}


def _versus(row: dict, stored: dict, reference: dict, arrays: dict) -> None:
    error = relative_error(reference, arrays)
    growth = row["growth_mib"]
    row["vs_stored"] = {"max_rel_err": error,
                        "memory_less": stored["growth_mib"] / growth if growth > 0 else None,
                        "time_ratio": row["step_ms"] / stored["step_ms"]}
    if error > TOLERANCE:
        row["status"] = "outputs differ"
