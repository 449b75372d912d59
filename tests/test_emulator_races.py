"""The emulated device under ThreadSanitizer (`mdlc build --target cuda --emulate
--sanitize`; docs/cuda.md, "Races between CUDA threads"): each CUDA thread is a thread to
the sanitizer, so two threads' plain accesses to the same device memory, one a write,
with no atomic or barrier between them, are reported, naming the kernel, the block and
the thread, within a block and between the blocks of a grid; atomics and barriers order
them, and a launch is ordered after the host's copies and before its reads. Kernels with
races beside their correct twins (tests/emulator/racing_kernels.cu), and the char LM's
generated kernels, trained against the reference, without a report."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from codegen.compile.extension import build_extension
from codegen.compile.sanitizers import sanitizer_env, tsan_refusal
from codegen.targets.registry import target

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "emulator" / "racing_kernels.cu"
REPORT = "WARNING: ThreadSanitizer: data race"

pytestmark = pytest.mark.skipif(bool(tsan_refusal()), reason=tsan_refusal() or "-")


def under_tsan(code: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`code` in a Python started with the sanitizer's runtime first (sanitizer_env), which
    stops at its first report (exit status 66)."""
    env = {**os.environ, **sanitizer_env(thread=True),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    env["TSAN_OPTIONS"] += ":halt_on_error=1"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def kernels() -> str:
    return str(build_extension({"racing_kernels.cu": SOURCE.read_text(),
                                "test_device.h": SOURCE.with_name("test_device.h").read_text()},
                               "racing_kernels",
                               target("cuda", emulate=True), sanitize=True))


def run_case(built: str, case: str, *args) -> subprocess.CompletedProcess:
    code = ("import importlib.util, sys\n"
            "spec = importlib.util.spec_from_file_location('racing_kernels', sys.argv[1])\n"
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            f"print(m.{case}(*{args!r}))\n")
    return under_tsan(code, built)


def assert_race(r: subprocess.CompletedProcess, *names: str) -> None:
    assert r.returncode == 66 and REPORT in r.stderr, (r.returncode, r.stderr[-3000:])
    for name in names:
        assert name in r.stderr, r.stderr[-3000:]


def assert_clean(r: subprocess.CompletedProcess, want: str) -> None:
    assert r.returncode == 0 and "ThreadSanitizer" not in r.stderr, r.stderr[-3000:]
    assert r.stdout.strip() == want


def test_a_plain_add_of_many_threads_is_a_race_and_atomic_add_is_not(kernels):
    assert_race(run_case(kernels, "sum", False, 1), "in add_up",
                "'kernel add_up, block 0, thread ")
    assert_clean(run_case(kernels, "sum", True, 1), "[1000.0]")
    assert_clean(run_case(kernels, "sum", True, 4), "[1000.0]")


def test_blocks_of_one_grid_writing_one_element_race(kernels):
    """The emulator runs blocks one after another; a GPU runs them at once."""
    assert_race(run_case(kernels, "numbers", True), "in block_numbers",
                "'kernel block_numbers, block 1, thread 0'")
    assert_clean(run_case(kernels, "numbers", False), "[0.0, 1.0, 2.0, 3.0]")


def test_a_barrier_orders_a_write_before_the_other_threads_reads(kernels):
    assert_race(run_case(kernels, "copies", False), "in broadcast")
    assert_clean(run_case(kernels, "copies", True), str([7.0] * 65))


CHARLM = """
from test_native import assert_example_matches
from test_sanitize import IMPORT
exec(IMPORT)
for model in ("CharLM", "CharLMStep", "CharLMSample"):
    assert_example_matches(mod, "charlm.mdl", model, "f32")
exec(RUN)
bad = np.full((7, 3), 500, np.int32)  # every thread of the gather reports its fault
try:
    mod.CharLM(seed=0).forward(tokens=bad, targets=t, lengths=n)
except IndexError as error:
    assert "holds 500 at flat position 0" in str(error), error
else:
    raise AssertionError("tokens past the table were accepted")
print("faults clean")
"""


def test_the_char_lms_kernels_are_free_of_races(tmp_path):
    """Its gather's gradient (scatter_add), cross-entropy, the loss's sum into one number
    and the loop's kernels, forward and backward, trained against the reference; then a
    bad call raises its ValueError in the sanitized process as anywhere, and a gather
    whose every thread finds an id past the table records one fault, without a race (the
    threads that lose the record read its kind atomically: a volatile read was one)."""
    from test_sanitize import RUN
    r = subprocess.run([sys.executable, "-m", "codegen.cli", "build",
                        str(ROOT / "examples" / "charlm.mdl"), "--target", "cuda", "--emulate",
                        "--sanitize", "--dtype", "f32", "--name", "charlm_tsan", "-o",
                        str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    note = r.stderr.strip().splitlines()[-1]  # how to start Python for it
    assert note.startswith("note: import it from a Python started as: LD_PRELOAD=")
    env = dict(w.split("=", 1) for w in shlex.split(note.split("started as: ", 1)[1])[:-1])
    assert "tsan" in env["LD_PRELOAD"] and env.keys() == sanitizer_env(thread=True).keys()
    built = r.stdout.strip().splitlines()[-1]
    run = under_tsan(CHARLM.replace("exec(RUN)", RUN), str(tmp_path / Path(built).name))
    assert run.returncode == 0 and "ThreadSanitizer" not in run.stderr, run.stderr[-3000:]
    assert run.stdout.split()[-3:] == ["clean", "faults", "clean"], run.stdout
