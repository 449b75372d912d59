"""The differential fuzzer: random well-typed programs (tests/fuzz_generate.py), many to
one module, built natively (in f64, or f32 with `--dtype f32`) and compared with the
NumPy reference interpreter (tests/fuzz_compare.py) in a child process, so that native
code that crashes ends that process only. Each program runs twice on one instance: at
T=4, B=3, S=2 (the specialized code, in every other module: built with `--specialize
T=4,B=3,S=2 --specialize T=4,B=3`), then at random dims (B up to `--rows`, 3 by
default). `--vjp` builds the modules with a backward that takes a cotangent per float
output, compared with the reference's vector-Jacobian product.

    python3 tests/fuzz_programs.py --programs 300 --seed 0 [--keep DIR]
                                   [--dtype f32] [--vjp] [--target cuda [--emulate]]
                                   [--sanitize] [--profile] [--rows N]

prints a summary (programs, constructs and primitives covered, failures) and, for each
failing program, its source and a minimized repro: statements dropped while the
failure remains. Exit status 1 when a program fails. `--sanitize` builds the modules
under AddressSanitizer and UBSan (with `--target cuda --emulate`, ThreadSanitizer, which
reports races between CUDA threads): a memory error or race that leaves the results
right still ends the comparing process, and the program fails as a crash. `--target cuda` builds
for the GPU (where none is present, the programs are compiled and linked only: outcome
"built"); with `--emulate`, for mdl's emulated device, which runs and compares them on
the CPU.
docs/testing.md tells more.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import pickle
import re
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from dataclasses import replace
from pathlib import Path

from fuzz_compare import BUCKETS, ROWS, Outcome, compare
from fuzz_generate import SIZES, generate
from fuzz_source import Program, module_source, smaller

from codegen.compile.cuda_toolkit import gpu_capabilities
from codegen.compile.sanitizers import sanitizer_env
from codegen.ir.diagnostics import MdlBuildError
from codegen.ir.graph import walk_ops
from codegen.pipeline import BuildOptions, build as pipeline_build, import_built
from codegen.targets.registry import target as find_target
from dsl import MdlError, UsageError, check_source

PER_MODULE = 25
# A model's comparison (every case, both passes, sanitized or emulated) takes seconds; one
# still running after this is a hang (outcome "hang")
MODEL_LIMIT_S = 300


def programs(seed: int, count: int, start: int = 0, size: str = "small") -> list[Program]:
    return [generate(seed, i, size) for i in range(start, start + count)]


def run(progs: list[Program], directory: Path, specialize: bool = True,
        target: str = "cpu", emulate: bool = False, dtype: str = "f64",
        vjp: bool = False, sanitize: bool = False, rows: int = ROWS,
        profile: bool = False) -> dict[str, Outcome]:
    """Every program's outcome, built as one module (`specialize`: with code for the
    BUCKETS too; `emulate`: the cuda target for the emulated device; `dtype`, `vjp`,
    `sanitize`, `profile`: as `build`'s; `rows`: the largest B of the second case). A program the
    front end rejects is the generator's bug; one that breaks its module's build is found
    by building halves."""
    outcomes: dict[str, Outcome] = {}
    graphs = {}
    for p in progs:
        try:
            graphs[p.name] = check_source(p.source(), model=p.name, dtype=dtype).graph
        except MdlError as e:
            outcomes[p.name] = Outcome("rejected", e.render())
    checked = [p for p in progs if p.name in graphs]
    _build_and_compare(checked, graphs, directory, specialize, outcomes,
                       dict(target=target, emulate=emulate, dtype=dtype, vjp=vjp,
                            sanitize=sanitize, profile=profile), rows)
    return outcomes


def _build_and_compare(progs, graphs, directory: Path, specialize: bool, outcomes,
                       how: dict, rows: int = ROWS) -> None:
    """`how`: build's keywords (target, emulate, dtype, vjp, sanitize, profile); `rows`: as
    run's."""
    if not progs:
        return
    buckets = _buckets([graphs[p.name] for p in progs]) if specialize else []
    try:
        built = build(module_source(progs), directory, buckets, **how)
    except Exception as e:  # noqa: BLE001 -- any failure of the compiler is a finding
        if len(progs) > 1:
            half = len(progs) // 2
            for part in (progs[:half], progs[half:]):
                _build_and_compare(part, graphs, directory, specialize, outcomes, how, rows)
            return
        outcomes[progs[0].name] = _build_failure(e)
        return
    if how["target"] == "cuda" and not how["emulate"] and not gpu_capabilities():
        outcomes.update((p.name, Outcome("built", "no GPU here to run it")) for p in progs)
        return
    compare_apart(built, [(p.name, p.source(), p.lengths, p.seed, p.few_steps)
                          for p in progs], outcomes, rows)


def _build_failure(e: Exception) -> Outcome:
    return Outcome("build" if isinstance(e, MdlBuildError) else "compiler",
                   f"{type(e).__name__}: {e}")


def build(text: str, directory: Path, specialize: list[dict], target: str = "cpu",
          emulate: bool = False, dtype: str = "f64", vjp: bool = False,
          sanitize: bool = False, profile: bool = False) -> tuple:
    """Builds the module of a .mdl text in `dtype` (one class per model) for `target`
    (and `emulate`; `vjp`: a backward that takes cotangents; `sanitize`: under
    AddressSanitizer and UBSan, or emulated, ThreadSanitizer; `profile`: its code timing itself, which must change no
    number), named after the text and the build (a suffix for f32, vjp, sanitize and
    profile), so that a build seen before comes from the cache; what `import_built` needs
    to import it: (path, name, options)."""
    name = "fuzz_" + hashlib.sha256(text.encode()).hexdigest()[:12]
    name += ("_f32" if dtype == "f32" else "") + ("_vjp" if vjp else "") + (
        ("_tsan" if emulate else "_asan") if sanitize else "") + ("_prof" if profile else "")
    path = directory / f"{name}.mdl"
    path.write_text(text)
    options = BuildOptions(target=target, dtype=dtype, specialize=specialize,
                           emulate=emulate, vjp=vjp, sanitize=sanitize, profile=profile)
    pipeline_build(path, name, options, progress=False)
    return str(path), name, options


def _buckets(graphs: list) -> list[dict]:
    """The BUCKETS that fit some of `graphs` (a set that fits none is a usage error)."""
    return [b for b in BUCKETS if any(set(b) <= _dims(g) for g in graphs)]


def _dims(graph) -> set[str]:
    return {s for v in graph.inputs.values() for d in v.type.shape for s in d.symbols}


def run_text(text: str, directory: Path, dtype: str = "f64", vjp: bool = False,
             few_steps: int = 0) -> Outcome:
    """One hand-written model (a bug's minimal program) through the same comparison
    (`few_steps`: as a Program's)."""
    name = re.search(r"^model (\w+)", text, re.M).group(1)
    try:
        graph = check_source(text, model=name, dtype=dtype).graph
    except MdlError as e:
        return Outcome("rejected", e.render())
    try:
        built = build(text, directory, _buckets([graph]), dtype=dtype, vjp=vjp)
    except Exception as e:  # noqa: BLE001 -- any failure of the compiler is a finding
        return _build_failure(e)
    outcomes: dict[str, Outcome] = {}
    compare_apart(built, [(name, text, frozenset(), zlib.crc32(name.encode()), few_steps)],
                  outcomes)
    return outcomes[name]


def compare_apart(built: tuple, models: list[tuple], outcomes: dict, rows: int = ROWS) -> None:
    """Each model's outcome, compared in a process of its own, so that native code that
    crashes ends that process, not the fuzzer. `models`: (name, source, lengths, seed,
    few_steps).
    A process that dies takes the model it was comparing with it (tried again alone
    when others ran before it: memory they corrupted may be what killed it); the rest
    go on in a new process."""
    pending = list(models)
    while pending:
        done, code = _compare_in_a_process(built, pending, rows)
        outcomes.update(done)
        rest = [m for m in pending if m[0] not in done]
        if not rest:
            return
        crashed, detail = rest[0], f"the process comparing it died ({code})"
        if code.startswith(f"exit status {-signal.SIGALRM}"):  # (serve's alarm)
            outcomes[crashed[0]] = Outcome("hang", f"still running after {MODEL_LIMIT_S} s")
            pending = rest[1:]
            continue
        if crashed is not pending[0]:
            alone, _ = _compare_in_a_process(built, [crashed], rows)
            if crashed[0] in alone:
                detail += (f" after {len(done)} other models ran in it; alone: "
                           f"{alone[crashed[0]].kind}")
        outcomes[crashed[0]] = Outcome("crash", detail)
        pending = rest[1:]


def _compare_in_a_process(built: tuple, models: list[tuple],
                          rows: int = ROWS) -> tuple[dict, str]:
    """The outcomes a new process (`serve`) reports before it ends, and how it ended."""
    read, write = os.pipe()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    if built[2].sanitize:  # a report ends the process: the model's outcome is a crash
        env.update(sanitizer_env(thread=built[2].emulate))
        if built[2].emulate:  # ThreadSanitizer goes on after a report unless told
            env["TSAN_OPTIONS"] += ":halt_on_error=1"
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            [sys.executable, "-c", f"import fuzz_programs; fuzz_programs.serve({write})"],
            stdin=subprocess.PIPE, stderr=errors, env=env, pass_fds=(write,))
        os.close(write)
        pickle.dump((built, models, rows), process.stdin)
        process.stdin.close()
        done = {}
        with os.fdopen(read, "rb") as results:
            while True:
                try:
                    name, kind, detail = pickle.load(results)
                except EOFError:
                    break
                done[name] = Outcome(kind, detail)
        code = process.wait()
        errors.seek(0)
        lines = errors.read().decode(errors="replace").strip().splitlines()
    # ASan's report ends with its one-line SUMMARY, UBSan's (halting, with a stack) has
    # its `runtime error:` line first; other deaths, with their last lines
    said = ([line.strip() for line in lines if "runtime error:" in line][:1]
            + [line for line in lines if line.startswith("SUMMARY:")][-1:]) or lines[-3:]
    return done, f"exit status {code}" + (": " + " / ".join(said) if said else "")


def serve(fd: int) -> None:
    """The process `compare_apart` starts: reads (built, models, rows) on stdin, imports the
    module (from the cache) and writes each model's outcome to file descriptor `fd` as
    soon as it is known. A model still running after MODEL_LIMIT_S seconds ends the
    process by SIGALRM (its default action: native code that never returns to Python
    could not run a handler), which compare_apart reports as a hang."""
    (path, module_name, options), models, rows = pickle.load(sys.stdin.buffer)
    with os.fdopen(fd, "wb") as out:
        module = import_built(path, module_name, options)
        for name, source, lengths, seed, few_steps in models:
            signal.alarm(MODEL_LIMIT_S)
            graph = check_source(source, model=name, dtype=options.dtype).graph
            outcome = compare(module, name, graph, lengths, seed, options.dtype, options.vjp,
                              rows, few_steps)
            signal.alarm(0)
            pickle.dump((name, outcome.kind, outcome.detail), out)
            out.flush()


# ---- shrinking ------------------------------------------------------------------------
def shrink(program: Program, fails, batch: int = 12, budget_s: float = 300.0) -> Program:
    """The smallest program found that still `fails`, one step at a time (largest steps
    first). `fails(candidates) -> [bool]` judges a batch at once (one build). Steps the
    front end rejects are skipped."""
    best, deadline = program, time.monotonic() + budget_s
    while time.monotonic() < deadline:
        candidates = sorted((c for c in smaller(best) if accepted(c)), key=Program.size)
        found = None
        for start in range(0, len(candidates), batch):
            chunk = candidates[start:start + batch]
            failing = [c for c, bad in zip(chunk, fails(chunk)) if bad]
            if failing or time.monotonic() > deadline:
                found = min(failing, key=Program.size, default=None)
                break
        if found is None:
            break
        best = found
    return replace(best, name=f"{program.name}_min")


def accepted(program: Program) -> bool:
    try:
        check_source(program.source(), model=program.name, dtype="f64")
        return True
    except MdlError:
        return False


def still_fails(kind: str, directory: Path, specialize: bool = True, **how):
    """The shrinker's judge: a candidate fails as the original did (`how`: run's
    target, emulate, dtype and vjp)."""
    def fails(candidates: list[Program]) -> list[bool]:
        outcomes = run(candidates, directory, specialize, **how)
        return [outcomes[c.name].kind == kind for c in candidates]
    return fails


# ---- the command ----------------------------------------------------------------------
def coverage(progs: list[Program]) -> tuple[Counter, Counter, list[str]]:
    """Constructs drawn (the generator's tags), primitives reached (the checked graphs'
    ops, structured ones included), and the programs the front end rejects."""
    constructs = sum((p.covered for p in progs), Counter())
    prims: Counter = Counter()
    rejected = []
    for p in progs:
        try:
            graph = check_source(p.source(), model=p.name, dtype="f64").graph
        except MdlError:
            rejected.append(p.name)
            continue
        prims.update(op.prim for op in walk_ops(graph.body))
    return constructs, prims, rejected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0, help="index of the first program")
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--per-module", type=int, default=PER_MODULE)
    parser.add_argument("--keep", type=Path, help="write the modules' .mdl files and the "
                        "failing programs' repros here")
    parser.add_argument("--shrink", type=int, default=3,
                        help="failing programs to minimize (0: none)")
    parser.add_argument("--target", choices=("cpu", "cuda"), default="cpu",
                        help="the backend to build for (cuda without a GPU: build only)")
    parser.add_argument("--emulate", action="store_true",
                        help="with --target cuda: build for mdl's emulated device, which "
                        "runs the programs on the CPU, and compare them")
    parser.add_argument("--dtype", choices=("f64", "f32"), default="f64",
                        help="the modules' float type (the reference runs in float64)")
    parser.add_argument("--vjp", action="store_true",
                        help="build with a backward that takes a cotangent per float "
                        "output, compared with the reference's vector-Jacobian product")
    parser.add_argument("--rows", type=int, default=ROWS,
                        help="the largest batch (B) of each program's second case, drawn "
                        f"from 1 to it (default {ROWS}; larger ones reach the kernels that "
                        "split rows into blocks and products and loops over the threads)")
    parser.add_argument("--sanitize", action="store_true",
                        help="build under AddressSanitizer and UBSan (the cpu target), or "
                        "ThreadSanitizer (--target cuda --emulate): a memory error, "
                        "undefined behaviour or a race between CUDA threads ends the "
                        "comparing process, and the program's outcome is a crash with the "
                        "sanitizer's summary")
    parser.add_argument("--profile", action="store_true",
                        help="build profiled modules (`mdlc build --profile`, the cpu "
                        "target): timing the code must change no number")
    args = parser.parse_args(argv)
    try:
        find_target(args.target, args.emulate)
    except UsageError as e:
        parser.error(str(e))
    if args.sanitize and args.target != "cpu" and not args.emulate:
        parser.error("--sanitize builds for the cpu target or the emulated device only")
    if args.rows < 1:
        parser.error(f"--rows must be at least 1, got {args.rows}")
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.keep or Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        return _fuzz(args, directory)


def _fuzz(args, directory: Path) -> int:
    start = time.monotonic()
    progs = programs(args.seed, args.programs, args.start, args.size)
    outcomes: dict[str, Outcome] = {}
    specialized: dict[str, bool] = {}
    how = dict(target=args.target, emulate=args.emulate, dtype=args.dtype, vjp=args.vjp,
               sanitize=args.sanitize, rows=args.rows, profile=args.profile)
    for i in range(0, len(progs), args.per_module):
        chunk = progs[i:i + args.per_module]
        t = time.monotonic()
        specialize = i // args.per_module % 2 == 0
        specialized.update((p.name, specialize) for p in chunk)
        found = run(chunk, directory, specialize, **how)
        outcomes.update(found)
        bad = sum(not o.ok for o in found.values())
        print(f"programs {i}..{i + len(chunk) - 1}: {bad} failing, "
              f"{time.monotonic() - t:.1f} s", flush=True)
    failures = [p for p in progs if not outcomes[p.name].ok]
    constructs, prims, _ = coverage(progs)
    print(f"\n{len(progs)} programs (seed {args.seed}, target {args.target}"
          f"{', emulated' if args.emulate else ''}, {args.dtype}"
          f"{', vjp' if args.vjp else ''}{', sanitized' if args.sanitize else ''}"
          f"{', profiled' if args.profile else ''}"
          f"{f', B up to {args.rows}' if args.rows != ROWS else ''}), "
          f"{len(failures)} failing, "
          f"{time.monotonic() - start:.0f} s")
    print("by outcome: " + ", ".join(f"{k} {v}" for k, v in
                                     Counter(o.kind for o in outcomes.values()).most_common()))
    print("constructs: " + ", ".join(f"{k} {v}" for k, v in sorted(constructs.items())))
    print("primitives: " + ", ".join(f"{k} {v}" for k, v in sorted(prims.items())))
    for n, p in enumerate(failures):
        outcome = outcomes[p.name]
        print(f"\n==== {p.name} ({outcome.kind}): {outcome.detail}\n{p.source()}")
        if n < args.shrink:
            small = shrink(p, still_fails(outcome.kind, directory, specialized[p.name],
                                          **how))
            repro = run([small], directory, specialized[p.name], **how)[small.name]
            print(f"---- minimized ({repro.kind}: {repro.detail})\n{small.source()}")
            (directory / f"{p.name}.repro.mdl").write_text(small.source())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
