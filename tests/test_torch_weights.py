"""codegen.torch_weights: a PyTorch model's weights under mdl's names and back. The
BiLSTM tagger of examples/bidirectional.mdl against its PyTorch twin (nn.Embedding, a
bidirectional nn.LSTM over packed sequences, nn.Linear), and a model of every layout
(LSTMCell, GRU layers, GRUCell, LayerNorm, a tensor): the same loss and gradients from
the same weights; trained weights written back give PyTorch the model's loss; wrong
mappings are errors that say what to do."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from codegen.pipeline import load  # noqa: E402
from codegen.torch_weights import Layer, params_from_torch, params_to_torch  # noqa: E402

F = torch.nn.functional
TAGGER = Path(__file__).resolve().parents[1] / "examples" / "bidirectional.mdl"


class BiTagger(torch.nn.Module):
    def __init__(self, V=50, E=16, H=24, K=5):
        super().__init__()
        self.embedding = torch.nn.Embedding(V, E)
        self.lstm = torch.nn.LSTM(E, H, bidirectional=True)
        self.out = torch.nn.Linear(2 * H, K)

    def forward(self, tokens, tags, lengths):
        packed = torch.nn.utils.rnn.pack_padded_sequence(
            self.embedding(tokens), lengths, enforce_sorted=False)
        hs, _ = self.lstm(packed)
        hs, _ = torch.nn.utils.rnn.pad_packed_sequence(hs, total_length=tokens.shape[0])
        logits = self.out(hs)
        real = torch.arange(tokens.shape[0])[:, None] < lengths[None, :]
        return F.cross_entropy(logits[real], tags[real])


def tagger_mapping(net):
    return {"embedding": net.embedding, "forward/lstm": Layer(net.lstm),
            "backward/lstm": Layer(net.lstm, reverse=True), "tagger": net.out}


def batch(seed=0, T=7, B=4):
    rng = np.random.default_rng(seed)
    lengths = np.array([7, 3, 5, 1], np.int32)[:B]
    return dict(tokens=rng.integers(0, 50, (T, B)).astype(np.int32),
                tags=rng.integers(0, 5, (T, B)).astype(np.int32), lengths=lengths)


def torch_loss(net, b):
    return net(torch.as_tensor(b["tokens"], dtype=torch.long),
               torch.as_tensor(b["tags"], dtype=torch.long), torch.as_tensor(b["lengths"]))


def test_a_pytorch_taggers_weights_give_its_loss_and_gradients():
    torch.manual_seed(0)
    net = BiTagger().double()
    m = load(TAGGER, dtype="f64").BiTagger(seed=1)
    weights = params_from_torch(tagger_mapping(net))
    assert sorted(weights) == sorted(m.params)          # every parameter, no other
    m.set_params(weights)
    b = batch()
    out = m.forward(**b, training=True)
    grads = m.backward()
    loss = torch_loss(net, b)
    loss.backward()
    assert abs(float(out["loss"]) - loss.item()) < 1e-12
    theirs = {"embedding": net.embedding.weight.grad, "tagger/W": net.out.weight.grad.T,
              "tagger/b": net.out.bias.grad,
              "forward/lstm/W": net.lstm.weight_ih_l0.grad.T,
              "forward/lstm/U": net.lstm.weight_hh_l0.grad.T,
              "forward/lstm/b": net.lstm.bias_ih_l0.grad,
              "backward/lstm/W": net.lstm.weight_ih_l0_reverse.grad.T,
              "backward/lstm/b": net.lstm.bias_hh_l0_reverse.grad}
    for name, g in theirs.items():
        np.testing.assert_allclose(grads[name], g.numpy(), rtol=1e-9, atol=1e-12,
                                   err_msg=name)


def test_trained_weights_written_back_give_pytorch_the_models_loss():
    torch.manual_seed(1)
    net = BiTagger()
    m = load(TAGGER).BiTagger(seed=3)
    m.set_optimizer("adam", lr=0.01)
    for step in range(5):
        m.train_step(**batch(step))
    params_to_torch(m.params, tagger_mapping(net))
    assert net.lstm.bias_hh_l0.abs().sum().item() == 0        # the bias went to bias_ih
    b = batch(9)
    with torch.no_grad():
        assert abs(torch_loss(net, b).item() - float(m.forward(**b)["loss"])) < 1e-5
    again = params_from_torch(tagger_mapping(net))
    for name, value in m.params.items():
        np.testing.assert_allclose(again[name], value, rtol=1e-6, atol=1e-7, err_msg=name)


LAYOUTS = """
import "std/rnn.mdl"
model Layouts(I = 3, H = 4) {
  input xs : f32[T, B, I]
  param scale : f32[H] = ones
  h = zeros[B, H]; c = zeros[B, H]; g1 = zeros[B, H]; g2 = zeros[B, H]; k = zeros[B, H]
  for x in xs {
    h, c = lstm(x, h, c) as cell
    g1 = gru(x, g1) as first
    g2 = gru(g1, g2) as second
    k = gru(x, k) as gcell
  }
  output loss = sum(layer_norm(h + g2 + k, eps = 1e-5) as norm * scale)
  minimize loss
}
"""


def test_every_layout(tmp_path):
    path = tmp_path / "layouts.mdl"
    path.write_text(LAYOUTS)
    torch.manual_seed(2)
    cell, gcell = torch.nn.LSTMCell(3, 4).double(), torch.nn.GRUCell(3, 4).double()
    gru = torch.nn.GRU(3, 4, num_layers=2).double()
    norm, scale = torch.nn.LayerNorm(4).double(), torch.nn.Parameter(torch.randn(4).double())
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    mapping = {"cell": cell, "first": Layer(gru, 0), "second": Layer(gru, 1),
               "gcell": gcell, "norm": norm, "scale": scale}
    m = load(path, dtype="f64").Layouts(seed=0)
    m.set_params(params_from_torch(mapping))
    xs = np.random.default_rng(5).normal(size=(6, 2, 3))
    x = torch.as_tensor(xs)
    h = c = k = torch.zeros(2, 4, dtype=torch.float64)
    for t in range(6):
        h, c = cell(x[t], (h, c))
        k = gcell(x[t], k)
    g2 = gru(x)[1][1]
    want = (norm(h + g2 + k) * scale).sum().item()
    assert abs(float(m.forward(xs=xs)["loss"]) - want) < 1e-12


def test_read_only_weights_are_written_without_a_warning():
    """A cuda model's `params` are read-only copies: params_to_torch of them made
    torch.as_tensor warn ("The given NumPy array is not writable") for every weight."""
    import warnings
    torch.manual_seed(4)
    cell = torch.nn.LSTMCell(3, 4)
    params = {name: np.array(value) for name, value in
              params_from_torch({"cell": cell}).items()}
    for value in params.values():
        value.setflags(write=False)
    other = torch.nn.LSTMCell(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        params_to_torch(params, {"cell": other})
    again = params_from_torch({"cell": other})
    assert all(np.array_equal(again[name], value) for name, value in params.items())


def test_bfloat16_weights_are_read_as_their_float32_values():
    """NumPy has no bfloat16: torch's .numpy() raised without naming the weight."""
    torch.manual_seed(3)
    cell = torch.nn.LSTMCell(3, 4)
    want = params_from_torch({"cell": cell})
    got = params_from_torch({"cell": cell.to(torch.bfloat16)})
    for name, values in want.items():
        assert got[name].dtype == np.float32
        np.testing.assert_allclose(got[name], values, rtol=2 ** -7)


def test_wrong_mappings_say_what_to_do():
    lstm2 = torch.nn.LSTM(3, 4, num_layers=2)
    with pytest.raises(ValueError, match=r"map each one's scope to Layer\(module, index"):
        params_from_torch({"enc/lstm": lstm2})
    with pytest.raises(ValueError, match="no layer 2"):
        params_from_torch({"enc/lstm": Layer(lstm2, 2)})
    with pytest.raises(ValueError, match="no layer 0 reversed"):
        params_from_torch({"enc/lstm": Layer(lstm2, 0, reverse=True)})
    with pytest.raises(ValueError, match=r"without a bias: .*`param W : f32\[3, 4\]`, `x @ W`"
                                         r"\) and map that name to the module's `weight.T`"):
        params_from_torch({"out": torch.nn.Linear(3, 4, bias=False)})
    for rnn in (torch.nn.GRU(3, 4, bias=False), torch.nn.LSTMCell(3, 4, bias=False)):
        with pytest.raises(ValueError, match=f"an nn.{type(rnn).__name__} without a bias"):
            params_from_torch({"cell": rnn})
    with pytest.raises(ValueError, match="proj_size"):
        params_from_torch({"enc": torch.nn.LSTM(3, 4, proj_size=2)})
    with pytest.raises(TypeError, match="no mdl layout for Conv1d"):
        params_from_torch({"conv": torch.nn.Conv1d(3, 4, 2)})
    lin = torch.nn.Linear(3, 4)
    with pytest.raises(KeyError, match="no parameter out/b"):
        params_to_torch({"out/W": np.zeros((3, 4))}, {"out": lin})
    # QA: a cell of the other kind said only "no parameter gru/b"
    gru = {"gru/W": np.zeros((3, 12)), "gru/U": np.zeros((4, 12)), "gru/bW": np.zeros(12),
           "gru/bU": np.zeros(12)}
    with pytest.raises(KeyError, match=re.escape(
            "the model's gru is std's gru (U, W, bU, bW), mapped to an nn.LSTMCell; map an "
            "nn.GRUCell or a layer of nn.GRU to it")):
        params_to_torch(gru, {"gru": torch.nn.LSTMCell(3, 4)})
    with pytest.raises(KeyError, match=re.escape(
            "the model's enc is std's lstm (U, W, b), mapped to an nn.GRU; map an "
            "nn.LSTMCell or a layer of nn.LSTM to it")):
        params_to_torch({"enc/W": np.zeros((3, 16)), "enc/U": np.zeros((4, 16)),
                         "enc/b": np.zeros(16)}, {"enc": torch.nn.GRU(3, 4)})
    before = lin.weight.detach().clone()
    with pytest.raises(ValueError, match=re.escape(
            "out/W is [4, 3], its torch module's weight wants [3, 4] (its torch tensor is "
            "[4, 3], read transposed)")):
        params_to_torch({"out/W": np.zeros((4, 3)), "out/b": np.zeros(4)}, {"out": lin})
    assert torch.equal(lin.weight, before)                   # nothing changed
    # QA: max_norm rescales the rows an nn.Embedding reads, which mdl's indexing does not
    # (outputs differed by 0.017); a module on the meta device gave torch's "Cannot copy
    # out of meta tensor", naming no parameter
    with pytest.raises(ValueError, match="'emb': an nn.Embedding with max_norm rescales"):
        params_from_torch({"emb": torch.nn.Embedding(5, 3, max_norm=1.0)})
    # QA: a LayerNorm without a bias was said to be "without them"; scale_grad_by_freq
    # was taken silently, and training then differs from PyTorch's
    with pytest.raises(ValueError, match=r"over \[5\], without a bias$"):
        params_from_torch({"norm": torch.nn.LayerNorm(5, bias=False)})
    with pytest.raises(ValueError, match=r"over \[5\], without weight and bias$"):
        params_from_torch({"norm": torch.nn.LayerNorm(5, elementwise_affine=False)})
    with pytest.warns(UserWarning, match="'emb': an nn.Embedding with scale_grad_by_freq"):
        params_from_torch({"emb": torch.nn.Embedding(5, 3, scale_grad_by_freq=True)})
    with pytest.warns(UserWarning, match="'emb': an nn.Embedding with padding_idx=0 gives "
                                         "that row no gradient"):
        params_from_torch({"emb": torch.nn.Embedding(5, 3, padding_idx=0)})
    meta = torch.nn.GRU(3, 4, device="meta")
    for call in (lambda: params_from_torch({"l0/gru": meta}),
                 lambda: params_to_torch({}, {"l0/gru": meta})):
        with pytest.raises(ValueError, match="parameter l0/gru/W: its torch tensor is on the "
                                             "meta device"):
            call()


def test_arguments_of_the_wrong_kind_are_refused_before_any_module_changes():
    """QA: a str array failed inside torch after the weight was written, complex values
    lost their imaginary part, nn.RNN came out under gru's names, Layer(lstm, True) read
    layer 1, and a list for a dict raised AttributeError."""
    lin = torch.nn.Linear(4, 3)
    before = lin.weight.detach().clone()
    for bad, message in [(np.array(["a", "b", "c"]), "out/b holds str32 values"),
                         (np.ones(3, np.complex64), "out/b holds complex64 values"),
                         ([None, None, None], "out/b holds object values")]:
        with pytest.raises(TypeError, match=message):
            params_to_torch({"out/W": np.ones((4, 3)), "out/b": bad}, {"out": lin})
        assert torch.equal(lin.weight, before)
    for call, message in [
            (lambda: params_from_torch([lin]), "mapping takes a dict"),
            (lambda: params_to_torch([1], {"out": lin}), "params takes a dict"),
            (lambda: params_from_torch({"s": Layer(torch.nn.RNN(3, 4))}),
             "Layer takes an nn.LSTM or an nn.GRU, got RNN"),
            (lambda: Layer(torch.nn.LSTM(3, 4, 2), True), "index takes an int, got True"),
            (lambda: Layer(torch.nn.LSTM(3, 4, bidirectional=True), 0, "no"),
             "reverse takes True or False")]:
        with pytest.raises(TypeError, match=message):
            call()
    # a tensor that requires grad is read as its values
    params_to_torch({"out/W": torch.ones(4, 3, requires_grad=True), "out/b": np.zeros(3)},
                    {"out": lin})
    assert lin.weight.sum().item() == 12.0


def test_a_tensor_that_cannot_be_written_leaves_every_module_as_it_was():
    """QA: the first module was written, then torch refused the second (an inference
    tensor, an expanded one); and fractions written into an integer tensor were cut."""
    lin = torch.nn.Linear(5, 3)
    before = lin.weight.detach().clone()
    with torch.inference_mode():
        frozen = torch.zeros(3)
    for target, words in ((frozen, "Inplace update to inference tensor"),
                          (torch.zeros(1).expand(3), "more than one element")):
        with pytest.raises(RuntimeError, match=f"parameter x: its torch tensor cannot be "
                                               f"written \\(.*{words}.*no module was changed"):
            params_to_torch({"a/W": np.ones((5, 3)), "a/b": np.ones(3), "x": np.ones(3)},
                            {"a": lin, "x": target})
        assert torch.equal(lin.weight, before)
    ints = torch.zeros(3, dtype=torch.int64)
    with pytest.raises(ValueError, match="x holds fractions, and its torch tensor is "
                                         "torch.int64"):
        params_to_torch({"x": np.array([1.7, -2.9, 3.5])}, {"x": ints})
    params_to_torch({"x": np.array([1.0, -2.0, 3.0])}, {"x": ints})  # whole numbers fit
    assert ints.tolist() == [1, -2, 3]


def test_a_refused_lstm_bias_puts_back_the_bias_ih_written_before_it():
    """QA: std's one LSTM bias is written as bias_ih, then bias_hh zeroed; when bias_hh
    refused, bias_ih kept the new values though the error said no module was changed."""
    torch.manual_seed(5)
    cell = torch.nn.LSTMCell(3, 2)
    with torch.inference_mode():  # a frozen bias_hh, which torch will not write
        cell.bias_hh = torch.nn.Parameter(torch.zeros(8), requires_grad=False)
    before = {name: t.detach().clone() for name, t in cell.named_parameters()}
    values = {"lstm/W": np.zeros((3, 8)), "lstm/U": np.zeros((2, 8)), "lstm/b": np.ones(8)}
    with pytest.raises(RuntimeError, match="parameter lstm/b: .*no module was changed"):
        params_to_torch(values, {"lstm": cell})
    for name, t in cell.named_parameters():
        assert torch.equal(t, before[name]), name


@pytest.mark.parametrize("values, dtype, message", [
    ([300.0], torch.int8, "holds 300.0, and its torch tensor is torch.int8, which holds "
                          "-128 to 127: it would wrap around"),
    ([-1], torch.uint8, "holds -1, and its torch tensor is torch.uint8, which holds 0 to 255"),
    ([2.0 ** 63], torch.int64, "holds 9.223372036854776e\\+18, .* torch.int64"),
    ([1.0, 2.0], torch.bool, "holds 2.0, and its torch tensor is torch.bool, which holds "
                             "only 0 and 1: it would be True"),
    ([1.0, np.nan], torch.int64, "holds NaN or infinity, and its torch tensor is "
                                 "torch.int64, which holds neither"),
    ([-np.inf], torch.int32, "holds NaN or infinity")])
def test_values_an_integer_tensor_cannot_hold_are_refused(values, dtype, message):
    """QA: 300.0 written into an int8 tensor became 44 and 2.0 into a bool one True,
    silently; NaN and infinity were refused as "fractions"."""
    target = torch.zeros(len(values), dtype=dtype)
    with pytest.raises(ValueError, match=f"parameter x {message}"):
        params_to_torch({"x": np.array(values)}, {"x": target})
    assert not target.any()
    edges = torch.zeros(2, dtype=torch.int8)
    params_to_torch({"x": np.array([-128.0, 127.0])}, {"x": edges})   # its range fits
    assert edges.tolist() == [-128, 127]


def _computed_linears():
    """(a Linear whose weight torch computes from others, the words naming it)."""
    from torch.nn.utils import prune
    nn_utils = torch.nn.utils
    with pytest.warns(FutureWarning):  # the old hook is deprecated, and still in use
        hooked = nn_utils.weight_norm(torch.nn.Linear(4, 3))
    return [(nn_utils.parametrizations.weight_norm(torch.nn.Linear(4, 3)),
             r"a parametrization of 'weight'\), so a write would not reach the module: "
             r"remove that first, torch.nn.utils.parametrize.remove_parametrizations"
             r"\(module, 'weight'\)"),
            (nn_utils.parametrizations.spectral_norm(torch.nn.Linear(4, 3))
             .requires_grad_(False), "a parametrization of 'weight'"),
            (hooked, r"weight_norm of 'weight'\), .* torch.nn.utils.remove_weight_norm"),
            (nn_utils.spectral_norm(torch.nn.Linear(4, 3)),
             "spectral_norm of 'weight'.* torch.nn.utils.remove_spectral_norm"),
            (prune.l1_unstructured(torch.nn.Linear(4, 3), "weight", amount=0.5),
             r"pruning of 'weight'\), .* torch.nn.utils.prune.remove\(module, 'weight'\)")]


def test_a_tensor_torch_computes_is_refused_before_any_module_changes():
    """QA: into a weight_norm'ed, spectral_norm'ed or pruned module, and into the doc's own
    `bias_ih_l0 + bias_hh_l0` of an nn.RNN, params_to_torch returned normally and wrote
    nothing: torch computes such a tensor from others, anew at each access or forward."""
    torch.manual_seed(6)
    plain = torch.nn.Linear(4, 3)
    before = plain.weight.detach().clone()
    values = {"a/W": np.ones((4, 3)), "a/b": np.ones(3), "c/W": np.ones((4, 3)),
              "c/b": np.ones(3)}
    for computed, words in _computed_linears():
        for grad in (True, False):  # a computed weight under no_grad has no grad_fn
            with torch.set_grad_enabled(grad), pytest.raises(
                    ValueError, match=f"parameter c/W: torch computes its tensor from "
                                      f"others \\({words}"):
                params_to_torch(values, {"a": plain, "c": computed})
            assert torch.equal(plain.weight, before)
    rnn = torch.nn.RNN(4, 3)
    with pytest.raises(ValueError, match=r"parameter b: torch computes its tensor from "
                                         r"others \(AddBackward0\), so a write would not "
                                         r"reach them: map a tensor that holds its values"):
        params_to_torch({"b": np.ones(3)}, {"b": rnn.bias_ih_l0 + rnn.bias_hh_l0})
    # a view of a parameter is written through, and so is a module once its
    # parametrization is removed
    params_to_torch({"W": np.ones((4, 3))}, {"W": plain.weight.T})
    assert plain.weight.sum().item() == 12.0
    computed = _computed_linears()[0][0]
    torch.nn.utils.parametrize.remove_parametrizations(computed, "weight")
    params_to_torch(values, {"c": computed})
    assert computed.weight.sum().item() == 12.0
