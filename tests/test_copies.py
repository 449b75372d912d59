"""Copies of a model: `copy.copy`, `copy.deepcopy` and pickle give a model of its own
(parameters, optimizer state, the dropout stream's place, where its outputs go) that
trains on bit for bit as the original does; a bad state is refused and changes nothing;
`repr` says what a model is."""
from __future__ import annotations

import copy
import pickle
import subprocess
import sys

import numpy as np
import pytest
from conftest import CHARLM, charlm_batch

from codegen.pipeline import load

WAYS = {
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "pickle": lambda m: pickle.loads(pickle.dumps(m)),
}

DROPOUT = """
model Dropped(I = 5, H = 7) {
  input xs : f32[T, B, I]
  param W : f32[I, H] = normal(0, 0.5)
  param U : f32[H, H] = normal(0, 0.5)
  h = zeros[B, H]
  for x in xs { h = tanh(dropout(x, 0.3) @ W + h @ U) }
  output loss = mean(h * h)
  minimize loss
}
"""


def trained(module, steps: int = 2):
    m = module.CharLM(seed=1)
    m.set_optimizer("adam", lr=0.05, clip_norm=1.0)
    for step in range(steps):
        m.train_step(**charlm_batch(step))
    return m


def same_params(a, b) -> bool:
    return all(np.array_equal(v, b.params[k]) for k, v in a.params.items())


@pytest.mark.parametrize("way", list(WAYS))
def test_a_copy_trains_on_as_the_original_does(charlm64, way):
    a = trained(charlm64)
    b = WAYS[way](a)
    assert type(b) is type(a) and b is not a
    assert b.optimizer == a.optimizer and b.rng_calls == a.rng_calls and same_params(a, b)
    for step in range(2, 5):
        assert a.train_step(**charlm_batch(step))["loss"] == \
            b.train_step(**charlm_batch(step))["loss"]
    assert same_params(a, b)


@pytest.mark.parametrize("way", list(WAYS))
def test_a_copy_has_parameters_of_its_own(charlm64, way):
    a = trained(charlm64)
    b = WAYS[way](a)
    before = {k: v.copy() for k, v in a.params.items()}
    b.train_step(**charlm_batch(7))
    assert all(np.array_equal(v, before[k]) for k, v in a.params.items())
    assert not same_params(a, b)


@pytest.mark.parametrize("way", list(WAYS))
def test_a_copy_keeps_the_attributes_set_on_the_model(charlm64, way):
    """As Python's own objects do: a run's label or best loss set on the model was lost."""
    a = trained(charlm64)
    a.label, a.history = "run 7", [3.5, 2.25]
    b = WAYS[way](a)
    assert (b.label, b.history) == ("run 7", [3.5, 2.25])
    assert (b.history is a.history) == (way == "copy")  # a shallow copy shares them
    # a pickle made before attributes were kept: (arrays, outputs_on_device)
    old = charlm64.CharLM(seed=1)
    old.__setstate__(a.__reduce__()[2][:2])
    assert same_params(a, old) and not hasattr(old, "label")


def test_a_copy_of_a_sharing_model_owns_what_it_shared(charlm64):
    """CharLMStep(params=m) uses m's weights; its copy has them as they were."""
    m = trained(charlm64)
    step = charlm64.CharLMStep(params=m)
    twin = copy.deepcopy(step)
    kept = {k: v.copy() for k, v in twin.params.items()}
    m.train_step(**charlm_batch(9))
    assert all(np.array_equal(v, m.params[k]) for k, v in step.params.items())  # step: m's
    assert all(np.array_equal(v, kept[k]) for k, v in twin.params.items())  # the copy: its own
    assert not all(np.array_equal(v, m.params[k]) for k, v in twin.params.items())


def test_the_dropout_stream_goes_on_where_it_was(tmp_path):
    path = tmp_path / "dropped.mdl"
    path.write_text(DROPOUT)
    module = load(path, dtype="f64", name="dropped_copies")
    a = module.Dropped(seed=4)
    a.set_optimizer("sgd", lr=0.1, momentum=0.9)
    xs = np.random.default_rng(0).standard_normal((4, 2, 5))
    a.train_step(xs=xs)
    b = pickle.loads(pickle.dumps(a))
    assert b.rng_calls == a.rng_calls == 1
    for _ in range(3):  # equal losses only if both draw the same masks
        assert a.train_step(xs=xs)["loss"] == b.train_step(xs=xs)["loss"]


def test_pickle_finds_a_loaded_modules_classes_by_name(charlm64):
    """load puts the module into sys.modules as an import does (pickle looks the class
    up there), unless the name is another module's."""
    assert sys.modules[charlm64.__name__] is charlm64


def test_a_model_file_named_as_a_module_does_not_hide_it(tmp_path):
    path = tmp_path / "json.mdl"
    path.write_text(DROPOUT)
    import json
    module = load(path, name="json")
    assert sys.modules["json"] is json and module is not json
    with pytest.raises(pickle.PicklingError):
        pickle.dumps(module.Dropped())
    copy.deepcopy(module.Dropped())  # a copy looks nothing up


@pytest.mark.parametrize("state, error, message", [
    (None, TypeError, r"takes \(checkpoint arrays: dict, outputs_on_device: bool\[, "
     r"attributes: dict\]\)"),
    (({},), TypeError, "what __reduce__ gives; got tuple"),
    (({}, "no"), TypeError, "outputs_on_device must be True or False"),
    (({}, True), ValueError, "outputs_on_device is True, but the model runs on the CPU"),
    (({}, False), ValueError, "not an mdl checkpoint"),
    (({}, False, "x"), TypeError, "the state's attributes must be a dict, got str"),
    (({}, False, {}, 4), TypeError, "what __reduce__ gives; got tuple"),
])
def test_a_bad_state_is_refused_and_changes_nothing(charlm64, state, error, message):
    m = trained(charlm64)
    before = {k: v.copy() for k, v in m.params.items()}
    with pytest.raises(error, match=message):
        m.__setstate__(state)
    assert all(np.array_equal(v, before[k]) for k, v in m.params.items())


def test_a_state_checked_as_a_checkpoint_is(charlm64):
    m = charlm64.CharLM(seed=0)
    arrays, on_device, attributes = m.__reduce__()[2]
    del arrays["param/embedding"]
    with pytest.raises(ValueError, match="__setstate__ of model CharLM: no 'param/embedding'"):
        m.__setstate__((arrays, on_device))


def test_repr_says_what_the_model_is(charlm64):
    m = charlm64.CharLM(seed=3)
    count = sum(v.size for v in m.params.values())
    head = (f"<{charlm64.__name__}.CharLM: cpu, f64, {len(m.params)} parameters "
            f"({count:,} numbers), seed 3")
    assert repr(m) == head + ", no optimizer>"
    m.set_optimizer("sgd", lr=0.25)
    m.train_step(**charlm_batch(0))
    assert repr(m) == head + "; sgd, lr 0.25, 1 step>"


WORKERS = '''
import multiprocessing, sys
import numpy as np
from codegen import load

def setup():  # the worker loads the module, so that pickle finds the class by its name
    load(sys.argv[1], defines={"H": 16}, name="charlm_workers")

def loss_of(model):
    ids = np.random.default_rng(0).integers(0, 96, (6, 3), dtype=np.int32)
    batch = dict(tokens=ids[:-1], targets=ids[1:], lengths=np.full(3, 5, np.int32))
    return float(model.forward(**batch)["loss"])

if __name__ == "__main__":
    module = load(sys.argv[1], defines={"H": 16}, name="charlm_workers")
    models = [module.CharLM(seed=s) for s in range(3)]
    with multiprocessing.get_context("spawn").Pool(1, initializer=setup) as pool:
        assert pool.map(loss_of, models) == [loss_of(m) for m in models]
    print("ok")
'''


def test_models_go_to_worker_processes_that_load_their_module(tmp_path):
    """docs/training.md's pattern: a spawned worker's initializer loads the module, and
    models sent to it arrive whole."""
    script = tmp_path / "workers.py"
    script.write_text(WORKERS)
    done = subprocess.run([sys.executable, str(script), str(CHARLM)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
