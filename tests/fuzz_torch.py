"""The differential fuzzer's oracle for the PyTorch bridge (codegen.pytorch.as_module): a
vjp build of a random program wrapped as a torch.nn.Module, run in training mode by
PyTorch's autograd, against the reference's vector-Jacobian product on the same values.
What it checks that tests/fuzz_compare.py does not: the bridge's own plumbing, i.e.
which tensor is which parameter, output and input, the gradients PyTorch accumulates
into `.grad`, and a second call replayed before its backward (`_replay`)."""
from __future__ import annotations

import numpy as np
import pytest
from fuzz_compare import (PRECISIONS, Outcome, Precision, case_inputs, differences,
                          raised, stream)

from codegen.ops.rng import derive
from codegen.reference import interpreter as reference

torch = pytest.importorskip("torch", reason="the PyTorch bridge needs PyTorch")
from codegen.pytorch import as_module  # noqa: E402 -- after the skip: it imports torch


def compare_torch(module, name: str, graph, dims: dict, lengths: set[str], seed: int,
                  precision: Precision = PRECISIONS["f64"]) -> Outcome:
    """Model `name` of a vjp build `module` through as_module at `dims`: the gradients
    PyTorch's backward leaves in every parameter's and float input's `.grad`, for the
    loss sum(cotangent * output) over the float outputs, against the reference."""
    model = getattr(module, name)(seed=seed)
    model.set_params({k: 0.5 * stream(seed, "param", k).standard_normal(v.shape)
                      for k, v in model.params.items()})
    params = {k: np.array(v, np.float64) for k, v in model.params.items()}
    bridge = as_module(model).train()
    inputs = case_inputs(graph, dims, lengths, seed, precision.dtype)
    tensors = {k: torch.from_numpy(np.array(v)) for k, v in inputs.items()}
    for t in tensors.values():
        t.requires_grad_(t.dtype.is_floating_point)
    try:
        bridge(**tensors)   # a first call, never differentiated
        calls = model.rng_calls + 1
        out = bridge(**tensors)
        outs = dict(zip(bridge.output_names, (out,) if isinstance(out, torch.Tensor) else out))
        cotangents = {k: stream(seed, "cotangent", k, dims).standard_normal(
            tuple(o.shape)).astype(precision.dtype.replace("f", "float"))
            for k, o in outs.items()}
        bridge(**tensors)   # a third call: the second's backward must run it again
        total = sum((o * torch.from_numpy(cotangents[k])).sum() for k, o in outs.items())
        # with no parameter and no float input, nothing requires a gradient: PyTorch's
        # backward would refuse the total, and the reference's gradients are none
        if torch.is_tensor(total) and total.requires_grad:
            total.backward()
    except Exception as e:  # noqa: BLE001 -- the bridge's error is a finding, unless the
        outcome = raised(e, graph, inputs, params, derive(seed, model.rng_calls))  # same
        if outcome.ok:
            return outcome
        return Outcome("native", f"through as_module: {outcome.detail}")
    want = reference.gradients(graph, inputs, params, training=True,
                               seed=derive(seed, calls), cotangents=cotangents)
    got = {k: p.grad.numpy() for k, p in bridge.named_parameters() if p.grad is not None}
    got.update({f"input:{k}": t.grad.numpy() for k, t in tensors.items()
                if t.grad is not None})
    trainable = dict(bridge.named_parameters())
    expected = {**{k: v for k, v in want.params.items() if k in trainable},
                **{f"input:{k}": v for k, v in want.inputs.items()}}
    floor = precision.noise * max((float(np.abs(a).max(initial=0.0))
                                   for a in expected.values()), default=0.0)
    diffs = differences(got, expected, floor, precision.tolerance)
    if diffs:
        return Outcome("mismatch", "through as_module: " + "; ".join(
            f"gradient {k}: {d}" for k, d in diffs.items()))
    return Outcome("ok")

