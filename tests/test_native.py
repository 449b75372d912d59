"""The C++ backend against the NumPy reference interpreter: every example model, built in
f32 and f64, on fresh random inputs, forward and every gradient; specializations; the
module API; bad calls."""
import copy
import os
import pickle
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from codegen.ops.rng import derive
from codegen.pipeline import load
from codegen.reference import gradcheck, interpreter as reference
from dsl import check_file
from source_files import built_for

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
MODELS = [(path.name, name) for path in sorted(EXAMPLES.glob("*.mdl"))
          for name in re.findall(r"^model (\w+)", path.read_text(), re.M)]
DIMS = {"T": 5, "B": 3, "S": 4}  # S: a second sequence length (attention.mdl's source)
TOLERANCE = {"f64": 1e-10, "f32": 1e-4}
_BUILT: dict = {}


def native(file: str, dtype: str, **options):
    """The module of every model in an example file (one build per file and dtype)."""
    key = (file, dtype, repr(options))
    if key not in _BUILT:
        name = f"{Path(file).stem}_{dtype}{'_special' if options else ''}"
        _BUILT[key] = load(EXAMPLES / file, dtype=dtype, name=name, **options)
    return _BUILT[key]


def graph_of(file: str, model: str, dtype: str):
    return check_file(str(EXAMPLES / file), model=model, dtype=dtype).graph


def rel_error(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    scale = max(float(np.abs(want).max(initial=0.0)), 1e-30)
    return float(np.abs(got - want).max(initial=0.0)) / scale


def random_case(graph, dtype: str, seed: int = 1):
    rng = np.random.default_rng(seed)
    inputs = gradcheck.random_inputs(graph, DIMS, rng)
    npdt = np.float64 if dtype == "f64" else np.float32
    return {k: v.astype(npdt) if v.dtype == np.float64 else v for k, v in inputs.items()}


def assert_training_matches(m, graph, inputs, tol: float, seed: int = 0) -> dict:
    """A training forward and backward of native model `m` against the reference: the
    loss and every gradient (parameters and float inputs); the gradients."""
    params = {k: np.array(v) for k, v in m.params.items()}
    calls = m.rng_calls
    out = m.forward(**inputs, training=True)
    grads = m.backward()
    want = reference.gradients(graph, inputs, params, training=True,
                               seed=derive(seed, calls + 1))
    assert rel_error(out[graph.loss], want.outputs[graph.loss]) < tol
    expected = {**want.params, **{f"input:{k}": v for k, v in want.inputs.items()}}
    assert set(grads) == set(expected)
    for name, g in grads.items():
        assert rel_error(g, expected[name]) < tol, name
    return grads


def assert_example_matches(module, file: str, model: str, dtype: str, calls: int = 1):
    """Model `model` of `module` (example `file` built in `dtype`, for any target) against
    the reference: its outputs, and its loss and gradients where it trains; `calls` times,
    on new numbers of the same shapes each time. The model."""
    graph = graph_of(file, model, dtype)
    m = getattr(module, model)(seed=3)
    tol = TOLERANCE[dtype]
    for call in range(calls):
        inputs = random_case(graph, dtype, seed=call + 1)
        params = {k: np.array(v) for k, v in m.params.items()}
        out = m.forward(**inputs)
        want = reference.run(graph, inputs, params)
        for name in graph.outputs:
            assert rel_error(out[name], want[name]) < tol, name
        if graph.loss is not None:
            assert_training_matches(m, graph, inputs, tol, seed=3)
    return m


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("file, model", MODELS, ids=[f"{f}:{m}" for f, m in MODELS])
def test_example_matches_the_reference(file, model, dtype):
    assert_example_matches(native(file, dtype), file, model, dtype)


def test_specialized_and_generic_code_agree():
    module = native("charlm.mdl", "f64", specialize=[{"T": 5, "B": 3}])
    m = module.CharLM(seed=0)
    assert m.specializations == [{"T": 5, "B": 3}]
    graph = graph_of("charlm.mdl", "CharLM", "f64")
    fixed = random_case(graph, "f64")
    other = {**fixed, "tokens": fixed["tokens"][:4], "targets": fixed["targets"][:4],
             "lengths": np.minimum(fixed["lengths"], 4)}
    for inputs in (fixed, other):  # the first runs the specialization, the second not
        assert_training_matches(m, graph, inputs, 1e-10)


@pytest.mark.parametrize("strided", [False, True])
def test_backward_reads_the_training_forwards_inputs_which_stay_alive(strided):
    """The backward reads a training forward's inputs where they are (uncopied): the
    module keeps them alive, even when the caller drops them or they were converted."""
    import gc
    graph = graph_of("charlm.mdl", "CharLM", "f64")
    m = native("charlm.mdl", "f64").CharLM(seed=5)
    inputs = random_case(graph, "f64", seed=7)
    params = {k: np.array(v) for k, v in m.params.items()}
    want = reference.gradients(graph, inputs, params, training=True,
                               seed=derive(5, m.rng_calls + 1)).params
    given = {k: np.repeat(v, 2, axis=0)[::2] if strided else v.copy()
             for k, v in inputs.items()}
    m.forward(**given, training=True)
    del given
    gc.collect()
    junk = [np.full((5, 3), 7, np.int32) for _ in range(1000)]  # reuse freed memory
    grads = m.backward()
    del junk
    for name, g in want.items():
        assert rel_error(grads[name], g) < 1e-10, name


@pytest.fixture(scope="module")
def towers():
    return native("towers.mdl", "f32").Towers(seed=0)


def test_params_are_live_views(towers):
    w = towers.params["fc0/two_level_fc/level0/W"]
    x = {f"a{i}": np.ones((8, 20), np.float32) for i in range(1, 5)}
    before = towers.forward(**x)["s"]
    w += 1.0
    assert towers.forward(**x)["s"] != before
    assert towers.params["fc0/two_level_fc/level0/W"][0, 0] == w[0, 0]
    w -= 1.0


PARAMS_MODEL = """
model Small(H = 3) {
  input x : f32[B, H]
  param w : f32[H] = uniform(-1.0, 1.0)
  output loss = sum(x * w)
  minimize loss
}
"""


@pytest.mark.parametrize("target", ["cpu", "emulated"])
def test_params_refuses_changes_of_its_own(tmp_path, target):
    """QA: `m.params["w"] = a` changed nothing of the model, silently (params was a new
    dict at each read). The dict refuses it, and every other change of its entries, saying
    what changes the weights; a copy or a pickle of it is a plain dict of the arrays."""
    path = tmp_path / "small.mdl"
    path.write_text(PARAMS_MODEL)
    m = built_for(path, target, name=f"params_dict_{target}").Small(seed=0)
    params = m.params
    assert isinstance(params, dict) and list(params) == ["w"]
    assert ", 1 parameter (3 numbers), seed 0" in repr(m)  # QA: "1 parameters"
    module = type(m).__module__
    assert repr(m).startswith(f"<{module}.Small: ")

    class Mine(type(m)):  # QA: a subclass's was <its module>.Small, a class of neither
        pass
    assert repr(Mine(seed=0)).startswith(f"<{__name__}.{Mine.__qualname__}: ")
    how = "write into one" if target == "cpu" else "read-only copies"
    for change in (lambda: params.__setitem__("w", np.ones(3, np.float32)),
                   lambda: params.update(w=np.ones(3, np.float32)), lambda: params.pop("w"),
                   lambda: params.setdefault("v", 1), lambda: params.clear(),
                   lambda: params.__delitem__("w"), lambda: params.popitem()):
        with pytest.raises(TypeError, match=f"params cannot be changed: .*{how}.*set_params"):
            change()
    # an augmented assignment writes into the array, then stores it again: that is no
    # change (QA: native.md's `m.params["decoder/b"] -= ...` raised after the weight moved)
    if target == "cpu":
        before = params["w"].copy()
        params["w"] -= 1.0
        np.testing.assert_array_equal(m.params["w"], before - 1.0)
    else:
        with pytest.raises(ValueError, match="read-only"):
            params["w"] -= 1.0
    with pytest.raises(TypeError, match="params cannot be changed"):
        params["w"] = params["w"].copy()
    with pytest.raises(TypeError, match="params cannot be changed"):
        params["v"] = params["w"]
    kept = copy.deepcopy(params)
    assert type(kept) is dict and type(pickle.loads(pickle.dumps(params))) is dict
    m.set_params({"w": np.full(3, 2.0, np.float32)})
    np.testing.assert_array_equal(m.params["w"], 2.0)
    assert not (kept["w"] == 2.0).all()  # the copy is of the arrays too
    if target == "emulated":  # QA: `m.device_params["w"] = a` changed nothing, silently
        views = m.device_params
        for change in (lambda: views.__setitem__("w", m.device_params["w"]),
                       lambda: views.update(w=1), lambda: views.pop("w")):
            with pytest.raises(TypeError, match="device_params cannot be changed: .*set_params"):
                change()
        np.testing.assert_array_equal(np.from_dlpack(views["w"]), 2.0)


@pytest.mark.parametrize("value", ["off", "no", "00"])
def test_huge_pages_setting_takes_0_or_1(towers, monkeypatch, value):
    """MDL_HUGE_PAGES=off was read as on (every value not starting with "0" was); a bad
    value is the error of the model made (the arenas read it once, and must not throw)."""
    monkeypatch.setenv("MDL_HUGE_PAGES", value)
    with pytest.raises(ValueError, match=f"MDL_HUGE_PAGES='{value}': expected 0 "
                                         r"\(off\) or 1 \(on\)"):
        type(towers)(seed=0)
    monkeypatch.setenv("MDL_HUGE_PAGES", "0")
    type(towers)(seed=0)


def test_every_parameter_starts_on_a_cache_line(towers):
    """A parameter's vector loads never straddle two cache lines: its model's store is
    64-byte aligned and each parameter starts on a boundary, whatever the sizes before it
    (Towers' biases are 80 bytes). Before, a B = 1 LSTM ran 1.3-1.45x slower in the models
    whose store began 16 bytes into a line (docs/build.md, "Weights on cache lines")."""
    sizes = {name: p.nbytes for name, p in towers.params.items()}
    assert any(n % 64 for n in sizes.values())  # a size that would shift the next one
    for model in [towers, *(type(towers)(seed=s) for s in range(1, 4))]:
        for name, p in model.params.items():
            assert p.ctypes.data % 64 == 0, name


def test_set_params_writes_checked_weights(towers):
    name = "fc0/two_level_fc/level0/W"
    old = np.array(towers.params[name])
    assert towers.device == "cpu"
    towers.set_params({name: old.astype(np.float64) + 1.0})  # converted to the model's dtype
    assert np.array_equal(towers.params[name], old + 1.0)
    with pytest.raises(KeyError, match="has no parameter 'nope'; its parameters: ") as info:
        towers.set_params({name: old, "nope": old})
    assert all(known in str(info.value) for known in list(towers.params)[:24])
    with pytest.raises(ValueError, match=r"'fc0/two_level_fc/level0/W' is f32\[20, 20\], got"):
        towers.set_params({name: old[:, :3]})
    # no real numbers: None became a scalar, complex values lost their imaginary part
    for bad, kind in [(object(), "object"), (old + 1j, "complex64"),
                      (np.full(old.shape, "a"), "<U1")]:
        with pytest.raises(TypeError, match=f"'{name}' holds {kind} values, got "):
            towers.set_params({name: bad})
    # once "holds object values, got NoneType"
    with pytest.raises(TypeError, match=f"'{name}' is None; a parameter takes an array of "
                       "real numbers of its shape"):
        towers.set_params({name: None})
    # a list NumPy reads as objects: "holds object values" of numbers
    with pytest.raises(TypeError, match=f"'{name}' is no array of numbers NumPy holds in "
                       "one dtype, got list read as objects"):
        towers.set_params({name: [[2**70] * 20] * 20})
    # finite values past f32's range were stored as inf (NumPy's warning only)
    with pytest.raises(ValueError, match=re.escape(
            f"'{name}' holds 1e+300 (element 0), past the range of the model's f32")):
        towers.set_params({name: np.full(old.shape, 1e300)})
    assert np.array_equal(towers.params[name], old + 1.0)  # nothing changed by a bad call
    towers.set_params({name: old})
    assert np.array_equal(towers.params[name], old)


def test_non_contiguous_and_dlpack_inputs(towers):
    x = {f"a{i}": np.random.default_rng(i).standard_normal((8, 20)).astype(np.float32)
         for i in range(1, 5)}
    want = towers.forward(**x)["s"]
    strided = {k: np.asfortranarray(v) for k, v in x.items()}
    assert towers.forward(**strided)["s"] == want
    # bytes in the other order (a file written on a big-endian machine) are read as the
    # numbers they are, not as their bytes
    swapped = {k: v.astype(v.dtype.newbyteorder()) for k, v in x.items()}
    assert towers.forward(**swapped)["s"] == want

    class Capsule:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kwargs):
            return self.a.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()
    assert towers.forward(**{k: Capsule(v) for k, v in x.items()})["s"] == want


@pytest.mark.parametrize("change, error, message", [
    (lambda x: x.pop("a1"), TypeError, "missing input 'a1'"),
    (lambda x: x.update(zz=x["a1"]), TypeError, "unknown input 'zz'"),
    (lambda x: x.update({"\ud800": x["a1"]}), TypeError, "unknown input '\\ud800'"),
    (lambda x: x.update(a2=x["a2"].astype(np.float64)), ValueError,
     "input 'a2': expected f32[8, 20], got float64[8, 20] (wrong dtype)"),
    (lambda x: x.update(a3=x["a3"][0]), ValueError, "input 'a3': expected f32[8, 20], got "
                                                     "float32[20] (wrong rank)"),
    (lambda x: x.update(a4=x["a4"][:5]), ValueError, "(dim 0 must be 8)"),
    (lambda x: x.update(training="yes"), TypeError,
     "forward(): training must be True or False, got str"),
    (lambda x: x.update(training=1), TypeError,
     "forward(): training must be True or False, got int"),
    (lambda x: x.update(training=None), TypeError,
     "forward(): training must be True or False, got NoneType"),
])
def test_bad_calls_raise(towers, change, error, message):
    x = {f"a{i}": np.zeros((8, 20), np.float32) for i in range(1, 5)}
    change(x)
    with pytest.raises(error, match=re.escape(message)):
        towers.forward(**x)


@pytest.mark.parametrize("call, error, message", [
    (lambda m, x: m.forward(*x.values()), TypeError, "forward() of model Towers takes its "
     "arguments by name: forward(a1=..., a2=..., a3=..., a4=...)"),
    (lambda m, x: m.train_step(x), TypeError, "train_step() of model Towers takes its "
     "arguments by name: train_step(a1=..., a2=..., a3=..., a4=...)"),
    (lambda m, x: (m.forward(**x, training=True), m.backward(1.0)), TypeError,
     "backward() of model Towers takes no positional arguments: call backward()"),
    (lambda m, x: type(m)(seed=-1), ValueError,
     "Towers(seed=...): the seed must be in [0, 2**64), got -1"),
    (lambda m, x: type(m)(seed=2 ** 64), ValueError, "got 18446744073709551616"),
    (lambda m, x: type(m)(seed=0.5), TypeError,
     "Towers(seed=...): the seed must be an int, got float"),
])
def test_positional_inputs_and_bad_seeds_raise_saying_what_to_write(towers, call, error,
                                                                    message):
    x = {f"a{i}": np.zeros((8, 20), np.float32) for i in range(1, 5)}
    with pytest.raises(error, match=re.escape(message)):
        call(towers, x)
    assert type(towers)(np.uint64(2 ** 64 - 1)).params.keys() == towers.params.keys()


@pytest.mark.parametrize("call, error, message", [
    (lambda m: setattr(m, "rng_calls", "3"), TypeError, "rng_calls must be an int, got str"),
    (lambda m: setattr(m, "rng_calls", -1), ValueError,
     "rng_calls must be in [0, 2**64), got -1"),
    (lambda m: m.set_params([np.zeros(3)]), TypeError,
     "set_params(values) takes a dict {parameter full name: array}, got list"),
    (lambda m: m.set_optimizer(3, lr=0.1), TypeError,
     'set_optimizer(name): name must be "sgd" or "adam", got int'),
    (lambda m: m.set_optimizer("sgd", 0.1), TypeError,  # pybind11's "incompatible ..."
     "set_optimizer(name, **options) takes its options by name (lr=0.1), got 1 more "
     "positional argument(s)"),
    (lambda m: setattr(m, "outputs_on_device", "yes"), TypeError,
     "outputs_on_device must be True or False, got str"),
    (lambda m: m.save(3), TypeError, "save(path): path must be a str or an os.PathLike, got int"),
    (lambda m: m.set_params({3: np.ones(3)}), TypeError,  # once "no parameter '3'"
     "takes its parameters by full name (a str), got the key 3 of type int"),
    (lambda m: m.load(None), TypeError,
     "load(path): path must be a str or an os.PathLike, got NoneType"),
    (lambda m: setattr(m, "rng_calls", np.array([1, 2])), TypeError,
     "rng_calls must be an int, got ndarray"),
    (lambda m: m.forward(a1=[[1.0], [2.0, 3.0]], a2=0, a3=0, a4=0), ValueError,
     "input 'a1': NumPy cannot read it as an array: setting an array element with a sequence"),
])
def test_other_bad_calls_name_what_they_take(towers, call, error, message):
    before = towers.rng_calls
    with pytest.raises(error, match=re.escape(message)):
        call(towers)
    assert towers.rng_calls == before and not towers.outputs_on_device
    towers.rng_calls = np.int64(before)  # NumPy's ints are ints
    assert towers.rng_calls == before


# Arguments bound as Python binds them, in Python's words: pybind11's own TypeError said
# "incompatible function arguments", listed `self: object` and, in a constructor,
# `<repr raised Error>`.
@pytest.mark.parametrize("call, message", [
    (lambda m, mod: m.apply_gradients(1), "apply_gradients() takes no arguments (1 given)"),
    (lambda m, mod: m.save(), "save(path) missing required argument 'path'"),
    (lambda m, mod: m.load("a", "b"), "load(path) takes 1 argument (2 given)"),
    (lambda m, mod: m.set_params({}, values={}),
     "set_params(values) got multiple values for argument 'values'"),
    (lambda m, mod: m.to_device(x=1), "to_device(array) got an unexpected keyword argument 'x'"),
    (lambda m, mod: m.profile(0), "profile() takes no arguments (1 given)"),
    (lambda m, mod: m.set_optimizer(lr=0.1),
     "set_optimizer(name, **options) missing required argument 'name'"),
    (lambda m, mod: m.set_optimizer("sgd", name="adam"),
     "set_optimizer(name, **options) got multiple values for argument 'name'"),
    (lambda m, mod: type(m)(foo=1),
     "Towers(seed=0, params=None) got an unexpected keyword argument 'foo'"),
    (lambda m, mod: type(m)(1, m, 3), "Towers(seed=0, params=None) takes 2 arguments (3 given)"),
    (lambda m, mod: type(m)(params=type(m)), "params= takes a model of the same module "
     "(`towers_f32`) to share parameters with, got the class Towers: give a model made by calling it"),
    (lambda m, mod: mod.set_num_threads(), "set_num_threads(n) missing required argument 'n'"),
    (lambda m, mod: mod.get_num_threads(2), "get_num_threads() takes no arguments (1 given)"),
    (lambda m, mod: mod.DeviceArray(), "DeviceArray cannot be made by calling it: DeviceArrays "
     "come from a device model"),
])
def test_wrong_counts_and_names_of_arguments_say_the_signature(towers, call, message):
    module = sys.modules[type(towers).__module__]
    with pytest.raises(TypeError, match=re.escape(message)):
        call(towers, module)


def test_arguments_by_name_and_defaults_still_bind(towers, tmp_path):
    cls = type(towers)
    shared = cls(seed=3, params=towers)
    assert shared.shared and cls(7, towers).shared == shared.shared
    assert repr(cls()).endswith("seed 0, no optimizer>")
    path = str(tmp_path / "m.npz")
    shared.save(path=path)
    shared.load(path)
    shared.set_optimizer(name="sgd", lr=0.1)
    assert shared.optimizer["name"] == "sgd"


class _Exported:
    """A `__dlpack__` object whose producer refuses to export (torch's tensor that requires
    grad says BufferError; a bfloat16 one, RuntimeError), or whose `__dlpack_device__` says
    something that is not (type, id)."""

    def __init__(self, refusal=None, device=(1, 0)):
        self.refusal, self.device = refusal, device

    def __dlpack__(self, **kwargs):
        raise self.refusal

    def __dlpack_device__(self):
        if isinstance(self.device, Exception):
            raise self.device
        return self.device


@pytest.mark.parametrize("given, error, message", [
    (_Exported(BufferError("Can't export tensors that require gradient")), ValueError,
     "input 'a1': NumPy cannot read it as an array: BufferError: Can't export tensors that "
     "require gradient"),
    (_Exported(RuntimeError("Unsupported dtype in DLTensor.")), ValueError,
     "input 'a1': NumPy cannot read it as an array: RuntimeError: Unsupported dtype"),
    (_Exported(device="cuda"), TypeError, "input 'a1': its __dlpack_device__() must return "
     "(device type, device id), two ints, got 'cuda'"),
    (_Exported(device=(2,)), TypeError, "two ints, got (2,)"),
    (_Exported(device=(2, 2 ** 40)), ValueError, "__dlpack_device__() (2, 1099511627776) is "
     "out of range"),
    # torch's meta tensor: its words came out naming no input
    (_Exported(device=ValueError("Unknown device type meta for Dlpack")), ValueError,
     "input 'a1': its __dlpack_device__() raised ValueError: Unknown device type meta"),
])
def test_what_a_dlpack_producer_refuses_names_the_input(towers, given, error, message):
    """These came out unnamed: `RuntimeError: Unsupported dtype in DLTensor.`, `IndexError:
    tuple index out of range`, pybind11's `Unable to cast Python instance`."""
    x = {f"a{i}": np.zeros((8, 20), np.float32) for i in range(2, 5)}
    with pytest.raises(error, match=re.escape(message)):
        towers.forward(a1=given, **x)


def test_training_takes_numpy_bools_too(towers):
    x = {f"a{i}": np.ones((8, 20), np.float32) for i in range(1, 5)}
    assert towers.forward(**x, training=np.bool_(True))["s"] == towers.forward(**x)["s"]
    towers.backward()  # it was a training forward


HUGE_DIMS = """
model Huge() {
  input x : f32[N, M]
  input w : f32[M, 64]
  h = tanh(x @ w)
  output y = sum(h * h)
}
"""


@pytest.mark.parametrize("n", [2 ** 20, 2 ** 56 + 1, 2 ** 57 + 3])
def test_dims_whose_memory_would_overflow_are_a_value_error(tmp_path, n):
    """Inputs with no elements bind dims to any size NumPy allows: N = 2**57 + 3 makes h,
    [N, 64] floats, 2**65 + 768 bytes, which wrapped around to 768 in int64_t and the
    product wrote past them (a segfault). Every byte count of a function is computed in
    double first, and a call past 2**60 bytes is refused."""
    path = tmp_path / "huge.mdl"
    path.write_text(HUGE_DIMS)
    m = load(path, name="huge_dims").Huge()
    x, w = np.zeros((n, 0), np.float32), np.zeros((0, 64), np.float32)
    if n < 2 ** 40:
        assert m.forward(x=x, w=w)["y"] == 0
        return
    with pytest.raises(ValueError, match=r"the dims of this call would need [0-9.e+]+ bytes of "
                       r"working memory, more than 2\*\*60, which no machine has: an input's "
                       r"dims are too large"):
        m.forward(x=x, w=w)


def test_dims_must_agree_between_inputs():
    m = native("charlm.mdl", "f32").CharLM()
    t = np.zeros((5, 3), np.int32)
    with pytest.raises(ValueError, match=re.escape("input 'targets': expected i32[T, B], got "
                                                   "int32[4, 3] (T = 5 from an earlier input)")):
        m.forward(tokens=t, targets=t[:4], lengths=np.ones(3, np.int32))


DERIVED_DIMS = """
model Derived(H = 3) {
  input a : f32[T]
  input x : f32[T, 2 * T]
  input y : f32[T + 1, H]
  param w : f32[H] = uniform(-1.0, 1.0)
  output z = y * w
  output loss = sum(x) + sum(a) + sum(z * z)
  minimize loss
}
"""


BOOL_BYTES = """
model Bools() {
  input m : bool[B]
  input x : f32[B]
  output as_float = f32(m)
  output count = sum(i32(m))
  output same = m == (x > 0.0)
  output picked = where(m, x, -x)
}
"""


@pytest.mark.parametrize("target", ["cpu", "emulated"])
def test_a_bool_input_is_true_wherever_its_byte_is_not_zero(tmp_path, target):
    """QA: uint8 data viewed as bool (NumPy prints bytes 2 and 255 as True) was read as
    its bytes: f32(m) gave 2.0 and 255.0, a count 258, and `m == (x > 0)` false. Any
    nonzero byte is True, as in NumPy and the reference; the caller's array is not
    changed."""
    path = tmp_path / "bools.mdl"
    path.write_text(BOOL_BYTES)
    m = built_for(path, target, name=f"bool_bytes_{target}").Bools(seed=0)
    raw = np.array([0, 1, 2, 255, 128, 0], np.uint8)
    given = {"m": raw.view(bool), "x": np.ones(6, np.float32)}
    want = reference.run(check_file(str(path)).graph, given, {})
    got = m.forward(**given)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    assert got["count"] == 4 and list(raw) == [0, 1, 2, 255, 128, 0]


@pytest.mark.parametrize("target", ["cpu", "emulated"])
def test_inputs_of_dims_made_of_others(tmp_path, target):
    """QA: an input of dim T + 1 (or 2 * T) ended the process at every call: the runtime
    bound the dim of index 999999 of a table of two. Such a dim is checked against the
    dims bound before it, and named as written."""
    path = tmp_path / "derived.mdl"
    path.write_text(DERIVED_DIMS)
    m = built_for(path, target, name=f"derived_dims_{target}", dtype="f64").Derived(seed=1)
    assert m.inputs == {"a": "f64[T]", "x": "f64[T, 2*T]", "y": "f64[T + 1, 3]"}
    rng = np.random.default_rng(0)
    given = {"a": rng.normal(size=3), "x": rng.normal(size=(3, 6)),
             "y": rng.normal(size=(4, 3))}
    graph = check_file(str(path), dtype="f64").graph
    want = reference.run(graph, given, m.params, training=True)
    got = m.forward(**given, training=True)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-12)
    grads = reference.gradients(graph, given, m.params)
    np.testing.assert_allclose(m.backward()["w"], grads.params["w"], rtol=1e-12)
    for name, shape, why in [("x", (3, 5), "dim 1 must be 2*T = 6"),
                             ("y", (3, 3), "dim 0 must be T + 1 = 4")]:
        with pytest.raises(ValueError, match=re.escape(
                f"input '{name}': expected {m.inputs[name]}, got float64{list(shape)} "
                f"({why})")):
            m.forward(**{**given, name: np.zeros(shape)})
    empty = m.forward(a=np.zeros(0), x=np.zeros((0, 0)), y=np.ones((1, 3)))
    assert empty["z"].shape == (1, 3)


def test_backward_before_a_training_forward_is_a_runtime_error():
    m = native("charlm.mdl", "f32").CharLM()
    with pytest.raises(RuntimeError, match="training=True"):
        m.backward()
    # after one, whose saved values set_params made stale: it said no forward had run
    ids = np.zeros((4, 2), np.int32)
    m.forward(tokens=ids, targets=ids, lengths=np.full(2, 4, np.int32), training=True)
    m.set_params({"decoder/b": m.params["decoder/b"] + 1.0})
    with pytest.raises(RuntimeError, match=r"backward\(\): this model's parameters changed "
                       r"\(set_params, load, an optimizer's step\) since its forward"):
        m.backward()


def test_after_a_failed_training_forward_backward_is_a_runtime_error():
    """A training forward whose run fails (an index out of range, found by native code)
    has overwritten what the one before it saved: backward must refuse, not read it (it
    read freed memory once: tests/fuzz_calls.py found it)."""
    m = native("charlm.mdl", "f32").CharLM()
    small = np.zeros((2, 1), np.int32)
    m.forward(tokens=small, targets=small, lengths=np.full(1, 2, np.int32), training=True)
    bad = np.zeros((5, 3), np.int32)
    bad[0, 1] = -1
    calls = m.rng_calls
    with pytest.raises(IndexError):
        m.forward(tokens=bad, targets=bad * 0, lengths=np.full(3, 5, np.int32), training=True)
    with pytest.raises(RuntimeError, match="training=True"):
        m.backward()
    # it counts no more than a call its arguments' checks refuse: the next call draws what
    # it would have drawn had the failed one not been made
    assert m.rng_calls == calls
    with pytest.raises(ValueError):
        m.forward(tokens=bad.astype(np.int64), targets=bad * 0,
                  lengths=np.full(3, 5, np.int32), training=True)
    assert m.rng_calls == calls


@pytest.mark.parametrize("refused", [
    dict(tokens=np.zeros((2, 1), np.float32)),  # a wrong dtype
    dict(tokens=np.zeros((3, 1), np.int32)),  # T of another input
    dict(extra=np.zeros(1)),  # no such input
])
def test_after_a_training_forward_refused_for_its_arguments_backward_is_a_runtime_error(
        refused):
    """Its arguments refused, such a forward left the one before it in place, and
    backward() gave that one's gradients: a training loop skipping a bad batch went on
    with the gradients of the batch before it. An inference forward's refusal leaves the
    last training forward's backward alone."""
    m = native("charlm.mdl", "f32").CharLM()
    small = np.zeros((2, 1), np.int32)
    batch = dict(tokens=small, targets=small, lengths=np.full(1, 2, np.int32))
    m.forward(**batch, training=True)
    with pytest.raises((ValueError, TypeError)):
        m.forward(**{**batch, **refused})
    m.backward()
    with pytest.raises((ValueError, TypeError)):
        m.forward(**{**batch, **refused}, training=True)
    with pytest.raises(RuntimeError, match=r"backward\(\) needs a forward\(\.\.\., "
                                           r"training=True\) first"):
        m.backward()
    m.forward(**batch, training=True)
    m.backward()


@pytest.mark.parametrize("call", ["train_step", "forward_backward"])
def test_a_refused_training_step_leaves_no_backward_of_the_forward_before_it(call):
    """train_step and forward_backward make a training forward too: their arguments
    refused, backward() is refused as after a refused forward(..., training=True), not
    given the gradients of an earlier batch."""
    m = native("charlm.mdl", "f32").CharLM()
    m.set_optimizer("sgd", lr=1e-3)
    small = np.zeros((2, 1), np.int32)
    batch = dict(tokens=small, targets=small, lengths=np.full(1, 2, np.int32))
    m.forward(**batch, training=True)
    with pytest.raises(ValueError, match="input 'tokens'"):
        getattr(m, call)(**{**batch, "tokens": small.astype(np.float32)})
    with pytest.raises(RuntimeError, match=r"backward\(\) needs a forward\(\.\.\., "
                                           r"training=True\) first"):
        m.backward()
    m.forward_backward(**batch)
    m.backward()  # of that call's forward


def test_bad_indices_are_an_index_error_naming_their_input():
    m = native("charlm.mdl", "f32").CharLM()
    good = np.zeros((2, 2), np.int32)
    bad = good.copy()
    bad[1, 0] = 500
    with pytest.raises(IndexError, match=r"`tokens` holds 500 at flat position 2, outside "
                                         r"\[0, 96\): the rows of the table it indexes"):
        m.forward(tokens=bad, targets=good, lengths=np.full(2, 2, np.int32))
    with pytest.raises(IndexError, match=r"`targets` holds -1 at flat position 3: "
                                         r"cross_entropy's targets lie in \[0, 96\)"):
        m.forward(tokens=good, targets=np.array([[0, 0], [0, -1]], np.int32),
                  lengths=np.full(2, 2, np.int32))
    m.forward(tokens=good, targets=good, lengths=np.full(2, 2, np.int32))  # still works


def test_one_instance_from_many_threads(towers):
    x = {f"a{i}": np.random.default_rng(i).standard_normal((8, 20)).astype(np.float32)
         for i in range(1, 5)}
    want = towers.forward(**x)["s"]
    results = []

    def work():
        for _ in range(20):
            results.append(towers.forward(**x)["s"])
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 80 and all(r == want for r in results)


LENGTHS_AND_WHILE = """
model Ragged(H = 3) {
  input xs : f32[T, B, H]; input n : i32[B]
  param w : f32[H, H] = normal(0, 1)
  h = zeros[B, H]
  hs = for x in reversed(xs) (lengths = n) {
    h = tanh(x @ w + h)
    steps = 0                 # the trip count depends on every row, padded ones too
    while norm(h) > 0.5 and steps < 50 { h = 0.9 * h; steps = steps + 1 }
    yield h
  }
  output loss = sum(hs * hs)
  minimize loss
}
"""


def test_rows_past_their_length_see_zeros_as_in_the_reference(tmp_path):
    path = tmp_path / "ragged.mdl"
    path.write_text(LENGTHS_AND_WHILE)
    graph = check_file(str(path), dtype="f64").graph
    m = load(path, dtype="f64").Ragged(seed=0)
    rng = np.random.default_rng(0)
    inputs = {"xs": rng.standard_normal((5, 3, 3)), "n": np.array([5, 2, 1], np.int32)}
    assert_training_matches(m, graph, inputs, 1e-10)


KEYWORDS = """
model struct(namespace = 3) {
  input class : f32[B, namespace]
  input int : i32[B]
  scope template { param delete : f32[namespace, namespace] = normal(0, 1) }
  param operator : f32[namespace] = ones
  this = class @ template.delete + operator
  output void = sum(this * this) + sum(f32(int))
  minimize void
}
"""


def test_cpp_keywords_as_mdl_names_build_and_run(tmp_path):
    path = tmp_path / "keywords.mdl"
    path.write_text(KEYWORDS)
    module = load(path, dtype="f64")
    m = getattr(module, "struct")(seed=0)
    x = {"class": np.ones((2, 3)), "int": np.array([1, 2], np.int32)}
    graph = check_file(str(path), dtype="f64").graph
    grads = assert_training_matches(m, graph, x, 1e-12)
    assert set(grads) == {"template/delete", "operator", "input:class"}


def test_a_build_seen_before_needs_no_code_generation(tmp_path, monkeypatch):
    from codegen import pipeline
    path = tmp_path / "again.mdl"
    path.write_text("model Again() { input x : f32[B]; output y = sum(x * 2.0) }")
    first = pipeline.build(path)

    def no_generation(*args, **kwargs):
        raise AssertionError("generated code for a build the cache has")
    monkeypatch.setattr(pipeline, "sources", no_generation)
    assert pipeline.build(path) == first
    path.write_text("model Again() { input x : f32[B]; output y = sum(x * 3.0) }")
    with pytest.raises(AssertionError, match="generated code"):
        pipeline.build(path)


def test_training_a_model_without_a_loss_is_a_runtime_error(tmp_path):
    path = tmp_path / "noloss.mdl"
    path.write_text("model NoLoss() { input x : f32[B]; output y = x * 2.0 }")
    m = load(path).NoLoss()
    assert m.forward(x=np.ones(2, np.float32))["y"].tolist() == [2.0, 2.0]
    with pytest.raises(RuntimeError, match="minimizes no output"):
        m.forward(x=np.ones(2, np.float32), training=True)
    # it said to run a forward(..., training=True) first, which is refused just above
    with pytest.raises(RuntimeError, match=r"backward\(\): model NoLoss has no backward "
                       "pass: it minimizes no output and was built without vjp"):
        m.backward()
    with pytest.raises(RuntimeError, match=r"set_optimizer\(\): model NoLoss minimizes no "
                       "output, so there is nothing to train"):
        m.set_optimizer("sgd", lr=0.1)
    assert m.optimizer is None


@pytest.mark.parametrize("bad", [[9, 1, 2], [3, -1, 2]])
def test_lengths_outside_the_sequence_are_a_value_error(bad):
    graph = graph_of("bidirectional.mdl", "BiTagger", "f32")
    m = native("bidirectional.mdl", "f32").BiTagger()
    inputs = {**random_case(graph, "f32"), "lengths": np.array(bad, np.int32)}
    b = int(np.flatnonzero((np.array(bad) < 0) | (np.array(bad) > 5))[0])
    message = f"lengths[{b}] = {bad[b]} is outside [0, 5] (the sequence length)"
    with pytest.raises(ValueError, match=re.escape(message)):
        m.forward(**inputs)
    with pytest.raises(ValueError, match=re.escape(message)):
        reference.run(graph, inputs, {k: np.array(v) for k, v in m.params.items()})


CROSS_ENTROPY = """
model Tokens(V = 5) {
  input logits : f32[T, B, V]
  input targets : i32[T, B]
  input n : i32[B]
  output loss = cross_entropy(logits, targets, lengths = n)
  minimize loss
}
"""


@pytest.mark.parametrize("target", ["cpu", "emulated"])
def test_a_cross_entropys_lengths_outside_the_sequence_are_a_value_error(tmp_path, target):
    """QA: cross_entropy(..., lengths = n) took n = [5, 2, 3] at T = 4 as [4, 2, 3], and -1
    as 0, where a loop refuses them, and data-parallel training weighed a shard by their
    sum. They are refused as a loop's are, before a bad target (one at row 1, step 3)."""
    path = tmp_path / "tokens.mdl"
    path.write_text(CROSS_ENTROPY)
    m = built_for(path, target, name=f"tokens_{target}").Tokens()
    graph = check_file(str(path)).graph
    rng = np.random.default_rng(0)
    targets = rng.integers(0, 5, (4, 3)).astype(np.int32)
    targets[3, 1] = 7
    given = {"logits": rng.normal(size=(4, 3, 5)).astype(np.float32), "targets": targets}
    for n, message in (([5, 2, 3], "n[0] = 5 is outside [0, 4]"),
                       ([2, 4, -1], "n[2] = -1 is outside [0, 4]")):
        inputs = {**given, "n": np.array(n, np.int32)}
        for run in (lambda: m.forward(**inputs), lambda: reference.run(graph, inputs, {})):
            with pytest.raises(ValueError, match=re.escape(message + " (the sequence length)")):
                run()
    inputs = {**given, "n": np.array([4, 3, 2], np.int32)}  # the bad target is padding
    np.testing.assert_allclose(m.forward(**inputs)["loss"],
                               reference.run(graph, inputs, {})["loss"], rtol=1e-6)


def run_alone(code: str) -> str:
    """What `code` prints, run in a Python process of its own that imports the tests'
    modules (modules come from the session's build cache, whose directory it inherits).
    For what measures the whole process, as its resident memory: a pytest-xdist worker
    holds more than the test (execnet's thread), which once raised its peak mid-test."""
    tests = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)])}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=600)
    assert run.returncode == 0, run.stderr
    return run.stdout


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_memory_stays_flat_over_ten_thousand_calls():
    """One instance called 10,000 times (training and inference, two sequence lengths, a
    `while` whose tapes grow and shrink): arenas and tapes are reused, results freed."""
    native("control.mdl", "f32")  # built here, found in the cache there
    grown = run_alone("""
import numpy as np
from codegen.reference import gradcheck
from test_native import graph_of, native, resident_bytes
graph = graph_of("control.mdl", "Adaptive", "f32")
m = native("control.mdl", "f32").Adaptive(seed=0)
cases = []
for steps in (5, 7):
    inputs = gradcheck.random_inputs(graph, {"T": steps, "B": 3}, np.random.default_rng(steps))
    cases.append({k: v.astype(np.float32) if v.dtype == np.float64 else v
                  for k, v in inputs.items()})

def calls(n):
    for i in range(n):
        inputs = cases[i % 2]
        if i % 3:
            m.forward(**inputs, training=True)
            m.backward()
        else:
            m.forward(**inputs)

calls(1000)  # arenas, tapes and the allocator reach their working size
before = resident_bytes()
calls(10_000)
print(resident_bytes() - before)
""")
    assert int(grown.split()[-1]) < 1 << 20


def test_initializers_of_rank_three_follow_the_reference_rule(tmp_path):
    """xavier and orthogonal treat [..., in, out] as the matrix [n / out, out], in native
    code as in the reference interpreter."""
    path = tmp_path / "init3.mdl"
    path.write_text("model Init3() {\n  input x : f32[B, 4]\n"
                    "  param W : f32[2, 3, 4] = xavier\n  param Q : f32[2, 6, 3] = orthogonal\n"
                    "  output y = sum(x) + sum(W) + sum(Q)\n}\n")
    params = load(path, name="init3").Init3(seed=5).params
    w, q = params["W"].astype(np.float64), params["Q"].reshape(12, 3).astype(np.float64)
    limit = np.sqrt(6.0 / (2 * 3 + 4))
    assert np.abs(w).max() <= limit and np.abs(w).max() > 0.5 * limit
    assert np.allclose(q.T @ q, np.eye(3), atol=1e-5)


def test_results_are_handed_over_as_arrays_of_their_own(tmp_path):
    """Outputs and gradients computed in memory of their own become the NumPy arrays
    (no copy out of the arena): writable, and no later call changes them; a gradient
    that is a value the training forward saved (d loss / d w = hs) is still a copy, so
    that changing it changes no second backward. Results under 4 KiB (the loss) are
    copied: for them a copy costs less than memory of their own."""
    path = tmp_path / "handed.mdl"
    path.write_text("""model M(H = 8) {
  input xs : f32[T, B, H]; input w : f32[T, B, H]
  param U : f32[H, H] = uniform(-0.5, 0.5)
  h = zeros[B, H]
  hs = for x in xs { h = tanh(h @ U + x); yield h }
  output loss = sum(hs * w)
  output last = h
  minimize loss
}
""")
    m = load(path, dtype="f64", name="handed_f64").M(seed=1)
    rng = np.random.default_rng(0)
    xs, w = rng.standard_normal((2, 5, 64, 8))  # h: 64 x 8 doubles, 4 KiB
    out = m.forward(xs=xs, w=w, training=True)
    g = m.backward()
    assert not out["last"].flags.owndata and not g["input:xs"].flags.owndata  # handed over
    assert g["input:w"].flags.owndata  # the saved hs, copied
    assert out["loss"].flags.owndata and g["U"].flags.owndata  # under 4 KiB: copied
    kept = {k: v.copy() for k, v in {**out, **g}.items()}
    for a in (*out.values(), *g.values()):
        assert a.flags.writeable
        a[...] = 7.0
    again = m.backward()
    for k in g:
        assert np.array_equal(again[k], kept[k]), k
    m.forward(xs=w, w=xs, training=True)
    m.backward()
    assert (g["U"] == 7.0).all() and (out["last"] == 7.0).all()


@pytest.mark.parametrize("file, model", MODELS, ids=[f"{f}:{m}" for f, m in MODELS])
def test_results_in_memory_python_let_go_are_written_whole(file, model):
    """Results of 4 KiB and more take the memory of earlier results that Python let go
    (mdl/result_pool.h), as it is, not zeroed: each call's results are poisoned with NaN
    before they go, and the next call's still match the reference in every element."""
    graph = graph_of(file, model, "f64")
    m = getattr(native(file, "f64"), model)(seed=3)
    inputs = gradcheck.random_inputs(graph, {**DIMS, "B": 64}, np.random.default_rng(2))
    for _ in range(3):
        params = {k: np.array(v) for k, v in m.params.items()}
        results = dict(m.forward(**inputs))
        want = reference.run(graph, inputs, params)
        for name in graph.outputs:
            assert rel_error(results[name], want[name]) < TOLERANCE["f64"], name
        if graph.loss is not None:
            results.update(assert_training_matches(m, graph, inputs, TOLERANCE["f64"], seed=3))
        for a in results.values():
            if a.dtype.kind == "f" and a.flags.writeable:
                a[...] = np.nan
        del results


def test_an_input_too_large_to_copy_says_how_much_memory_it_needed(tmp_path):
    """QA: the C-contiguous copy of a broadcast view of 2**48 elements raised
    MemoryError('std::bad_alloc'), saying nothing of how much it asked for. (Beyond any
    address space, so no machine gives it, whatever its overcommit.)"""
    path = tmp_path / "big.mdl"
    path.write_text("model Big() { input x : f32[T, B]\n  output y = sum(x) }")
    m = load(path).Big()
    x = np.broadcast_to(np.float32(1), (2**24, 2**24))
    with pytest.raises(MemoryError, match=re.escape(
            "this call needs 1.13e+06 GB more of memory (1125899906842624 bytes)")):
        m.forward(x=x)
    assert m.forward(x=np.ones((2, 3), np.float32))["y"] == 6.0


@pytest.mark.parametrize("target", ["cpu", "emulated"])
def test_parameters_too_large_for_memory_say_so(tmp_path, target):
    """QA: a model whose parameters the machine cannot hold said "this call needs ... GB
    more of memory at these sizes ...: give smaller inputs", though no call or input was
    involved. (2**48 values: beyond any address space, so no machine gives them.) The
    cuda target's store is device memory: on the emulated device, the same words."""
    from source_files import built_for
    path = tmp_path / "huge.mdl"
    path.write_text("model Huge(N = 16777216) { input x : f32[B]\n"
                    "  param w : f32[N, N] = zeros\n  output y = sum(x) + w[0, 0] }")
    module = built_for(path, target)
    with pytest.raises(MemoryError, match=re.escape(
            "the model's parameters, 281474976710656 values (1.13e+06 GB), need more memory "
            "than the model's device would give: use smaller hyper-parameters")):
        module.Huge(seed=0)


LISTS = ("model L() { input ids : i32[B]; input y : f32[B]; input s : f32\n"
         "  output z = f32(ids) * y + s }")


@pytest.fixture(scope="module", params=["f32", "f64"])
def lists(request, tmp_path_factory):
    """Model L of LISTS (its floats in the dtype of the parameter), and that dtype."""
    path = tmp_path_factory.mktemp("lists") / "lists.mdl"
    path.write_text(LISTS)
    return load(path, dtype=request.param, name=f"lists_{request.param}").L(), request.param


def test_lists_and_numbers_are_read_as_the_declared_dtype(tmp_path):
    """A list has no dtype of its own: `ids=[0, 1]` for an i32 input said "expected i32[B],
    got int64[2] (wrong dtype)", a dtype the user never chose. Numbers go into a float,
    integers that fit into i32; an array keeps its dtype, checked as before."""
    path = tmp_path / "lists.mdl"
    path.write_text(LISTS)
    m = load(path).L()
    got = m.forward(ids=[0, 1], y=[0.5, 2], s=3)["z"]
    assert got.dtype == np.float32 and got.tolist() == [3.0, 5.0]
    assert m.forward(ids=(2,), y=(1.0,), s=0.25)["z"].tolist() == [2.25]
    for ids, why in [([1.0], "got float64[1] (wrong dtype)"),  # a float is no index
                     ([True], "got bool[1] (wrong dtype)"),
                     (np.array([1], np.int64), "got int64[1] (wrong dtype)")]:  # an array's own
        with pytest.raises(ValueError, match=re.escape(f"input 'ids': expected i32[B], {why}")):
            m.forward(ids=ids, y=[1.0], s=0)
    # a number past f32's range became inf, with NumPy's warning only; an inf is the caller's
    for y, s, what in [([1.0, -1e39], 0, "input 'y': holds -1e+39 (element 1)"),
                       ([1.0], 1e300, "input 's': holds 1e+300 (element 0)")]:
        with pytest.raises(ValueError, match=re.escape(f"{what}, past the range of the "
                                                       "model's f32")):
            m.forward(ids=[0] * len(y), y=y, s=s)
    assert m.forward(ids=[1], y=[float("inf")], s=0)["z"].tolist() == [float("inf")]
    # an integer that does not fit is named (it said "got int64[2] (wrong dtype)"), and an
    # empty list, which NumPy reads as float64, is the declared dtype (it was refused)
    for ids, what in [([0, 2**31], "holds 2147483648 (element 1)"),
                      ([-2**31 - 1], "holds -2147483649 (element 0)")]:
        with pytest.raises(ValueError, match=re.escape(f"input 'ids': {what}, past the range "
                                                       "of i32")):
            m.forward(ids=ids, y=[1.0] * len(ids), s=0)
    assert m.forward(ids=[], y=[], s=1)["z"].tolist() == []


def test_ints_numpy_reads_as_objects_are_numbers_in_or_past_the_range(lists):
    """QA: an int past int64 and uint64 (`y=[10**400]`), which NumPy reads as an object,
    said "expected f32[B], got object[1] (wrong dtype)". It is a number: past the input's
    range it is named as a float past it is, within it (2**70 into an f32) it is read."""
    m, dtype = lists
    largest = {"f32": "3.4e+38", "f64": "1.8e+308"}[dtype]
    for kwargs, what in [
            (dict(y=[[10**400] * 8] * 3), f"'y': holds 1e+400 (element 0), past the range of "
             f"the model's {dtype} (its largest number is {largest})"),
            (dict(y=[1.5, np.int64(2), -10**400]), "'y': holds -1e+400 (element 2)"),
            (dict(s=12345678901234567890123456789 * 10**380), "'s': holds 1.23e+408 (element 0)"),
            (dict(ids=[0, 2**70]), "'ids': holds 1180591620717411303424 (element 1), past the "
             "range of i32 (-2147483648 to 2147483647)"),
            (dict(ids=[-10**400]), "'ids': holds -1e+400 (element 0), past the range of i32")]:
        call = {"ids": [0], "y": [1.0], "s": 0, **kwargs}
        with pytest.raises(ValueError, match=re.escape(f"input {what}")):
            m.forward(**call)
    if dtype == "f32":  # past an f32's range, within an f64's
        with pytest.raises(ValueError, match=re.escape("input 'y': holds 1e+39 (element 1), "
                                                       "past the range of the model's f32")):
            m.forward(ids=[0, 0], y=[1, 10**39], s=0)
    else:
        assert m.forward(ids=[1, 1], y=[1, 10**39], s=0)["z"].tolist() == [1.0, 1e39]
    assert m.forward(ids=[1, 1], y=[2**70, 1.5], s=-1)["z"].tolist() == [2.0**70, 0.5]
    # an object that is no number is still refused as one
    with pytest.raises(ValueError, match=re.escape(f"input 'y': expected {dtype}[B], got "
                                                   "object[2] (wrong dtype)")):
        m.forward(ids=[0, 0], y=[1.0, None], s=0)


def test_a_bool_in_a_list_is_refused_as_a_bool_array_is(lists):
    """QA: `ids=[True, 2, 3]` for an i32 input was read as 1, 2, 3 (NumPy reads it as
    int64), and `y=[0.5, False]` as 0.5, 0 (float64), where `[True]` and a bool array
    are refused: a bool among a list's numbers is as wrong a dtype as a list of bools."""
    m, dtype = lists
    for kwargs, what in [
            (dict(ids=[True, 2, 3]), "'ids': holds a bool (element 0), not an i32"),
            (dict(ids=(2, np.True_)), "'ids': holds a bool (element 1), not an i32"),
            (dict(y=[0.5, False]), f"'y': holds a bool (element 1), not an {dtype}"),
            (dict(y=[1, 2, np.array(False)]), f"'y': holds a bool (element 2), not an {dtype}"),
            (dict(ids=np.array([True, False])), "'ids': expected i32[B], got bool[2]"),
            (dict(s=True), f"'s': expected {dtype}, got bool[]")]:
        call = {"ids": [0, 1], "y": [1.0, 2.0], "s": 0, **kwargs}
        with pytest.raises(ValueError, match=re.escape(f"input {what} (wrong dtype)")):
            m.forward(**call)
    assert m.forward(ids=[1, 2], y=[0.5, 2], s=1)["z"].tolist() == [1.5, 5.0]
