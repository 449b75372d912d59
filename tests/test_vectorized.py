"""The generated CPU code's elementwise loops that call math functions vectorize: GCC,
asked to say which loops it vectorized (-fopt-info-vec-optimized), names every innermost
loop of the char LM's module that calls std::exp or std::tanh (its LSTM gates, with
lengths: a `where` keeping the state of padded rows). Such a loop left scalar costs the
char LM's forward at B=32 more than half its time (codegen/compile/flags.py says which
flags it takes and why)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from codegen.compile.flags import compile_flags, host_compiler, include_dirs
from codegen.compile.options import BuildOptions
from codegen.pipeline import sources

CHARLM = Path(__file__).resolve().parents[1] / "examples" / "charlm.mdl"


def math_loops(text: str) -> list[int]:
    """The line numbers (1-based) of the innermost `#pragma GCC ivdep` loops whose body
    calls std::exp or std::tanh."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        if line.strip() != "#pragma GCC ivdep" or not lines[i + 1].lstrip().startswith("for ("):
            continue
        depth, body = 0, []
        for j in range(i + 1, len(lines)):
            depth += lines[j].count("{") - lines[j].count("}")
            body.append(lines[j])
            if depth == 0:
                break
        if re.search(r"std::(exp|tanh)\(", "\n".join(body)):
            found.append(i + 2)
    return found


@pytest.mark.skipif("clang" in host_compiler()["version"].lower(),
                    reason="the vectorizer's report read here is GCC's")
def test_the_char_lms_gate_loops_vectorize(tmp_path):
    _, files = sources(CHARLM, "charlm_vec", BuildOptions(model="CharLM"))
    source = tmp_path / "module.cpp"
    source.write_text(files["module.cpp"])
    loops = math_loops(files["module.cpp"])
    assert loops, "no loop calls std::exp or std::tanh: the test reads the wrong code"
    done = subprocess.run([host_compiler()["path"], *compile_flags(),
                           *(f"-I{d}" for d in include_dirs()), "-c", str(source), "-o",
                           str(tmp_path / "module.o"), "-fopt-info-vec-optimized"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    vectorized = {int(n) for n in re.findall(r"module\.cpp:(\d+):\d+: optimized: loop "
                                             r"vectorized", done.stderr)}
    assert not set(loops) - vectorized, (sorted(set(loops) - vectorized), loops)
