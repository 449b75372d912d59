"""What a generated module tells its users about itself: each model class's docstring (its
inputs, outputs and what it trains), each method's, and the type stub MOD.pyi written
beside the extension, which must say what the module really holds (codegen/backend/
interface.py, templates/module.pyi.j2, cpp_runtime/src/python_module.cpp)."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from codegen import cli
from codegen.compile.options import BuildOptions
from codegen.pipeline import sources
from conftest import CHARLM

# Members each model class declares in the stub itself: its inputs are their arguments, and
# a model that does not train has none but forward
PER_MODEL = {"forward", "backward", "train_step", "forward_backward", "apply_gradients",
             "gradient_buffer", "device_gradient_buffer", "gradient_layout"}
TRAINING = PER_MODEL - {"forward"}

KEYWORD_NAMES = """
model lambda() {
  input x : f32[B, 4]
  param W : f32[4, 4]
  output y = x @ W
}
model Ok() {
  input class : f32[B, 4]
  param W : f32[4, 4]
  output y = class @ W
  output loss = sum(y)
  minimize loss
}
model Debug() {
  input __debug__ : f32[B, 4]
  output y = sum(__debug__)
}
"""


def stub_of(module) -> str:
    return Path(module.__file__).with_name(module.__name__ + ".pyi").read_text()


def classes(stub: str) -> dict[str, ast.ClassDef]:
    return {c.name: c for c in ast.parse(stub).body if isinstance(c, ast.ClassDef)}


def members(cls: ast.ClassDef) -> dict[str, ast.AST]:
    out = {}
    for node in cls.body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = node
        elif isinstance(node, ast.AnnAssign):
            out[node.target.id] = node
    return out


def keywords(function: ast.FunctionDef) -> list[str]:
    return [a.arg for a in function.args.kwonlyargs]


# the special methods a DeviceArray has for users: DLPack's, NumPy's and conversions
CONVERSIONS = {"__array__", "__float__", "__int__", "__index__", "__bool__"}


def public(cls) -> set[str]:
    """Its own members that users call: no private names, no pybind11 internals."""
    return {k for k in vars(cls)
            if not k.startswith("_") or k.startswith("__dlpack") or k in CONVERSIONS}


def test_a_model_class_docstring_lists_its_inputs_and_outputs(charlm64):
    doc = charlm64.CharLM.__doc__
    assert doc.startswith("CharLM(seed=0, params=None): the mdl model CharLM (cpu, f64).")
    assert "forward(*, tokens, targets, lengths, training=False) takes the inputs by name:" \
        in doc
    assert "    tokens   i64[T, B]" not in doc and "    tokens   i32[T, B]" in doc
    assert "    logits  f64[T, B, 96]" in doc and "    loss    f64 (minimized)" in doc
    assert "backward() after forward(..., training=True): the gradients of loss." in doc
    assert "Dims T, B take any size in a call; compiled for T=6, B=3 too." in doc
    assert "Hyper-parameters: V=96, E=32, H=16." in doc
    numbers = sum(p.size for p in charlm64.CharLM(seed=0).params.values())
    assert f"Parameters: 6 arrays, {numbers:,} numbers (.params)." in doc
    step = charlm64.CharLMStep.__doc__
    assert "It does not train (it minimizes nothing)" in step
    assert "Dim B takes any size in a call.\n" in step  # T=6, B=3 does not fit it


def test_methods_say_how_they_are_called(charlm64):
    forward = charlm64.CharLM.forward.__doc__
    assert forward.startswith("forward(*, <inputs>, training=False) -> dict\n\n")
    assert "Overloaded" not in forward  # one overload: positional calls get a TypeError
    assert inspect.getdoc(charlm64.CharLM.__init__).startswith("__init__(seed=0, params=None)")
    with pytest.raises(TypeError, match=r"takes its arguments by name: forward\(tokens=\.\.\."):
        charlm64.CharLM(seed=0).forward(1, 2)


def test_the_stub_declares_what_the_module_holds(charlm64):
    stub = classes(stub_of(charlm64))
    base = public(charlm64._Model)
    assert set(members(stub["_Model"])) == base - PER_MODEL
    for name in ("CharLM", "CharLMStep"):
        runtime = getattr(charlm64, name)
        declared = members(stub[name])
        model = runtime(seed=0)
        trains = name == "CharLM"
        assert set(declared) - {"__init__"} == (PER_MODEL if trains else {"forward"})
        assert keywords(declared["forward"]) == [*model.inputs, "training"]
        if trains:
            assert keywords(declared["train_step"]) == list(model.inputs)
            assert keywords(declared["backward"]) == []
        assert ast.get_docstring(stub[name]) == inspect.cleandoc(runtime.__doc__)
    assert set(members(stub["DeviceArray"])) == public(charlm64.DeviceArray)
    functions = {f.name for f in ast.parse(stub_of(charlm64)).body
                 if isinstance(f, ast.FunctionDef)}
    assert functions == {k for k in vars(charlm64) if callable(getattr(charlm64, k))
                         and not k.startswith("_") and not isinstance(getattr(charlm64, k), type)}


def test_build_installs_the_stub_beside_the_module(tmp_path, charlm64, capsys):
    assert cli.main(["build", str(CHARLM), "-o", str(tmp_path), "--name", "charlm_h16_f64",
                     "--dtype", "f64", "-D", "H=16", "--specialize", "T=6,B=3"]) == 0
    assert (tmp_path / "charlm_h16_f64.pyi").read_text() == stub_of(charlm64)


def test_emit_writes_the_stub_and_compiles_only_sources(tmp_path, capsys):
    assert cli.main(["emit", str(CHARLM), "-o", str(tmp_path)]) == 0
    assert (tmp_path / "charlm.pyi").is_file()
    assert ".pyi" not in (tmp_path / "CMakeLists.txt").read_text()


def test_the_docstring_native_md_shows_is_the_one_generated():
    page = (Path(__file__).resolve().parents[1] / "docs" / "native.md").read_text()
    section = page[page.index("### What a module says about itself"):]
    start = section.index("```text\n") + len("```text\n")
    shown = section[start:section.index("\n```", start)]
    _, files = sources(CHARLM, "charlm", BuildOptions())
    assert shown == ast.get_docstring(classes(files["charlm.pyi"])["CharLM"])


def test_a_vjp_build_s_backward_takes_the_cotangents_by_name():
    _, files = sources(CHARLM, "charlm", BuildOptions(vjp=True))
    declared = members(classes(files["charlm.pyi"])["CharLM"])
    assert set(declared) == {"__init__", "forward", "backward"}  # it does not train natively
    assert keywords(declared["backward"]) == ["logits", "loss"]
    step = members(classes(files["charlm.pyi"])["CharLMStep"])
    assert keywords(step["backward"]) == ["logits", "h_out", "c_out"]


def test_a_cuda_module_s_results_may_stay_on_the_device():
    _, files = sources(CHARLM, "charlm", BuildOptions(target="cuda", emulate=True))
    assert "_Result = dict[str, _Any]" in files["charlm.pyi"]
    assert "the mdl model CharLM (cuda, f32)." in files["charlm.pyi"]


def test_names_python_cannot_declare_are_still_typed(tmp_path):
    path = tmp_path / "keywords.mdl"
    path.write_text(KEYWORD_NAMES)
    _, files = sources(path, "keywords", BuildOptions())
    stub = files["keywords.pyi"]
    assert set(classes(stub)) == {"_DLPack", "DeviceArray", "_Model", "Ok", "Debug"}
    compile(stub, "keywords.pyi", "exec")  # `__debug__: _Array` parsed but did not compile
    assert members(classes(stub)["Debug"])["forward"].args.kwarg.arg == "inputs"
    assert '# The model lambda is getattr(module, "lambda")' in stub
    ok = members(classes(stub)["Ok"])
    assert ok["forward"].args.kwarg.arg == "inputs" and keywords(ok["forward"]) == ["training"]
    assert ok["train_step"].args.kwarg.arg == "inputs"


GOOD = """
import numpy as np
import {name} as charlm

m = charlm.CharLM(seed=0)
t = np.zeros((5, 2), np.int32)
n = np.full(2, 5, np.int32)
loss: float = float(m.forward(tokens=t, targets=t, lengths=n)["loss"])
m.set_optimizer("adam", lr=1e-3)
m.train_step(tokens=t, targets=t, lengths=n)
m.forward(tokens=t, targets=t, lengths=n, training=True)
m.params["decoder/b"] -= 0.1 * m.backward()["decoder/b"]
step = charlm.CharLMStep(params=m)
h = np.zeros((2, 16))
step.forward(token=t[0], h=h, c=h)
"""

BAD = """
import numpy as np
import {name} as charlm

m = charlm.CharLM(seed=0)
t = np.zeros((5, 2), np.int32)
m.forward(tokens=t, target=t, lengths=np.full(2, 5, np.int32))
charlm.CharLMStep(params=m).train_step(token=t[0])
"""


def test_a_type_checker_reads_the_stub(tmp_path, charlm64):
    api = pytest.importorskip("mypy.api", reason="mypy (an optional peer) is not installed")
    (tmp_path / "charlm_h16_f64.pyi").write_text(stub_of(charlm64))
    for name, text in [("good.py", GOOD), ("bad.py", BAD)]:
        (tmp_path / name).write_text(text.format(name="charlm_h16_f64"))
    flags = ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache")]
    out, _, status = api.run([*flags, str(tmp_path / "good.py")])
    assert status == 0, out
    out, _, status = api.run([*flags, str(tmp_path / "bad.py")])
    assert status == 1
    assert 'Unexpected keyword argument "target" for "forward" of "CharLM"' in out
    assert '"CharLMStep" has no attribute "train_step"' in out


STUB_CLASHES = """
model os() { input self : f32[B, 3]; output y = sum(self) }
model Any() { input x : f32[B, 3]; output y = sum(x) }
model _Array() { input x : f32[B, 3]; output y = sum(x) }
model dict() { input x : f32[B, 3]; output y = sum(x) }
"""


def test_names_the_stub_itself_uses_leave_it_valid(tmp_path):
    """An input `self` made `def forward(self, *, self: _Array)` (a SyntaxError), and a
    model `os`, `Any` or `_Array` hid the stub's own names (mypy: `Name "os" already
    defined`)."""
    path = tmp_path / "clashes.mdl"
    path.write_text(STUB_CLASHES)
    _, files = sources(path, "clashes", BuildOptions())
    stub = files["clashes.pyi"]
    declared = classes(stub)  # parses: no duplicate argument
    assert {"os", "Any"} <= set(declared) and not {"_Array", "dict"} & set(declared)
    assert members(declared["os"])["forward"].args.kwarg.arg == "inputs"
    assert '# The model _Array is getattr(module, "_Array")' in stub
    api = pytest.importorskip("mypy.api", reason="mypy (an optional peer) is not installed")
    (tmp_path / "clashes.pyi").write_text(stub)
    out, _, status = api.run(["--strict", "--no-incremental", "--cache-dir",
                              str(tmp_path / "cache"), str(tmp_path / "clashes.pyi")])
    assert status == 0, out
