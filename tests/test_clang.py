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
    in the char LM's module is vectorized by Clang, its LSTM gates' calls of tanh too
    (mdl::simd_tanh: Clang 14 has no vector tanh of libmvec's); only `erf` and `erfc`
    would leave a loop scalar (docs/build.md). With GCC's `ivdep` alone, which Clang
    ignores, its cost model left the LSTM step's backward loops (13 pointers, each pair
    checked for overlap) scalar; with std::tanh, the gates' loops."""
    from codegen.compile.options import BuildOptions
    from codegen.pipeline import sources
    from test_vectorized import CHARLM, math_loops
    _, files = sources(CHARLM, "charlm_clang_vec", BuildOptions(model="CharLM"))
    text = files["module.cpp"]
    marked = set(math_loops(text, "."))
    scalar = set(math_loops(text, r"std::erfc?\("))
    assert math_loops(text, r"mdl::simd_tanh\("), "no tanh loop: the test reads the wrong code"
    vectorized, missed = clang_remarks(clang, text, tmp_path)
    assert marked - scalar & vectorized, "no marked loop vectorized"
    assert not (marked - scalar) & missed, sorted((marked - scalar) & missed)


def clang_remarks(clang, text: str, directory: Path) -> tuple[set[int], set[int]]:
    """The lines of the loops Clang vectorized and of those it did not, compiling `text`
    as a model's module."""
    source = directory / "module.cpp"
    source.write_text(text)
    done = subprocess.run([clang, *flags.compile_flags(),
                           *(f"-I{d}" for d in flags.include_dirs()), "-c", str(source),
                           "-o", str(directory / "module.o"), "-Rpass=loop-vectorize",
                           "-Rpass-missed=loop-vectorize"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    found = lambda said: {int(n) for n in re.findall(  # noqa: E731
        rf"module\.cpp:(\d+):\d+: remark: {said}", done.stderr)}
    return found("vectorized loop"), found("loop not vectorized")


SOFTPLUS = """
model Soft() {
  input x : f32[B, 64]
  param w : f32[64, 64] = normal(0, 0.1)
  y = softplus(x @ w)
  output loss = mean(y * y)
  minimize loss
}
"""


def test_clangs_softplus_loops_vectorize(clang, tmp_path):
    """softplus calls log1p, which Clang 14 has no vector version of: the cpu target's
    loops call mdl::simd_softplus (mdl/vector_math.h), on simd_log1p; with mdl::softplus
    (std::log1p) its loop stayed scalar."""
    from codegen.compile.options import BuildOptions
    from codegen.pipeline import sources
    from test_vectorized import math_loops
    model = tmp_path / "soft.mdl"
    model.write_text(SOFTPLUS)
    _, files = sources(model, "soft_clang_vec", BuildOptions(model="Soft"))
    text = files["module.cpp"]
    loops = set(math_loops(text, r"mdl::simd_softplus\("))
    assert loops, "no softplus loop: the test reads the wrong code"
    vectorized, missed = clang_remarks(clang, text, tmp_path)
    assert loops <= vectorized and not loops & missed, (sorted(loops), sorted(vectorized))


# mdl/vector_math.h's simd_tanh, simd_expm1 and simd_log1p, as Clang builds them, beside
# glibc's: over every 997th f32 in [-20, 20] and 200,000 f64 from 1e-40 to 1e5 of both
# signs, and special arguments, their worst error in ulps (NaN, infinity, the sign of 0 and
# any other value where glibc's is not finite must be glibc's exactly: 1e9 ulps otherwise).
ULPS = r"""
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>
#include "mdl/vector_math.h"

template <class T> double ulps(T got, T want) {
  if (!std::isfinite(want) || want == 0)
    return (got == want && std::signbit(got) == std::signbit(want)) ||
           (std::isnan(got) && std::isnan(want)) ? 0 : 1e9;
  if (!std::isfinite(got) || std::signbit(got) != std::signbit(want)) return 1e9;
  const T step = std::nextafter(std::fabs(want), std::numeric_limits<T>::infinity()) -
                 std::fabs(want);
  return std::fabs(double(got) - double(want)) / step;
}

#define SWEEP(T, fn)                                                            \
  __attribute__((noinline)) void fn##_##T(T* __restrict o, const T* __restrict x, \
                                          int64_t n) {                          \
    for (int64_t i = 0; i < n; ++i) o[i] = mdl::simd_##fn(x[i]);                \
  }
SWEEP(float, tanh) SWEEP(float, expm1) SWEEP(float, log1p)
SWEEP(double, tanh) SWEEP(double, expm1) SWEEP(double, log1p)

template <class T>
void report(const char* name, void (*fn)(T*, const T*, int64_t), T (*libm)(T),
            const std::vector<T>& xs) {
  std::vector<T> out(xs.size());
  fn(out.data(), xs.data(), int64_t(xs.size()));
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) worst = std::fmax(worst, ulps(out[i], libm(xs[i])));
  std::printf("%s %g\n", name, worst);
}

int main() {
  const float inf = INFINITY;
  std::vector<float> xf = {0.f, -0.f, inf, -inf, NAN, -1.f, -2.f, 88.f, 89.f, -104.f, 3e38f};
  for (uint32_t b = 0; b < 0x41a00000u; b += 997) {
    float f;
    std::memcpy(&f, &b, 4);
    xf.push_back(f);
    xf.push_back(-f);
  }
  std::vector<double> xd = {0.0, -0.0, double(inf), -double(inf), double(NAN), -1.0, 709.0,
                            710.0, -745.0, 1e300, 19.0, 20.0};
  std::mt19937_64 g(1);
  std::uniform_real_distribution<double> decade(-40, 5);
  for (int i = 0; i < 200000; ++i) xd.push_back((i % 2 ? 1 : -1) * std::pow(10.0, decade(g)));
  report<float>("tanh_f32", tanh_float, [](float x) { return std::tanh(x); }, xf);
  report<float>("expm1_f32", expm1_float, [](float x) { return std::expm1(x); }, xf);
  report<float>("log1p_f32", log1p_float, [](float x) { return std::log1p(x); }, xf);
  report<double>("tanh_f64", tanh_double, [](double x) { return std::tanh(x); }, xd);
  report<double>("expm1_f64", expm1_double, [](double x) { return std::expm1(x); }, xd);
  report<double>("log1p_f64", log1p_double, [](double x) { return std::log1p(x); }, xd);
}
"""


def test_clangs_own_vector_tanh_expm1_and_log1p_are_within_6_ulp(clang, tmp_path):
    """Clang 14 vectorizes no call of tanh, expm1 or log1p: mdl/vector_math.h builds them
    from exp and log for Clang, which its -fveclib=libmvec maps. Measured beside glibc:
    6 ulp at worst (f32 tanh and expm1), the special values exactly; the loops vectorize."""
    source = tmp_path / "ulps.cpp"
    source.write_text(ULPS)
    built = subprocess.run([clang, *flags.compile_flags(), f"-I{ROOT / 'cpp_runtime'}",
                            str(source), "-o", str(tmp_path / "ulps"), "-lmvec", "-lm",
                            "-Rpass=loop-vectorize"], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    assert built.stderr.count("remark: vectorized loop") >= 6, built.stderr[-2000:]
    done = subprocess.run([str(tmp_path / "ulps")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    worst = {name: float(value) for name, value in map(str.split, done.stdout.splitlines())}
    assert len(worst) == 6 and all(v <= 6 for v in worst.values()), worst
