"""Every example model checks cleanly, and the JSON description of a model is stable and
has the structure the interface page promises (towers, charlm, sharing in detail)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from codegen.cli import main as mdlc
from dsl import check_file, to_json

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.mdl"))
MODEL = re.compile(r"^model\s+(\w+)", re.MULTILINE)


def models_of(path: Path) -> list[str]:
    return MODEL.findall(path.read_text())


EXAMPLE_MODELS = [(p.name, m) for p in EXAMPLES for m in models_of(p)]
GENERATORS = {"CharLMStep", "CharLMSample", "TranslatorEncode", "TranslatorStep",
              "TranslatorGreedy", "TranslatorBeam", "TaggerDecode"}


def json_of(path: Path, model: str | None = None, **defines) -> dict:
    return to_json(check_file(str(path), model=model, defines=defines))


def test_the_promised_examples_exist():
    names = {p.name for p in EXAMPLES}
    assert {"charlm.mdl", "towers.mdl", "sharing.mdl", "milstm.mdl", "control.mdl"} <= names
    assert len(EXAMPLE_MODELS) >= 9


# Caffe2's test_parameter_sharing_nested_scopes maps model_b to a model_a no parameter
# outside it is under: a rename, which a model of one's own would write by mistake for
# model_c (the example's comment says so)
WARNED = {("caffe2_sharing.mdl", "NestedScopes"): [
    "`share (model_b = model_a)` ties `model_b`'s parameters to no other: none outside it "
    "is under `model_a`; did you mean `model_c`?"]}


@pytest.mark.parametrize("file,model", EXAMPLE_MODELS)
def test_example_checks_without_warnings(file, model):
    cm = check_file(str(ROOT / "examples" / file), model=model)
    assert [w.message for w in cm.warnings] == WARNED.get((file, model), []), \
        "\n".join(w.render() for w in cm.warnings)
    g = cm.graph
    if model in GENERATORS:  # runs on a trained model's parameters
        assert g.loss is None
    else:
        assert g.loss is not None, "every other example trains: it minimizes an output"
        assert g.outputs[g.loss].type.rank == 0
    for p in g.params.values():  # all floats f32, every parameter used
        assert p.value.type.dtype == "f32" and p.uses, p.name
    for name, v in g.inputs.items():
        assert v.type.dtype in ("f32", "i32"), name


def test_cli_checks_charlm():
    run = subprocess.run([sys.executable, "-m", "codegen.cli", "check", "examples/charlm.mdl"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    assert run.stdout.splitlines()[0] == "model CharLM(V=96, E=32, H=256): ok"


def test_cli_json_is_stable_and_has_the_interface_keys():
    cmd = [sys.executable, "-m", "codegen.cli", "check", "examples/towers.mdl", "--json"]
    runs = [subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
            for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr
    assert runs[0].stdout == runs[1].stdout
    data = json.loads(runs[0].stdout)
    assert list(data) == ["model", "inputs", "outputs", "params"]
    assert data["model"] == "Towers"
    for group in ("inputs", "outputs"):
        for entry in data[group].values():
            assert list(entry) == ["dtype", "shape"]
    for entry in data["params"].values():
        assert list(entry) == ["dtype", "shape", "init", "trainable", "regularizer", "uses"]


@pytest.mark.parametrize("file,model", EXAMPLE_MODELS)
def test_json_is_the_same_twice_in_process(file, model):
    path = ROOT / "examples" / file
    first = json.dumps(json_of(path, model))
    assert json.dumps(json_of(path, model)) == first


def test_towers_has_exactly_the_eight_parameters():
    data = json_of(ROOT / "examples" / "towers.mdl")
    towers = [f"{prefix}two_level_fc/level{i}/{p}" for prefix in ("fc0/", "")
              for i in (0, 1) for p in ("W", "b")]
    assert sorted(data["params"]) == sorted(towers)
    assert data["inputs"] == {f"a{i}": {"dtype": "f32", "shape": [8, 20]} for i in range(1, 5)}
    assert data["outputs"] == {"s": {"dtype": "f32", "shape": []}}
    for name, p in data["params"].items():
        weight = name.endswith("/W")
        assert p["dtype"] == "f32"
        assert p["shape"] == ([20, 20] if weight else [20])
        assert p["init"] == ("normal(0, 0.1)" if weight else "zeros")
        assert p["trainable"] is True and p["regularizer"] is None
        # the three calls in scope fc0 share; the fourth is alone
        lines = [int(u.split(":")[-2]) for u in p["uses"]]
        assert lines == ([15, 16, 17] if name.startswith("fc0/") else [18])
        assert all(u.startswith(str(ROOT / "examples" / "towers.mdl")) for u in p["uses"])


def test_charlm_structure_and_defines():
    path = ROOT / "examples" / "charlm.mdl"
    data = json_of(path, "CharLM")
    assert data["inputs"] == {"tokens": {"dtype": "i32", "shape": ["T", "B"]},
                              "targets": {"dtype": "i32", "shape": ["T", "B"]},
                              "lengths": {"dtype": "i32", "shape": ["B"]}}
    assert data["outputs"] == {"logits": {"dtype": "f32", "shape": ["T", "B", 96]},
                               "loss": {"dtype": "f32", "shape": []}}
    shapes = {k: v["shape"] for k, v in data["params"].items()}
    assert shapes == {"embedding": [96, 32], "lstm/W": [32, 1024], "lstm/U": [256, 1024],
                      "lstm/b": [1024], "decoder/W": [256, 96], "decoder/b": [96]}
    bigger = json_of(path, "CharLM", H=512, V=50)
    assert bigger["params"]["lstm/U"]["shape"] == [512, 2048]
    assert bigger["outputs"]["logits"]["shape"] == ["T", "B", 50]


def test_sharing_example_resolves_like_the_language_page():
    data = json_of(ROOT / "examples" / "sharing.mdl")
    uses = {k: len(v["uses"]) for k, v in data["params"].items()}
    assert uses == {"scope_a/w": 3, "scope_a/unshared_child/w": 1, "scope_c/w": 1}


CAFFE2 = {
    "DefaultScopes": {"w", "scope/w", "scope/scope_2/w"},
    "NestedScopes": {"global_scope/w", "global_scope/model_a/w", "global_scope/model_c/w"},
    "Subscopes": {"global_scope/w", "global_scope/a/w", "global_scope/c/w"},
    "CreateParam": {"w", "some_global_scope/w"},
    "DeepHierarchy": {"b/d/f/w"},
    "Brew": {"fc1/w", "fc1/b", "some_global_scope/model_a/output/w",
             "some_global_scope/model_a/output/b",
             "some_global_scope/model_a/unshared/output/w",
             "some_global_scope/model_a/unshared/output/b"},
}


@pytest.mark.parametrize("model", CAFFE2)
def test_caffe2_example_models(model):
    data = json_of(ROOT / "examples" / "caffe2_sharing.mdl", model)
    assert set(data["params"]) == CAFFE2[model]


def test_attributes_example():
    params = json_of(ROOT / "examples" / "attributes.mdl")["params"]
    summary = {k: (v["init"], v["trainable"], v["regularizer"]) for k, v in params.items()}
    assert summary == {
        "embed/table": ("normal(0, 1)", False, None),
        "encoder/dense/W": ("uniform(-0.1, 0.1)", True, "l2(0.0001)"),
        "encoder/dense/b": ("zeros", True, "l2(0.0001)"),
        "encoder/deeper/dense/W": ("orthogonal", True, "l2(0.0001)"),
        "encoder/deeper/dense/b": ("zeros", True, "l2(0.0001)"),
        "readout/dense/W": ("xavier", True, "l1(1e-05)"),
        "readout/dense/b": ("zeros", True, "l1(1e-05)"),
    }


def test_bidirectional_example_has_two_directions():
    params = json_of(ROOT / "examples" / "bidirectional.mdl")["params"]
    assert {k for k in params if "lstm" in k} == {
        f"{d}/lstm/{p}" for d in ("forward", "backward") for p in ("W", "U", "b")}


def test_params_table_lists_every_use(capsys):
    assert mdlc(["check", str(ROOT / "examples" / "sharing.mdl"), "--params"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("scope_a/w "))
    assert row.count("sharing.mdl:") == 3
