"""Generated code under AddressSanitizer and UBSan: the char LM (lengths, gather,
cross-entropy, a loop and its backward) built with --sanitize runs forward and backward
in a subprocess with the sanitizer runtime preloaded, without a report, and a bad call
raises there as anywhere."""
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from codegen.compile.sanitizers import has_runtime, sanitizer_env
from codegen.pipeline import BuildOptions, build, sources

ROOT = Path(__file__).resolve().parents[1]
# What a sanitized process runs first: the module at argv[1] imported as `mod`
IMPORT = """
import importlib.util, sys
import numpy as np
spec = importlib.util.spec_from_file_location(sys.argv[1].split("/")[-1].split(".")[0],
                                              sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
"""
RUN = """
m = mod.CharLM(seed=0)
rng = np.random.default_rng(0)
t = rng.integers(0, 96, (7, 3)).astype(np.int32)
n = np.array([7, 2, 5], np.int32)
m.forward(tokens=t, targets=t, lengths=n, training=True)
g = m.backward()
assert all(np.isfinite(v).all() for v in g.values())
try:  # an exception thrown in the module reaches Python (sanitizer_env)
    m.forward(tokens=t, targets=t, lengths=np.array([9, 2, 5], np.int32))
except ValueError as error:
    assert "lengths" in str(error), error
else:
    raise AssertionError("a length past T was accepted")
print("clean")
"""


def run_sanitized(built, body: str = RUN) -> subprocess.CompletedProcess:
    """`body` (RUN: the char LM's calls) on the module `built` (`mod`, with numpy as np),
    in a process with the sanitizers' runtime preloaded."""
    if not has_runtime():
        pytest.skip("this compiler ships no AddressSanitizer runtime")
    env = {**os.environ, **sanitizer_env()}
    return subprocess.run([sys.executable, "-c", IMPORT + body, str(built)],
                          capture_output=True, text=True, env=env)


def assert_use_after_poison(built) -> None:
    """RUN on `built` ends in ASan's report of a read or write of poisoned memory."""
    r = run_sanitized(built)
    assert r.returncode != 0 and "clean" not in r.stdout
    assert "AddressSanitizer: use-after-poison" in r.stderr, r.stderr[-3000:]


def test_charlm_is_clean_under_sanitizers():
    built = build(ROOT / "examples" / "charlm.mdl", "charlm_asan",
                  BuildOptions(sanitize=True, defines={"H": 16}))
    r = run_sanitized(built)
    assert r.returncode == 0 and "clean" in r.stdout, r.stderr[-3000:]
    assert "runtime error" not in r.stderr  # UBSan reports without stopping otherwise


def test_a_value_past_its_slot_is_reported_though_the_slots_share_one_arena(monkeypatch):
    """Every slot of the memory plan is followed by a poisoned redzone under ASan
    (mdl/arena.h): a plan whose slots are a cache line short of their values, as a bug
    of the planner would make them, is reported, though the overflow stays inside the
    one allocation that holds them all."""
    from codegen.backend import plan
    size_bytes = plan.size_bytes
    monkeypatch.setattr(plan, "size_bytes", lambda v, dims: f"({size_bytes(v, dims)}) - 64")
    # a name of its own: the build index would answer for charlm_asan without generating
    built = build(ROOT / "examples" / "charlm.mdl", "charlm_asan_short_slots",
                  BuildOptions(sanitize=True, defines={"H": 16}))
    assert_use_after_poison(built)


def test_a_value_read_after_the_plan_ended_its_life_is_reported(monkeypatch):
    """A sanitized build marks each slot of the memory plan dead once its value's last
    reader has run, and live again just before its next value is computed (plan.Lifetimes,
    mdl::mark_slots): a planner that ends every value's life one instruction early, as a
    liveness bug would, makes the last reader read a dead slot, which is reported, though
    the slot lies inside the arena's one allocation."""
    from codegen.backend import plan
    use = plan._Liveness.use

    def early(self, v):
        self.pos -= 1
        try:
            use(self, v)
        finally:
            self.pos += 1
    monkeypatch.setattr(plan._Liveness, "use", early)
    built = build(ROOT / "examples" / "charlm.mdl", "charlm_asan_early_deaths",
                  BuildOptions(sanitize=True, defines={"H": 16}))
    assert_use_after_poison(built)


def test_mdlc_build_says_how_to_import_a_sanitized_module(tmp_path):
    """Imported from a plain Python, a sanitized module aborts it (ASan's runtime must
    come first); `mdlc build --sanitize` says on stderr how to start Python, and a Python
    started so imports the module and runs it."""
    if not has_runtime():
        pytest.skip("this compiler ships no AddressSanitizer runtime")
    r = subprocess.run([sys.executable, "-m", "codegen.cli", "build", str(ROOT / "examples" /
                        "gru.mdl"), "--sanitize", "--name", "gru_asan_cli", "-o", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    note = r.stderr.strip().splitlines()[-1]
    assert note.startswith("note: import it from a Python started as: LD_PRELOAD=")
    env = dict(word.split("=", 1) for word in shlex.split(note.split("started as: ", 1)[1])[:-1])
    assert "asan" in env["LD_PRELOAD"] and "libstdc++" in env["LD_PRELOAD"]  # GCC's or Clang's
    run = subprocess.run([sys.executable, "-c", "import gru_asan_cli, numpy as np; "
                          "m = gru_asan_cli.GRUClassifier(seed=0); print(sorted(m.params)[0])"],
                         capture_output=True, text=True, cwd=tmp_path, env={**os.environ, **env})
    assert run.returncode == 0, run.stderr[-2000:]


WHILE = """
model Twice() {
  input x : f32[B, 4]
  param w : f32[4, 4] = normal(0, 0.5)
  h = x
  k = 0
  while k < 2 {
    h = tanh(h @ w)
    k = k + 1
  }
  output loss = sum(h)
  minimize loss
}
"""


WRAPS = """
model Wraps() {
  input x : i32[B]
  input y : i32[B]
  output up = (x + 1) > x
  output p = x * y - y
  output n = abs(-x)
  output total = sum(x * y)
}
"""


# Two directions over padded rows (lengths), run at once: codegen/backend/concurrent.py.
BOTH_WAYS = """
model BothWays(H = 6) {
  input xs : f32[T, B, 4]
  input lengths : i32[B]
  param w : f32[4, H] = normal(0, 0.5)
  param u : f32[H, H] = normal(0, 0.5)
  param v : f32[H, H] = normal(0, 0.5)
  h = zeros[B, H]; g = zeros[B, H]
  fs = for x in xs (lengths = lengths) { h = tanh(x @ w + h @ u); yield h }
  bs = for x in reversed(xs) (lengths = lengths) { g = tanh(x @ w + g @ v); yield g }
  output loss = sum(fs * bs)
  minimize loss
}
"""


@pytest.fixture(scope="module")
def edges(tmp_path_factory):
    """WHILE, WRAPS and BOTH_WAYS, built sanitized in one module."""
    path = tmp_path_factory.mktemp("edges") / "edges.mdl"
    path.write_text(WHILE + WRAPS + BOTH_WAYS)
    return build(path, "edges_asan", BuildOptions(sanitize=True))


def run_script(built, body: str) -> None:
    """run_sanitized(built, body), which must end clean."""
    r = run_sanitized(built, body + "\nprint('clean')\n")
    assert r.returncode == 0 and "clean" in r.stdout, r.stderr[-3000:]


def test_a_while_loop_in_a_batch_of_no_rows_is_clean(edges):
    """A while loop's tapes get records of 0 bytes when the batch is empty: the push
    called memcpy on an empty tape's data(), a null pointer, which UBSan reports (found
    by the fuzzer's B = 0 case)."""
    run_script(edges, """
m = mod.Twice(seed=0)
for b in (0, 3):
    m.forward(x=np.ones((b, 4), np.float32), training=True)
    m.backward()""")


def test_i32_arithmetic_past_its_range_is_clean(edges):
    """i32 `+ - *`, `-x`, `abs` and `sum` past i32's range wrap around (docs/language.md):
    they were signed overflows, which UBSan halts on (the fuzzer's integers found
    `abs(n0 - n1)`)."""
    run_script(edges, """
top, bottom = np.iinfo(np.int32).max, np.iinfo(np.int32).min
x = np.array([top, bottom, 65536, -7], np.int32)
y = np.array([2, -1, 65536, 3], np.int32)
out = mod.Wraps().forward(x=x, y=y)
assert out["up"].tolist() == [False, True, True, True], out
assert out["n"].tolist() == [top, bottom, 65536, 7], out
assert out["total"] == np.sum(x.astype(np.int64) * y).astype(np.int32), out""")



def test_loops_run_at_once_are_clean(edges, tmp_path):
    """Two directions run at once, one a thread, forward and backward: the slots each
    marks live and dead as it goes are its own."""
    (tmp_path / "both.mdl").write_text(BOTH_WAYS)
    _, files = sources(tmp_path / "both.mdl", "both", BuildOptions(sanitize=True))
    assert files["module.cpp"].count("mdl::Arms ") == 3  # forward, training, backward
    run_script(edges, """
mod.set_num_threads(2)
m = mod.BothWays(seed=0)
rng = np.random.default_rng(0)
xs = rng.standard_normal((9, 4, 4)).astype(np.float32)
n = np.array([9, 3, 6, 1], np.int32)
for _ in range(2):
    out = m.forward(xs=xs, lengths=n, training=True)
    g = m.backward()
assert np.isfinite(out["loss"]) and all(np.isfinite(v).all() for v in g.values())""")
