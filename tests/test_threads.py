"""The threads of a generated module: set_num_threads/get_num_threads, products split over
threads (mdl's own kernel and the BLAS's, on OpenMP's threads: cpp_runtime/mdl/blas.h)
and large elementwise loops split over the same threads (codegen/targets/cpu.py)
agreeing with one thread and with NumPy, from several Python threads at once, and a
process forked after the threads had started (libgomp cannot start threads again in it)."""
import os
import select
import signal
import threading

import numpy as np
import pytest

from codegen.pipeline import load

# Products past blas.h's one-thread size (2^18 multiply-adds), in a loop (a packed weight:
# mdl's own kernel with OpenBLAS) and out of one (a plain product), and an elementwise loop
# past cpu.py's PARALLEL_WORK (z: one contiguous loop, shared in multiples of 16 elements;
# H = 250 and B = 37 leave a remainder; the backward's step loop at B = 48).
WIDE = """
model Wide(H = 250) {
  input xs : f32[T, B, H]
  param w : f32[H, H] = normal(0, 0.06)
  param u : f32[H, H] = normal(0, 0.06)
  param a : f32[H] = uniform(0.5, 1.5)
  h = zeros[B, H]
  hs = for x in xs {
    h = tanh(x + a * (h @ w))
    yield h
  }
  output y = hs @ u
  output z = sigmoid(hs) * tanh(hs) + 2 * hs
  param c : f32[H] = normal(0, 0.1)
  output loss = sum(tanh(hs @ u + c))
  minimize loss
}
"""


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    path = tmp_path_factory.mktemp("threads") / "wide.mdl"
    path.write_text(WIDE)
    return load(path)


def numpy_wide(params, xs):
    h = np.zeros(xs.shape[1:], np.float64)
    hs = []
    for x in xs.astype(np.float64):
        h = np.tanh(x + params["a"] * (h @ params["w"]))
        hs.append(h)
    hs = np.stack(hs)
    y = hs @ params["u"]
    return {"y": y, "z": np.tanh(hs) / (1 + np.exp(-hs)) + 2 * hs,
            "dc": (1 - np.tanh(y + params["c"]) ** 2).sum(axis=(0, 1))}


def inputs(seed, T=4, B=48, H=250):
    return np.random.default_rng(seed).standard_normal((T, B, H)).astype(np.float32)


@pytest.fixture
def threads(wide):
    """Leaves the process's thread count as it found it."""
    before = wide.get_num_threads()
    yield
    wide.set_num_threads(before)


def test_the_thread_count_is_set_and_read(wide, threads):
    wide.set_num_threads(1)
    assert wide.get_num_threads() == 1
    wide.set_num_threads(2)  # MKL caps the count at the cores (2 on every machine here)
    assert wide.get_num_threads() == 2
    with pytest.raises(ValueError, match="n >= 1, got 0"):
        wide.set_num_threads(0)


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("batch", [48, 37])
def test_products_and_loops_on_any_thread_count_match_numpy(wide, threads, n, batch):
    wide.set_num_threads(n)
    m = wide.Wide(seed=1)
    params = {k: v.astype(np.float64) for k, v in m.params.items()}
    xs = inputs(n, T=3 if batch == 37 else 4, B=batch)
    out, expected = m.forward(xs=xs, training=True), numpy_wide(params, xs)
    for name in ("y", "z"):
        np.testing.assert_allclose(out[name], expected[name], atol=2e-4, err_msg=name)
    np.testing.assert_allclose(m.backward()["c"], expected["dc"], rtol=1e-4)


def test_products_from_several_python_threads_at_once(wide, threads):
    wide.set_num_threads(2)
    models = [wide.Wide(seed=s) for s in range(4)]
    xs = [inputs(10 + s) for s in range(4)]
    expected = [m.forward(xs=x) for m, x in zip(models, xs)]
    failures = []

    def work(i):
        for _ in range(20):
            out = models[i].forward(xs=xs[i])
            if not all(np.array_equal(out[k], expected[i][k]) for k in ("y", "z")):
                failures.append(i)
    workers = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert failures == []


def test_a_process_forked_after_the_threads_started_runs_on_one_thread(wide, threads):
    wide.set_num_threads(2)
    m = wide.Wide(seed=2)
    xs = inputs(3)
    expected = m.forward(xs=xs)["y"]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, never return into pytest
        try:
            same = np.array_equal(m.forward(xs=xs)["y"], expected)
            try:
                wide.set_num_threads(2)
                refused = "accepted"
            except RuntimeError as e:
                refused = str(e)
            os.write(write, f"{same} {wide.get_num_threads()} {refused}".encode())
        finally:
            os._exit(0)
    os.close(write)
    if not select.select([read], [], [], 120)[0]:  # a child whose threads wait forever
        os.kill(pid, signal.SIGKILL)
    with os.fdopen(read) as pipe:
        report = pipe.read()
    os.waitpid(pid, 0)
    assert report.startswith("True 1 set_num_threads(2): this process was forked"), report
    assert "'spawn'" in report
    assert np.array_equal(m.forward(xs=xs)["y"], expected)  # the parent keeps its threads
    assert wide.get_num_threads() == 2
