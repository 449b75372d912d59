"""Optimizers inside the module against NumPy implementations of the same formulas (PyTorch's
SGD and Adam/AdamW), step by step in f64: momentum, Nesterov, weight decay, global-norm
clipping, the scope regularizers (l2, l1) and frozen scopes of examples/attributes.mdl."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

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


class Reference:
    """The update rules, written from PyTorch's documentation of torch.optim.SGD and Adam,
    with clip_grad_norm_ before the step and the scope regularizers added to gradients."""

    def __init__(self, graph, params: dict, name: str, options: dict):
        self.name, self.o = name, {"momentum": 0.0, "nesterov": False, "weight_decay": 0.0,
                                   "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                                   "decoupled": False, "clip_norm": None, **options}
        self.w = {k: v.copy() for k, v in params.items()}
        self.graph, self.t = graph, 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, grads: dict) -> None:
        o, self.t = self.o, self.t + 1
        grads = {k: g for k, g in grads.items() if not k.startswith("input:")}
        if o["clip_norm"] is not None:
            norm = np.sqrt(sum(float(np.sum(g * g)) for g in grads.values()))
            grads = {k: g * min(1.0, o["clip_norm"] / (norm + 1e-6)) for k, g in grads.items()}
        for k, g in grads.items():
            w, reg = self.w[k], self.graph.params[k].regularizer
            if reg is not None:
                g = g + reg.strength * (w if reg.kind == "l2" else np.sign(w))
            if self.name == "sgd":
                g = g + o["weight_decay"] * w
                if o["momentum"]:
                    self.m[k] = g.copy() if self.t == 1 else o["momentum"] * self.m[k] + g
                    g = g + o["momentum"] * self.m[k] if o["nesterov"] else self.m[k]
                self.w[k] = w - o["lr"] * g
                continue
            if o["decoupled"]:
                w = w - o["lr"] * o["weight_decay"] * w
            else:
                g = g + o["weight_decay"] * w
            self.m[k] = o["beta1"] * self.m[k] + (1 - o["beta1"]) * g
            self.v[k] = o["beta2"] * self.v[k] + (1 - o["beta2"]) * g * g
            m_hat = self.m[k] / (1 - o["beta1"] ** self.t)
            v_hat = self.v[k] / (1 - o["beta2"] ** self.t)
            self.w[k] = w - o["lr"] * m_hat / (np.sqrt(v_hat) + o["eps"])


CONFIGS = {
    "sgd": ("sgd", {"lr": 0.1}),
    "sgd momentum": ("sgd", {"lr": 0.1, "momentum": 0.9}),
    "sgd nesterov": ("sgd", {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
    "sgd weight decay": ("sgd", {"lr": 0.1, "weight_decay": 0.01}),
    "sgd clipped": ("sgd", {"lr": 0.1, "momentum": 0.5, "clip_norm": 0.05}),
    "adam": ("adam", {"lr": 0.01}),
    "adam weight decay": ("adam", {"lr": 0.01, "weight_decay": 0.1, "beta1": 0.8}),
    "adamw": ("adam", {"lr": 0.01, "weight_decay": 0.1, "decoupled": True}),
    "adam clipped": ("adam", {"lr": 0.01, "clip_norm": 0.05, "eps": 1e-6}),
}


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
    (lambda m: m.set_optimizer("rmsprop", lr=1), ValueError, "unknown optimizer 'rmsprop'"),
    (lambda m: m.set_optimizer("sgd"), ValueError, "lr is required"),
    (lambda m: m.set_optimizer("sgd", lr=0), ValueError, "lr must be > 0"),
    (lambda m: m.set_optimizer("sgd", lr=1, beta1=0.5), TypeError, "unknown option 'beta1'"),
    (lambda m: m.set_optimizer("sgd", lr=1, nesterov=True), ValueError, "nesterov needs"),
    (lambda m: m.set_optimizer("adam", lr=1, beta2=1.0), ValueError, "beta1 and beta2"),
    (lambda m: m.set_optimizer("adam", lr=1, clip_norm=0), ValueError, "clip_norm must be"),
])
def test_bad_optimizer_calls_raise(module, call, error, message):
    with pytest.raises(error, match=message):
        call(module.Regularized(seed=0))


def test_after_a_train_step_backward_needs_a_new_forward(module):
    m = module.Regularized(seed=0)
    m.set_optimizer("adam", lr=0.01)
    m.train_step(**batch(0))
    with pytest.raises(RuntimeError, match="needs a forward"):
        m.backward()
