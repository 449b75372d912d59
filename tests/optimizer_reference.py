"""The optimizers' update rules in NumPy, written from PyTorch's documentation of
torch.optim.SGD and Adam (clip_grad_norm_ before the step, the scope regularizers added to
gradients), and a set of configurations covering each option: the oracle of the
module's train_step (tests/test_training.py, and the differential fuzzer's
tests/fuzz_compare.py)."""
from __future__ import annotations

import numpy as np


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
            coef = o["clip_norm"] / (norm + 1e-6)  # NaN stays NaN (torch.clamp's), where
            grads = {k: g * (coef if coef < 1 or np.isnan(coef) else 1.0)  # min() gave 1
                     for k, g in grads.items()}
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
