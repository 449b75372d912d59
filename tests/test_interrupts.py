"""Ctrl-C stops a call between a loop's steps (cpp_runtime/mdl/interrupts.h), on both
targets (the cuda target's on the emulated device): a `while` whose condition stays true
(in a forward, in a training step, in a child process a thread forked), or 2**40 steps of an
empty batch, ran on for ever or for hours before, deaf to Ctrl-C. Each case runs in a
process of its own that sends itself SIGINT once the call is under way: the call raises
KeyboardInterrupt (or what a SIGINT handler of the user's raises, one installed after the
import too: the loops ran to their end under one before a call chained the handler
again), a training step interrupted changes no weight, and the model works after it."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from source_files import built_for, source_file

SOURCE = """
model Forever() {
  input x : f32[3]
  h = x
  while sum(h) > -1.0 { h = h + 1.0 }
  output y = sum(h)
}

model Empty() {
  input xs : f32[T, B, 8]
  s = zeros[B, 8]
  for x in xs { s = s + x }
  output y = s
}

model Spin() {
  input x : f32[1, 8]
  input n : i32
  param w : f32[8, 8] = normal(0, 0.3)
  k = n
  while k > -1 { k = abs(k) }
  y = x @ w
  output left = k
  output loss = mean(y * y)
  minimize loss
}

model Late() {
  input x : f32[R, 512]
  input w : f32[512, 512]
  k = sum(x @ w) * 0.0
  while k >= 0.0 { k = k + 1.0 }
  output out = k
}
"""

# After the import (which chains the handler) and before the call, as a user's script
PRELUDE = """
import os, signal, sys, threading, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import {module} as built
def interrupt_soon():
    threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    return time.monotonic()
def stop(signum, frame):  # a SIGINT handler of the user's
    raise RuntimeError("stopped by my handler")
def forever_interrupted(module):
    start = interrupt_soon()
    try:
        module.Forever(seed=0).forward(x=np.zeros(3, np.float32))
    except (KeyboardInterrupt, RuntimeError) as e:
        print("interrupted", time.monotonic() - start < 10, repr(e))
"""

CASES = {
    "while": """
        m = built.Forever(seed=0)
        start = interrupt_soon()
        try:
            m.forward(x=np.zeros(3, np.float32))
        except KeyboardInterrupt:
            print("interrupted", time.monotonic() - start < 10)
        print(m.forward(x=np.full(3, -5.0, np.float32))["y"])
    """,
    "empty batch": """
        m = built.Empty(seed=0)
        start = interrupt_soon()
        try:
            m.forward(xs=np.zeros((2**40, 0, 8), np.float32))
        except KeyboardInterrupt:
            print("interrupted", time.monotonic() - start < 10)
        print(m.forward(xs=np.ones((3, 2, 8), np.float32))["y"][1, 7])
    """,
    "training": """
        m = built.Spin(seed=0)
        m.set_optimizer("sgd", lr=0.1)
        before = m.params["w"].copy()
        x = np.ones((1, 8), np.float32)
        start = interrupt_soon()
        try:
            m.train_step(x=x, n=np.int32(3))  # k stays 3: for ever
        except KeyboardInterrupt:
            print("interrupted", time.monotonic() - start < 10)
        print("unchanged", bool(np.array_equal(m.params["w"], before)))
        m.train_step(x=x, n=np.int32(-5))
        print("trained", not np.array_equal(m.params["w"], before))
    """,
    "own handler": """
        signal.signal(signal.SIGINT, stop)  # before the import of another module
        import importlib
        forever_interrupted(importlib.import_module(sys.argv[2]))
    """,
    "own handler after the import": """
        signal.signal(signal.SIGINT, stop)  # replaces the handler the import chained
        forever_interrupted(built)
    """,
    # QA: a Ctrl-C during the product, before the loop chained the handler again, reached
    # the user's handler alone, which left the flag down: the `while` ran on
    "own handler, Ctrl-C before the first loop": """
        signal.signal(signal.SIGINT, stop)
        m = built.Late(seed=0)
        rows = 20000 if m.device == "cpu" else 2000  # a product of a tenth of a second or more
        x, w = np.ones((rows, 512), np.float32), np.ones((512, 512), np.float32)
        start = time.monotonic()
        threading.Timer(0.02, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        try:
            m.forward(x=x, w=w)
        except RuntimeError as e:
            print("interrupted", time.monotonic() - start < 10, repr(e))
    """,
    "own handler after two imports": """
        import importlib
        again = importlib.import_module(sys.argv[2])
        signal.signal(signal.SIGINT, stop)
        for module in (again, built, again):
            forever_interrupted(module)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own again
        forever_interrupted(built)
    """,
    "forked by a thread": """
        def child():
            m = built.Forever(seed=0)
            start = interrupt_soon()
            try:
                m.forward(x=np.zeros(3, np.float32))
            except KeyboardInterrupt:
                print("interrupted", time.monotonic() - start < 10, flush=True)
            os._exit(0)
        def fork_here():  # the child's one thread, its main thread, is not the parent's
            pid = os.fork()
            if pid == 0:
                child()
            for _ in range(600):  # 30 s, then the child is ended (not left running)
                if os.waitpid(pid, os.WNOHANG)[0]:
                    return
                time.sleep(0.05)
            os.kill(pid, signal.SIGKILL)
            print("the child ran on")
        forker = threading.Thread(target=fork_here)
        forker.start()
        forker.join()
    """,
    # QA: the handler ran inside the call, which held the model's lock, and save() waited
    # on it for ever; there what reads the model runs, and anything else is refused
    "own handler that saves": """
        import tempfile
        path = os.path.join(tempfile.mkdtemp(), "saved.npz")
        m = built.Spin(seed=0)
        m.set_optimizer("sgd", lr=0.1)
        before = m.params["w"].copy()
        def save_and_stop(signum, frame):
            m.save(path)
            try:
                m.set_params({"w": before})
            except RuntimeError as e:
                print("refused", "inside a call of model Spin" in str(e))
            raise RuntimeError("saved")
        signal.signal(signal.SIGINT, save_and_stop)
        start = interrupt_soon()
        try:
            m.train_step(x=np.ones((1, 8), np.float32), n=np.int32(3))  # for ever
        except RuntimeError as e:
            print("interrupted", time.monotonic() - start < 10, repr(e))
        back = built.Spin(seed=1)
        back.load(path)
        print("as before the step", bool(np.array_equal(back.params["w"], before)),
              back.rng_calls)
    """,
    # QA: a child forked while another thread was in a call waited for ever on the lock
    # that thread held
    "forked during another thread's call": """
        m = built.Spin(seed=0)
        def spin():
            m.forward(x=np.ones((1, 8), np.float32), n=np.int32(3))  # for ever
        threading.Thread(target=spin, daemon=True).start()
        time.sleep(0.5)
        pid = os.fork()
        if pid == 0:
            try:
                m.forward(x=np.ones((1, 8), np.float32), n=np.int32(-5))
            except RuntimeError as e:
                print("child:", "inside a call on another thread when this process was "
                      "forked" in str(e), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        sys.stdout.flush()
        os._exit(0)  # the spinning call never ends: no exit that waits for it
    """,
}
STOPPED = "RuntimeError('stopped by my handler')\n"
EXPECTED = {"forked by a thread": "interrupted True\n",
            "own handler that saves": "refused True\ninterrupted True RuntimeError('saved')\n"
                                      "as before the step True 0\n",
            "forked during another thread's call": "child: True\n", "while": "interrupted True\n-15.0\n", "empty batch": "interrupted True\n3.0\n",
            "training": "interrupted True\nunchanged True\ntrained True\n",
            "own handler": "interrupted True " + STOPPED,
            "own handler after the import": "interrupted True " + STOPPED,
            "own handler, Ctrl-C before the first loop": "interrupted True " + STOPPED,
            "own handler after two imports": ("interrupted True " + STOPPED) * 3
            + "interrupted True KeyboardInterrupt()\n"}


def sigint_as_in_a_terminal() -> None:
    """The child's SIGINT at its default, so that Python installs its handler: a job run
    in the background (`cmd &`, as CI may run the suite) starts with SIGINT ignored, and
    its children would never see the signal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# The chained handler is the runtime's glue, the same for both targets: the cases of a
# second module (which shares the first one's handler) run on the cpu alone
SECOND_MODULE = {"own handler", "own handler after two imports"}
# a cuda model is not for forked children (CUDA's rule; the emulated device's own lock
# was held by the parent's thread)
CPU_ONLY = SECOND_MODULE | {"forked during another thread's call"}
RUNS = [(target, case) for target in ("cpu", "emulated") for case in sorted(CASES)
        if target == "cpu" or case not in CPU_ONLY]


@pytest.fixture(scope="module")
def module_of(tmp_path_factory):
    """The module of the file `name` (of SOURCE) for a target, built once."""
    made: dict = {}

    def get(name: str, target: str):
        if (name, target) not in made:
            made[name, target] = built_for(source_file(tmp_path_factory, name, SOURCE), target)
        return made[name, target]
    return get


@pytest.mark.parametrize("target, case", RUNS)
def test_ctrl_c_stops_a_loop_between_steps(module_of, target, case):
    first = module_of("interrupted.mdl", target)
    folders, second = [Path(first.__file__).parent], ""
    if case in SECOND_MODULE:
        other = module_of("interrupted_too.mdl", target)
        folders.append(Path(other.__file__).parent)
        second = other.__name__
    script = PRELUDE.format(module=first.__name__) + textwrap.dedent(CASES[case])
    sys_path = [str(f) for f in folders]
    done = subprocess.run([sys.executable, "-c", f"import sys; sys.path[:0] = {sys_path!r}\n"
                           + script, sys_path[0], second],
                          capture_output=True, text=True, timeout=120,
                          preexec_fn=sigint_as_in_a_terminal)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == EXPECTED[case], done.stdout + done.stderr[-2000:]


RECURRENT = """
model Rnn(I = 16, H = 32) {
  input xs : f32[T, B, I]
  param U : f32[I, H] = uniform(-0.1, 0.1)
  param W : f32[H, H] = uniform(-0.1, 0.1)
  h = zeros[B, H]
  hs = for x in xs {
    h = tanh(x @ U + h @ W)
    yield h
  }
  output loss = mean(hs * hs)
  minimize loss
}
"""

# A handler that raises once the backward runs: a profiled build's counts of the
# backward's parts (the cpu target's, counted as they run: the emulated device's come at
# the call's end) say so, while rng_calls (counted once the call is done) says the call
# still runs; a thread sends SIGINT every half millisecond until it has. A signal that
# lands after the backward's loop (no step left to read it) is handled after the call:
# a try missed, and the next one goes again.
IN_THE_BACKWARD = """
import os, signal, sys, tempfile, threading
import numpy as np
import {module} as built
xs = np.random.default_rng(0).standard_normal((20000, 1, 16)).astype(np.float32)
path = os.path.join(tempfile.mkdtemp(), "saved.npz")
for call in ("train_step", "forward_backward"):
    for attempt in range(8):
        m = built.Rnn(seed=0)
        m.set_optimizer("sgd", lr=0.1)
        m.train_step(xs=xs[:5])
        m.reset_profile()
        before, calls = m.params["W"].copy(), m.rng_calls
        done = threading.Event()
        def in_backward(signum, frame):
            if done.is_set():  # a signal still on its way
                return
            if m.rng_calls != calls:  # the call is over
                done.set()
            elif any(s["function"] == "backward" and s["runs"] for s in m.profile()):
                done.set()
                m.save(path)
                raise KeyboardInterrupt
        def pester():
            while not done.wait(0.0005):
                os.kill(os.getpid(), signal.SIGINT)
        signal.signal(signal.SIGINT, in_backward)
        thread = threading.Thread(target=pester)
        thread.start()
        try:
            getattr(m, call)(xs=xs)
            interrupted = False
        except KeyboardInterrupt:
            interrupted = True
        done.set()
        thread.join()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if interrupted:
            break
    print(call, "interrupted" if interrupted else "never interrupted in its backward")
    print("rng_calls", m.rng_calls, int(np.load(path)["rng/calls"]),
          "unchanged", bool(np.array_equal(before, m.params["W"])))
    try:
        m.backward()
    except RuntimeError as e:
        print(e)
"""


def test_a_training_call_interrupted_in_its_backward_leaves_no_backward(tmp_path_factory):
    """QA: train_step and forward_backward interrupted in their backward (Ctrl-C, a
    handler of the user's) left backward() runnable on that call's inputs, which Python
    had freed (the cpu target read freed memory: wrong gradients or a crash), and counted
    the call in rng_calls, also in the handler's checkpoint (a resumed run drew other
    dropout masks). The call counts once its gradients are made, and leaves no backward."""
    module = built_for(source_file(tmp_path_factory, "interrupted_backward.mdl", RECURRENT),
                       "cpu", profile=True)
    folder = str(Path(module.__file__).parent)
    done = subprocess.run([sys.executable, "-c", f"import sys; sys.path[:0] = [{folder!r}]\n"
                           + IN_THE_BACKWARD.format(module=module.__name__)],
                          capture_output=True, text=True, timeout=120,
                          preexec_fn=sigint_as_in_a_terminal)
    assert done.returncode == 0, done.stderr[-2000:]
    none = "backward() needs a forward(..., training=True) first\n"
    assert done.stdout == ("train_step interrupted\nrng_calls 1 1 unchanged True\n" + none
                           + "forward_backward interrupted\nrng_calls 1 1 unchanged True\n"
                           + none), done.stdout + done.stderr[-2000:]
