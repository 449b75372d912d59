"""The generated CPU code's elementwise loops vectorize: GCC, asked to say which loops it
vectorized (-fopt-info-vec-optimized), names every innermost loop of the char LM's module
that calls std::exp or tanh (mdl::simd_tanh: its LSTM gates, with lengths: a `where` keeping the
state of padded rows), and the loop of the ponder benchmark's backward that takes
g, -g or 0 by x's sign, g a scalar read in the loop (the gradient of a `mean` in a `while`). Such a
loop left scalar costs the char LM's forward at B=32 more than half its time
(codegen/compile/flags.py says which flags it takes and why), the ponder training step
0.7x more."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from codegen.compile.flags import compile_flags, host_compiler, include_dirs
from codegen.compile.options import BuildOptions
from codegen.pipeline import sources

ROOT = Path(__file__).resolve().parents[1]
CHARLM = ROOT / "examples" / "charlm.mdl"
MATH = r"(std::exp|mdl::simd_tanh)\("
# abs's gradient (ops/primitives/elementwise.py): g, -g or 0 by x's sign, a NaN's 0
SIGN = r"mdl::select<float>\(s\d+ != 0, s\d+, float\(0x0\.0p\+0\)\)"


def math_loops(text: str, pattern: str = MATH) -> list[int]:
    """The line numbers (1-based) of the innermost `MDL_VECTORIZE` loops whose body
    matches `pattern` (calls std::exp or tanh)."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        if line.strip() != "MDL_VECTORIZE" or not lines[i + 1].lstrip().startswith("for ("):
            continue
        depth, body = 0, []
        for j in range(i + 1, len(lines)):
            depth += lines[j].count("{") - lines[j].count("}")
            body.append(lines[j])
            if depth == 0:
                break
        if re.search(pattern, "\n".join(body)):
            found.append(i + 2)
    return found


def vectorized_lines(text: str, directory: Path) -> set[int]:
    """The lines of the loops GCC vectorized, compiling `text` as a model's module."""
    source = directory / "module.cpp"
    source.write_text(text)
    done = subprocess.run([host_compiler()["path"], *compile_flags(),
                           *(f"-I{d}" for d in include_dirs()), "-c", str(source), "-o",
                           str(directory / "module.o"), "-fopt-info-vec-optimized"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return {int(n) for n in re.findall(r"module\.cpp:(\d+):\d+: optimized: loop "
                                       r"vectorized", done.stderr)}


gcc_only = pytest.mark.skipif("clang" in host_compiler()["version"].lower(),
                              reason="the vectorizer's report read here is GCC's")


@gcc_only
def test_the_char_lms_gate_loops_vectorize(tmp_path):
    _, files = sources(CHARLM, "charlm_vec", BuildOptions(model="CharLM"))
    loops = math_loops(files["module.cpp"])
    assert loops, "no loop calls std::exp or tanh: the test reads the wrong code"
    vectorized = vectorized_lines(files["module.cpp"], tmp_path)
    assert not set(loops) - vectorized, (sorted(set(loops) - vectorized), loops)


@gcc_only
def test_a_loop_reading_a_broadcast_scalar_vectorizes(tmp_path):
    """The loop of `d mean(abs(g - h)) / (B H)` times g - h's sign in a backward (the ponder
    benchmark's `while` had it until its convergence measure, read only by the condition,
    stopped being differentiated): it read the scalar through a broadcast at every
    element, and GCC left the code specialized for B = 32 scalar, with a branch a sign.
    Only the loops GCC keeps count: in that code the loop's split over the threads is
    dead (too small), so the rule is that some copy of each kind vectorizes, the
    specialized one's included."""
    path = tmp_path / "moves.mdl"
    path.write_text("""
model Moves(H = 128) {
  input xs : f32[T, B, H]
  param V : f32[H, H] = uniform(-0.1, 0.1)
  h = zeros[B, H]
  moved = 0.0
  for x in xs {
    g = tanh(x + h @ V)
    moved = moved + mean(abs(g - h))
    h = g
  }
  output loss = moved
  minimize loss
}
""")
    options = BuildOptions(specialize=[{"T": 35, "B": 32}])
    _, files = sources(path, "moves_vec", options)
    text = files["module.cpp"]
    loops = math_loops(text, SIGN)
    assert loops, "no loop selects by a sign: the test reads the wrong code"
    vectorized = vectorized_lines(text, tmp_path)
    lines = text.splitlines()
    specialized = next(i for i, line in enumerate(lines, 1)
                       if "constexpr int64_t d1 = 32;" in line)
    assert any(n > specialized for n in set(loops) & vectorized), (
        sorted(vectorized & set(loops)), loops, specialized)


@gcc_only
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_a_loop_calling_pow_vectorizes(tmp_path, dtype):
    """`**` is mdl::power (mdl/scalar.h), which calls libmvec's pow (mdl/vector_math.h
    declares it, as it does the functions of one argument): without the declaration
    each element called scalar powf, and `x ** 1.5` over [256, 1024] f32 took 3.4x as
    long. Its argument, flushed where a denormal reads as 0 (mdl::flushed), stays in
    the vector loop, and so does power's own test for an exponent of 0.5."""
    path = tmp_path / "powers.mdl"
    path.write_text("model Powers() {\n  input x : f32[B, 64]\n"
                    "  output y = x ** 1.5 + log(x)\n}\n")
    _, files = sources(path, "powers_vec", BuildOptions(dtype=dtype))
    text = files["module.cpp"]
    loops = math_loops(text, r"mdl::power<\w+>\(mdl::flushed\(")
    assert loops, "no loop calls mdl::power: the test reads the wrong code"
    assert set(loops) <= vectorized_lines(text, tmp_path), loops


@gcc_only
def test_a_loop_selecting_by_a_steps_flag_vectorizes(tmp_path):
    """`recompute`'s backward step loop re-runs the LSTM's gates and selects its state's
    gradient by the step's flag (`where(flag, d h, 0)`, the flag the same for the whole
    loop). As `flag ? d_h[i] : 0`, GCC made the load a masked one it would not vectorize,
    and the loop ran scalar: 122 us a step at B = 16, H = 256, against 11 as
    mdl::select's masked bits (mdl/scalar.h), which read both arms."""
    path = tmp_path / "again.mdl"
    path.write_text("""
import "std/rnn.mdl"
model Again(H = 64) {
  input xs : f32[T, B, H]
  input weights : f32[T, B, H]
  h = zeros[B, H]
  c = zeros[B, H]
  hs = for x in xs (recompute) {
    h, c = lstm(x, h, c)
    yield h
  }
  output loss = sum(hs * weights)
  minimize loss
}
""")
    _, files = sources(path, "again_vec", BuildOptions(model="Again"))
    text = files["module.cpp"]
    loops = math_loops(text, r"(mdl::select<float>\(|\? )(?s:.*)std::exp\(")
    assert loops, "no loop selects and calls std::exp: the test reads the wrong code"
    assert set(loops) <= vectorized_lines(text, tmp_path), loops
