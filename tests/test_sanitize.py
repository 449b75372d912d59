"""Generated code under AddressSanitizer and UBSan: the char LM (lengths, gather,
cross-entropy, a loop and its backward) built with --sanitize runs forward and backward
in a subprocess with the sanitizer runtime preloaded, without a report."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codegen.pipeline import BuildOptions, build

ROOT = Path(__file__).resolve().parents[1]
RUN = """
import importlib.util, sys
import numpy as np
spec = importlib.util.spec_from_file_location("charlm_asan", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
m = mod.CharLM(seed=0)
rng = np.random.default_rng(0)
t = rng.integers(0, 96, (7, 3)).astype(np.int32)
n = np.array([7, 2, 5], np.int32)
m.forward(tokens=t, targets=t, lengths=n, training=True)
g = m.backward()
assert all(np.isfinite(v).all() for v in g.values())
print("clean")
"""


def test_charlm_is_clean_under_sanitizers():
    asan = subprocess.run(["g++", "-print-file-name=libasan.so"], capture_output=True,
                          text=True).stdout.strip()
    if not os.path.isabs(asan):
        pytest.skip("this compiler ships no AddressSanitizer runtime")
    built = build(ROOT / "examples" / "charlm.mdl", "charlm_asan",
                  BuildOptions(sanitize=True, defines={"H": 16}))
    env = {**os.environ, "LD_PRELOAD": asan, "ASAN_OPTIONS": "detect_leaks=0",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}
    r = subprocess.run([sys.executable, "-c", RUN, str(built)], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0 and "clean" in r.stdout, r.stderr[-3000:]
    assert "runtime error" not in r.stderr  # UBSan reports without stopping otherwise
