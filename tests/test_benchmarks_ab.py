"""benchmarks/ab.py (`python -m benchmarks.ab`): the suite's mdl models built two ways and
timed in one process, on tiny sizes: every case and pass gets a row with both builds'
times and their ratio, and builds that compute other numbers are refused."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import ab
from benchmarks.cases import Bench

REPO = Path(__file__).resolve().parents[1]
THREADS = min(2, len(os.sched_getaffinity(0)))


def _ab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.ab", "--quick",
                           "--threads", str(THREADS), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=600)


def test_two_builds_get_a_row_per_case_and_pass_with_their_ratio():
    """The machine's default build against one whose products all go to the BLAS (the
    default shares the runtime the rest of the suite built; each other variant builds
    its own, its BLAS flags being part of the runtime's key)."""
    done = _ab("--variant", "default",
               "--variant", "blas", "MDL_SMALL_PRODUCTS=blas",
               "--only", "lstm", "generation", "--rounds", "2", "--turn", "1",
               "--pause", "0")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "| case | pass | default | blas | blas / default |"
    rows = [line.split(" | ") for line in lines[2:]]
    assert [r[1] for r in rows] == ["training step", "forward", "generation step"]
    for row in rows:
        assert re.fullmatch(r"[\d.]+ (us|ms)", row[2]) and re.fullmatch(r"[\d.]+ (us|ms)", row[3])
        assert float(row[4].rstrip(" |")) > 0


@pytest.mark.parametrize("args, says", [
    (["--variant", "one", "MDL_BLAS=mkl"], "at least two --variant"),
    (["--variant", "a", "MDL_BLAS", "--variant", "b"], "'MDL_BLAS' is not VAR=VALUE"),
    (["--variant", "a", "--variant", "b", "--only", "nothing"], "no such case"),
])
def test_a_bad_command_says_what_is_wrong(args, says):
    done = _ab(*args)
    assert done.returncode != 0 and says in done.stderr


def _bench(hs: np.ndarray) -> Bench:
    return Bench({}, lambda: {"loss": np.float32(hs.sum()), "h": hs})


def test_builds_whose_outputs_differ_are_not_timed():
    hs = np.linspace(1, 2, 12, dtype=np.float32)
    ab._check("case", ["a", "b"], [_bench(hs), _bench(hs + 1e-7)])  # within the tolerance
    with pytest.raises(SystemExit, match="b's outputs differ from a's"):
        ab._check("case", ["a", "b"], [_bench(hs), _bench(hs * 1.01)])


def test_dims_resize_every_case_chosen_and_name_it_anew():
    from benchmarks.cases import by_name
    case = by_name("lstm-t35-b1-h128", False)
    wider = ab._resized(case, ["H=512", "B=4"])
    assert wider.name == "lstm-t35-b4-h512" and wider.dims == {"T": 35, "B": 4, "H": 512}
    assert wider.group == case.group and wider.passes == case.passes
    assert ab._resized(case, []) is case
    with pytest.raises(SystemExit, match="--dims K=3: expected one of T=N, B=N, H=N"):
        ab._resized(case, ["K=3"])
