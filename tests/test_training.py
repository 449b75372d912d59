"""Optimizers inside the module against NumPy implementations of the same formulas (PyTorch's
SGD and Adam/AdamW), step by step in f64: momentum, Nesterov, weight decay, global-norm
clipping, the scope regularizers (l2, l1) and frozen scopes of examples/attributes.mdl."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from optimizer_reference import CONFIGS, Reference

from codegen.pipeline import load
from dsl import check_file

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "attributes.mdl"
STEPS = 4


@pytest.fixture(scope="module")
def module():
    return load(EXAMPLE, dtype="f64", name="attributes_f64")


@pytest.fixture(scope="module")
def graph():
    return check_file(str(EXAMPLE), dtype="f64").graph


def batch(step: int) -> dict:
    rng = np.random.default_rng(step)
    return {"ids": rng.integers(0, 40, 6).astype(np.int32), "target": rng.standard_normal(6)}


@pytest.mark.parametrize("config", CONFIGS)
def test_updates_match_numpy_step_by_step(module, graph, config):
    name, options = CONFIGS[config]
    m = module.Regularized(seed=3)
    ref = Reference(graph, {k: np.array(v) for k, v in m.params.items()}, name, options)
    m.set_optimizer(name, **options)
    for step in range(STEPS):
        inputs = batch(step)
        want = m.forward(**inputs, training=True)["loss"]  # the gradients at these params
        grads = m.backward()
        got = m.train_step(**inputs)["loss"]
        assert got == want  # train_step is forward + backward + the update
        ref.step(grads)
        for k, w in m.params.items():
            assert np.allclose(w, ref.w[k], rtol=1e-12, atol=1e-14), (config, step, k)
    assert m.optimizer["steps"] == STEPS


def test_frozen_parameters_never_move_and_regularizers_act_in_updates_only(module):
    m = module.Regularized(seed=0)
    frozen = np.array(m.params["embed/table"])
    grads = (m.forward(**batch(0), training=True), m.backward())[1]
    assert "embed/table" not in grads  # trainable = false: no gradient at all
    m.set_optimizer("sgd", lr=1.0)
    for step in range(3):
        m.train_step(**batch(step))
    assert np.array_equal(m.params["embed/table"], frozen)


def test_a_frozen_parameter_keeps_its_room_in_the_gradient_buffer(module):
    """training.md: the buffer holds a frozen parameter's room, zero, which gradient_layout
    does not name; its offsets, not the sizes summed, place each gradient."""
    m = module.Regularized(seed=0)
    m.forward_backward(**batch(0))
    layout, buffer = m.gradient_layout, np.array(m.gradient_buffer)
    assert "embed/table" not in layout
    room = np.zeros(buffer.size, bool)
    grads = (m.forward(**batch(0), training=True), m.backward())[1]
    for name, (offset, shape) in layout.items():
        size = int(np.prod(shape))
        assert np.array_equal(buffer[offset:offset + size], grads[name].ravel()), name
        room[offset:offset + size] = True
    assert buffer.size - room.sum() >= m.params["embed/table"].size
    assert not buffer[~room].any()


def test_the_learning_rate_can_change_between_steps(module):
    a, b = module.Regularized(seed=1), module.Regularized(seed=1)
    a.set_optimizer("sgd", lr=0.1)
    b.set_optimizer("sgd", lr=0.3)
    a.lr = 0.3
    assert a.lr == 0.3 and a.optimizer["lr"] == 0.3
    a.train_step(**batch(0))
    b.train_step(**batch(0))
    for k in a.params:
        assert np.array_equal(a.params[k], b.params[k])


@pytest.mark.parametrize("call, error, message", [
    (lambda m: m.train_step(**batch(0)), RuntimeError, "needs an optimizer"),
    (lambda m: m.lr, RuntimeError, "no optimizer is set"),
    (lambda m: (m.set_optimizer("sgd", lr=1), setattr(m, "lr", "0.1")), TypeError,
     "lr must be a number, got str"),
    (lambda m: m.set_optimizer("rmsprop", lr=1), ValueError, "unknown optimizer 'rmsprop'"),
    (lambda m: m.set_optimizer("sgd"), ValueError, "lr is required"),
    (lambda m: m.set_optimizer("sgd", lr=0), ValueError, "lr must be > 0"),
    (lambda m: m.set_optimizer("sgd", lr=1, beta1=0.5), TypeError, "unknown option 'beta1'"),
    (lambda m: m.set_optimizer("adam", lr=0.1, foo=1, bar=2), TypeError,
     "got unknown options 'foo', 'bar' \\(options are lr, beta1"),
    (lambda m: m.set_optimizer("sgd", lr=1, nesterov=True), ValueError, "nesterov needs"),
    (lambda m: m.set_optimizer("adam", lr=1, beta2=1.0), ValueError, "beta1 and beta2"),
    (lambda m: m.set_optimizer("adam", lr=1, clip_norm=0), ValueError, "clip_norm must be"),
    (lambda m: m.set_optimizer("adam", lr="0.1"), TypeError,
     re.escape('set_optimizer("adam"): lr must be a number, got str')),
    (lambda m: m.set_optimizer("sgd", lr=True), TypeError, "lr must be a number, got bool"),
    # an int past a double's range is too large, not "no number" (it said "got int"),
    # nor inf, which the caller never wrote
    (lambda m: m.set_optimizer("sgd", lr=10**400), ValueError,
     re.escape('set_optimizer("sgd"): lr is an int past the range of any float')),
    (lambda m: (m.set_optimizer("sgd", lr=1), setattr(m, "lr", -2**1024)), ValueError,
     "lr is an int past the range of any float"),
    (lambda m: m.set_optimizer("sgd", lr=1, momentum=[0.9]), TypeError,
     "momentum must be a number, got list"),
    (lambda m: m.set_optimizer("sgd", lr=1, momentum=0.9, nesterov="yes"), TypeError,
     "nesterov must be True or False, got str"),
    # values that pass the signs' checks but would make every parameter inf or NaN
    (lambda m: m.set_optimizer("sgd", lr=float("inf")), ValueError,
     "lr must be finite, got inf"),
    (lambda m: m.set_optimizer("sgd", lr=0.1, weight_decay=float("inf")), ValueError,
     "weight_decay must be finite"),
    (lambda m: m.set_optimizer("adam", lr=0.1, clip_norm=float("inf")), ValueError,
     "clip_norm must be finite"),
    # a NaN is no number (it said "momentum must be >= 0", "lr must be > 0")
    (lambda m: m.set_optimizer("sgd", lr=0.1, momentum=float("nan")), ValueError,
     "momentum must be finite, got nan"),
    (lambda m: m.set_optimizer("adam", lr=float("nan")), ValueError,
     "lr must be finite, got nan"),
    (lambda m: (m.set_optimizer("sgd", lr=1), setattr(m, "lr", float("nan"))), ValueError,
     "lr must be finite, got nan"),
    (lambda m: m.set_optimizer("adam", lr=0.1, eps=1e-320), ValueError,
     re.escape("eps = 9.99989e-321 is too small for an f64 model: its code flushes numbers "
               "below 2.2e-308 to zero")),
    (lambda m: (m.set_optimizer("sgd", lr=1), setattr(m, "lr", float("inf"))), ValueError,
     "lr must be finite, got inf"),
    # QA: a name with no UTF-8 (a lone surrogate) was pybind11's "Unable to cast" and a
    # UnicodeEncodeError; as ascii() writes it now
    (lambda m: m.set_optimizer("\ud800", lr=1), ValueError,
     re.escape("unknown optimizer '\\ud800' (optimizers are sgd, adam)")),
    (lambda m: m.set_optimizer("sgd", lr=1, **{"\ud800": 1}), TypeError,
     re.escape("got an unknown option '\\ud800'")),
    (lambda m: m.set_params({"\ud800": 1}), KeyError, re.escape("no parameter '\\\\ud800'")),
])
def test_bad_optimizer_calls_raise(module, call, error, message):
    with pytest.raises(error, match=message):
        call(module.Regularized(seed=0))


def test_after_a_train_step_backward_needs_a_new_forward(module):
    m = module.Regularized(seed=0)
    m.set_optimizer("adam", lr=0.01)
    m.train_step(**batch(0))
    # the step's update made its forward's saved values stale, and the message says so
    with pytest.raises(RuntimeError, match=r"parameters changed \(set_params, load, an "
                       r"optimizer's step\) since its forward"):
        m.backward()


@pytest.mark.parametrize("change", ["train_step", "set_params", "load"])
def test_apply_gradients_refuses_gradients_of_parameters_since_changed(module, tmp_path,
                                                                       change):
    """forward_backward's gradients belong to the parameters it ran at: after an update, a
    set_params or a checkpoint's load they were once applied to the new ones, silently."""
    m = module.Regularized(seed=0)
    m.set_optimizer("sgd", lr=0.1)
    m.save(tmp_path / "m.npz")
    m.forward_backward(**batch(0))
    if change == "train_step":
        m.train_step(**batch(1))
    elif change == "set_params":
        m.set_params({k: np.array(v) for k, v in m.params.items()})
    else:
        m.load(tmp_path / "m.npz")
    before = {k: np.array(v) for k, v in m.params.items()}
    with pytest.raises(RuntimeError, match="needs a forward_backward.*since the parameters "
                                           "last changed"):
        m.apply_gradients()
    for k, v in m.params.items():
        assert np.array_equal(v, before[k]), k
    m.forward_backward(**batch(2))
    m.set_optimizer("adam", lr=0.01)  # the optimizer changes nothing the gradients belong to
    m.apply_gradients()


def test_a_failed_forward_backward_leaves_the_gradient_buffer_as_it_was(module):
    """training.md: a forward_backward that raises (an index out of range) changes neither
    gradient_buffer nor what apply_gradients() steps from: the last good one's."""
    m = module.Regularized(seed=0)
    m.set_optimizer("sgd", lr=0.1)
    m.forward_backward(**batch(0))
    kept = np.array(m.gradient_buffer)
    bad = batch(1)
    bad["ids"][2] = 40
    with pytest.raises(IndexError, match="holds 40 at flat position 2"):
        m.forward_backward(**bad)
    np.testing.assert_array_equal(m.gradient_buffer, kept)
    m.apply_gradients()
    plain = module.Regularized(seed=0)  # the same steps without the failed one
    plain.set_optimizer("sgd", lr=0.1)
    plain.forward_backward(**batch(0))
    plain.apply_gradients()
    for name, value in plain.params.items():
        np.testing.assert_array_equal(m.params[name], value, err_msg=name)


# A parameter of more elements than the runtime's kSplitStep (1 << 14, host_device.cpp),
# whose step is split over the threads, of a size no vector or share divides
WIDE = """model Wide(N = 131) {
  input x : f64[B, 130]
  input target : f64[B, N]
  param W : f64[130, N] = normal(0, 0.1)
  param b : f64[N] = zeros
  output loss = mse(tanh(x @ W + b), target)
  minimize loss
}
"""


@pytest.mark.parametrize("config", ["sgd momentum", "adam", "adamw", "adam clipped"])
def test_a_wide_parameters_step_on_the_threads_matches_numpy(tmp_path, config):
    """Its step on two threads and on one, and the clipping norm's sum in its running
    sums, each as the NumPy formulas make them."""
    path = tmp_path / "wide.mdl"
    path.write_text(WIDE)
    module = load(path, dtype="f64", name="wide_f64")
    graph = check_file(str(path), dtype="f64").graph
    name, options = CONFIGS[config]
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((5, 130)), "target": rng.standard_normal((5, 131))}
    told = module.get_num_threads()
    try:
        for threads in (2, 1):
            module.set_num_threads(threads)
            m = module.Wide(seed=1)
            ref = Reference(graph, {k: np.array(v) for k, v in m.params.items()}, name,
                            options)
            m.set_optimizer(name, **options)
            for step in range(3):
                grads = (m.forward(**inputs, training=True), m.backward())[1]
                m.train_step(**inputs)
                ref.step(grads)
                for k, w in m.params.items():
                    assert np.allclose(w, ref.w[k], rtol=1e-12, atol=1e-14), (threads, step, k)
    finally:
        module.set_num_threads(told)


NAN_GRADIENT = """
model Scaled() {
  input x : f64[4]
  param w : f64[4] = ones
  param u : f64[2] = ones
  output loss = sum(w * x) + sum(u * u)
  minimize loss
}
"""


@pytest.mark.parametrize("target", ["cpu", "emulated"])
@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_a_nan_gradient_clipped_makes_every_step_nan_as_pytorchs(tmp_path, target, name):
    """clip_norm over a gradient holding a NaN: the norm is NaN, and so is every gradient
    scaled by it (PyTorch's clip_grad_norm_, whose clamp keeps the NaN, and the NumPy
    formulas). The scale was taken as 1: the NaN element went NaN and every other
    parameter took its whole step unclipped, where clipping was asked for."""
    path = tmp_path / "scaled.mdl"
    path.write_text(NAN_GRADIENT)
    how = dict(target="cuda", emulate=True) if target == "emulated" else {}
    m = load(path, dtype="f64", name=f"scaled_{target}", **how).Scaled(seed=0)
    x = np.array([np.nan, 1.0, 2.0, 3.0])
    options = {"lr": 0.1, "clip_norm": 1.0}
    grads = (m.forward(x=x, training=True), m.backward())[1]
    ref = Reference(check_file(str(path), dtype="f64").graph,
                    {k: np.array(v) for k, v in m.params.items()}, name, options)
    ref.step(grads)
    m.set_optimizer(name, **options)
    m.train_step(x=x)
    for k, w in m.params.items():
        assert np.isnan(w).all() and np.isnan(ref.w[k]).all(), k
    torch = pytest.importorskip("torch")
    w, u = torch.ones(4, requires_grad=True), torch.ones(2, requires_grad=True)
    ((w * torch.tensor(x, dtype=torch.float32)).sum() + (u * u).sum()).backward()
    torch.nn.utils.clip_grad_norm_([w, u], 1.0)
    (torch.optim.SGD if name == "sgd" else torch.optim.Adam)([w, u], lr=0.1).step()
    assert torch.isnan(w).all() and torch.isnan(u).all()
