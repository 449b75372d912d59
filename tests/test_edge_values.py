"""Values at their edges, the same on every target and in the reference: `max` of i32
values that are all negative (the CPU's started from an integer's infinity(), which is 0,
and returned 0); `max`, `logsumexp`, `softmax` and `mean` over no elements (a batch of
none): max's identity (-inf, or i32's lowest value) where NumPy itself would raise; and
NaN, which `max`, `maximum`, `minimum`, `relu` and `clip` keep, as NumPy and PyTorch do
(they dropped it: a diverged model's NaN could vanish behind a relu), and NaN or inf
times 0 (folded to 0 once), and infinities,
which log_softmax meets as logsumexp does; and `bool(x)`, true
where x is not 0 (it was a truncation to uint8_t: bool(0.5) false, bool(256) false, and
bool(2.0) a bool holding 2); and `i32(x)` of a NaN (0) or of a float past i32 (its
nearer end), which C++'s cast leaves undefined (x86 gave INT32_MIN for both, a GPU
saturates); and i32 `+ - *`, unary `-`, `abs` and `sum`, which wrap around past i32's
range as NumPy's do (a signed overflow is undefined in C++: GCC folded `(x + 1) > x` to
true at i32's largest value); and i32 `//` and `%` by 0 or -1; and `x ** 0.5`, sqrt on every
target (GCC made pow(x, 0.5) sqrt only in loops it vectorized), and `x ** y`, C's pow in
the reference too (NumPy's `power` took an exponent of one number for sqrt); and the
sign of a zero, the same on every target and in the reference (NumPy's vectorized
`maximum` took a tie's second operand, and its `sign`, which abs's gradient is, and `cumsum` kept a -0.0)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from codegen.pipeline import load
from codegen.reference import interpreter
from dsl import check_source

SOURCE = """
model Ints() {
  input x : i32[B, 3]
  output m = max(x)
  output rows = max(x, axis = 1)
  output cols = max(x, axis = 0)
}
model Floats() {
  input x : f32[B, 3]
  output m = max(x)
  output cols = max(x, axis = 0)
  output avg = mean(x, axis = 0)
  output up = maximum(x, 0.0)
  output up_first = maximum(0.0, x)
  output down = minimum(x, 0.0)
  output down_first = minimum(0.0, x)
  output r = relu(x)
  output c = clip(x, -1.0, 1.0)
  output lse = logsumexp(x, axis = 0)
  output sm = softmax(x, axis = 0)
  output row_sm = softmax(x, axis = 1)
  output lsm = log_softmax(x, axis = 1)
  output row_lse = logsumexp(x, axis = 1)
  output zero = x * 0.0
}
model NoTargets() {
  input logits : f32[B, 3]
  input targets : i32[B]
  param w : f32[3] = ones
  output loss = cross_entropy(logits * w, targets)
  minimize loss
}
model Wide() {
  input x : f32[B, N]
  output m = max(x)
  output rows = max(x, axis = 1)
  output low = min(x, axis = 1)
  output lse = logsumexp(x, axis = 1)
  output cols = logsumexp(x, axis = 0)
}
model Columns() {
  input x : f32[T, B, 3]
  input k : i32[T, B]
  output over_t = sum(x, axis = 0)
  output over_tb = sum(x, axis = [0, 1])
  output avg_tb = mean(x, axis = [0, 1])
  output over_t_b = sum(x, axis = [0, 2])
  output ks = sum(k, axis = 0)
}
model Slopes() {
  input x : f32[B]
  param w : f32[1] = ones
  output loss = sum(abs(x * w) + relu(x * w) + maximum(x * w, 0.5) + clip(x * w, -1.0, 1.0))
  minimize loss
}
model NanSlopes() {
  input a : f32[N]
  input b : f32[N]
  input c : f32[N]
  input d : f32[N]
  input e : f32[N]
  input f : f32[M]
  input h : f32[M]
  input k : f32[N]
  output loss = sum(relu(a)) + sum(abs(b)) + sum(elu(c)) + sum(maximum(d, 0.0))
                + sum(minimum(0.0, e)) + max(f) + min(h) + sum(clip(k, -1.0, 1.0))
  minimize loss
}
model Hot() {
  input ids : i32[N]
  output y = one_hot(ids, 3)
}
model Truth() {
  input x : f32[B]
  input i : i32[B]
  output b = bool(x)
  output bi = bool(i)
  output f = f32(bool(x))
  output n = i32(x * 1e10)
}
model Wraps() {
  input x : i32[B]
  input y : i32[B]
  output up = (x + 1) > x
  output twice = (x * 2) > x
  output p = x * y
  output d = x - y
  output n = -x
  output a = abs(x)
  output total = sum(x * y)
  output cols = sum(x + y, axis = 0)
}
model DroppedBack(H = 3) {
  input xs : f32[T, B, H]
  h = zeros[B, H]
  for x in reversed(xs) (checkpoint = 3) { h = tanh(x + dropout(h, 0.5)) }
  output loss = sum(h * h)
  minimize loss
}
model Divides() {
  input x : i32[B]
  input y : i32[B]
  output q = x // y
  output r = x % y
  output every = (x // 3) * 3 + x % 3 == x
}
model Shifted() {
  input x : f32[B, 3]
  input t : i32[B]
  param w : f32[1] = ones
  output sm = softmax(x, axis = 1)
  output lsm = log_softmax(x, axis = 1)
  output ce = cross_entropy(x, t)
  output loss = sum(logsumexp(x * w, axis = 1))
  minimize loss
}
model Classes() {
  input x : f32[B, N]
  input t : i32[B]
  output sm = softmax(x, axis = 1)
  output lsm = log_softmax(x, axis = 1)
  output ce = cross_entropy(x, t)
}
model Picks() {
  input x : f32[B, N]
  input n : i32[B, N]
  output rows = argmax(x)
  output cols = argmax(x, axis = 0)
  output ints = argmax(n, axis = 1)
}
model LongRows() {
  input x : f32[B, N]
  input n : i32[B, N]
  output sm = softmax(x, axis = 1)
  output lsm = log_softmax(x, axis = 1)
  output top = max(x, axis = 1)
  output total = sum(x, axis = 1)
  output lse = logsumexp(x, axis = 1)
  output ints = max(n, axis = 1)
  output int_total = sum(n, axis = 1)
}
model Pointers() {
  input xs : f32[S, B, 3]
  input picks : i32[B]
  param w : f32[3] = ones
  output loss = cross_entropy(transpose(sum(xs * w, axis = 2)), picks)
  minimize loss
}
model Powers() {
  input x : f32[N]
  input y : f32[N]
  output half = x ** 0.5
  output given = x ** y
  output folded = x ** (zeros[N] + 0.5)
}
model Zeros() {
  input x : f32[N]
  input y : f32[N]
  input g : f32[N]
  output r = relu(x)
  output up = maximum(x, y)
  output down = minimum(x, y)
  output c = clip(x, -1.0, 1.0)
  output run = cumsum(x, axis = 0)
  output back = cumsum(x, axis = 0, reverse = true)
  output plus = x + 0.0
  output plus_zeros = zeros[N] + x
  output minus = x - (-0.0)
  output kept = (x + (-0.0)) + (x - 0.0)
  output loss = sum(abs(x) * g)
  minimize loss
}
model Bounds() {
  input x : f32[N]
  input lo : f32[N]
  input hi : f32[N]
  output c = clip(x, lo, hi)
  output low = clip(x, lo, 1.0)
  output high = clip(x, -1.0, hi)
}
model Counts() {
  input xs : f32[T, B, 3]
  input ns : i32[T, B, 2]
  input lens : i32[B]
  param w : f32[3, 2] = normal(0, 0.5)
  h = zeros[B, 2]
  c = full[B, 2](7)
  ys, cs = for x in reversed(xs), n in reversed(ns) (lengths = lens, checkpoint = 2) {
    c = c * 3 + n
    h = tanh(x @ w + h * f32(clip(c, -3, 3)))
    yield h, c - n
  }
  output c
  output cs
  output loss = mean(ys * ys) + mean(h)
  minimize loss
}
"""
ON_GPU = os.environ.get("MDL_TEST_DEVICE") == "gpu"
TARGETS = [("cpu", False), ("cuda", not ON_GPU)]


def load_on(target_emulate: tuple, source: str, stem: str, tmp_path_factory):
    """`source` built in f64 for one of TARGETS (the cuda target on the emulated device
    unless the tests run on a GPU), as module `{stem}_{target}[_emulated]`."""
    target, emulate = target_emulate
    path = tmp_path_factory.mktemp(stem) / f"{stem}.mdl"
    path.write_text(source)
    return load(path, target=target, emulate=emulate, dtype="f64",
                name=f"{stem}_{target}{'_emulated' if emulate else ''}")


@pytest.fixture(scope="module", params=TARGETS, ids=["cpu", "cuda"])
def module(request, tmp_path_factory):
    return load_on(request.param, SOURCE, "edges", tmp_path_factory)


def matches_the_reference(module, model: str, rtol: float = 0.0, **inputs) -> dict:
    """The outputs of `model` on `inputs`, after checking each is the reference's: equal,
    or within `rtol` (NaN matching NaN either way)."""
    got = getattr(module, model)().forward(**inputs)
    got = {k: np.asarray(v.numpy() if hasattr(v, "numpy") else v) for k, v in got.items()}
    with np.errstate(invalid="ignore"):
        want = interpreter.run(check_source(SOURCE, model=model, dtype="f64").graph, inputs, {})
    for k in want:
        if rtol:
            np.testing.assert_allclose(got[k], want[k], rtol=rtol, err_msg=k)
        else:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    return got


@pytest.mark.parametrize("x", [-np.arange(1, 7).reshape(2, 3), np.arange(-3, 3).reshape(2, 3),
                               np.zeros((0, 3))], ids=["negative", "mixed", "none"])
def test_max_of_i32(module, x):
    x = x.astype(np.int32)
    got = matches_the_reference(module, "Ints", x=x)
    if x.size:
        assert got["m"] == x.max()
    else:
        assert got["m"] == np.iinfo(np.int32).min
        assert (got["cols"] == np.iinfo(np.int32).min).all()


def test_float_reductions_over_no_elements(module):
    got = matches_the_reference(module, "Floats", x=np.zeros((0, 3)))
    assert got["m"] == -np.inf and (got["lse"] == -np.inf).all()
    assert got["sm"].shape == (0, 3) and np.isnan(got["avg"]).all()


def test_cross_entropy_over_no_targets_is_0_with_zero_gradients(module):
    """As the `lengths` form's: PyTorch's mean of nothing is NaN (QA found this form's
    0 undocumented)."""
    inputs = dict(logits=np.zeros((0, 3)), targets=np.zeros(0, np.int32))  # an f64 build
    graph = check_source(SOURCE, model="NoTargets", dtype="f64").graph
    assert interpreter.run(graph, inputs, {"w": np.ones(3)})["loss"] == 0.0
    m = module.NoTargets()
    assert float(m.forward(**inputs, training=True)["loss"]) == 0.0
    assert (np.asarray(m.backward()["w"]) == 0.0).all()


@pytest.mark.parametrize("T, B", [(2000, 3), (7, 300), (1, 5)])
def test_sums_over_strided_axes_split_in_runs(module, T, B):
    """Sums and means over outer axes, of few outputs and many elements each: on the GPU
    each output's elements are cut into runs a thread each, whose sums are added in
    order (cuda/rows.h's reduce_runs_kernel); an i32 sum wraps around as NumPy's."""
    rng = np.random.default_rng(T)
    x = rng.standard_normal((T, B, 3))
    k = rng.integers(-2**31, 2**31, (T, B)).astype(np.int32)
    got = matches_the_reference(module, "Columns", rtol=1e-12, x=x, k=k)
    np.testing.assert_allclose(got["over_tb"], x.sum(axis=(0, 1)), rtol=1e-12)
    np.testing.assert_array_equal(got["ks"], k.sum(axis=0, dtype=np.int32))


def test_nvcc_compiles_the_edges(tmp_path):
    """nvcc refused the reduction kernel for i32 (its logsumexp branch called std::exp and
    std::isfinite on an int, host-only functions): a model taking the max of an i32 input
    did not build for a GPU. Where nvcc is installed, these models (i32's wrapping
    arithmetic and sums among them) build and import."""
    from test_cuda import _nvcc_missing
    if (why := _nvcc_missing()) is not None:
        pytest.skip(f"no CUDA toolkit: {why}")
    path = tmp_path / "ints.mdl"
    path.write_text(SOURCE)
    built = load(path, target="cuda", dtype="f32", name="edges_nvcc")
    assert hasattr(built, "Ints") and hasattr(built, "Wraps")


def test_nan_is_kept_as_numpy_keeps_it(module):
    x = np.array([[1.0, np.nan, -2.0], [np.nan, 5.0, 0.0], [3.0, 4.0, -1.0],
                  [np.inf, 1.0, 2.0], [-np.inf, 0.0, 1.0]])
    got = matches_the_reference(module, "Floats", rtol=1e-12, x=x)
    assert np.isnan(got["m"]) and np.isnan(got["r"][0, 1]) and np.isnan(got["c"][1, 0])
    assert np.isnan(got["up_first"][0, 1]) and got["r"][2, 2] == 0
    # log_softmax of [inf, 1, 2] is [NaN, -inf, -inf], x - logsumexp(x) as PyTorch's
    # logsumexp gives it (it was all NaN, as torch.log_softmax 2.13 still gives it)
    assert np.isnan(got["lsm"][3, 0]) and (got["lsm"][3, 1:] == -np.inf).all()
    # NaN and inf times 0 are NaN (x * 0.0 was folded to zeros)
    assert np.isnan(got["zero"][0, 1]) and np.isnan(got["zero"][3, 0])
    assert got["zero"][2, 2] == 0


def test_casts_of_numbers_are_defined_everywhere(module):
    x = np.array([0.5, -0.25, 0.0, 2.0, np.nan, 256.0])
    i = np.array([0, 1, 256, -1, 2, 512], np.int32)
    got = matches_the_reference(module, "Truth", x=x, i=i)
    assert got["b"].tolist() == [True, True, False, True, True, True]
    assert got["f"].tolist() == [1, 1, 0, 1, 1, 1]
    top, bottom = np.iinfo(np.int32).max, np.iinfo(np.int32).min
    assert got["n"].tolist() == [top, bottom, 0, top, 0, top]  # NaN 0, saturated


def test_i32_arithmetic_wraps_around_as_numpy(module):
    top, bottom = np.iinfo(np.int32).max, np.iinfo(np.int32).min
    x = np.array([top, bottom, 65536, -7, bottom], np.int32)
    y = np.array([2, 1, 65536, 3, -1], np.int32)
    got = matches_the_reference(module, "Wraps", x=x, y=y)
    assert got["up"].tolist() == [False, True, True, True, True]  # was all true
    assert got["twice"].tolist() == [False, True, True, False, True]
    assert got["n"][1] == bottom and got["a"][1] == bottom and got["p"][2] == 0
    assert got["total"] == np.sum(x.astype(np.int64) * y).astype(np.int32)  # modulo 2**32


def test_i32_floor_division_and_remainder_are_numpys(module):
    """The quotient rounds down and the remainder has the divisor's sign, as NumPy's and
    Python's; a 0 divisor gives 0 and i32's lowest value // -1 wraps (C's `/` and `%`
    leave both undefined, and x86 ends the process with a signal)."""
    top, bottom = np.iinfo(np.int32).max, np.iinfo(np.int32).min
    x = np.array([7, -7, 7, -7, 5, bottom, bottom, top, -1, 0, 6, bottom], np.int32)
    y = np.array([2, 2, -2, -2, 0, -1, 2, bottom, bottom, 0, -3, bottom], np.int32)
    got = matches_the_reference(module, "Divides", x=x, y=y)
    with np.errstate(all="ignore"):
        assert got["q"].tolist() == np.floor_divide(x, y).tolist()
        assert got["r"].tolist() == np.remainder(x, y).tolist()
    assert got["q"].tolist()[:6] == [3, -4, -4, 3, 0, bottom] and got["r"][3] == -1
    assert got["every"].all()


def test_dropout_in_a_reversed_checkpointed_loop_draws_the_references_masks(module):
    """T=4 in segments of 3: the reversed loop's first two steps are the last segment's
    padding. The reference skips them; on the GPU they run, masked, and must draw no
    random numbers, or every real step's mask is another (the loss was 1.2x off)."""
    from fuzz_compare import compare
    graph = check_source(SOURCE, model="DroppedBack", dtype="f64").graph
    for seed in (1, 2):
        outcome = compare(module, "DroppedBack", graph, seed=seed, dtype="f64")
        assert outcome.ok, outcome.detail


def test_softmax_keeps_its_precision_far_from_zero(module):
    """softmax, log_softmax, cross_entropy and logsumexp's gradient of rows far from 0:
    each as precise as of the same row shifted to 0. They subtracted the row's
    logsumexp, whose last bits round log(sum) away: softmax of a row of -1e17 (in f64;
    -1e9 in f32, an attention score masked out) was 1 everywhere, not 1/3."""
    near = np.array([[0.0, 0.0, 0.0], [0.0, 1.0, 2.0], [0.0, -3.0, 0.5]])
    x = near + np.array([[-1e17], [1e9], [-1e9]])
    t = np.array([1, 2, 0], np.int32)
    model = getattr(module, "Shifted")(seed=0)
    got = model.forward(x=x, t=t, training=True)
    grads = model.backward()
    graph = check_source(SOURCE, model="Shifted", dtype="f64").graph
    want = interpreter.run(graph, {"x": near, "t": t}, {"w": np.ones(1)})
    tolerance = {"rtol": 1e-12, "atol": 1e-15}  # of the same rows near 0
    for k in ("sm", "lsm", "ce"):
        np.testing.assert_allclose(np.asarray(got[k]), want[k], err_msg=k, **tolerance)
    np.testing.assert_allclose(np.asarray(grads["input:x"]), want["sm"], **tolerance)
    np.testing.assert_allclose(want["sm"][0], 1 / 3)
    far = interpreter.gradients(graph, {"x": x, "t": t}, {"w": np.ones(1)}, training=True)
    np.testing.assert_allclose(far.inputs["x"], want["sm"], **tolerance)  # the reference's
    for k in ("sm", "lsm", "ce"):
        np.testing.assert_allclose(far.outputs[k], want[k], err_msg=k, **tolerance)


@pytest.mark.parametrize("n", [1, 15, 16, 17, 300])
def test_rows_of_classes_with_nans_and_infinities(module, n):
    """softmax, log_softmax and cross_entropy of one row at a time, of lengths about the
    CPU's 16 lanes and 256-element chunks (mdl/kernels.h's row_exp_sum): a NaN anywhere
    makes the row NaN (the max the CPU shifts by skips NaNs; the sum of exponentials
    carries it), an infinity as in the reference, and large values keep their precision."""
    rng = np.random.default_rng(n)
    rows = [rng.standard_normal(n) for _ in range(6)]
    rows[1][-1] = np.nan
    rows[2][0], rows[2][-1] = np.inf, np.nan
    rows[3][n // 2] = np.inf
    rows[4][:] = -np.inf
    rows[5] += 1e9
    for i, row in enumerate(rows):
        got = matches_the_reference(module, "Classes", rtol=1e-12, x=row[None, :],
                                    t=np.array([n - 1], np.int32))
        assert np.isnan(got["ce"]) == np.isnan(got["sm"]).all() == (i in (1, 2, 3, 4)), i
        if i in (0, 5):
            np.testing.assert_allclose(got["sm"].sum(), 1.0, rtol=1e-12)


@pytest.mark.parametrize("n", [1, 7, 8, 9, 17, 300])
def test_max_and_logsumexp_of_rows_keep_a_nan_anywhere(module, n):
    """max, min and logsumexp over contiguous rows, of lengths about the CPU's vectors (4
    doubles with AVX2, 8 with AVX-512): the CPU takes a row's max but for NaNs and whether
    it has one in one vectorized pass (mdl/kernels.h's row_max), where mdl::larger one
    element after another was scalar. A NaN anywhere makes the row's max, min and
    logsumexp NaN; infinities and rows of -inf give the reference's values. logsumexp
    over the columns (runs across the outputs, which add exp(x - max) by a select where
    the column's max is finite, and take the log likewise) too."""
    rng = np.random.default_rng(n)
    x = rng.standard_normal((8, n))
    x[1, 0] = np.nan
    x[2, -1] = np.nan
    x[3, n // 2] = np.nan
    x[4, n // 3] = np.inf
    x[5, :] = -np.inf
    x[6, -1], x[6, 0] = -np.inf, np.nan
    x[7, n // 2] = -np.inf
    got = matches_the_reference(module, "Wide", rtol=1e-12, x=x)
    nan = np.array([False, True, True, True, False, False, True, False])
    for k in ("rows", "low", "lse"):
        assert (np.isnan(got[k]) == nan).all(), k
    assert got["rows"][4] == np.inf and got["rows"][5] == -np.inf and np.isnan(got["m"])
    assert np.isnan(got["cols"][0]) and np.isnan(got["cols"][n // 2])


def test_argmax_picks_the_first_largest_and_the_first_nan(module):
    """argmax: the first of equal values, a NaN counting as the largest (as NumPy), -1
    along an axis of no elements (NumPy raises); rows long enough for a GPU block to
    share, with ties in different threads' elements."""
    x = np.array([[1.0, 3.0, 3.0, -1.0], [np.inf, np.nan, 2.0, np.nan],
                  [-np.inf, -np.inf, -np.inf, -np.inf], [0.0, -0.0, 0.0, 0.5]])
    n = np.array([[2, 7, 7, 1], [-5, -5, -9, -6], [0, 0, 0, 0], [-2147483648] * 4], np.int32)
    got = matches_the_reference(module, "Picks", x=x, n=n)
    assert got["rows"].tolist() == [1, 1, 0, 3] and got["ints"].tolist() == [1, 0, 0, 0]
    assert got["cols"].tolist() == [1, 1, 0, 1]
    got = matches_the_reference(module, "Picks", x=np.zeros((0, 4)), n=np.zeros((0, 4), np.int32))
    assert got["cols"].tolist() == [-1] * 4 and got["rows"].shape == (0,)
    got = matches_the_reference(module, "Picks", x=np.zeros((2, 0)), n=np.zeros((2, 0), np.int32))
    assert got["rows"].tolist() == [-1, -1] and got["ints"].tolist() == [-1, -1]
    long = np.random.default_rng(0).standard_normal((3, 5000))
    long[0, [100, 4000]] = 9.0  # a tie far apart: the first
    long[1, 4999] = 9.0
    long[2, [3000, 70]] = np.nan, 9.0
    wide = np.nan_to_num(long * 1000).astype(np.int32)
    got = matches_the_reference(module, "Picks", x=long, n=wide)
    assert got["rows"].tolist() == [100, 4999, 3000] and got["ints"].tolist()[:2] == [100, 4999]


def test_a_few_long_rows(module):
    """softmax, log_softmax and the reductions along a few rows of 5000, each of which a
    block of 1024 threads shares on a GPU (a greedy decoder's scores): a NaN, infinities,
    i32 sums that wrap, the largest value in the last element."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 5000))
    x[1, 4321] = np.nan
    x[2, [7, 4000]] = np.inf, -np.inf
    x[3, 4999] = 9.0
    n = rng.integers(-2**31, 2**31 - 1, (4, 5000)).astype(np.int32)
    n[3, 4999] = np.iinfo(np.int32).max
    got = matches_the_reference(module, "LongRows", rtol=1e-12, x=x, n=n)
    assert np.isnan(got["top"][1]) and got["top"][2] == np.inf and got["top"][3] == 9.0
    assert got["ints"][3] == np.iinfo(np.int32).max
    np.testing.assert_allclose(got["sm"][[0, 3]].sum(axis=1), 1.0, rtol=1e-12)


def test_classes_counted_by_a_symbolic_dim(module):
    """cross_entropy over S classes, S a dim of an input (a pointer network's scores over
    source positions): its gradient's one_hot of S classes did not compile (`S` was
    written into the C++ as it is)."""
    rng = np.random.default_rng(3)
    inputs = {"xs": rng.standard_normal((5, 2, 3)), "picks": np.array([4, 0], np.int32)}
    model = getattr(module, "Pointers")(seed=0)
    got = model.forward(**inputs, training=True)
    grads = model.backward()
    graph = check_source(SOURCE, model="Pointers", dtype="f64").graph
    want = interpreter.gradients(graph, inputs, {"w": np.ones(3)}, training=True)
    np.testing.assert_allclose(float(got["loss"]), want.outputs["loss"], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(grads["w"]), want.params["w"], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(grads["input:xs"]), want.inputs["xs"], rtol=1e-12,
                               atol=1e-15)


def test_an_i32_sequence_and_state_through_a_checkpointed_loop(module):
    """An i32 sequence stepped through in reverse, with lengths (a row of none) and
    checkpoints, carrying an i32 state that wraps past i32's range and an i32 yield, and
    the float state's gradient through them."""
    rng = np.random.default_rng(1)
    inputs = {"xs": rng.standard_normal((5, 3, 3)),
              "ns": rng.integers(-9, 9, (5, 3, 2)).astype(np.int32),
              "lens": np.array([5, 0, 3], np.int32)}
    inputs["ns"][1, 0, 0], inputs["ns"][2, 2, 1] = np.iinfo(np.int32).max, np.iinfo(np.int32).min
    model = getattr(module, "Counts")(seed=0)
    params = {k: np.array(v) for k, v in model.params.items()}
    got = model.forward(**inputs, training=True)
    grads = model.backward()
    graph = check_source(SOURCE, model="Counts", dtype="f64").graph
    want = interpreter.run(graph, inputs, params)
    for k in ("c", "cs"):
        np.testing.assert_array_equal(np.asarray(got[k]), want[k], err_msg=k)
    np.testing.assert_allclose(float(got["loss"]), want["loss"], rtol=1e-12)
    want = interpreter.gradients(graph, inputs, params, training=True)
    np.testing.assert_allclose(np.asarray(grads["w"]), want.params["w"], rtol=1e-10, atol=1e-14)
    assert not (np.asarray(got["c"]) == 7).all()  # the state moved where the rows ran


def test_gradients_at_nan_are_the_references(module):
    """The backward at a NaN input is the reference's: relu's, maximum's and clip's are
    what their rules select, and abs's is 0 there, as PyTorch's."""
    x = np.array([np.nan, 2.0, -0.5, 0.0, 0.75])
    model = getattr(module, "Slopes")(seed=0)
    model.forward(x=x, training=True)
    got = {k: np.asarray(v.numpy() if hasattr(v, "numpy") else v)
           for k, v in model.backward().items()}
    graph = check_source(SOURCE, model="Slopes", dtype="f64").graph
    with np.errstate(invalid="ignore"):
        want = interpreter.gradients(graph, {"x": x}, {"w": np.ones(1)}, training=True)
    np.testing.assert_allclose(got["input:x"], want.inputs["x"], rtol=1e-12)
    np.testing.assert_allclose(got["w"], want.params["w"], rtol=1e-12)
    assert got["input:x"][0] == 2.0 and np.isnan(got["w"][0])  # relu's 1 + maximum's 1


# each input's slope at NaN, PyTorch's (torch 2.13): relu, elu, maximum and minimum pass
# the cotangent back where they are NaN, abs and clip none, and a `max` or `min` all of it
# to the NaNs it came from (mdl's gave 0, NaN, NaN, 0.5, 0.5, every element NaN, 1)
NAN_SLOPES = {"a": 1.0, "b": 0.0, "c": 1.0, "d": 1.0, "e": 1.0, "f": 1.0, "h": 1.0, "k": 0.0}


def test_the_gradients_at_nan_and_infinities_are_pytorchs(module):
    x = np.array([np.nan, 0.0, -0.0, 2.0, -2.0, 0.5, np.inf, -np.inf])
    inputs = {name: x for name in NAN_SLOPES}
    inputs["f"] = inputs["h"] = x[[0, 1, 3, 4, 5]]  # a max of inf and -inf is no NaN
    model = module.NanSlopes()
    model.forward(**inputs, training=True)
    got = {k[len("input:"):]: np.asarray(v.numpy() if hasattr(v, "numpy") else v)
           for k, v in model.backward().items()}
    graph = check_source(SOURCE, model="NanSlopes", dtype="f64").graph
    with np.errstate(invalid="ignore", over="ignore"):
        want = interpreter.gradients(graph, inputs, {}, training=True).inputs
    for name, slope in NAN_SLOPES.items():
        assert got[name][0] == slope and want[name][0] == slope, name
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, err_msg=name)
    assert got["f"].tolist() == got["h"].tolist() == [1.0, 0, 0, 0, 0]
    try:
        import torch
    except ImportError:
        return
    functions = {"a": torch.relu, "b": torch.abs, "c": torch.nn.functional.elu,
                 "d": lambda v: torch.maximum(v, torch.zeros_like(v)),
                 "e": lambda v: torch.minimum(torch.zeros_like(v), v),
                 "f": torch.max, "h": torch.min, "k": lambda v: torch.clamp(v, -1.0, 1.0)}
    for name, function in functions.items():
        v = torch.tensor(inputs[name], dtype=torch.float32, requires_grad=True)
        function(v).sum().backward()
        np.testing.assert_allclose(got[name], v.grad.numpy(), rtol=1e-6, err_msg=name)


@pytest.mark.parametrize("n", [6, 40])
def test_a_power_of_one_half(module, n):
    """`x ** 0.5` is sqrt (NaN at -inf, -0.0 at -0.0: PyTorch's and NumPy's), and `x ** y`
    of an input y C's pow (inf, 0.0), on every target and in the reference: the cpu
    target's pow(x, 0.5) was sqrt where GCC vectorized its loop (40 elements) and pow
    where it did not (6), and the reference's was sqrt or pow as NumPy's `power` took its
    exponent (one number, or one an element). An exponent a pass folds to 0.5 is pow's
    too: it reached GCC as pow(x, 0.5), which its vectorizer made a root."""
    x = np.resize([-np.inf, -0.0, -4.0, np.inf, 4.0, 0.0], n)
    got = matches_the_reference(module, "Powers", x=x, y=np.full(n, 0.5))
    wants = {"half": np.resize([np.nan, -0.0, np.nan, np.inf, 2.0, 0.0], n),
             "given": np.resize([np.inf, 0.0, np.nan, np.inf, 2.0, 0.0], n),
             "folded": np.resize([np.inf, 0.0, np.nan, np.inf, 2.0, 0.0], n)}
    for k, want in wants.items():
        np.testing.assert_array_equal(got[k], want, err_msg=k)
        numbers = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got[k][numbers]), np.signbit(want[numbers]),
                                      err_msg=k)


@pytest.mark.parametrize("n", [4, 40])
def test_the_sign_of_a_zero_is_pytorchs(module, n):
    """relu(-0.0) is -0.0, -0.0 + 0.0 is 0.0, a running sum of -0.0s is 0.0 and abs's
    gradient at -0.0 is
    0.0, as in PyTorch, and a tie of maximum or minimum is its first operand, on every
    target and in the reference, in loops GCC vectorizes (40 elements) and in ones it
    does not (4): the reference gave relu(-0.0) 0.0 and maximum(-0.0, 0.0) 0.0, and the
    targets abs's gradient -0.0. (PyTorch's and NumPy's maximum of a tie is one operand
    or the other as their loops are vectorized or not.)"""
    x = np.resize([-0.0, 0.0, -0.0, 0.0], n)
    y = np.resize([0.0, -0.0, -0.0, 0.0], n)
    inputs = {"x": x, "y": y, "g": np.ones(n)}
    got = matches_the_reference(module, "Zeros", **inputs)
    negative = np.resize([True, False, True, False], n)
    # QA: x + 0.0, zeros + x and x - -0.0 were folded to x, -0.0 where IEEE gives 0.0
    # (and 1.0 / (x + 0.0) -inf for +inf); x + -0.0 and x - 0.0 are x
    wants = {"r": negative, "c": negative, "up": negative, "down": negative,
             "run": np.zeros(n, bool), "back": np.zeros(n, bool), "plus": np.zeros(n, bool),
             "plus_zeros": np.zeros(n, bool), "minus": np.zeros(n, bool), "kept": negative}
    graph = check_source(SOURCE, model="Zeros", dtype="f64").graph
    reference = interpreter.run(graph, inputs, {})
    for k, want in wants.items():
        assert np.signbit(got[k]).tolist() == want.tolist(), k
        assert np.signbit(reference[k]).tolist() == want.tolist(), k
    model = module.Zeros()
    model.forward(**inputs, training=True)
    slope = np.asarray(model.backward()["input:x"])
    want_slope = interpreter.gradients(graph, inputs, {}, training=True).inputs["x"]
    assert not np.signbit(slope).any() and not np.signbit(want_slope).any()
    try:
        import torch
    except ImportError:
        return
    tx = torch.from_numpy(x).requires_grad_()
    torch.abs(tx).sum().backward()
    theirs = {"r": torch.relu(tx), "c": torch.clamp(tx, -1, 1), "run": torch.cumsum(tx, 0),
              "back": torch.cumsum(tx.flip(0), 0).flip(0)}
    for k, value in theirs.items():
        assert torch.signbit(value).tolist() == wants[k].tolist(), k
    assert not torch.signbit(tx.grad).any()


def test_a_nan_bound_of_clip_is_kept(module):
    """clip(x, lo, hi) is minimum(maximum(x, lo), hi): a NaN bound gives NaN, as a NaN x
    does (maximum's and minimum's rule, PyTorch's clamp, NumPy's clip). x < NaN is false,
    so a NaN lo or hi was passed over: clip(0.5, NaN, 1.0) was 0.5."""
    nan, inf = np.nan, np.inf
    x = np.array([0.5, 0.5, nan, 0.0, 5.0, -5.0, 1.0, 2.0])
    lo = np.array([nan, 0.0, 0.0, -inf, 1.0, 1.0, nan, nan])
    hi = np.array([1.0, nan, 1.0, nan, 3.0, -1.0, 1.0, 3.0])
    got = matches_the_reference(module, "Bounds", x=x, lo=lo, hi=hi)
    np.testing.assert_array_equal(got["c"], np.clip(x, lo, hi))
    np.testing.assert_array_equal(got["low"], np.clip(x, lo, 1.0))
    np.testing.assert_array_equal(got["high"], np.clip(x, -1.0, hi))
    assert np.isnan(got["c"][[0, 1, 2, 3, 6, 7]]).all() and got["c"][[4, 5]].tolist() == [3, -1]


def test_an_id_outside_one_hots_classes_gives_a_row_of_zeros(module):
    """As JAX's one_hot and the ONNX export's (ids == range(n)); PyTorch's raises."""
    got = matches_the_reference(module, "Hot", ids=np.array([0, 2, 3, -1, -3, 2**31 - 1],
                                                            np.int32))
    np.testing.assert_array_equal(got["y"], [[1, 0, 0], [0, 0, 1]] + [[0, 0, 0]] * 4)
