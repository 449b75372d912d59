"""`python -m benchmarks.ab`: the suite's mdl models built two or more ways (by the
environment each build sees: MDL_BLAS, MDL_SMALL_PRODUCTS, MDL_MARCH, ...) and timed in
ONE process, the builds taking turns call by call. A build choice is decided by such
paired runs, not by two runs of the suite: on the 2-core VMs a process's speed moves
1.2-1.6x within minutes, and a slow spell then lands on every build alike.

    python -m benchmarks.ab --variant mkl MDL_BLAS=mkl MDL_SMALL_PRODUCTS=blas \\
        --variant own MDL_BLAS=mkl MDL_SMALL_PRODUCTS=own --only lstm generation

Per case and pass: each build's median time, and the median over rounds of its time over
the first build's (the ratio of each round's pair). Before timing, every build's loss and
gradients (or final states, or tokens) are compared with the first build's."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import replace

from benchmarks.cases import Case, cases, select
from benchmarks.measure import TOLERANCE, relative_error
from benchmarks.worker import _limit_threads, _ms

VARIABLES = ("MDL_BLAS", "MDL_SMALL_PRODUCTS", "MDL_MARCH")  # reset for every build


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    variants = [_variant(v) for v in args.variant]
    if len(variants) < 2:
        sys.exit("benchmarks.ab: give at least two --variant LABEL [VAR=VALUE ...]")
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = str(args.threads)
    _limit_threads(args.threads)
    try:
        chosen = [_resized(c, args.dims) for c in select(cases(args.quick), args.only,
                                                         args.quick)]
    except ValueError as e:
        sys.exit(f"benchmarks.ab: {e}")
    print(f"| case | pass | {' | '.join(label for label, _ in variants)} | "
          f"{' | '.join(f'{label} / {variants[0][0]}' for label, _ in variants[1:])} |")
    print("| --- " * (2 + 2 * len(variants) - 1) + "|")
    for case in chosen:
        benches = [_setup(case, env) for _, env in variants]
        _check(case.name, [label for label, _ in variants], benches)
        for pass_name in benches[0].passes:
            runs = [b.passes[pass_name] for b in benches]
            times = _alternate(runs, args.rounds, args.pause, args.turn)
            medians = [statistics.median(t) for t in times]
            ratios = [statistics.median(x / y for x, y in zip(t, times[0])) for t in times[1:]]
            print(f"| {case.name} | {pass_name} | "
                  f"{' | '.join(_fmt(m) for m in medians)} | "
                  f"{' | '.join(f'{r:.3f}' for r in ratios)} |", flush=True)
        del benches
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", nargs="+", action="append", required=True,
                   metavar=("LABEL", "VAR=VALUE"),
                   help="a build: its label, then the variables its build sees (the "
                        f"others of {', '.join(VARIABLES)} unset); twice or more")
    p.add_argument("--only", nargs="+", default=[], metavar="NAME",
                   help="the suite's groups, case names or patterns (default: all cases)")
    p.add_argument("--rounds", type=int, default=15,
                   help="turns of each build per pass (default 15)")
    p.add_argument("--dims", nargs="+", default=[], metavar="D=N",
                   help="sizes in place of the suite's, in every case chosen (B=8 H=256)")
    p.add_argument("--quick", action="store_true",
                   help="the suite's tiny sizes: a check that the comparison works")
    p.add_argument("--threads", type=int, default=2, help="threads of every build")
    p.add_argument("--turn", type=float, default=50,
                   help="milliseconds of calls a turn times, at least one call (default 50)")
    p.add_argument("--pause", type=float, default=0.25,
                   help="seconds between turns, for the threads of the turn before to "
                        "stop spinning (default 0.25, as the suite)")
    return p


def _variant(words: list[str]) -> tuple[str, dict[str, str]]:
    label, *pairs = words
    env = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not name:
            sys.exit(f"benchmarks.ab: --variant {label}: {pair!r} is not VAR=VALUE")
        env[name] = value
    return label, env


def _resized(case: Case, dims: list[str]) -> Case:
    """The case with the sizes `--dims` gives (T=, B=, H=) in place of the suite's."""
    new = dict(case.dims)
    for pair in dims:
        name, eq, value = pair.partition("=")
        if not eq or name not in new or not value.isdigit():
            sys.exit(f"benchmarks.ab: --dims {pair}: expected one of "
                     f"{', '.join(f'{k}=N' for k in new)}")
        new[name] = int(value)
    if new == case.dims:
        return case
    name = "-".join([case.group, *([case.loop] if case.loop else []),
                     *(f"{k.lower()}{v}" for k, v in new.items())])
    return replace(case, name=name, dims=new)


def _setup(case: Case, env: dict[str, str]):
    """The case's mdl model built (through the cache) as the variant's environment says.
    The choices are read when a build starts (codegen/compile/blas.py, flags.py): setting
    the variables and forgetting the cached choice is what a fresh process would do."""
    from benchmarks import mdl_models
    from codegen.compile import blas
    for name in VARIABLES:
        os.environ.pop(name, None)
    os.environ.update(env)
    blas.blas.cache_clear()
    return mdl_models.setup(case)


def _check(case_name: str, labels: list[str], benches) -> None:
    first = benches[0].check()
    for label, bench in zip(labels[1:], benches[1:]):
        err = relative_error(first, bench.check())
        if err > TOLERANCE:
            sys.exit(f"benchmarks.ab: {case_name}: {label}'s outputs differ from "
                     f"{labels[0]}'s (relative error {err:.1e})")


def _alternate(runs, rounds: int, pause: float, turn: float) -> list[list[float]]:
    """Each round, every build one untimed call and then its timed calls (`turn` ms of
    the first build's), the order turning from round to round."""
    for run in runs:
        run()
    calls = max(1, int(turn / max(_ms(runs[0]), 1e-3)))
    times: list[list[float]] = [[] for _ in runs]
    for r in range(rounds):
        order = list(range(len(runs)))
        order = order[r % len(runs):] + order[:r % len(runs)]
        for i in order:
            time.sleep(pause)
            runs[i]()
            times[i].append(_ms(runs[i], calls))
    return times


def _fmt(ms: float) -> str:
    return f"{ms * 1e3:.3g} us" if ms < 0.1 else f"{ms:.3g} ms"


if __name__ == "__main__":
    sys.exit(main())
