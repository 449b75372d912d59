"""The threads of a generated module: set_num_threads/get_num_threads, products split over
threads (mdl's own kernel and the BLAS's, on OpenMP's threads: cpp_runtime/mdl/blas.h)
and large elementwise loops split over the same threads (codegen/targets/cpu.py)
agreeing with one thread and with NumPy, from several Python threads at once, and a
process forked after the threads had started (libgomp cannot start threads again in it)."""
import os
import re
import select
import signal
import threading

import numpy as np
import pytest
from source_files import source_file

from codegen.pipeline import BuildOptions, load, sources

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
    wide.set_num_threads(2)  # every machine here has at least 2 cores
    assert wide.get_num_threads() == 2
    wide.set_num_threads(1024)  # no BLAS takes more than the CPUs the process may run on
    assert 1 <= wide.get_num_threads() <= len(os.sched_getaffinity(0))
    wide.set_num_threads(2)
    with pytest.raises(ValueError, match="needs 1 <= n <= 1024, got 0"):
        wide.set_num_threads(0)
    for n in (-1, 2**70):  # one message for the range (it was "must be in [0, 2**64)")
        with pytest.raises(ValueError, match=f"needs 1 <= n <= 1024, got {n}"):
            wide.set_num_threads(n)
    with pytest.raises(TypeError, match=r"set_num_threads\(n\): n must be an int, got str"):
        wide.set_num_threads("2")
    assert wide.get_num_threads() == 2


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
    """The child computes what one thread computes, to the bit (a BLAS may add in another
    order on two threads: OpenBLAS on a Zen 3 does, by an ulp)."""
    m = wide.Wide(seed=2)
    xs = inputs(3)
    wide.set_num_threads(1)
    one_thread = m.forward(xs=xs)["y"]
    wide.set_num_threads(2)
    expected = m.forward(xs=xs)["y"]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, never return into pytest
        try:
            same = np.array_equal(m.forward(xs=xs)["y"], one_thread)
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


def test_a_loop_split_over_the_threads_is_generated_once(tmp_path):
    """A loop that may run on the threads or on one is one lambda of the split loop's range
    (kept out of line: MDL_NOINLINE) that the threads' region and the one-thread way both
    call; two copies of it made a quarter to two fifths of a model's compile
    (docs/build.md)."""
    path = tmp_path / "wide.mdl"
    path.write_text(WIDE)
    _, files = sources(path, "wide", BuildOptions())
    code = files["module.cpp"]
    parts = re.findall(r"const auto (part\d+) = \[=, &m, &c\]\(const int64_t \w+, "
                       r"const int64_t \w+\) MDL_NOINLINE \{", code)
    assert len(parts) >= 3  # z's loop; the step's tanh, forward and backward
    # each called twice (names are a function's own: one may recur in the next)
    assert all(code.count(f" {p}(") == 2 * code.count(f"auto {p} =") for p in parts)
    regions = re.findall(r"#pragma omp parallel num_threads\(team\)\n( *)\{\n(.*?)\n\1\}",
                         code, re.S)
    assert len(regions) == len(parts)
    assert not any("for (" in body for _, body in regions)


# Products that read none of each other's results run together (codegen/backend/
# products.py, mdl::gemm_together): with mdl's kernels split over the threads when there are
# at least 2^16 multiply-adds and at most 8 rows each. t dies at its product, and the other
# products' results are of its size: the memory plan must not give them its slot while
# the group still reads it. N = 300 leaves columns past the last whole vector; xt is read
# transposed; q's second product reads h @ u (shared with y), so it runs in the next group.
TOGETHER = """
model Together(N = 300) {
  input x : f32[B, N]; input h : f32[B, N]; input xt : f32[N, B]
  param w : f32[N, N] = normal(0, 0.06)
  param u : f32[N, N] = normal(0, 0.06)
  t = x * 2.0
  output y = t @ w + h @ u
  output z = transpose(xt) @ u
  output q = (h @ u) @ w
}

model Chain(N = 300) {
  input h : f32[B, N]
  param w : f32[N, N] = normal(0, 0.06)
  param u : f32[N, N] = normal(0, 0.06)
  output q = (h @ u) @ w
}
"""


@pytest.fixture(scope="module")
def together(tmp_path_factory):
    return source_file(tmp_path_factory, "together.mdl", TOGETHER)


def infer_text(path, model):
    _, files = sources(path, "together", BuildOptions(model=model))
    return files["module.cpp"].split("void infer_0(Model& m, Call& c) {")[1].split("\n}\n")[0]


def test_independent_products_are_one_call_and_dependent_ones_are_not(together):
    infer = infer_text(together, "Together")
    groups = re.findall(r"const mdl::Product<float> \w+\[\] = \{\n((?:      \{.*\},\n)+)",
                        infer)
    # t @ w with h @ u; then xt^T @ u with (h @ u) @ w
    assert [len(rows.splitlines()) for rows in groups] == [2, 2]
    assert "mdl::gemm(" not in infer
    chain = infer_text(together, "Chain")
    assert chain.count("mdl::gemm(") == 2 and "gemm_together" not in chain


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("batch", [1, 3, 8, 9])
def test_products_run_together_match_numpy(together, threads, n, batch):
    module = load(together)
    module.set_num_threads(n)
    m = module.Together(seed=3)
    w, u = (m.params[k].astype(np.float64) for k in ("w", "u"))
    rng = np.random.default_rng(batch)
    x, h = (rng.standard_normal((batch, 300)).astype(np.float32) for _ in range(2))
    xt = rng.standard_normal((300, batch)).astype(np.float32)
    out = m.forward(x=x, h=h, xt=xt)
    expected = {"y": 2 * x @ w + h @ u, "z": xt.T.astype(np.float64) @ u, "q": (h @ u) @ w}
    for name, value in expected.items():
        np.testing.assert_allclose(out[name], value, rtol=1e-4, atol=1e-4, err_msg=name)
