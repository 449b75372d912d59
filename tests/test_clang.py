"""Builds with Clang (`CXX=clang++`, docs/build.md "Compilers"): GCC's own flags are left
out (Clang refuses -fno-tree-sink), and a module runs its threads on one OpenMP runtime,
Clang's own (libomp), or with MKL Intel's (libiomp5), on which MKL then runs its threads
too. A Clang build that linked GNU OpenMP beside libomp computed wrong numbers on two
threads: its loops' calls of omp_get_thread_num reached libgomp, which knew none of
libomp's threads, so each thread took the whole loop (the char LM's logits 0.39 off at
B = 64). Skipped where no clang++ is installed, or it has no OpenMP runtime (.ci/run
installs both from Debian's packages)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from codegen.compile import flags, runtime
from codegen.ir.diagnostics import MdlBuildError

ROOT = Path(__file__).resolve().parents[1]
CLANG = shutil.which("clang++") or next(
    (found for v in range(30, 13, -1) if (found := shutil.which(f"clang++-{v}"))), None)
pytestmark = pytest.mark.skipif(CLANG is None, reason="no clang++ on PATH")


@pytest.fixture
def clang(monkeypatch, tmp_path):
    """CXX set to Clang in this process; skips where it cannot build OpenMP code."""
    monkeypatch.setenv("CXX", CLANG)
    try:
        runtime.check_compiler(tmp_path)
    except MdlBuildError as e:
        pytest.skip(f"Clang here builds no module: {e}")
    return CLANG


def test_clang_gets_no_gcc_flags_and_one_openmp_runtime(clang):
    assert not flags.host_compiler()["gcc"]
    built = flags.compile_flags()
    assert not set(flags.GCC_CODE_FLAGS) & set(built)
    assert runtime.glue_level(["-O3"]) == list(runtime.GLUE_OPTIMIZATION)
    linked = flags.link_flags(False)
    assert "-lgomp" not in linked
    omp = flags.openmp()
    assert f"-l{omp.library}" in linked and omp.flag in built
    assert omp.library == ("iomp5" if flags.blas().name == "mkl" else "omp")


CHECK = """
import numpy as np
from codegen.pipeline import load
from codegen.reference import gradcheck, interpreter as reference
from dsl import check_file
path = "examples/charlm.mdl"
module = load(path, dtype="f64", defines={"H": 64}, name="charlm_clang_f64")
module.set_num_threads(2)
graph = check_file(path, model="CharLM", dtype="f64", defines={"H": 64}).graph
m = module.CharLM(seed=3)
inputs = gradcheck.random_inputs(graph, {"T": 5, "B": 64}, np.random.default_rng(2))
params = {k: np.array(v) for k, v in m.params.items()}
got = m.forward(**inputs, training=True)
grads = m.backward()
want = reference.run(graph, inputs, params)
wanted = reference.gradients(graph, inputs, params)
def error(a, b):
    return float(np.abs(np.asarray(a) - b).max() / max(np.abs(b).max(), 1e-300))
worst = max([error(got[k], want[k]) for k in want] +
            [error(grads[k], wanted.params[k]) for k in wanted.params])
print("compiler", open(module.__file__, "rb").read().count(b"clang") > 0, "worst", worst)
assert worst < 1e-10, worst
"""


def test_a_clang_build_on_two_threads_computes_what_the_reference_does(clang):
    """The char LM in f64 at B = 64, where its loops and products split over two
    threads: its outputs and gradients within 1e-10 of the reference's. In a process of
    its own, whose only OpenMP runtime is the one a Clang build links."""
    env = {**os.environ, "CXX": clang, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "compiler True" in done.stdout, done.stdout
