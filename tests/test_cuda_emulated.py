"""The cuda target's generated code executed on the emulated device (docs/cuda.md, "The
emulated device"): every example's module.cpp and kernels.cu, the same text a build for a
GPU compiles, both built by the host compiler and run on the CPU with every CUDA thread a
checked fiber. Each example against the reference interpreter, under two thread orders,
and in deferred mode; training and checkpoints against the cpu target; bad input data
raises the CPU's exceptions.

With MDL_TEST_DEVICE=gpu the same tests run on a real GPU instead (docs/cuda.md, "On a
machine with a GPU"): the modules are built by nvcc, and the emulator's own settings
(thread orders, deferred streams) have no effect there."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from conftest import CHARLM, charlm_batch
from test_native import MODELS, assert_example_matches, graph_of

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
FILES = sorted({file for file, _ in MODELS})
ON_GPU = os.environ.get("MDL_TEST_DEVICE") == "gpu"
# the emulator's thread orders; a GPU has its own, so it runs each example once
ORDERS = ["order=forward"] if ON_GPU else ["order=forward", "order=reverse"]
EMULATE = not ON_GPU
SUFFIX = "cuda" if ON_GPU else "emulated"  # module names: test_cuda.py builds the same
DEVICE = "cuda" if ON_GPU else "cuda-emulated"  # what a model's `device` says


def on_both_targets(path, stem: str, **options) -> dict:
    """The .mdl file `path` built for the cpu target and for the cuda target (the emulated
    device, or the GPU), as the modules `<stem>_cpu` and `<stem>_emulated` (`_cuda`):
    {"cpu": module, "cuda": module}."""
    from codegen.pipeline import load
    return {"cpu": load(path, name=f"{stem}_cpu", **options),
            "cuda": load(path, target="cuda", emulate=EMULATE, name=f"{stem}_{SUFFIX}",
                         **options)}


@pytest.fixture(scope="session")
def emulated_modules() -> dict:
    """Every example's emulated cuda module, in f32 and f64: {(file, dtype): module}."""
    from codegen.pipeline import load

    def build(key):
        file, dtype = key
        return key, load(EXAMPLES / file, target="cuda", emulate=EMULATE, dtype=dtype,
                         name=f"{Path(file).stem}_{dtype}_{SUFFIX}")
    with ThreadPoolExecutor(min(8, os.cpu_count() or 2)) as pool:
        return dict(pool.map(build, [(f, d) for f in FILES for d in ("f32", "f64")]))


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("file, model", MODELS, ids=[f"{f}:{m}" for f, m in MODELS])
def test_example_matches_the_reference(emulated_modules, file, model, dtype, order,
                                       monkeypatch):
    monkeypatch.setenv("MDL_CUDA_EMULATOR", order)
    assert_example_matches(emulated_modules[(file, dtype)], file, model, dtype)


@pytest.mark.parametrize("file, model", [("charlm.mdl", "CharLM"), ("control.mdl", "Adaptive"),
                                         ("bidirectional.mdl", "BiTagger")])
def test_deferred_streams_and_shuffled_threads(emulated_modules, file, model, monkeypatch):
    """Work runs only when a stream is synchronized (a missing wait reads poison), threads
    and blocks in a seeded random order, every kernel on fibers."""
    monkeypatch.setenv("MDL_CUDA_EMULATOR", "deferred,order=shuffle,seed=3,fibers")
    assert_example_matches(emulated_modules[(file, "f64")], file, model, "f64")


@pytest.mark.parametrize("file, model", MODELS, ids=[f"{f}:{m}" for f, m in MODELS])
def test_repeated_calls_replay_a_captured_cuda_graph(emulated_modules, file, model,
                                                     monkeypatch):
    """A function whose host code only queues work runs as a CUDA graph (docs/cuda.md,
    "CUDA graphs"): the first call runs as it is, the second, queueing the same work, is
    captured, the third replays it; each on new numbers, against the reference. The
    functions of control.mdl read their conditions back to the host: never captured."""
    monkeypatch.setenv("MDL_CUDA_EMULATOR", "deferred")  # a missing wait reads poison
    m = assert_example_matches(emulated_modules[(file, "f64")], file, model, "f64", calls=3)
    trains = graph_of(file, model, "f64").loss is not None  # infer, train and backward
    functions = 0 if file == "control.mdl" else 3 if trains else 1
    assert m.cuda_graphs == {"captured": functions, "replayed": functions}


def test_a_graph_is_replayed_only_for_the_work_it_was_captured_from(emulated_modules):
    """A call whose host code would queue other work (other dims, so other sizes and
    pointers) runs as it is, and the captured graph serves the next call that matches."""
    from test_native import DIMS, assert_training_matches, random_case
    module = emulated_modules[("charlm.mdl", "f64")]
    graph = graph_of("charlm.mdl", "CharLM", "f64")
    m = module.CharLM(seed=3)
    replayed = []
    for seed, steps in enumerate([5, 5, 5, 4, 5, 3]):
        with pytest.MonkeyPatch.context() as patch:
            patch.setitem(DIMS, "T", steps)
            inputs = random_case(graph, "f64", seed=seed)
        assert_training_matches(m, graph, inputs, 1e-10, seed=3)
        replayed.append(m.cuda_graphs["replayed"])
    # T=5 captured at the second call, replayed at the third and fifth (train, backward)
    assert replayed == [0, 0, 2, 2, 4, 4]


def test_cuda_graphs_can_be_turned_off(emulated_modules, monkeypatch):
    """MDL_CUDA_GRAPHS=0 (read when a model is made): every call runs as it is."""
    monkeypatch.setenv("MDL_CUDA_GRAPHS", "0")
    m = assert_example_matches(emulated_modules[("gru.mdl", "f64")], "gru.mdl",
                               "GRUClassifier", "f64", calls=3)
    assert m.cuda_graphs == {"captured": 0, "replayed": 0}


@pytest.mark.parametrize("value", ["off", "false", "2"])
def test_cuda_graphs_setting_takes_0_or_1(emulated_modules, monkeypatch, value):
    """MDL_CUDA_GRAPHS=off was read as on (every value but "0" was)."""
    monkeypatch.setenv("MDL_CUDA_GRAPHS", value)
    module = emulated_modules[("gru.mdl", "f64")]
    with pytest.raises(ValueError, match=f"MDL_CUDA_GRAPHS='{value}': expected 0 "
                                         r"\(off\) or 1 \(on\)"):
        module.GRUClassifier(seed=0)
    monkeypatch.setenv("MDL_CUDA_GRAPHS", "1")
    assert module.GRUClassifier(seed=0).cuda_graphs == {"captured": 0, "replayed": 0}


@pytest.fixture(scope="module")
def charlms(charlm64_generic):
    """(emulated cuda, cpu) modules of charlm.mdl in f64 with H = 16."""
    from codegen.pipeline import load
    return (load(CHARLM, target="cuda", emulate=EMULATE, dtype="f64", defines={"H": 16},
                 name=f"charlm_h16_f64_{SUFFIX}"), charlm64_generic)


def test_the_model_says_where_it_runs(charlms):
    emulated, cpu = charlms
    assert emulated.CharLM(seed=0).device == DEVICE
    assert cpu.CharLM(seed=0).device == "cpu"


@pytest.mark.parametrize("optimizer, options", [
    ("sgd", {"lr": 0.1, "momentum": 0.9, "clip_norm": 0.5}),
    ("adam", {"lr": 0.01, "clip_norm": 0.5, "weight_decay": 0.01}),
])
def test_training_matches_the_cpu_target(charlms, optimizer, options):
    models = [module.CharLM(seed=0) for module in charlms]
    for m in models:
        m.set_optimizer(optimizer, **options)
    for step in range(3):
        losses = [m.train_step(**charlm_batch(step))["loss"] for m in models]
        np.testing.assert_allclose(losses[0], losses[1], rtol=1e-12)
    emulated, cpu = (m.params for m in models)
    for name in cpu:
        np.testing.assert_allclose(emulated[name], cpu[name], rtol=1e-10, atol=1e-13,
                                   err_msg=name)


def test_gradients_combined_in_the_device_s_buffer_or_the_host_s(charlms):
    """forward_backward then apply_gradients, the gradients halved in between as a caller
    that combines them would: in the host's gradient_buffer, then in the device's
    device_gradient_buffer (through DLPack, in place), then in the host's again; each
    step as the cpu target's on the same gradients."""
    torch = pytest.importorskip("torch")
    emulated, cpu = (module.CharLM(seed=0) for module in charlms)
    for m in (emulated, cpu):
        m.set_optimizer("adam", lr=0.01)
    for step, where in enumerate(["host", "device", "device", "host"]):
        batch = charlm_batch(step)
        emulated.forward_backward(**batch)
        cpu.forward_backward(**batch)
        if where == "device":
            grads = torch.from_dlpack(emulated.device_gradient_buffer)
            np.testing.assert_allclose(grads.cpu().numpy(), cpu.gradient_buffer, rtol=1e-10,
                                       atol=1e-14)
            grads.mul_(0.5)
        else:
            np.testing.assert_allclose(emulated.gradient_buffer, cpu.gradient_buffer,
                                       rtol=1e-10, atol=1e-14)
            emulated.gradient_buffer[:] *= 0.5
        cpu.gradient_buffer[:] *= 0.5
        emulated.apply_gradients()
        cpu.apply_gradients()
        for name, want in cpu.params.items():
            np.testing.assert_allclose(emulated.params[name], want, rtol=1e-10, atol=1e-13,
                                       err_msg=f"step {step}: {name}")
    with pytest.raises(ValueError, match="runs on the CPU: its gradient_buffer is in its"):
        cpu.device_gradient_buffer


def test_checkpoints_move_between_targets(charlms, tmp_path):
    emulated, cpu = charlms
    trained = emulated.CharLM(seed=0)
    trained.set_optimizer("adam", lr=0.01)
    trained.train_step(**charlm_batch(0))
    trained.save(tmp_path / "cuda.npz")
    on_cpu = cpu.CharLM(seed=1)
    on_cpu.load(tmp_path / "cuda.npz")
    on_cpu.train_step(**charlm_batch(1))
    on_cpu.save(tmp_path / "cpu.npz")
    back = emulated.CharLM(seed=2)
    back.load(tmp_path / "cpu.npz")
    for name, value in on_cpu.params.items():
        np.testing.assert_array_equal(back.params[name], value, err_msg=name)
    batch = charlm_batch(2)
    np.testing.assert_allclose(back.forward(**batch)["loss"], on_cpu.forward(**batch)["loss"],
                               rtol=1e-12)


@pytest.mark.parametrize("name, value", [("tokens", 500), ("tokens", -1), ("targets", 96),
                                         ("lengths", 99), ("lengths", -2)])
def test_bad_input_data_raises_the_cpus_exception(charlms, name, value):
    """Device code skips the bad element and records it; the runtime raises what the CPU
    target raises. Nothing reads out of bounds: the emulator would report it instead."""
    errors = []
    for module in charlms:
        batch = charlm_batch(1)
        batch[name] = batch[name].copy()
        batch[name].flat[1] = value
        m = module.CharLM(seed=0)
        with pytest.raises((IndexError, ValueError)) as caught:
            m.forward(**batch)
        errors.append((type(caught.value), str(caught.value)))
        m.forward(**charlm_batch(2))  # the model goes on working
    assert errors[0] == errors[1]


# lists NumPy reads as something other than the input's dtype (tests/test_native.py)
LISTS = [
    # QA: "got object[3, 16] (wrong dtype)", of an int NumPy reads as an object
    ("h", [[0.5] * 15 + [10**400]] * 3,
     "input 'h': holds 1e+400 (element 15), past the range of the model's f64"),
    # QA: read as 1, 2, 3 and as 1.0, where a bool array is refused
    ("token", [True, 2, 3], "input 'token': holds a bool (element 0), not an i32 (wrong dtype)"),
    ("c", [[0.0] * 16] * 2 + [[0.0] * 15 + [True]],
     "input 'c': holds a bool (element 47), not an f64 (wrong dtype)"),
]


@pytest.mark.parametrize("name, value, message", LISTS, ids=[m for _, _, m in LISTS])
def test_lists_are_read_as_on_the_cpu(charlms, name, value, message):
    """A list is read in the runtime both targets share: the same call, the same error."""
    errors = []
    for module in charlms:
        m = module.CharLMStep(seed=0)
        call = {"token": [1, 2, 3], "h": [[0.5] * 16] * 3, "c": np.zeros((3, 16))}
        with pytest.raises(ValueError) as caught:
            m.forward(**{**call, name: value})
        errors.append(str(caught.value))
        assert m.forward(**call)["h_out"].shape == (3, 16)  # lists it does read
    assert errors[0] == errors[1] and message in errors[0]


@pytest.mark.skipif(ON_GPU, reason="the emulated device's memory= setting; a GPU has its own")
def test_a_call_too_big_for_the_device_s_memory_raises_memory_error(charlms, monkeypatch):
    """As cudaMalloc fails on a GPU when its memory is used up, so it does on the emulated
    device (MDL_CUDA_EMULATOR's memory=, by default half of the machine's): the call
    raises MemoryError, where touching the pages would have had the process killed."""
    m = charlms[0].CharLM(seed=0)
    small = charlm_batch(0)
    before = m.forward(**small)["loss"]
    monkeypatch.setenv("MDL_CUDA_EMULATOR", "memory=64M")
    T, B = 2000, 100  # its logits alone are 2000 * 100 * 96 doubles: 146 MiB
    big = {"tokens": np.zeros((T, B), np.int32), "targets": np.zeros((T, B), np.int32),
           "lengths": np.full(B, T, np.int32)}
    with pytest.raises(MemoryError, match="more of the GPU's memory"):  # once std::bad_alloc
        m.forward(**big)
    assert m.forward(**small)["loss"] == before  # the device goes on working


@pytest.mark.skipif(ON_GPU, reason="the emulated device's memory= setting; a GPU has its own")
def test_a_model_the_device_has_no_room_for_raises_memory_error(charlms, monkeypatch):
    """The model's first cudaMalloc (its fault record, 72 bytes) on a full device raised
    MemoryError("std::bad_alloc"); it names the call and CUDA's reason."""
    monkeypatch.setenv("MDL_CUDA_EMULATOR", "memory=8")
    # (an allocation takes whole pages and a guard page, as the words say: 8192 bytes here)
    with pytest.raises(MemoryError, match=r"^cudaMalloc: the GPU's memory is used up \(.*"
                                          r"72 bytes asked for take \d+ \(whole pages and a "
                                          r"guard page after them\), \d+ of the device's 8 "
                                          r"are in use"):
        charlms[0].CharLM(seed=0)
    monkeypatch.delenv("MDL_CUDA_EMULATOR")
    charlms[0].CharLM(seed=0)  # the device goes on working


@pytest.mark.skipif(ON_GPU, reason="the emulated device's memory= setting; a GPU has its own")
def test_an_optimizer_the_device_has_no_room_for_changes_nothing(charlms, monkeypatch,
                                                                 tmp_path):
    """set_optimizer and load make the optimizer's buffers before they change anything
    (mdl/optimizer.h, shared by both targets): they named an Adam whose buffers were
    null, the next train_step crashed the cpu target and left the device's sticky error
    here, and load had already written the file's weights."""
    module = charlms[0]
    donor = module.CharLM(seed=1)
    donor.set_optimizer("adam", lr=0.01)
    donor.train_step(**charlm_batch(0))
    donor.save(tmp_path / "adam.npz")
    m, twin = module.CharLM(seed=0), module.CharLM(seed=0)
    for model in (m, twin):
        model.set_optimizer("sgd", lr=0.1, momentum=0.9)
        model.train_step(**charlm_batch(1))
    before = {k: v.copy() for k, v in m.params.items()}
    monkeypatch.setenv("MDL_CUDA_EMULATOR", "memory=8")  # every allocation fails
    with pytest.raises(MemoryError, match="the optimizer's two buffers of .* values need"):
        m.set_optimizer("adam", lr=0.01)
    with pytest.raises(MemoryError):
        m.load(tmp_path / "adam.npz")
    monkeypatch.delenv("MDL_CUDA_EMULATOR")
    assert m.optimizer == twin.optimizer and m.optimizer["name"] == "sgd"
    assert all(np.array_equal(v, before[k]) for k, v in m.params.items())
    for model in (m, twin):
        model.train_step(**charlm_batch(2))
    assert all(np.array_equal(v, twin.params[k]) for k, v in m.params.items())
    m.load(tmp_path / "adam.npz")  # with room, as the file says
    assert m.optimizer == donor.optimizer


@pytest.mark.skipif(ON_GPU, reason="the emulated device's memory is the host's: views of it")
def test_views_of_the_emulated_device_s_memory_are_read_in_place(charlms):
    """np.from_dlpack (or torch's) of a DeviceArray, kDLCPU here, as an input or to
    set_params: copied as host memory, the emulator refused it ("is device memory, not
    host memory"), and the next call failed too, with those words."""
    emulated, _ = charlms
    a, b = emulated.CharLM(seed=0), emulated.CharLM(seed=1)
    batch = charlm_batch(1)
    want = a.forward(**batch)["loss"]
    tokens = np.from_dlpack(a.to_device(batch["tokens"]))
    assert a.forward(**{**batch, "tokens": tokens})["loss"] == want
    b.set_params({k: np.from_dlpack(v) for k, v in a.device_params.items()})
    assert b.forward(**batch)["loss"] == want


@pytest.mark.skipif(ON_GPU, reason="the emulated device's memory= setting; a GPU has its own")
def test_a_bad_memory_setting_is_an_error_of_the_call_that_meets_it(charlms):
    """In a process of its own: the error is the device's sticky error from then on."""
    module = charlms[0]
    code = (f"import importlib.util as u\n"
            f"s = u.spec_from_file_location({module.__name__!r}, {module.__file__!r})\n"
            "m = u.module_from_spec(s); s.loader.exec_module(m)\n"
            "try:\n    m.CharLM(seed=0)\nexcept RuntimeError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "MDL_CUDA_EMULATOR": "memory=2X"}, timeout=120)
    assert "MDL_CUDA_EMULATOR: memory=2X: memory= takes a number of bytes, with K, M or G " \
        "after it for KiB, MiB or GiB (memory=2G)" in done.stdout, done.stdout + done.stderr


@pytest.mark.skipif(ON_GPU, reason="the emulated device's memory= setting; a GPU has its own")
def test_a_bad_setting_met_by_cudamalloc_is_not_out_of_memory(charlms):
    """A call needing new device memory met the bad setting at cudaMalloc, whose every
    failure read as out of memory (MemoryError, "3600 bytes ... the GPU's memory"). Only CUDA's out-of-memory answer is a MemoryError; this one names the word."""
    module = charlms[0]
    code = (f"import importlib.util as u, os, numpy as np\n"
            f"s = u.spec_from_file_location({module.__name__!r}, {module.__file__!r})\n"
            "m = u.module_from_spec(s); s.loader.exec_module(m)\n"
            "model = m.CharLM(seed=0)\n"
            "os.environ['MDL_CUDA_EMULATOR'] = 'memory=2X'\n"
            "try:\n    model.to_device(np.zeros((300, 3), np.int32))\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.startswith("RuntimeError cudaMalloc: emulated CUDA device: "
                                  "MDL_CUDA_EMULATOR: memory=2X: memory= takes a number"), \
        done.stdout + done.stderr


def test_numpy_reads_a_device_array_as_a_copy(charlms):
    """np.asarray(out) was an array of one object, the DeviceArray itself (no __array__),
    and np.testing compared that object. It is numpy()'s copy now, on a GPU too."""
    emulated, _ = charlms
    m = emulated.CharLM(seed=0)
    want = m.forward(**charlm_batch(1))["logits"]
    m.outputs_on_device = True
    out = m.forward(**charlm_batch(1))["logits"]
    got = np.asarray(out)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(out, want)
    assert np.asarray(out, dtype=np.float32).dtype == np.float32
    with pytest.raises(ValueError, match=r"lies in the device's memory: NumPy can read it "
                                         r"only as a copy in host memory \(copy=False"):
        np.asarray(out, copy=False)


def test_outputs_left_on_the_device_read_through_dlpack(charlms):
    """The emulator's device memory is the host's (kDLCPU, read by NumPy); a GPU's is
    kDLCUDA, read by PyTorch where it is installed."""
    emulated, _ = charlms
    m = emulated.CharLM(seed=0)
    want = m.forward(**charlm_batch(1))["logits"]
    m.outputs_on_device = True
    out = m.forward(**charlm_batch(1))["logits"]
    np.testing.assert_array_equal(out.numpy(), want)
    if not ON_GPU:
        assert out.__dlpack_device__() == (1, 0)  # kDLCPU
        np.testing.assert_array_equal(np.from_dlpack(out), want)
        return
    assert out.__dlpack_device__()[0] == 2  # kDLCUDA
    torch = pytest.importorskip("torch")
    np.testing.assert_array_equal(torch.from_dlpack(out).cpu().numpy(), want)


def test_dlpack_takes_the_array_apis_options(charlms):
    """QA: __dlpack__ took any keywords and ignored them: np.from_dlpack(param,
    copy=True) followed the weights, and dl_device=(2, 5) or a stream of "x" passed.
    copy=True is a copy in the device's memory (or the host's, with dl_device=(1, 0)),
    another device without it a BufferError, a bad option a TypeError."""
    m = charlms[0].CharLM(seed=0)
    param = m.device_params["decoder/b"]
    before = param.numpy()
    device = param.__dlpack_device__()
    copies = [np.from_dlpack(param, copy=True)] if not ON_GPU else []
    capsules = [param.__dlpack__(copy=True), param.__dlpack__(copy=True, dl_device=device),
                param.__dlpack__(copy=True, dl_device=(1, 0), stream=None)]
    view = param.__dlpack__(copy=False, dl_device=device, stream=None if not ON_GPU else 1)
    m.set_params({"decoder/b": before + 7})
    if not ON_GPU:
        for copy in copies + [np.from_dlpack(_Capsule(c, device)) for c in capsules[:2]]:
            np.testing.assert_array_equal(copy, before)
        np.testing.assert_array_equal(np.from_dlpack(_Capsule(view, device)), before + 7)
    for options, error, words in [
            ({"dl_device": (2 if not ON_GPU else 1, 5)}, BufferError, "ask for a copy"),
            ({"stream": "x"}, TypeError, "a stream is None or an int, got str"),
            ({"copy": 1}, TypeError, "copy is None, True or False, got int"),
            ({"dl_device": "cpu"}, TypeError, "a tuple (device_type, device_id)"),
            ({"device": None}, TypeError, "unexpected keyword argument 'device'")]:
        with pytest.raises(error, match=re.escape(words)):
            param.__dlpack__(**options)


class _Capsule:
    """A DLPack producer of a capsule already made, for np.from_dlpack."""
    def __init__(self, capsule, device):
        self.capsule, self.device = capsule, device

    def __dlpack__(self, **options):
        return self.capsule

    def __dlpack_device__(self):
        return self.device


TINY = """model Tiny(H = 4) {
  input ids : i32[B]
  input x : f32[B, H]
  param emb : f32[3, H] = normal(0, 1)
  output y = tanh(emb[ids] + x)
  output loss = sum(y * y)
  minimize loss
}
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict:
    """TINY on both targets: {"cpu": module, "cuda": module}."""
    path = tmp_path_factory.mktemp("tiny") / "tiny.mdl"
    path.write_text(TINY)
    return on_both_targets(path, "tiny")


def tiny_batch() -> dict:
    return {"ids": np.array([0, 2], np.int32), "x": np.ones((2, 4), np.float32)}


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_a_training_call_past_2_64_calls_is_an_overflow_error(tiny, target):
    """QA: rng_calls wrapped round from 2**64 - 1 to 0 unnoticed, and the calls after it
    drew the first calls' dropout masks again. The call that would pass it is refused as
    one whose arguments are: nothing counted, nothing trained, no backward."""
    m = tiny[target].Tiny(seed=0)
    m.set_optimizer("sgd", lr=0.1)
    m.rng_calls = 2 ** 64 - 2
    m.train_step(**tiny_batch())
    assert m.rng_calls == 2 ** 64 - 1
    params = m.params
    for call in (m.train_step, m.forward_backward,
                 lambda **x: m.forward(**x, training=True)):
        with pytest.raises(OverflowError, match=re.escape(
                "model Tiny has made 2**64 - 1 training calls (rng_calls), as many as its "
                "count of dropout streams holds: another would wrap it round to 0")):
            call(**tiny_batch())
        assert m.rng_calls == 2 ** 64 - 1
    with pytest.raises(RuntimeError, match=re.escape("backward() needs a forward(..., "
                                                     "training=True) first")):
        m.backward()
    for name, value in m.params.items():
        np.testing.assert_array_equal(value, params[name])
    m.rng_calls = 0
    m.train_step(**tiny_batch())
    assert m.rng_calls == 1


def test_a_device_array_of_one_number_converts_as_numpy_s(tiny):
    """QA: float(out["loss"]) of a loss left on the device was a TypeError, where a NumPy
    0-d array converts, and bool(a) was True whatever `a` held. One number, of 0 dims or of
    one element (as PyTorch's tensors convert), converts as NumPy's own does; more or none
    raise NumPy's errors in its words (NumPy 1's, which took one element too)."""
    import operator
    m = tiny["cuda"].Tiny(seed=0)
    m.outputs_on_device = True
    out = m.forward(**tiny_batch())
    loss, y = out["loss"], out["y"]
    copy = loss.numpy()
    assert copy.shape == () and copy > 0
    assert float(loss) == float(copy) and int(loss) == int(copy) and bool(loss)
    assert type(float(loss)) is float and type(int(loss)) is int
    ids = m.to_device(np.array([2], np.int32))
    assert int(ids) == operator.index(ids) == 2 and ["a", "b", "c"][ids] == "c"
    assert float(ids) == 2.0 and not m.to_device(np.zeros(1, np.int32))
    none = m.to_device(np.zeros(0, np.int32))
    for convert, a, error, words in [
            (float, y, TypeError, "only length-1 arrays can be converted to Python scalars: "
             f"DeviceArray(f32[2, 4] on {DEVICE}) holds 8 numbers"),
            (int, none, TypeError, "only length-1 arrays can be converted to Python "
             f"scalars: DeviceArray(i32[0] on {DEVICE}) holds 0 numbers"),
            (operator.index, loss, TypeError, "only integer scalar arrays can be converted "
             f"to a scalar index: DeviceArray(f32[] on {DEVICE}) is of dtype float32"),
            (bool, y, ValueError, "The truth value of an array with more than one element "
             f"is ambiguous: DeviceArray(f32[2, 4] on {DEVICE}) holds 8 numbers"),
            (bool, none, ValueError, "The truth value of an empty array is ambiguous: "
             f"DeviceArray(i32[0] on {DEVICE}) holds no numbers")]:
        with pytest.raises(error, match=re.escape(words)):
            convert(a)
        with pytest.raises(error):  # NumPy refuses it too
            convert(a.numpy())


def test_device_outputs_reuse_memory_only_once_let_go(charlms, monkeypatch):
    """Outputs left on the device take memory the pool kept from arrays Python let go
    (src/device_pool.h), without zeroing it: each call's outputs are right on reused
    memory, outputs still held keep their values, and an output read through DLPack is
    never reused (its consumer may read it on a stream of its own after letting it go).
    Outputs fed back as inputs are read without waiting for the device."""
    monkeypatch.setenv("MDL_CUDA_EMULATOR", "deferred")  # a missing wait reads poison
    emulated, _ = charlms
    m = emulated.CharLM(seed=0)
    batches = [charlm_batch(k) for k in range(4)]
    want = [m.forward(**b)["logits"] for b in batches]
    m.outputs_on_device = True
    held = m.forward(**batches[0])["logits"]
    for k in (1, 2, 3, 1):  # the arrays of each call let go before the next
        np.testing.assert_array_equal(m.forward(**batches[k])["logits"].numpy(), want[k])
    np.testing.assert_array_equal(held.numpy(), want[0])
    if ON_GPU:
        torch = pytest.importorskip("torch")
        read = torch.from_dlpack(m.forward(**batches[2])["logits"])
    else:
        read = np.from_dlpack(m.forward(**batches[2])["logits"])
    for k in (1, 3):
        np.testing.assert_array_equal(m.forward(**batches[k])["logits"].numpy(), want[k])
    got = read.cpu().numpy() if ON_GPU else read
    np.testing.assert_array_equal(got, want[2])
    # a step's outputs as the next call's inputs, as a generation loop feeds its state
    step = emulated.CharLMStep(seed=0)
    rng = np.random.default_rng(5)
    tokens = rng.integers(0, 96, (4, 3)).astype(np.int32)
    h = c = np.zeros((3, 16))
    wanted = []
    for token in tokens:
        out = step.forward(token=token, h=h, c=c)
        h, c = out["h_out"], out["c_out"]
        wanted.append(out["logits"])
    step.outputs_on_device = True
    h = c = step.to_device(np.zeros((3, 16)))
    for token, logits in zip(tokens, wanted):
        out = step.forward(token=token, h=h, c=c)
        h, c = out["h_out"], out["c_out"]
        np.testing.assert_array_equal(out["logits"].numpy(), logits)


def test_the_cli_builds_for_the_emulated_device_and_checks_gradients_on_it(tmp_path):
    import subprocess
    import sys

    def mdlc(*args):
        return subprocess.run([sys.executable, "-m", "codegen.cli", *args], capture_output=True,
                              text=True, timeout=600, cwd=tmp_path)
    emulate = ["--emulate"] * EMULATE
    done = mdlc("build", str(EXAMPLES / "towers.mdl"), "--target", "cuda", *emulate, "-o",
                str(tmp_path))
    assert done.returncode == 0, done.stderr
    run = subprocess.run([sys.executable, "-c", "import towers; m = towers.Towers(seed=0); "
                          "print(m.device)"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == DEVICE, run.stderr
    done = mdlc("gradcheck", str(EXAMPLES / "gru.mdl"), "--target", "cuda", *emulate)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def loops_module(tmp_path_factory):
    """test_native_loops.py's models of loop options and loop shapes, on the device."""
    from codegen.pipeline import load
    from test_native_loops import SOURCE
    path = tmp_path_factory.mktemp("loops") / "loops.mdl"
    path.write_text(SOURCE)
    return path, load(path, target="cuda", emulate=EMULATE, dtype="f64",
                      name=f"loops_models_f64_{SUFFIX}")


def _loop_models() -> list[str]:
    from test_native_loops import MODELS
    return [*MODELS, "Singular"]


@pytest.mark.parametrize("model", _loop_models())
def test_loop_models_match_the_reference(loops_module, model):
    """Every loop model of the cpu target's loop tests (recompute, checkpoints, nested
    loops, branches, states updated in place, layers split into loops), f64, 1e-10. With
    `Singular` and `BranchDraws`: the padding steps of a checkpoint's last segment and of a
    recompute backward's last block are skipped on the device too, known on the host
    (control_flow.py, _skip_padding); run, with zeros for their inputs and kept values,
    log(0) and 0 / 0 made the gradients NaN."""
    from codegen.reference import gradcheck
    from dsl import check_file
    from test_native import assert_training_matches
    path, module = loops_module
    graph = check_file(str(path), model=model, dtype="f64").graph
    m = getattr(module, model)(seed=2)
    for steps in (3, 5, 17):
        inputs = gradcheck.random_inputs(graph, {"T": steps, "B": 2},
                                         np.random.default_rng(steps))
        grads = assert_training_matches(m, graph, inputs, 1e-10, seed=2)
        assert all(np.isfinite(g).all() for g in grads.values()), model


def test_padding_steps_of_padded_copies_are_skipped(tmp_path, monkeypatch):
    """Where a sequence's segments cannot be a view of it (a reader takes them whole, or
    its memory is strided), its kernel makes a zero-padded copy; the host still knows how
    many steps of each segment hold data (Layout.padded) and skips the rest. Forced here
    for every segment: without it the padding steps ran on the device and `Singular`'s
    and `BranchDraws`' gradients came out NaN."""
    from codegen.backend.lower import Lowering
    from codegen.pipeline import load
    from codegen.reference import gradcheck
    from dsl import check_file
    from test_native import assert_training_matches
    from test_native_loops import SOURCE
    monkeypatch.setattr(Lowering, "_ragged", lambda self, op: False)
    path = tmp_path / "loops.mdl"
    path.write_text(SOURCE)
    for model in ("Singular", "BranchDraws", "CheckpointReversed"):
        # each model alone: a module of the file's 23 models took 39 s to compile
        module = load(path, target="cuda", emulate=EMULATE, dtype="f64", model=model,
                      name=f"loops_copied_{model.lower()}_f64_{SUFFIX}")
        graph = check_file(str(path), model=model, dtype="f64").graph
        for steps in (3, 5):
            inputs = gradcheck.random_inputs(graph, {"T": steps, "B": 2},
                                             np.random.default_rng(steps))
            grads = assert_training_matches(getattr(module, model)(seed=2), graph, inputs,
                                            1e-10, seed=2)
            assert all(np.isfinite(g).all() for g in grads.values()), model


def test_checkpoint_segments_of_every_length(loops_module, monkeypatch):
    """A checkpointed loop's segments, views of its sequences, on the device: the shorter
    last one is copied, zero-padded, into a buffer of one segment (a read past the
    sequence would leave the device allocation, which the emulator refuses)."""
    from codegen.reference import gradcheck
    from dsl import check_file
    from test_native import assert_training_matches
    monkeypatch.setenv("MDL_CUDA_EMULATOR", "deferred")  # read as the module runs
    path, module = loops_module
    for steps in (1, 2, 3, 4, 7):
        for model in ("Checkpoint", "CheckpointReversed"):
            graph = check_file(str(path), model=model, dtype="f64").graph
            inputs = gradcheck.random_inputs(graph, {"T": steps, "B": 3},
                                             np.random.default_rng(steps))
            assert_training_matches(getattr(module, model)(seed=2), graph, inputs, 1e-10,
                                    seed=2)
