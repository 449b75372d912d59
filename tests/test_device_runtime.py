"""The runtime's device paths (cpp_runtime/src/model_object.h with a spec that names an
mdl::Device), run on a machine without a GPU: the CPU target's generated code, its models'
memory given to a stand-in device (tests/checked_device/) that is host memory it
allocated itself and that checks the side of every pointer the runtime hands it. Each
model is compared with the same model of the plain CPU module: the same code on the same
numbers, so the results must be equal, whatever moved through the table. What this
covers of the cuda target: the parameter store, inputs and cotangents copied over,
results copied back, the optimizer's state and steps on the device, checkpoints,
set_params, read-only params, sharing, data-parallel pieces. The GPU's own code is
tests/test_cuda.py's."""
from __future__ import annotations

import copy
import importlib.util
import pickle
from pathlib import Path

import numpy as np
import pytest
from conftest import CHARLM, charlm_batch

from codegen.compile.extension import build_extension
from codegen.pipeline import BuildOptions, load, sources
from codegen.targets.cpu import CpuTarget
from codegen.targets.registry import TARGETS

HERE = Path(__file__).resolve().parent / "checked_device"
DEFINES = {"H": 16}


class CheckedCpu(CpuTarget):
    """The CPU target (its kernels, by its name), its models' memory on the checked device;
    every function first checks that its inputs and parameters are the device's memory."""
    headers = ("checked_device.h",)  # beside module.cpp in the build's sources
    device = "&mdl::checked_device"

    def function(self, r, body: list[str]) -> str:
        head, rest = super().function(r, body).split("\n", 1)
        return "\n".join([head, '  mdl::expect_on_device(c.inputs, "input");',
                          '  mdl::expect_on_device(m.param, "parameter");', rest])


def _load(name: str, **options):
    """charlm.mdl (f64, H=16) for the checked device: its sources as the CPU target's,
    with the stand-in device compiled beside them."""
    checked = CheckedCpu()  # built by the cpu target's toolchain, which it inherits
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(TARGETS, "checked", checked)
        _, files = sources(CHARLM, name, BuildOptions("checked", "f64", DEFINES, **options))
    for file in ("checked_device.h", "checked_device.cpp"):
        files[file] = (HERE / file).read_text()
    spec = importlib.util.spec_from_file_location(name, build_extension(files, name, checked))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def modules():
    """(the checked module, the plain CPU one) of charlm.mdl."""
    return (_load("charlm_checked"),
            load(CHARLM, dtype="f64", defines=DEFINES, name="charlm_h16_f64_generic"))


def pair(modules, seed: int = 0):
    checked, plain = modules
    return checked.CharLM(seed=seed), plain.CharLM(seed=seed)


def assert_same(got: dict, want: dict, rtol: float = 0.0) -> None:
    """Equal, or within `rtol` (optimizer steps: the host's vectorized loops and the
    stand-in's scalar one may round an element differently, by an ulp)."""
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=0, err_msg=k)


def test_forward_and_backward_move_through_the_device(modules):
    on, off = pair(modules)
    assert on.device == "checked" and off.device == "cpu"
    assert_same(on.params, off.params)  # initialized on the host, then copied over
    batch = charlm_batch(1)
    assert_same(on.forward(**batch), off.forward(**batch))
    assert_same(on.forward(**batch, training=True), off.forward(**batch, training=True))
    assert_same(on.forward(**charlm_batch(2)), off.forward(**charlm_batch(2)))  # inference
    assert_same(on.backward(), off.backward())  # reads the training forward's copies


def test_params_are_read_only_copies_and_set_params_writes(modules):
    on, off = pair(modules)
    name = "embedding"
    w = on.params[name]
    with pytest.raises(ValueError, match="read-only"):
        w += 1.0
    for m in (on, off):
        m.set_params({name: np.full_like(w, 0.5)})
    assert_same(on.params, off.params)
    assert_same(on.forward(**charlm_batch(3)), off.forward(**charlm_batch(3)))


@pytest.mark.parametrize("optimizer", [
    dict(name="adam", lr=1e-2, clip_norm=0.5, weight_decay=1e-3),
    dict(name="sgd", lr=0.1, momentum=0.9, nesterov=True),
    dict(name="sgd", lr=0.1),
])
def test_train_steps_on_the_device_match_the_host(modules, optimizer, tmp_path):
    on, off = pair(modules)
    for m in (on, off):
        m.set_optimizer(**optimizer)
    for step in range(3):
        assert_same(on.train_step(**charlm_batch(step)), off.train_step(**charlm_batch(step)),
                    1e-12)
    assert_same(on.params, off.params, 1e-12)
    on.save(tmp_path / "on.npz")
    off.save(tmp_path / "off.npz")
    saved_on, saved_off = np.load(tmp_path / "on.npz"), np.load(tmp_path / "off.npz")
    floats = [k for k in saved_off if saved_off[k].dtype.kind == "f"]
    assert_same({k: saved_on[k] for k in floats}, {k: saved_off[k] for k in floats}, 1e-12)
    assert all(np.array_equal(saved_on[k], saved_off[k]) for k in saved_off if k not in floats)
    again = modules[0].CharLM(seed=5)
    again.load(tmp_path / "off.npz")  # a host checkpoint into a device model
    assert_same(again.params, off.params)
    assert_same(again.train_step(**charlm_batch(9)), off.train_step(**charlm_batch(9)), 1e-12)


def test_forward_backward_and_apply_gradients(modules):
    on, off = pair(modules)
    for m in (on, off):
        m.set_optimizer("adam", lr=1e-2)
    assert_same(on.forward_backward(**charlm_batch(4)), off.forward_backward(**charlm_batch(4)))
    np.testing.assert_array_equal(on.gradient_buffer, off.gradient_buffer)
    on.gradient_buffer[:] *= 0.5  # a caller combines gradients in the host buffer
    off.gradient_buffer[:] *= 0.5
    on.apply_gradients()
    off.apply_gradients()
    assert_same(on.params, off.params, 1e-12)


def test_a_shared_model_uses_the_sharers_device_memory(modules):
    checked, _ = modules
    a = checked.CharLM(seed=0)
    b = checked.CharLMStep(seed=1, params=a)
    a.set_params({"embedding": np.full_like(a.params["embedding"], 0.25)})
    assert np.all(b.params["embedding"] == 0.25)


def test_vjp_cotangents_move_through_the_device(modules):
    on = _load("charlm_checked_vjp", vjp=True).CharLM(seed=0)
    off = load(CHARLM, dtype="f64", defines=DEFINES, vjp=True,
               name="charlm_h16_f64_vjp").CharLM(seed=0)
    batch = charlm_batch(6)
    outs = on.forward(**batch, training=True)
    off.forward(**batch, training=True)
    rng = np.random.default_rng(0)
    cts = {k: rng.standard_normal(np.shape(outs[k])) for k in on.cotangents}
    assert_same(on.backward(**cts), off.backward(**cts))


def test_the_torch_bridge_trains_a_model_in_its_device_memory(modules):
    """codegen.pytorch on a device model: its parameters are its device_params (the
    stand-in's memory, which DLPack calls the host's), its outputs and gradients the
    device's buffers, and an SGD step of PyTorch's writes the device's weights: the same
    numbers as the bridge over the CPU module's model."""
    torch = pytest.importorskip("torch", reason="torch is not installed (codegen.pytorch "
                                                "needs it)")
    from codegen.pytorch import as_module
    on = as_module(_load("charlm_checked_vjp", vjp=True).CharLM(seed=0))
    off = as_module(load(CHARLM, dtype="f64", defines=DEFINES, vjp=True,
                         name="charlm_h16_f64_vjp").CharLM(seed=0))
    assert on.model.outputs_on_device
    opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (on, off)]
    for step in range(2):
        batch = {k: torch.from_numpy(v) for k, v in charlm_batch(step).items()}
        losses = []
        for m, opt in zip((on, off), opts):
            opt.zero_grad()
            logits, loss = m(**batch)
            (loss + logits.square().mean()).backward()
            losses.append(loss.item())
        assert losses[0] == losses[1]
        grads = [{k: p.grad.numpy() for k, p in m.named_parameters()} for m in (on, off)]
        assert_same(*grads)
        for opt in opts:
            opt.step()
    assert_same(on.model.params, off.model.params)  # the device's copies: torch moved them


@pytest.mark.parametrize("way", ["deepcopy", "pickle"])
def test_a_copy_of_a_device_model_has_device_memory_of_its_own(modules, way):
    """copy.deepcopy and pickle of a device model: its weights and optimizer state read
    from the device, the new model's written there, outputs_on_device kept; the copy
    steps on as the host's model does, and the original stays where it was."""
    on, off = pair(modules)
    for m in (on, off):
        m.set_optimizer("adam", lr=1e-2)
        m.train_step(**charlm_batch(0))
    on.outputs_on_device = True
    twin = copy.deepcopy(on) if way == "deepcopy" else pickle.loads(pickle.dumps(on))
    assert twin.device == "checked" and twin.outputs_on_device
    got = twin.train_step(**charlm_batch(1))
    assert_same({k: v.numpy() for k, v in got.items()}, off.train_step(**charlm_batch(1)), 1e-12)
    assert_same(twin.params, off.params, 1e-12)
    assert on.optimizer["steps"] == 1 and twin.optimizer["steps"] == 2


def test_outputs_on_the_device_are_read_through_dlpack(modules):
    """`outputs_on_device`: outputs and gradients stay in the device's memory, as arrays
    other libraries read without a copy (the stand-in's memory is the host's, so NumPy
    reads it)."""
    on, off = pair(modules)
    with pytest.raises(ValueError, match="runs on the CPU, whose outputs are NumPy arrays"):
        off.outputs_on_device = True
    on.outputs_on_device = True
    batch = charlm_batch(1)
    got, want = on.forward(**batch), off.forward(**batch)
    logits = got["logits"]
    assert repr(logits) == "DeviceArray(f64[6, 3, 96] on checked)"
    assert logits.shape == (6, 3, 96) and logits.dtype == np.float64
    assert logits.__dlpack_device__() == (1, 0)
    for name in want:
        np.testing.assert_array_equal(np.from_dlpack(got[name]), want[name])
        np.testing.assert_array_equal(got[name].numpy(), want[name])
    on.forward(**batch, training=True)
    off.forward(**batch, training=True)
    assert_same({k: v.numpy() for k, v in on.backward().items()}, off.backward())
    on.outputs_on_device = False
    assert isinstance(on.forward(**batch)["loss"], np.ndarray)
    del on  # an array outlives its model and its next calls
    np.testing.assert_array_equal(np.from_dlpack(logits), want["logits"])
    torch = pytest.importorskip("torch", reason="torch is not installed: NumPy read the "
                                "arrays above")
    np.testing.assert_array_equal(torch.from_dlpack(logits).numpy(), want["logits"])


def test_inputs_put_on_the_device_are_read_where_they_are(modules):
    """`to_device`: a copy of a NumPy array in the device's memory, which calls read there
    (the stand-in checks that every input a function gets is its memory), as they read a
    model's outputs left there: a generation step's state goes round without the host."""
    on, off = pair(modules)
    batch = charlm_batch(1)
    with pytest.raises(ValueError, match="runs on the CPU, which reads NumPy arrays"):
        off.to_device(batch["tokens"])
    placed = {k: on.to_device(v) for k, v in batch.items()}
    assert repr(placed["tokens"]) == "DeviceArray(i32[6, 3] on checked)"
    np.testing.assert_array_equal(placed["lengths"].numpy(), batch["lengths"])
    assert_same(on.forward(**placed), off.forward(**batch))
    on.forward(**placed, training=True)
    off.forward(**batch, training=True)
    del placed  # the backward reads the training forward's inputs: the model keeps them
    assert_same(on.backward(), off.backward())
    on.outputs_on_device = True
    logits = on.forward(**batch)["logits"]  # a DeviceArray of another dtype and shape
    with pytest.raises(ValueError, match=r"input 'tokens': expected i32\[T, B\], got "
                                         r"float64\[6, 3, 96\] \(wrong dtype\)"):
        on.forward(**{**batch, "tokens": logits})
    with pytest.raises(ValueError, match=r"to_device: expected an array of a dtype of model "
                                         r"CharLM's inputs \(int32\), got int64"):
        on.to_device(batch["tokens"].astype(np.int64))
    # QA: one whose __init__ never ran was read as the freed DeviceArray whose memory it
    # took (its shape, a segfault); to_device of one on the device already uploaded device
    # memory as host memory, which the emulated device refused as an internal error
    unmade = type(logits).__new__(type(logits))
    with pytest.raises(TypeError, match="DeviceArray object was never initialized"):
        on.forward(**{**batch, "tokens": unmade})
    again = on.to_device(placed_again := on.to_device(batch["tokens"]))
    assert again is not placed_again
    np.testing.assert_array_equal(again.numpy(), batch["tokens"])
    with pytest.raises(ValueError, match=r"CharLM's inputs \(int32\), got float64"):
        on.to_device(logits)


def test_a_step_model_takes_its_own_outputs_back(modules):
    """CharLMStep's state, handed out on the device, goes back in as the next step's input
    (where the emulated GPU's memory is the host's, DLPack alone would copy it over)."""
    on, off = (module.CharLMStep(seed=4) for module in modules)
    on.outputs_on_device = True
    token = np.array([5, 7, 9], np.int32)
    state = {"h": np.zeros((3, 16)), "c": np.zeros((3, 16))}
    placed = {k: on.to_device(v) for k, v in state.items()}
    for step in range(3):
        got = on.forward(token=on.to_device(token), **placed)
        want = off.forward(token=token, **state)
        for name in want:
            np.testing.assert_array_equal(got[name].numpy(), want[name], err_msg=name)
        placed = {"h": got["h_out"], "c": got["c_out"]}
        state = {"h": want["h_out"], "c": want["c_out"]}
        token = (token + step) % 96
