"""The differential fuzzer: random well-typed programs (tests/fuzz_generate.py), many to
one module, built natively in f64 and run in the NumPy reference interpreter on random
inputs; the inference outputs, the training outputs and every gradient (parameters and
float inputs) compared. Each program runs twice on one instance: at T=4, B=3 (the
specialized code, in every other module: built with `--specialize T=4,B=3`), then at
random dims (the generic code).

    python3 tests/fuzz_programs.py --programs 300 --seed 0 [--keep DIR]

prints a summary (programs, constructs and primitives covered, failures) and, for each
failing program, its source and a minimized repro: statements dropped while the
failure remains. Exit status 1 when a program fails.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from codegen import gradcheck, reference
from codegen.ir import walk_ops
from codegen.pipeline import BuildOptions, differentiate, for_backends, load
from codegen.pipeline import build as pipeline_build
from codegen.rng import derive
from dsl import MdlError, check_source
from dsl.diagnostics import MdlBuildError

from fuzz_generate import SIZES, generate
from fuzz_source import Program, module_source, smaller

TOLERANCE = 1e-9               # relative to the largest element, both sides in f64
# An array is compared relative to its largest element, but never to less than NOISE
# times the largest value of the case: rounding noise stays that far below it.
NOISE = 1e-6
SPECIALIZED = {"T": 4, "B": 3}
PER_MODULE = 25


@dataclass
class Outcome:
    kind: str   # ok, rejected, compiler, build, crash, native, reference, domain, mismatch
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


def programs(seed: int, count: int, start: int = 0, size: str = "small") -> list[Program]:
    return [generate(seed, i, size) for i in range(start, start + count)]


def run(progs: list[Program], directory: Path, specialize: bool = True) -> dict[str, Outcome]:
    """Every program's outcome, built as one module (`specialize`: with code for
    SPECIALIZED too). A program the front end rejects is the generator's bug; one that
    breaks its module's build is found by building halves."""
    outcomes: dict[str, Outcome] = {}
    graphs = {}
    for p in progs:
        try:
            graphs[p.name] = check_source(p.source(), model=p.name, dtype="f64").graph
        except MdlError as e:
            outcomes[p.name] = Outcome("rejected", e.render())
    checked = [p for p in progs if p.name in graphs]
    _build_and_compare(checked, graphs, directory, specialize, outcomes)
    return outcomes


def _build_and_compare(progs, graphs, directory: Path, specialize: bool, outcomes) -> None:
    if not progs:
        return
    fits = specialize and any(set(SPECIALIZED) <= _dims(graphs[p.name]) for p in progs)
    try:
        built = build(module_source(progs), directory, [SPECIALIZED] if fits else [])
    except Exception as e:  # noqa: BLE001 -- any failure of the compiler is a finding
        if len(progs) > 1:
            half = len(progs) // 2
            for part in (progs[:half], progs[half:]):
                _build_and_compare(part, graphs, directory, specialize, outcomes)
            return
        outcomes[progs[0].name] = _build_failure(e)
        return
    compare_apart(built, [(p.name, p.source(), p.lengths, p.seed) for p in progs], outcomes)


def _build_failure(e: Exception) -> Outcome:
    return Outcome("build" if isinstance(e, MdlBuildError) else "compiler",
                   f"{type(e).__name__}: {e}")


def build(text: str, directory: Path, specialize: list[dict]) -> tuple:
    """Builds the module of a .mdl text in f64 (one class per model), named after the
    text so that a build seen before comes from the cache; what `load` needs to import
    it: (path, name, specialize)."""
    name = "fuzz_" + hashlib.sha256(text.encode()).hexdigest()[:12]
    path = directory / f"{name}.mdl"
    path.write_text(text)
    options = BuildOptions(dtype="f64", specialize=specialize)
    pipeline_build(path, name, options, progress=False)
    return str(path), name, specialize


def _dims(graph) -> set[str]:
    return {s for v in graph.inputs.values() for d in v.type.shape for s in d.symbols}


def run_text(text: str, directory: Path) -> Outcome:
    """One hand-written model (a bug's minimal program) through the same comparison."""
    name = re.search(r"^model (\w+)", text, re.M).group(1)
    try:
        graph = check_source(text, model=name, dtype="f64").graph
    except MdlError as e:
        return Outcome("rejected", e.render())
    try:
        built = build(text, directory,
                      [SPECIALIZED] if set(SPECIALIZED) <= _dims(graph) else [])
    except Exception as e:  # noqa: BLE001 -- any failure of the compiler is a finding
        return _build_failure(e)
    outcomes: dict[str, Outcome] = {}
    compare_apart(built, [(name, text, frozenset(), zlib.crc32(name.encode()))], outcomes)
    return outcomes[name]


def compare_apart(built: tuple, models: list[tuple], outcomes: dict) -> None:
    """Each model's outcome, compared in a process of its own, so that native code that
    crashes ends that process, not the fuzzer. `models`: (name, source, lengths, seed).
    A process that dies takes the model it was comparing with it (tried again alone
    when others ran before it: memory they corrupted may be what killed it); the rest
    go on in a new process."""
    pending = list(models)
    while pending:
        done, code = _compare_in_a_process(built, pending)
        outcomes.update(done)
        rest = [m for m in pending if m[0] not in done]
        if not rest:
            return
        crashed, detail = rest[0], f"the process comparing it died ({code})"
        if crashed is not pending[0]:
            alone, _ = _compare_in_a_process(built, [crashed])
            if crashed[0] in alone:
                detail += (f" after {len(done)} other models ran in it; alone: "
                           f"{alone[crashed[0]].kind}")
        outcomes[crashed[0]] = Outcome("crash", detail)
        pending = rest[1:]


def _compare_in_a_process(built: tuple, models: list[tuple]) -> tuple[dict, str]:
    """The outcomes a new process (`serve`) reports before it ends, and how it ended."""
    read, write = os.pipe()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            [sys.executable, "-c", f"import fuzz_programs; fuzz_programs.serve({write})"],
            stdin=subprocess.PIPE, stderr=errors, env=env, pass_fds=(write,))
        os.close(write)
        pickle.dump((built, models), process.stdin)
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
        said = errors.read().decode(errors="replace").strip().splitlines()[-3:]
    return done, f"exit status {code}" + (": " + " / ".join(said) if said else "")


def serve(fd: int) -> None:
    """The process `compare_apart` starts: reads (built, models) on stdin, imports the
    module (from the cache) and writes each model's outcome to file descriptor `fd` as
    soon as it is known."""
    (path, module_name, specialize), models = pickle.load(sys.stdin.buffer)
    with os.fdopen(fd, "wb") as out:
        module = load(path, dtype="f64", name=module_name, specialize=specialize)
        for name, source, lengths, seed in models:
            graph = check_source(source, model=name, dtype="f64").graph
            outcome = compare(module, name, graph, lengths, seed)
            pickle.dump((name, outcome.kind, outcome.detail), out)
            out.flush()


def compare(module, name: str, graph, lengths: set[str] = frozenset(),
            seed: int = 0) -> Outcome:
    """The native model `name` against the reference: at the specialized dims, then at
    others, one instance for both (what the first call leaves behind must not matter).
    `lengths`: the inputs that are a loop's lengths. Parameters and inputs are drawn
    from `seed` and their names, so a smaller program keeps the values of the rest."""
    model = getattr(module, name)(seed=seed % 1000)
    for param, value in model.params.items():
        value[...] = 0.5 * stream(seed, "param", param).standard_normal(value.shape)
    dims = stream(seed, "dims")
    other = {"T": int(dims.integers(1, 7)), "B": int(dims.integers(1, 4))}
    for case in (SPECIALIZED, other):
        outcome = compare_case(model, graph, case, lengths, seed % 1000)
        if not outcome.ok:
            return Outcome(outcome.kind, f"at {case}: {outcome.detail}")
    return Outcome("ok")


def stream(seed: int, *labels) -> np.random.Generator:
    """A random stream of its own for `seed` and `labels`."""
    return np.random.default_rng([seed] + [zlib.crc32(str(x).encode()) for x in labels])


def compare_case(model, graph, dims: dict, lengths: set[str], seed: int) -> Outcome:
    params = {k: np.array(v) for k, v in model.params.items()}
    inputs = case_inputs(graph, dims, lengths, seed)
    calls = model.rng_calls + 1   # the training forward's dropout stream
    try:
        got = model.forward(**inputs)
        got_train = model.forward(**inputs, training=True)
        grads = model.backward()
    except Exception as e:  # noqa: BLE001 -- a native error is a finding
        return Outcome("native", f"{type(e).__name__}: {e}")
    try:
        want = reference.run(graph, inputs, params)
        want_train = reference.gradients(graph, inputs, params, training=True,
                                         seed=derive(seed, calls))
    except Exception as e:  # noqa: BLE001 -- the reference is under test too
        return Outcome("reference", f"{type(e).__name__}: {e}")
    expected = {**want_train.params, **{f"input:{k}": v for k, v in want_train.inputs.items()}}
    checks = (("output", got, want), ("training output", got_train, want_train.outputs),
              ("gradient", grads, expected))
    for what, _, arrays in checks:
        bad = [k for k, a in arrays.items() if not np.all(np.isfinite(a))]
        if bad:
            return Outcome("domain", f"the reference's {what} {bad[0]} is not finite")
    floor = NOISE * max(float(np.abs(a).max(initial=0.0)) for _, _, arrays in checks
                        for a in arrays.values())
    diffs = [f"{what} {k}: {d}" for what, mine, theirs in checks
             for k, d in differences(mine, theirs, floor).items()]
    if not diffs:
        return Outcome("ok")
    stage = blame(graph, inputs, params, derive(seed, calls), checks, floor)
    wrong = [k for k in differences(grads, expected, floor) if k in grads and k in expected]
    if wrong:
        stage += "; " + side(graph, inputs, params, derive(seed, calls), wrong[0],
                             grads[wrong[0]], expected[wrong[0]])
    return Outcome("mismatch", "; ".join(diffs) + f" ({stage})")


def blame(graph, inputs: dict, params: dict, seed: int, checks, floor: float) -> str:
    """Which stage a mismatch comes from: the graphs the backend is handed (after the
    passes), run in the reference, already differ; or they agree and the backend does
    not."""
    try:
        ready = reference.run(for_backends(graph), inputs, params)
        joint = reference.run(differentiate(graph), inputs, params, training=True, seed=seed)
    except Exception as e:  # noqa: BLE001 -- a pass that breaks the graph is a finding
        return f"the graphs after the passes do not run: {type(e).__name__}: {e}"
    grads = {k.split(":", 2)[2] if k.startswith("grad:param:") else k[5:]: v
             for k, v in joint.items() if k.startswith("grad:")}
    optimized = (ready, {k: joint[k] for k in graph.outputs}, grads)
    wrong = [f"{what} {k}" for (what, _, want), got in zip(checks, optimized)
             for k in differences(got, want, floor)]
    if wrong:
        return "the graphs after the passes already differ: " + ", ".join(wrong)
    return "the graphs after the passes agree with the reference: the backend differs"


def case_inputs(graph, dims: dict, lengths: set[str], seed: int) -> dict:
    """Random inputs with valid integers (gradcheck's bounds), each from a stream of its
    own (drawn with the others and kept alone); a row of a lengths input is sometimes
    empty."""
    inputs = {}
    for name in graph.inputs:
        rng = stream(seed, "input", name, dims)
        inputs[name] = gradcheck.random_inputs(graph, dims, rng)[name]
        if name in lengths and rng.random() < 0.3:
            inputs[name][rng.integers(0, len(inputs[name]))] = 0
    return inputs


def differences(got: dict, want: dict, floor: float = 0.0) -> dict[str, str]:
    """What differs between two {name: array}: a missing or extra name, a shape, or an
    error above TOLERANCE relative to the largest element (or to `floor`: a gradient
    that is zero in exact arithmetic is rounding noise on both sides)."""
    out = {k: "missing" for k in want if k not in got}
    out.update({k: "not expected" for k in got if k not in want})
    for k in set(got) & set(want):
        a, b = np.asarray(got[k], np.float64), np.asarray(want[k], np.float64)
        if a.shape != b.shape:
            out[k] = f"shape {list(a.shape)}, expected {list(b.shape)}"
            continue
        scale = max(float(np.abs(b).max(initial=0.0)), floor, 1e-300)
        error = float(np.abs(a - b).max(initial=0.0)) / scale
        if not error <= TOLERANCE:  # NaN included
            out[k] = f"relative error {error:.3g}"
    return out


def side(graph, inputs: dict, params: dict, seed: int, name: str, got, want) -> str:
    """Which side central differences of the reference's loss agree with, at the
    element of gradient `name` where the two differ most."""
    if got.shape != want.shape:
        return "shapes differ"
    target = inputs[name[6:]] if name.startswith("input:") else params[name]
    i = np.unravel_index(np.argmax(np.abs(got - want)), got.shape)
    old, eps, losses = target[i], 1e-6, []
    for value in (old + eps, old - eps):
        target[i] = value
        losses.append(float(reference.run(graph, inputs, params, training=True,
                                          seed=seed)[graph.loss]))
    target[i] = old
    numeric = (losses[0] - losses[1]) / (2 * eps)
    closer = "the reference" if abs(numeric - want[i]) <= abs(numeric - got[i]) else "native"
    return (f"{name}{list(map(int, i))}: native {got[i]:.6g}, reference {want[i]:.6g}, "
            f"central differences {numeric:.6g}: {closer} is right")


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


def still_fails(kind: str, directory: Path, specialize: bool = True):
    """The shrinker's judge: a candidate fails as the original did."""
    def fails(candidates: list[Program]) -> list[bool]:
        outcomes = run(candidates, directory, specialize)
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
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.keep or Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        return _fuzz(args, directory)


def _fuzz(args, directory: Path) -> int:
    start = time.monotonic()
    progs = programs(args.seed, args.programs, args.start, args.size)
    outcomes: dict[str, Outcome] = {}
    specialized: dict[str, bool] = {}
    for i in range(0, len(progs), args.per_module):
        chunk = progs[i:i + args.per_module]
        t = time.monotonic()
        specialize = i // args.per_module % 2 == 0
        specialized.update((p.name, specialize) for p in chunk)
        found = run(chunk, directory, specialize)
        outcomes.update(found)
        bad = sum(not o.ok for o in found.values())
        print(f"programs {i}..{i + len(chunk) - 1}: {bad} failing, "
              f"{time.monotonic() - t:.1f} s", flush=True)
    failures = [p for p in progs if not outcomes[p.name].ok]
    constructs, prims, _ = coverage(progs)
    print(f"\n{len(progs)} programs (seed {args.seed}), {len(failures)} failing, "
          f"{time.monotonic() - start:.0f} s")
    print("by outcome: " + ", ".join(f"{k} {v}" for k, v in
                                     Counter(o.kind for o in outcomes.values()).most_common()))
    print("constructs: " + ", ".join(f"{k} {v}" for k, v in sorted(constructs.items())))
    print("primitives: " + ", ".join(f"{k} {v}" for k, v in sorted(prims.items())))
    for n, p in enumerate(failures):
        outcome = outcomes[p.name]
        print(f"\n==== {p.name} ({outcome.kind}): {outcome.detail}\n{p.source()}")
        if n < args.shrink:
            small = shrink(p, still_fails(outcome.kind, directory, specialized[p.name]))
            repro = run([small], directory, specialized[p.name])[small.name]
            print(f"---- minimized ({repro.kind}: {repro.detail})\n{small.source()}")
            (directory / f"{p.name}.repro.mdl").write_text(small.source())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
