"""Builds with Clang (`CXX=clang++`, docs/build.md "Compilers: GCC and Clang"): GCC's own
flags are left out (Clang refuses -fno-tree-sink), and a module's own code runs on one
OpenMP runtime, Clang's (libomp), whose calls it binds to libomp's versioned symbols. A
Clang build that linked GNU OpenMP beside libomp computed wrong numbers on two threads:
its calls of omp_get_thread_num reached libgomp, which knew none of libomp's threads, so
each thread took the whole loop (the char LM's logits 0.39 off at B = 64). And MKL's Intel
threading layer took omp_get_thread_num from the GNU OpenMP that PyTorch loads for the
whole process, which doubled gradients: Clang builds take OpenBLAS, which runs its parallel
parts on mdl's pool, unless MDL_BLAS=mkl, which keeps MKL on its GNU layer. Skipped where
no clang++ is installed, or it has no OpenMP runtime (.ci/run installs both from Debian's
packages)."""
from __future__ import annotations

import os
import re
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
    monkeypatch.delenv("MDL_BLAS", raising=False)
    try:
        runtime.check_compiler(tmp_path)
    except MdlBuildError as e:
        pytest.skip(f"Clang here builds no module: {e}")
    return CLANG


def test_clang_gets_no_gcc_flags_and_one_openmp_runtime(clang):
    assert not flags.host_compiler()["gcc"]
    built = flags.compile_flags()
    assert "-fopenmp" in built and not set(flags.GCC_CODE_FLAGS) & set(built)
    assert runtime.glue_level(["-O3"]) == list(runtime.GLUE_OPTIMIZATION)
    linked = flags.link_flags(False)
    assert "-lomp" in linked and "-lgomp" not in linked
    assert flags.blas().name == "openblas"


# Run in a process of its own: PyTorch's GNU OpenMP loaded first where PyTorch is installed,
# its threads started by a backward, as a user's process that holds both has them; then the
# char LM at B = 64 (its loops and products split over two threads) and the bidirectional
# tagger (two loops that run at once), both in f64, against the reference.
CHECK = """
import numpy as np
try:
    import torch
    x = torch.randn(64, 64, requires_grad=True)
    (x @ x).tanh().sum().backward()
except ImportError:
    pass
from codegen.pipeline import load
from codegen.reference import gradcheck, interpreter as reference
from dsl import check_file

def error(a, b):
    return float(np.abs(np.asarray(a) - b).max() / max(np.abs(b).max(), 1e-300))

worst = 0.0
for path, model, defines in (("examples/charlm.mdl", "CharLM", {"H": 64}),
                             ("examples/bidirectional.mdl", "BiTagger", {})):
    module = load(path, dtype="f64", defines=defines, name=f"{model.lower()}_clang")
    module.set_num_threads(2)
    graph = check_file(path, model=model, dtype="f64", defines=defines).graph
    m = getattr(module, model)(seed=3)
    inputs = gradcheck.random_inputs(graph, {"T": 5, "B": 64}, np.random.default_rng(2))
    params = {k: np.array(v) for k, v in m.params.items()}
    got = m.forward(**inputs, training=True)
    grads = m.backward()
    want = reference.run(graph, inputs, params)
    wanted = reference.gradients(graph, inputs, params)
    worst = max([worst] + [error(got[k], want[k]) for k in want] +
                [error(grads[k], wanted.params[k]) for k in wanted.params])
    print(model, "by clang", b"clang version" in open(module.__file__, "rb").read())
print("worst", worst)
assert worst < 1e-10, worst
"""


@pytest.mark.parametrize("blas", ["", "mkl"])
def test_a_clang_build_on_two_threads_computes_what_the_reference_does(clang, blas):
    """Outputs and gradients within 1e-10 of the reference's, with Clang's BLAS (OpenBLAS)
    and with MKL where it is installed."""
    env = {**os.environ, "CXX": clang, "PYTHONPATH": str(ROOT), "MDL_BLAS": blas}
    if blas == "mkl":
        from codegen.compile.blas import _mkl
        if _mkl() is None:
            pytest.skip("MKL is not installed")
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("by clang True") == 2, done.stdout


def test_clangs_elementwise_loops_vectorize(clang, tmp_path):
    """Every loop the cpu target marks as independent (MDL_VECTORIZE, mdl/vector_math.h)
    in the char LM's module is vectorized by Clang, but those that call a function Clang 14
    has no vector version of (tanh, expm1, log1p, erf: docs/build.md). With GCC's `ivdep`
    alone, which Clang ignores, its cost model left the LSTM step's backward loops (13
    pointers, each pair checked for overlap) scalar."""
    from codegen.compile.options import BuildOptions
    from codegen.pipeline import sources
    from test_vectorized import CHARLM, math_loops
    _, files = sources(CHARLM, "charlm_clang_vec", BuildOptions(model="CharLM"))
    text = files["module.cpp"]
    marked = set(math_loops(text, "."))
    scalar = set(math_loops(text, r"std::(tanh|expm1|log1p|erfc?)\("))
    source = tmp_path / "module.cpp"
    source.write_text(text)
    done = subprocess.run([clang, *flags.compile_flags(),
                           *(f"-I{d}" for d in flags.include_dirs()), "-c", str(source),
                           "-o", str(tmp_path / "module.o"), "-Rpass=loop-vectorize",
                           "-Rpass-missed=loop-vectorize"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    found = lambda said: {int(n) for n in re.findall(  # noqa: E731
        rf"module\.cpp:(\d+):\d+: remark: {said}", done.stderr)}
    assert marked - scalar & found("vectorized loop"), "no marked loop vectorized"
    assert not (marked - scalar) & found("loop not vectorized"), \
        sorted((marked - scalar) & found("loop not vectorized"))
