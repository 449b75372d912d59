"""A run of the suite (`python -m benchmarks`, `mdlc bench`; options in codegen/cli.py):
the sgemm peak, then every selected case, then the memory cases, and the results as
Markdown (printed too), JSON and a PNG plot in the output directory."""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import measure, report
from benchmarks.cases import MDL, cases, select, sgemm_case
from benchmarks.machine import cpu, describe, isa_environment
from benchmarks.mdl_models import prebuild
from benchmarks.memory import measure_memory
from benchmarks.plot import plot
from benchmarks.pool import Pool
from codegen.compile.cuda_toolkit import gpu_capabilities
from dsl import UsageError


def run(args) -> int:
    """Runs the cases `args` selects; exit status 1 when an mdl model failed or a peer's
    outputs differed from mdl's (a comparison of different math), else 0."""
    reps = args.reps if args.reps is not None else (2 if args.quick else 20)
    cpus = len(os.sched_getaffinity(0))
    if reps < 1 or not 1 <= args.threads <= cpus:
        raise UsageError(f"--reps must be >= 1 and --threads between 1 and {cpus} (the CPUs "
                         f"this process may use), got --reps {reps} --threads {args.threads}")
    if args.isa == "avx2" and cpu().isa not in ("AVX2", "AVX-512"):
        raise UsageError(f"--isa avx2 restricts an x86 CPU with AVX2 to it; this one has "
                         f"{cpu().isa}")
    if args.device == "cuda" and not gpu_capabilities():
        raise UsageError("--device cuda runs the GPU rows, on an NVIDIA GPU: nvidia-smi "
                         "reports none here")
    try:
        selected = select(cases(args.quick, args.device), args.only, args.quick)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file in its place or on its path, a read-only place
        raise UsageError(f"--out {args.out}: cannot make the folder the results go to: "
                         f"{exc.strerror or exc}") from None
    if args.device == "cuda":  # a GPU machine's cores build the modules side by side
        print("building the mdl models", file=sys.stderr)
        prebuild([c for c in selected if c.group != "memory"], cpus)
    with tempfile.TemporaryDirectory(prefix="mdl-bench-") as work, \
            Pool(args.threads, args.quick, out / "logs",
                 {**_fresh_caches(Path(work)), **isa_environment(args.isa),
                  **_shared_gpu(args.device)}) as pool:
        rounds = min(reps, 5)  # a memory round is a process per loop option: at most 3
        plan = measure.Plan(reps=reps, rounds=rounds, warmups=3,
                            step_calls=10 if args.quick else 200,
                            settle=0.02 if args.quick else 0.25,
                            memory_rounds=1 if args.quick else min(rounds, 3),
                            skip_compile=args.skip_compile, work=Path(work))
        print("sgemm peak", file=sys.stderr)
        peak = measure.measure_peak(sgemm_case(args.quick, args.device), pool, plan)
        # pool.versions fills as workers start: the meta holds that dict itself
        result = {"meta": _meta(args, reps, plan, pool.versions), "peak": peak, "rows": [],
                  "memory": []}
        timed = [c for c in selected if c.group != "memory"]
        for i, case in enumerate(timed):
            print(f"[{i + 1}/{len(timed)}] {case.name}", file=sys.stderr)
            result["rows"] += measure.measure_case(case, pool, plan,
                                                   peak["gflops"][str(args.threads)])
            _write(out, result)  # a run cut short keeps the rows it measured
        memory = [c for c in selected if c.group == "memory"]
        result["memory"] = measure_memory(memory, pool, plan) if memory else []
    text = _write(out, result)
    print(text)
    print(plot(result, out / "ratios.png"), file=sys.stderr)
    return 0 if ok(result) else 1


def _write(out: Path, result: dict) -> str:
    """results.json and results.md in `out`; the Markdown."""
    (out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    text = report.markdown(result)
    (out / "results.md").write_text(text)
    return text


def _fresh_caches(work: Path) -> dict[str, str]:
    """torch.compile's caches in the run's own directory, so that its compile times are
    those of a first compile, not of a cache filled by an earlier run."""
    return {"TORCHINDUCTOR_CACHE_DIR": str(work / "inductor")}


def _shared_gpu(device: str) -> dict[str, str]:
    """Every framework's worker holds the one GPU at once: JAX takes memory as it needs it,
    not three quarters of the card when it starts."""
    return {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"} if device == "cuda" else {}


def ok(result: dict) -> bool:
    """Every mdl model ran, and no peer that ran disagreed with it."""
    statuses = [r["results"][fw]["status"] for r in result["rows"] for fw in r["results"]
                if fw == MDL or r["results"][fw]["status"] == "outputs differ"]
    statuses += [r["status"] for r in result["memory"]]
    return all(s == "ok" for s in statuses)


def _meta(args, reps: int, plan: measure.Plan, versions: dict) -> dict:
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": describe(args.isa), "cpu": dataclasses.asdict(cpu()), "isa": args.isa,
            "cpus": os.cpu_count(), "threads": args.threads,
            "device": args.device, **({"gpu": _gpu_name()} if args.device == "cuda" else {}),
            "reps": reps, "rounds": plan.rounds, "warmups": plan.warmups,
            "step_calls": plan.step_calls, "settle_s": plan.settle,
            "memory_rounds": plan.memory_rounds, "quick": args.quick,
            "skip_compile": args.skip_compile, "python": platform.python_version(),
            "versions": versions, "command": _command(args, reps)}


def _command(args, reps: int) -> str:
    """The command that repeats this run."""
    flags = [f"--reps {reps}", f"--threads {args.threads}",
             *([f"--device {args.device}"] if args.device != "cpu" else []),
             *([f"--isa {args.isa}"] if args.isa != "native" else []),
             *(["--quick"] * args.quick),
             *(["--skip-compile"] * args.skip_compile), *([f"--only {' '.join(args.only)}"]
                                                         if args.only else [])]
    return " ".join(["python -m benchmarks", *flags])


def _gpu_name() -> str:
    """The GPU's name as nvidia-smi reports it."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
        return done.stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "a GPU nvidia-smi does not name"
