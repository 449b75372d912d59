"""codegen.pytorch: a compiled LSTM (std/rnn.mdl's lstm in a `for`) inside a PyTorch model
with nn.Embedding and nn.Linear, trained with torch.optim.Adam, against the same model
written entirely in PyTorch (nn.LSTM with the same weights): every loss and gradient, in
f64 to 1e-10 and in f32. Then integer inputs passed through, the native vjp against the
reference, replays, modes, the errors, and docs/pytorch.md's code."""
from __future__ import annotations

import copy
import io
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install "
                                            "'mdl[torch]' to run the PyTorch bridge tests)")

from codegen.pipeline import load  # noqa: E402
from codegen.pytorch import as_module  # noqa: E402
from codegen.reference import interpreter as reference  # noqa: E402
from dsl import check_file  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ON_GPU = os.environ.get("MDL_TEST_DEVICE") == "gpu"  # the cuda target's test on a real GPU
T, B, V, E, H = 7, 3, 11, 6, 5
CORE = f"""
import "std/rnn.mdl"
model Core(E = {E}, H = {H}) {{
  input xs : f32[T, B, E]
  input h0 : f32[B, H]
  h = h0
  c = zeros[B, H]
  hs = for x in xs {{
    h, c = lstm(x, h, c)
    yield h
  }}
  output hs
  output last_c = c
}}
"""
MASKED = """
import "std/rnn.mdl"
model Masked(E = 4, H = 3) {
  input xs : f32[T, B, E]
  input lengths : i32[B]
  h = zeros[B, H]
  c = zeros[B, H]
  hs = for x in reversed(xs) (lengths = lengths) {
    h, c = lstm(x, h, c)
    yield h
  }
  output hs
  output last = h
}
"""
_BUILT: dict = {}


def compiled(tmp_path_factory, source: str, dtype: str, vjp: bool = True,
             target: str = "cpu"):
    """The module of `source`; for the cuda target, on the emulated device unless
    MDL_TEST_DEVICE=gpu."""
    key = (source, dtype, vjp, target)
    if key not in _BUILT:
        name = re.search(r"model (\w+)", source).group(1)
        path = tmp_path_factory.mktemp("bridge") / f"{name.lower()}.mdl"
        path.write_text(source)
        where = "" if target == "cpu" else "_gpu" if ON_GPU else "_emulated"
        _BUILT[key] = (load(path, dtype=dtype, vjp=vjp, target=target,
                            emulate=target == "cuda" and not ON_GPU,
                            name=f"{name.lower()}_{dtype}{'_vjp' if vjp else ''}{where}"),
                       path)
    return _BUILT[key]


class Mixed(torch.nn.Module):
    """Embedding, a recurrent core (compiled, or nn.LSTM), a linear decoder; a learned
    initial state expanded over the batch (a stride-0 input to the core)."""

    def __init__(self, core, dtype):
        super().__init__()
        self.embedding = torch.nn.Embedding(V, E, dtype=dtype)
        self.h0 = torch.nn.Parameter(0.1 * torch.randn(H, dtype=dtype))
        self.core = core
        self.decoder = torch.nn.Linear(H, V, dtype=dtype)

    def forward(self, tokens, targets):
        xs, h0 = self.embedding(tokens), self.h0.expand(B, H)
        if isinstance(self.core, torch.nn.LSTM):
            # cuDNN takes only a contiguous state; the compiled core reads the stride-0 one
            h0 = h0.contiguous()
            hs, (_, c) = self.core(xs, (h0[None], torch.zeros_like(h0)[None]))
            last_c = c[0]
        else:
            hs, last_c = self.core(xs, h0)
        logits = self.decoder(hs)
        return torch.nn.functional.cross_entropy(logits.reshape(T * B, V),
                                                 targets.reshape(T * B)) + (last_c ** 2).mean()


def twins(core, dtype):
    """The mixed model around `core` (compiled) and the same in PyTorch, equal weights:
    nn.LSTM has mdl's gate order (i, f, g, o), its weights transposed, one bias (the
    other held at zero)."""
    torch.manual_seed(0)
    ours = Mixed(as_module(core), dtype)
    lstm = torch.nn.LSTM(E, H, dtype=dtype)
    theirs = Mixed(lstm, dtype)
    theirs.load_state_dict({k: v for k, v in ours.state_dict().items()
                            if not k.startswith("core.")}, strict=False)
    p = ours.core
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(p.get_parameter("lstm/W").T)
        lstm.weight_hh_l0.copy_(p.get_parameter("lstm/U").T)
        lstm.bias_ih_l0.copy_(p.get_parameter("lstm/b"))
        lstm.bias_hh_l0.zero_()
    lstm.bias_hh_l0.requires_grad_(False)
    return ours, theirs


def pairs(ours, theirs) -> list[tuple[str, torch.Tensor, torch.Tensor, bool]]:
    """(name, our parameter, theirs, whether theirs is transposed) for every trained one."""
    a, b = dict(ours.named_parameters()), dict(theirs.named_parameters())
    out = [(k, a[k], b[k], False) for k in b if not k.startswith("core.")]
    lstm = theirs.core
    for name, t in (("lstm/W", lstm.weight_ih_l0), ("lstm/U", lstm.weight_hh_l0),
                    ("lstm/b", lstm.bias_ih_l0)):
        out.append((name, a[f"core.{name}"], t, t.dim() == 2))
    return out


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def train_side_by_side(ours, theirs, steps: int, tol: float, device: str = "cpu") -> None:
    """`steps` Adam steps of both twins on the same random batches: every loss and
    gradient, then every parameter after the steps, agree within `tol`."""
    opts = [torch.optim.Adam(m.parameters(), lr=0.05) for m in (ours, theirs)]
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        tokens = torch.randint(0, V, (T, B), generator=gen).to(device)
        targets = torch.randint(0, V, (T, B), generator=gen).to(device)
        losses = []
        for m, opt in zip((ours, theirs), opts):
            opt.zero_grad()
            loss = m(tokens, targets)
            loss.backward()
            losses.append(loss)
        assert rel(*losses) < tol
        for name, a, b, transposed in pairs(ours, theirs):
            assert a.grad.device.type == device
            assert rel(a.grad, b.grad.T if transposed else b.grad) < tol, name
        for opt in opts:
            opt.step()
    for name, a, b, transposed in pairs(ours, theirs):  # Adam moved both alike
        assert rel(a, b.T if transposed else b) < tol, name


@pytest.mark.parametrize("dtype, steps, tol", [("f64", 4, 1e-10), ("f32", 3, 1e-5)])
def test_a_compiled_lstm_trains_inside_pytorch_as_nn_lstm_does(tmp_path_factory, dtype,
                                                               steps, tol):
    module, _ = compiled(tmp_path_factory, CORE, dtype)
    tdtype = torch.float64 if dtype == "f64" else torch.float32
    ours, theirs = twins(module.Core(seed=0), tdtype)
    train_side_by_side(ours, theirs, steps, tol)
    native = ours.core.model.params["lstm/W"]  # and the native store is what it moved
    assert np.shares_memory(native, ours.core.get_parameter("lstm/W").detach().numpy())


def test_a_cuda_model_trains_inside_pytorch_on_its_device(tmp_path_factory, monkeypatch):
    """The cuda target's model (on the emulated device, whose memory is the host's, so
    its tensors are CPU tensors; on a GPU with MDL_TEST_DEVICE=gpu): its parameters are
    its device_params through DLPack, its outputs and gradients stay on the device, and
    four Adam steps move it as nn.LSTM's, f64 to 1e-10. The emulator runs queued work
    only when it is waited for (a missing wait reads poison)."""
    monkeypatch.setenv("MDL_CUDA_EMULATOR", "deferred")
    module, _ = compiled(tmp_path_factory, CORE, "f64", target="cuda")
    device = "cuda" if ON_GPU else "cpu"
    model = module.Core(seed=0)
    ours, theirs = twins(model, torch.float64)
    ours.to(device), theirs.to(device)  # the core's parameters are there already
    assert model.outputs_on_device
    train_side_by_side(ours, theirs, 4, 1e-10, device)
    # the native store is what Adam moved: the model's own copies of its weights say so
    np.testing.assert_array_equal(model.params["lstm/W"],
                                  ours.core.get_parameter("lstm/W").detach().cpu().numpy())
    with pytest.raises(RuntimeError, match="parameter 'lstm/W' no longer shares memory"):
        ours.double().core.float()(torch.zeros(T, B, E, device=device),
                                   torch.zeros(B, H, device=device))


def copied(module: torch.nn.Module, way: str) -> torch.nn.Module:
    """A copy of `module` by copy.deepcopy, or by torch.save and torch.load of it whole."""
    if way == "deepcopy":
        return copy.deepcopy(module)
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("way", ["deepcopy", "torch.save"])
def test_a_copied_module_trains_its_own_models_memory(tmp_path_factory, monkeypatch, target,
                                                      way):
    """copy.deepcopy of a PyTorch model around a compiled core, or torch.save and
    torch.load of it whole: the compiled model is copied (mdl's __reduce__) and the copy's
    parameters are that model's memory again, so original and copy train alike, and apart."""
    monkeypatch.setenv("MDL_CUDA_EMULATOR", "deferred")
    module, _ = compiled(tmp_path_factory, CORE, "f64", target=target)
    device = "cuda" if target == "cuda" and ON_GPU else "cpu"
    torch.manual_seed(0)
    ours = Mixed(as_module(module.Core(seed=0)), torch.float64).to(device)
    gen = torch.Generator().manual_seed(2)
    batches = [[torch.randint(0, V, (T, B), generator=gen).to(device) for _ in "tt"]
               for _ in range(3)]
    ours.core.get_parameter("lstm/U").requires_grad_(False)
    ours(*batches[0]).backward()
    twin = copied(ours, way)
    assert twin.core.model is not ours.core.model
    assert not twin.core.get_parameter("lstm/U").requires_grad  # frozen, as it was
    opts = [torch.optim.Adam(m.parameters(), lr=0.05) for m in (ours, twin)]
    for batch in batches[1:]:
        losses = []
        for m, opt in zip((ours, twin), opts):
            opt.zero_grad()
            loss = m(*batch)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[0] == losses[1]
    kept = ours.core.model.params["lstm/W"].copy()
    twin(*batches[0]).backward()
    opts[1].step()  # the copy's step moves its own model's weights, not the original's
    np.testing.assert_array_equal(ours.core.model.params["lstm/W"], kept)
    np.testing.assert_array_equal(twin.core.model.params["lstm/W"],
                                  twin.core.get_parameter("lstm/W").detach().cpu().numpy())
    assert not np.array_equal(twin.core.model.params["lstm/W"], kept)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("way", ["deepcopy", "torch.save"])
def test_a_copied_net_keeps_its_cores_tied(tmp_path_factory, monkeypatch, target, way):
    """QA: a copy (deepcopy, torch.save and torch.load; AveragedModel deep-copies) of a
    net of two cores sharing parameters (`params=`) had them untied, 6 parameters for 3,
    and trained apart from the original from its second step. The copies share again."""
    monkeypatch.setenv("MDL_CUDA_EMULATOR", "deferred")
    module, _ = compiled(tmp_path_factory, CORE, "f64", target=target)
    a = module.Core(seed=0)
    net = torch.nn.ModuleList([as_module(a), as_module(module.Core(seed=1, params=a))])
    twin = copied(net, way)
    assert len(list(twin.parameters())) == len(list(net.parameters())) == 3
    assert twin[0].model is not a and twin[1].model.rng_calls == net[1].model.rng_calls
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (net, twin)]
    device = "cuda" if target == "cuda" and ON_GPU else "cpu"
    for step in range(3):
        xs, h0 = (v.to(device) for v in inputs(step))
        losses = []
        for m, opt in zip((net, twin), opts):
            hs, c = m[0](xs, h0)
            loss = m[1](hs.repeat(1, 1, 2)[..., :E], c)[0].pow(2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[0] == losses[1], step


def test_integer_inputs_pass_through_and_gradients_are_the_references_vjp(tmp_path_factory):
    module, path = compiled(tmp_path_factory, MASKED, "f64")
    core = as_module(module.Masked(seed=2))
    graph = check_file(str(path), dtype="f64").graph
    rng = np.random.default_rng(0)
    xs = torch.tensor(rng.standard_normal((5, 4, 4)), requires_grad=True)
    lengths = np.array([5, 2, 0, 3], np.int32)
    weights = {k: torch.tensor(rng.standard_normal(s)) for k, s in (("hs", (5, 4, 3)),
                                                                    ("last", (4, 3)))}
    for given in (lengths, torch.from_numpy(lengths)):  # NumPy and torch integers alike
        core.zero_grad()
        xs.grad = None
        out = core(xs, lengths=given)
        sum((getattr(out, k) * w).sum() for k, w in weights.items()).backward()
        params = {k: np.array(v) for k, v in core.model.params.items()}
        want = reference.gradients(graph, {"xs": xs.detach().numpy(), "lengths": lengths},
                                   params, cotangents={k: w.numpy() for k, w in weights.items()})
        for k, p in core.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), want.params[k], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(xs.grad.numpy(), want.inputs["xs"], rtol=1e-10, atol=1e-12)


@pytest.fixture(scope="module")
def core64(tmp_path_factory):
    return compiled(tmp_path_factory, CORE, "f64")[0]


def inputs(seed: int, requires_grad: bool = True):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(T, B, E, generator=gen, dtype=torch.float64).requires_grad_(requires_grad),
            torch.randn(B, H, generator=gen, dtype=torch.float64).requires_grad_(requires_grad))


def grads_of(core, xs, h0) -> list[torch.Tensor]:
    hs, c = core(xs, h0)
    return torch.autograd.grad((hs.sum() + (c * c).sum()), [xs, h0, *core.parameters()])


def test_a_backward_after_other_forwards_replays_its_own(core64):
    core = as_module(core64.Core(seed=1))
    first, second = inputs(1), inputs(2)
    want = grads_of(core, *first)
    hs, c = core(*first)
    core(*second)                       # the model now keeps this forward
    core.model.forward(xs=second[0].detach().numpy(), h0=second[1].detach().numpy(),
                       training=True)   # and a direct call too
    calls = core.model.rng_calls
    got = torch.autograd.grad(hs.sum() + (c * c).sum(), [*first, *core.parameters()])
    assert core.model.rng_calls == calls
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=0)


@pytest.mark.parametrize("between", ["refused", "rng_calls set back"])
def test_a_backward_after_a_refused_or_renumbered_forward_replays_its_own(core64, between):
    """QA: the bridge told whether the model still kept a call's forward by rng_calls: a
    refused training call (which drops the saved values and counts no call) made the
    earlier call's backward raise "needs a forward", and another forward after
    `rng_calls` was set back gave it that forward's gradients (0.36 off, silently)."""
    core = as_module(core64.Core(seed=1))
    first, second = inputs(1), inputs(2)
    want = grads_of(core, *first)
    hs, c = core(*first)
    if between == "refused":
        with pytest.raises(ValueError):
            core(second[0][..., :-1], second[1])    # a wrong last dim
    else:  # the masks of the last call again, on other data, called directly
        core.model.rng_calls -= 1
        core.model.forward(xs=second[0].detach().numpy(), h0=second[1].detach().numpy(),
                           training=True)
    got = torch.autograd.grad(hs.sum() + (c * c).sum(), [*first, *core.parameters()])
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=0)


def test_threads_training_through_one_module_get_their_own_gradients(core64):
    """QA: two threads each running forward and backward through one module got wrong
    input gradients (0.064 off, every run): another thread's training forward landed
    between a backward's look at which forward the model kept and its vjp. The bridge now
    holds a lock of the model's over each forward's record and each look, replay and vjp."""
    import threading
    core = as_module(core64.Core(seed=5))
    given = [inputs(10 + i) for i in range(2)]
    want = [grads_of(core, *xs) for xs in given]
    worst = [0.0, 0.0]

    def work(i):
        for _ in range(30):
            got = grads_of(core, *given[i])
            worst[i] = max([worst[i], *((a - b).abs().max().item()
                                        for a, b in zip(got, want[i]))])
    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert worst == [0.0, 0.0]


def test_models_sharing_parameters_share_their_torch_parameters(core64):
    """QA: two models sharing weights (`params=`), or one model wrapped twice, had two
    nn.Parameters over one memory: torch.optim stepped each shared weight twice (Adam
    0.1 off a tied PyTorch twin after one step), and a step through one left the other's
    saved forward unchecked (a stale gradient, silently). They now get one Parameter."""
    a = core64.Core(seed=1)
    b = core64.Core(seed=2, params=a)
    first, second, again = as_module(a), as_module(b), as_module(a)
    net = torch.nn.ModuleList([first, second, again])
    assert [id(p) for p in net.parameters()] == [id(p) for p in first.parameters()]
    assert all(p is q for p, q in zip(first.parameters(), second.parameters()))
    before = [p.detach().clone() for p in first.parameters()]
    xs, h0 = inputs(20, requires_grad=False)
    loss = sum((m(xs, h0).hs ** 2).sum() for m in net)
    loss.backward()
    grads = [p.grad.clone() for p in first.parameters()]
    torch.optim.SGD(net.parameters(), lr=0.01).step()
    for p, was, g in zip(first.parameters(), before, grads):
        torch.testing.assert_close(p.detach(), was - 0.01 * g, rtol=1e-12, atol=1e-15)
    hs, _ = second(xs, h0)
    torch.optim.SGD(first.parameters(), lr=0.01).step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        hs.sum().backward()


def test_torch_gradcheck_through_the_compiled_core(core64):
    core = as_module(core64.Core(seed=3))
    assert torch.autograd.gradcheck(lambda xs, h0: tuple(core(xs, h0)), inputs(4))


def test_only_what_requires_grad_gets_a_gradient(core64):
    core = as_module(core64.Core(seed=0))
    xs, h0 = inputs(5, requires_grad=False)
    core.get_parameter("lstm/U").requires_grad_(False)
    hs, _ = core(xs, h0=h0.requires_grad_())
    hs.sum().backward()
    assert xs.grad is None and h0.grad is not None
    assert core.get_parameter("lstm/U").grad is None
    assert core.get_parameter("lstm/W").grad is not None


def test_with_nothing_to_differentiate_the_outputs_need_no_gradient(core64):
    """Frozen weights and inputs that need no gradient: the outputs need none either, as
    a PyTorch module's would, and hold the model's forward (the differential fuzzer's
    programs of integer inputs and no parameter: tests/fuzz_torch.py differentiates only
    a total that needs a gradient)."""
    core = as_module(core64.Core(seed=0)).train()
    for p in core.parameters():
        p.requires_grad_(False)
    xs, h0 = inputs(6, requires_grad=False)
    hs, c = core(xs, h0)
    assert not hs.requires_grad and not c.requires_grad
    want = core64.Core(seed=0).forward(xs=xs.numpy(), h0=h0.numpy())
    np.testing.assert_array_equal(hs.numpy(), want["hs"])
    np.testing.assert_array_equal(c.numpy(), want["last_c"])


@pytest.mark.parametrize("loss", [lambda hs: hs.sum(), lambda hs: (hs * hs).sum()])
def test_gradients_of_gradients_through_the_model_are_refused(core64, loss):
    """create_graph=True: refused even where the gradients given to the model need none
    (hs.sum()), where once_differentiable let the second-order terms through the model
    drop without a word (a gradient penalty trained without them)."""
    core = as_module(core64.Core(seed=0))
    xs, h0 = inputs(6)
    hs, _ = core(xs, h0)
    with pytest.raises(RuntimeError, match="Core's backward is native code, which PyTorch "
                                           "cannot differentiate again"):
        torch.autograd.grad(loss(hs), xs, create_graph=True)


def test_eval_mode_runs_the_inference_forward(core64):
    core = as_module(core64.Core(seed=0)).eval()
    with torch.no_grad():
        hs, c = core(*inputs(6, requires_grad=False))
    hs2, _ = core(*inputs(6))
    torch.testing.assert_close(hs, hs2.detach(), rtol=0, atol=0)
    with pytest.raises(RuntimeError, match=r"inference forward \(eval mode\).*\.train\(\)"):
        hs2.sum().backward()


def test_a_step_between_forward_and_backward_is_refused(core64):
    core = as_module(core64.Core(seed=0))
    hs, _ = core(*inputs(7))
    with torch.no_grad():
        core.get_parameter("lstm/b").add_(1.0)  # what an optimizer's step does
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        hs.sum().backward()


BAD = [
    (lambda m: as_module(object()), TypeError, "as_module takes a compiled mdl model"),
    (lambda m: as_module(type(m.model)), TypeError,
     "as_module takes a compiled mdl model, an instance: got the class Core itself"),
    (lambda m: m(inputs(0)[0].bfloat16(), inputs(0)[1]), TypeError,
     "input 'xs': expected f64[T, B, 6], got a torch.bfloat16 tensor, which NumPy cannot hold"),
    # once "a torch.float64 tensor, which NumPy cannot hold": the layout was the cause
    (lambda m: m(inputs(0)[0].to_sparse(), inputs(0)[1]), TypeError,
     "input 'xs': expected f64[T, B, 6], got a tensor of layout torch.sparse_coo: give a "
     "dense one (.to_dense())"),
    (lambda m: m.float()(*inputs(0)), RuntimeError,
     "parameter 'lstm/W' no longer shares memory with the compiled model"),
    (lambda m: m(*inputs(0), inputs(0)[0]), TypeError, "takes 2 inputs (xs, h0), got 3"),
    (lambda m: m(*inputs(0), xs=inputs(0)[0]), TypeError,
     "input 'xs' given both by position and by name"),
    (lambda m: m(inputs(0)[0]), TypeError, "missing input 'h0'"),
    # once a bare KeyError: 'foo', from the bridge before the native forward's check
    (lambda m: m(*inputs(0), foo=inputs(0)[0]), TypeError,
     "unknown input 'foo' (inputs are xs, h0)"),
    (lambda m: m(inputs(0)[0].float(), inputs(0)[1]), ValueError,
     "input 'xs': expected f64[T, B, 6], got float32[7, 3, 6] (wrong dtype)"),
    # QA: pybind11's "got multiple values for keyword argument 'training'"
    (lambda m: m(*inputs(0), training=False), TypeError,
     "unknown input 'training': the module's mode chooses the forward, .train() the "
     "training one, .eval() inference"),
    # QA: "got object[] (wrong dtype)"; torch's internal error of a nested tensor and its
    # refusal of a conjugated one's numpy(), neither naming the input; a meta tensor on a
    # cuda model went on to DLPack's error
    (lambda m: m(inputs(0)[0], None), TypeError, "input 'h0': expected f64[B, 5], got None"),
    (lambda m: m(torch.nested.nested_tensor(list(inputs(0)[0])), inputs(0)[1]), TypeError,
     "input 'xs': expected f64[T, B, 6], got a nested tensor: give a dense one"),
    (lambda m: m(inputs(0)[0].to(torch.complex128).conj(), inputs(0)[1]), ValueError,
     "input 'xs': expected f64[T, B, 6], got complex128[7, 3, 6] (wrong dtype)"),
    (lambda m: m(inputs(0)[0].to("meta"), inputs(0)[1]), ValueError,
     "input 'xs' is on meta: the compiled model runs on the CPU"),
]


@pytest.mark.parametrize("call, error, message", BAD)
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_bad_uses_raise(core64, call, error, message):
    with pytest.raises(error, match=re.escape(message)):
        call(as_module(core64.Core(seed=0)))


NAMES = """
model Under(H = 3) {
  input x : f32[B, H]
  param scale : f32[H] = ones
  output _h = x * scale
  output y2 = x
}
model Named(H = 3) {
  input x : f32[B, H]
  param training : f32[H] = ones
  output y = x * training
}
"""


def test_outputs_keep_their_names_and_pickle_and_a_clashing_parameter_is_named(
        tmp_path_factory):
    """QA: an output named `_h` became the field `_0` of the outputs' namedtuple (out._h
    an AttributeError); the tuple could not be pickled (torch.save of a call's outputs:
    "Can't pickle <class 'codegen.pytorch.CoreOutputs'>"); a parameter named as an
    attribute of nn.Module (`training`) failed in torch's register_parameter with
    "attribute 'training' already exists"."""
    module, _ = compiled(tmp_path_factory, NAMES, "f64")
    x = torch.ones(2, 3, dtype=torch.float64)
    out = as_module(module.Under(seed=0))(x)
    assert out._fields == ("_h", "y2") and torch.equal(out._h, out[0])
    assert repr(out).startswith("UnderOutputs(_h=tensor(")
    again = pickle.loads(pickle.dumps(out))
    assert type(again) is type(out) and torch.equal(again._h, out._h)
    buffer = io.BytesIO()
    torch.save(out, buffer)
    buffer.seek(0)
    assert torch.equal(torch.load(buffer, weights_only=False).y2, x)
    with pytest.raises(ValueError, match=re.escape(
            "model Named's parameter `training` is named as an attribute of torch.nn.Module")):
        as_module(module.Named(seed=0))


REGULARIZED = """
model Reg() {
  input x : f32[B, 4]
  input y : f32[B]
  scope enc (regularizer = l2(0.5)) { param W : f32[4, 3] = uniform(-1, 1) }
  scope out (regularizer = l1(0.2)) { param v : f32[3] = uniform(-1, 1) }
  param b : f32[3] = uniform(-1, 1)
  output loss = mse(sum(tanh(x @ enc.W + b) * out.v, axis = 1), y)
  minimize loss
}
model Unlike() {  # Reg's parameters, `enc/W` regularized otherwise
  input x : f32[B, 4]
  scope enc (regularizer = l2(0.1)) { param W : f32[4, 3] = uniform(-1, 1) }
  output y = tanh(x @ enc.W)
}
"""


def test_scope_regularizers_act_in_a_torch_optimizer_s_steps(tmp_path_factory):
    """QA: a scope's `regularizer = l2(x)` / `l1(x)` acted in mdl's own optimizer only:
    trained through as_module by torch.optim, the parameters moved as if there were none
    (0.049 off mdl's own step). The bridge adds each penalty to the gradient it hands on,
    so torch's SGD and Adam take mdl's own steps."""
    native = compiled(tmp_path_factory, REGULARIZED, "f64", vjp=False)[0].Reg(seed=0)
    bridged = as_module(compiled(tmp_path_factory, REGULARIZED, "f64")[0].Reg(seed=0))
    assert bridged.model._regularizers == {"enc/W": (0.0, 0.5), "out/v": (0.2, 0.0)}
    native.set_optimizer("adam", lr=0.05)
    opt = torch.optim.Adam(bridged.parameters(), lr=0.05)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x, y = rng.standard_normal((8, 4)), rng.standard_normal(8)
        native.train_step(x=x, y=y)
        opt.zero_grad()
        bridged(x=torch.tensor(x), y=torch.tensor(y)).backward()
        opt.step()
    for name, value in native.params.items():
        np.testing.assert_allclose(bridged.model.params[name], value, rtol=1e-12, atol=1e-14,
                                   err_msg=name)


def test_a_regularizer_counts_once_a_backward_however_many_calls_read_it(tmp_path_factory):
    """QA: the penalty was added in each call's backward, so a core called twice in one
    graph (one encoder for two inputs) had it twice in `.grad`: 0.70 off the gradient of
    the loss with the penalty once. It joins `.grad` once a backward now, after torch sums
    the calls' gradients; models sharing a parameter must regularize it alike."""
    module = compiled(tmp_path_factory, REGULARIZED, "f64")[0]
    reg = module.Reg(seed=0)
    bridged = as_module(reg)
    rng = np.random.default_rng(1)
    calls = [(torch.tensor(rng.standard_normal((8, 4))), torch.tensor(rng.standard_normal(8)))
             for _ in range(2)]

    def grads(*which):
        bridged.zero_grad()
        sum(bridged(x=x, y=y) for x, y in which).backward()
        return {k: p.grad.clone() for k, p in bridged.named_parameters()}
    both, first, second = grads(*calls), grads(calls[0]), grads(calls[1])
    w, v = (torch.tensor(reg.params[k]) for k in ("enc/W", "out/v"))
    penalty = {"enc/W": 0.5 * w, "out/v": 0.2 * torch.sign(v), "b": 0.0}
    for name, g in both.items():  # each lone call's gradient holds the penalty once too
        torch.testing.assert_close(g, first[name] + second[name] - penalty[name],
                                   rtol=1e-12, atol=1e-14, msg=name)
    with pytest.raises(ValueError, match=re.escape(
            "model Unlike's parameter `enc/W` shares its memory with model Reg's parameter "
            "`enc/W`, regularized l2(0.1) here and l2(0.5) there")):
        as_module(module.Unlike(seed=0, params=reg))


def test_a_new_module_never_takes_a_parameter_another_memory_replaced(tmp_path_factory):
    """QA: a Parameter kept alive (by an optimizer) after `.double()` gave it other memory
    stayed filed under the memory it had left; a new model's weight allocated there got
    that f64 tensor, so the new module's state_dict read other numbers, load_state_dict
    never reached the model and its first call raised, blaming it."""
    module = compiled(tmp_path_factory, CORE, "f32")[0]
    core = as_module(module.Core(seed=0))
    held = list(core.parameters())
    core.double()
    del core
    for seed in range(1, 4):  # a new model's memory may lie where the freed one's did
        fresh = as_module(module.Core(seed=seed))
        for name, p in fresh.named_parameters():
            assert p.dtype == torch.float32 and p.data_ptr() == \
                fresh.model.params[name].ctypes.data, name
        fresh(torch.zeros(T, B, E), torch.zeros(B, H))
    assert all(p.dtype == torch.float64 for p in held)


FROZEN_SHARED = """
model Left(N = 4) {
  input x : f32[B, N]
  scope s (trainable = false) { param f : f32[N] = ones }
  param q : f32[N] = zeros
  output y = tanh(x * s.f + q)
}
model Right(N = 4) {
  input x : f32[B, N]
  scope s (trainable = false) { param f : f32[N] = ones }
  param r : f32[N] = zeros
  output y = tanh(x * s.f - r)
}
"""


@pytest.mark.parametrize("way", ["deepcopy", "torch.save"])
def test_a_copy_ties_cores_that_share_only_frozen_parameters(tmp_path_factory, way):
    """QA: copies tied cores again through their trainable Parameters only: two models
    sharing only a `trainable = false` parameter (a buffer) were copied untied."""
    module = compiled(tmp_path_factory, FROZEN_SHARED, "f64")[0]
    left = module.Left(seed=0)
    net = torch.nn.ModuleDict({"l": as_module(left),
                               "r": as_module(module.Right(seed=0, params=left))})
    twin = copied(net, way)
    assert twin["r"].model.shared == ["s/f"]
    twin["l"].model.params["s/f"][0] = 9.0
    assert twin["r"].model.params["s/f"][0] == 9.0 and net["r"].model.params["s/f"][0] == 1.0


DROPPED = """
model Dropped(E = 4) {
  input xs : f32[T, B, E]
  param w : f32[E] = normal(0, 1)
  output y = sum(dropout(xs, 0.5) * w)
}
"""


def test_a_state_dict_resumes_the_dropout_stream(tmp_path_factory):
    """QA: a run resumed the PyTorch way (the module's and the optimizer's state_dict)
    drew new dropout masks, off an unbroken run by 0.012 in 6 steps: state_dict holds the
    model's stream's place (`_extra_state`: rng_calls), and load_state_dict puts it back."""
    module, _ = compiled(tmp_path_factory, DROPPED, "f64")
    xs = torch.ones(3, 2, 4, dtype=torch.float64)

    def steps(core, opt, n):
        for _ in range(n):
            opt.zero_grad()
            core(xs).backward()
            opt.step()

    core = as_module(module.Dropped(seed=0))
    opt = torch.optim.SGD(core.parameters(), lr=0.1, momentum=0.9)
    steps(core, opt, 3)
    saved, opt_saved = copy.deepcopy(core.state_dict()), copy.deepcopy(opt.state_dict())
    assert saved["_extra_state"] == {"rng_seed": 0, "rng_calls": 3}
    steps(core, opt, 3)
    again = as_module(module.Dropped(seed=5))
    again.load_state_dict(saved)
    opt2 = torch.optim.SGD(again.parameters(), lr=0.1, momentum=0.9)
    opt2.load_state_dict(opt_saved)
    steps(again, opt2, 3)
    assert torch.equal(again.w, core.w) and again.model.rng_calls == core.model.rng_calls
    assert again.model.rng_seed == 0
    for bad, error in ((-1, ValueError), ("3", TypeError), (2**64, ValueError)):
        with pytest.raises(error, match="rng_seed"):
            again.model.rng_seed = bad
    again.model.rng_seed = 2**64 - 1
    with pytest.raises(ValueError, match="_extra_state holds"):
        again.load_state_dict({**saved, "_extra_state": {"rng_seed": 0, "rng_calls": "3"}})


def test_a_build_without_vjp_is_refused_with_how_to_build_one(tmp_path_factory):
    module, _ = compiled(tmp_path_factory, CORE.replace("output last_c = c", "output last_c = c\n"
                                                        "  output loss = sum(hs)\n  minimize loss"),
                         "f64", vjp=False)
    with pytest.raises(ValueError, match=r"built without vjp \(build it with "
                                         r"load\(\.\.\., vjp=True\) or mdlc build --vjp\)"):
        as_module(module.Core(seed=0))


def test_without_torch_the_import_says_how_to_install_it():
    code = ("import sys; sys.modules['torch'] = None\n"
            "try:\n    import codegen.pytorch\nexcept ImportError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert "install PyTorch (pip install 'mdl[torch]'" in out


def test_the_pages_code_runs(tmp_path, monkeypatch):
    """docs/pytorch.md: its .mdl block saved as core.mdl, then its Python blocks in order
    in one namespace."""
    page = (ROOT / "docs" / "pytorch.md").read_text()
    (mdl,) = re.findall(r"^```mdl\n(.*?)^```", page, re.S | re.M)
    (tmp_path / "core.mdl").write_text(mdl)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_pytorch"}
    for k, code in enumerate(re.findall(r"^```python\n(.*?)^```", page, re.S | re.M)):
        exec(compile(code, f"docs/pytorch.md (python block {k + 1})", "exec"), namespace)
