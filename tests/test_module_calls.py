"""Bad calls into a generated module raise; they never crash the process (docs/native.md,
"Errors"), nor hang it. tests/fuzz_calls.py makes random calls, many of them wrong, in a
child process on each target, and from several threads at once: the child must finish,
whatever its calls raised."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conftest import CHARLM

from codegen.pipeline import load

FUZZ = Path(__file__).resolve().parent / "fuzz_calls.py"
CALLS = 300


def run_calls(module, seed: int, calls: int = CALLS, threads: int = 1) -> str:
    done = subprocess.run([sys.executable, str(FUZZ), module.__file__, module.__name__,
                           str(calls), str(seed), "--threads", str(threads), "--timeout", "300"],
                          capture_output=True, text=True, timeout=600)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, (
        f"random calls (seed {seed}) ended with status {done.returncode}; the last calls:\n"
        + "\n".join(lines[-6:]) + "\n" + done.stderr[-2000:] +
        f"\nrerun: python3 {FUZZ} {module.__file__} {module.__name__} {calls} {seed} "
        f"--threads {threads}")
    assert lines[-1].startswith(f"done: {calls * threads} calls")
    return lines[-1]


@pytest.fixture(scope="module")
def cpu_module():
    from codegen.pipeline import load
    return load(CHARLM, defines={"H": 16}, name="charlm_h16_calls")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_calls_on_the_cpu_raise_or_succeed(cpu_module, seed):
    summary = run_calls(cpu_module, seed)
    raised = int(summary.split(", ")[1].split()[0])
    assert 0 < raised < CALLS  # some calls were right, some wrong: both paths were taken


def test_random_calls_from_four_threads_at_once_end(cpu_module):
    """Four threads call the same instances: each call takes the model's lock without the
    GIL, so none waits for the lock holding the GIL that the lock's holder needs to hand
    back its results (set_optimizer and lr= once did: a deadlock)."""
    run_calls(cpu_module, 5, calls=200, threads=4)


def test_random_calls_on_a_vjp_build_raise_or_succeed():
    """Its backward takes cotangents: the fuzzer gives them of random shapes."""
    from codegen.pipeline import load
    module = load(CHARLM, defines={"H": 16}, vjp=True, name="charlm_h16_calls_vjp")
    run_calls(module, 4, calls=200)


def test_random_calls_on_the_cuda_target_raise_or_succeed():
    """On the emulated device; with MDL_TEST_DEVICE=gpu on the real one (docs/cuda.md)."""
    from codegen.pipeline import load
    on_gpu = os.environ.get("MDL_TEST_DEVICE") == "gpu"
    module = load(CHARLM, target="cuda", emulate=not on_gpu, defines={"H": 16},
                  name="charlm_h16_calls_" + ("cuda" if on_gpu else "emulated"))
    run_calls(module, 3, calls=150)


SUBTRACTING = """
model Shorter(H = 3) {
  input xs : f32[T, B, H]
  param W : f32[H, H] = normal(0, 0.5)
  h = zeros[B, H]
  for x in xs[1:], t in range(T - 1) { h = tanh(h @ W + x * f32(t)) }
  output loss = sum(h) + sum(zeros[T - 3, B])
  minimize loss
}
"""


def test_random_calls_on_sizes_that_subtract_raise_or_succeed(tmp_path):
    """Dims that make `T - 3` negative are refused: they once reached the memory plan (a
    segmentation fault)."""
    from codegen.pipeline import load
    path = tmp_path / "shorter.mdl"
    path.write_text(SUBTRACTING)
    run_calls(load(path, name="shorter_calls"), 6, calls=150)


def test_a_crash_is_reported_with_the_call_that_made_it(tmp_path):
    """The check fails on a crash, and names the call: a module whose forward aborts."""
    fake = tmp_path / "crashing.py"
    fake.write_text("import os\n\nclass Model:\n    inputs = {}\n"
                    "    def __init__(self, seed=0):\n        pass\n"
                    "    def __getattr__(self, name):\n        os.abort()\n")
    module = type(sys)("crashing")
    module.__file__ = str(fake)
    with pytest.raises(AssertionError, match=r"ended with status -6"):
        run_calls(module, 0, calls=5)


def run_child(module, body: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """`body` run in a child process after `M = <module>`: a crash there is its status."""
    script = ("import importlib.util, sys, threading, time\nimport numpy as np\n"
              f"spec = importlib.util.spec_from_file_location({module.__name__!r}, "
              f"{module.__file__!r})\n"
              "M = importlib.util.module_from_spec(spec); spec.loader.exec_module(M)\n" + body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("use", ["repr(m)", "m.params", "m.inputs", "m.rng_calls",
                                 "m.forward()", "m.set_optimizer('sgd', lr=0.1)",
                                 "m.__setstate__(M.CharLM().__reduce__()[2])",
                                 "M.CharLM(params=m)"])
def test_an_instance_whose_init_never_ran_raises_a_type_error(cpu_module, use):
    """`cls.__new__(cls)` (as copyreg and some serializers make instances): pybind11 hands
    over the model's memory unbuilt, and every use of it once crashed the process."""
    done = run_child(cpu_module, "m = M.CharLM.__new__(M.CharLM)\n"
                                 f"try:\n    {use}\nexcept TypeError as e:\n    print(e)\n")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == ("CharLM object was never initialized (its __init__ did not "
                                   "run): make one by calling its class, CharLM(seed=0)")


def test_a_second_init_is_refused_not_ignored(cpu_module):
    """pybind11 let `m.__init__(seed=1)` pass and ignored its arguments, bad ones too."""
    m = cpu_module.CharLM(seed=0)
    before = {k: v.copy() for k, v in m.params.items()}
    for args in ({"seed": 1}, {"seed": "x"}, {"params": cpu_module.CharLM(seed=2)}):
        with pytest.raises(TypeError, match="CharLM object is already initialized: make "
                                            r"another by calling CharLM\(seed=...\)"):
            m.__init__(**args)
    assert all(np.array_equal(v, before[k]) for k, v in m.params.items())


def test_a_device_array_made_without_a_model_raises_a_type_error(cpu_module):
    done = run_child(cpu_module, "a = M.DeviceArray.__new__(M.DeviceArray)\n"
                                 "for use in (repr, lambda a: a.shape, lambda a: a.numpy()):\n"
                                 "    try:\n        use(a)\n"
                                 "    except TypeError as e:\n        print(e)\n")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["DeviceArray object was never initialized (its "
                                        "__init__ did not run): DeviceArrays come from a device "
                                        "model (outputs_on_device, to_device, device_params)"] * 3


def test_the_models_base_class_refuses_a_capsule_of_another_kind(cpu_module):
    import datetime
    with pytest.raises(TypeError, match="_Model is the base of this module's model classes"):
        cpu_module._Model(datetime.datetime_CAPI)


def test_optimizer_options_past_the_models_float_range_raise(cpu_module):
    """An f32 model: lr = 1e300 is inf in its code, eps = 1e-40 a denormal it flushes."""
    m = cpu_module.CharLM(seed=0)
    with pytest.raises(ValueError, match=r"lr = 1e\+300 is too large for an f32 model"):
        m.set_optimizer("adam", lr=1e300)
    with pytest.raises(ValueError, match="eps = 1e-40 is too small for an f32 model"):
        m.set_optimizer("adam", lr=0.1, eps=1e-40)
    assert m.optimizer is None


def test_the_interpreter_exits_while_a_daemon_thread_trains(cpu_module):
    """The main thread returns while a daemon thread is inside train_step: the exit waits
    for the call (released_gil.h) instead of aborting ("terminate called without an
    active exception": Python ending the thread as it took the GIL back) or destroying
    what the call uses."""
    body = ("m = M.CharLM(seed=0); m.set_optimizer('adam', lr=0.01)\n"
            "ids = np.random.default_rng(0).integers(0, 96, (301, 16)).astype(np.int32)\n"
            "batch = dict(tokens=ids[:-1], targets=ids[1:], lengths=np.full(16, 300, np.int32))\n"
            "def loop():\n    while True:\n        m.train_step(**batch)\n"
            "for _ in range(2):\n    threading.Thread(target=loop, daemon=True).start()\n"
            "time.sleep(0.3)\nprint('returns')\n")
    for _ in range(4):
        done = run_child(cpu_module, body)
        assert (done.returncode, done.stdout) == (0, "returns\n"), done.stderr[-2000:]


def test_a_cuda_model_in_a_forked_child_is_a_runtime_error():
    """QA: a child forked while a thread of the parent was in an emulated cuda call waited
    for ever (on the emulator's lock that thread held) as soon as it made a model or
    called one; CUDA refuses a forked child's calls too. Each is a RuntimeError now, and
    the child exits."""
    from codegen.pipeline import load
    module = load(CHARLM, target="cuda", emulate=True, defines={"H": 16},
                  name="charlm_h16_calls_emulated")
    body = ("m = M.CharLM(seed=0)\n"
            "ids = np.random.default_rng(0).integers(0, 96, (301, 16)).astype(np.int32)\n"
            "batch = dict(tokens=ids[:-1], targets=ids[1:], lengths=np.full(16, 300, np.int32))\n"
            "def loop():\n    while True:\n        m.forward(**batch)\n"
            "threading.Thread(target=loop, daemon=True).start()\n"
            "import os, warnings\nwarnings.simplefilter('ignore')  # forking with threads\n"
            "time.sleep(0.3)\n"
            "if os.fork() == 0:\n"
            "    for use in (lambda: M.CharLM(seed=1), lambda: m.forward(**batch),\n"
            "                lambda: m.to_device(ids)):\n"
            "        try:\n            use()\n"
            "        except RuntimeError as e:\n            print(str(e)[:59], flush=True)\n"
            "    os._exit(0)\n"
            "print('child', os.wait()[1])\n")
    done = run_child(module, body, timeout=120)
    refused = "the cuda target cannot be used in a process forked from one"
    assert (done.returncode, done.stdout) == (0, f"{refused}\n" * 3 + "child 0\n"), \
        done.stderr[-2000:]


def test_a_child_forked_while_a_thread_is_in_a_call_exits(cpu_module):
    """The child has no such thread to count its call out: its exit must not wait for it
    (released_gil.h starts a count of its own in a forked child)."""
    body = ("m = M.CharLM(seed=0); m.set_optimizer('adam', lr=0.01)\n"
            "ids = np.random.default_rng(0).integers(0, 96, (301, 16)).astype(np.int32)\n"
            "batch = dict(tokens=ids[:-1], targets=ids[1:], lengths=np.full(16, 300, np.int32))\n"
            "def loop():\n    while True:\n        m.train_step(**batch)\n"
            "threading.Thread(target=loop, daemon=True).start()\n"
            "import os, warnings\nwarnings.simplefilter('ignore')  # forking with threads\n"
            "time.sleep(0.3)\n"
            "if os.fork() == 0:\n    sys.exit(0)\n"
            "print('child', os.wait()[1])\n")
    done = run_child(cpu_module, body, timeout=60)
    assert (done.returncode, done.stdout) == (0, "child 0\n"), done.stderr[-2000:]


REVERSED = """
model Rev(H = 4) {
  input xs : f32[T, B, H]
  input lengths : i32[B]
  h = zeros[B, H]
  ys = for x in reversed(xs) (lengths = lengths) { h = tanh(x + h); yield h }
  output y = sum(ys)
}
"""


def test_lengths_changed_by_another_thread_during_a_call_never_crash(tmp_path):
    """The cpu target reads inputs where the caller keeps them: a thread writing `lengths`
    between the check of a length and the copy its reversed order made sent the copy
    outside `xs` (a segfault within seconds). Each length is read once now: a call raises
    or returns."""
    path = tmp_path / "rev.mdl"
    path.write_text(REVERSED)
    module = load(path, name="reversed_raced")
    done = run_child(module, textwrap.dedent("""
        m = M.Rev(seed=0)
        T, B = 2000, 64
        xs, lengths = np.ones((T, B, 4), np.float32), np.full(B, T, np.int32)
        def flip():
            while True:
                lengths[:] = 2 ** 30
                lengths[:] = T
        threading.Thread(target=flip, daemon=True).start()
        ended = time.monotonic() + 3
        while time.monotonic() < ended:
            try:
                m.forward(xs=xs, lengths=lengths)
            except ValueError:
                pass
        print("done")
        """))
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-2000:]
