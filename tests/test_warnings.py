"""The checker's warnings reach every entry point that reads a .mdl file: `mdlc build`
(a first build and a cached one alike), `emit`, `gradcheck`, `check` (once for a
function's warning that several models find), and `codegen.load`, which issues them as
Python warnings (`codegen.MdlWarning`) at its caller's line."""
from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import pytest

import codegen
from codegen import cli
from codegen.compile import index
from codegen.compile.options import BuildOptions
from codegen.ir.diagnostics import Diagnostic, Loc, Source

# a function of an imported file with an unused local; a model with an unused value
LAYERS = """def double(x : f32[N]) -> f32[N] {
  spare = x * 3.0
  return x * 2.0
}
"""
MODELS = """import "layers.mdl"
model A() {
  input x : f32[4]
  output z = sum(double(x))
}
model B() {
  input x : f32[4]
  hs = double(x)
  param w : f32[4]
  output z = sum(double(x) * w)
  minimize z
}
"""
SPARE = "warning: `spare` is assigned but never used"
HS = "m.mdl:8:3: warning: `hs` is assigned but never used"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """m.mdl and its import, in a folder of their own that is the working directory
    (every test builds it under another module name: a test of a cached build makes its
    own first)."""
    (tmp_path / "layers.mdl").write_text(LAYERS)
    (tmp_path / "m.mdl").write_text(MODELS)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def mdlc(capsys, *args: str) -> tuple[int, str]:
    code = cli.main(list(args))
    return code, capsys.readouterr().err


def said(err: str) -> list[str]:
    """The `warning:` lines of stderr, in order."""
    return [line for line in err.splitlines() if "warning:" in line]


def test_build_says_the_warnings_on_a_first_build_and_a_cached_one(project, capsys):
    """The cached build, found by the index without checking anything, says what the
    first build's check found, the main file named as this call gives it."""
    first, err = mdlc(capsys, "build", "m.mdl", "--name", "warn_build", "-o", "out")
    assert first == 0
    layers = str((project / "layers.mdl").resolve())
    assert said(err) == [f"{layers}:2:3: {SPARE}", HS]
    assert " 8 |   hs = double(x)" in err.splitlines()  # the source line, and its caret
    assert index.lookup(Path("m.mdl"), "warn_build", BuildOptions()) is not None
    again, err = mdlc(capsys, "build", "./m.mdl", "--name", "warn_build", "-o", "out")
    assert again == 0
    assert said(err) == [f"{layers}:2:3: {SPARE}", "./" + HS]
    assert err.count(" 2 |   spare = x * 3.0") == 1


def test_emit_and_gradcheck_say_each_warning_once(project, capsys):
    code, err = mdlc(capsys, "emit", "m.mdl", "-o", "gen")
    assert code == 0 and len(said(err)) == 2 and said(err)[1] == HS
    code, err = mdlc(capsys, "gradcheck", "m.mdl", "--model", "B")
    assert code == 0 and said(err) == [said(err)[0], HS] and SPARE in said(err)[0]


def test_check_says_a_functions_warning_once_for_all_its_callers(project, capsys):
    code, err = mdlc(capsys, "check", "m.mdl")
    assert code == 0
    assert [w.split(": ", 1)[1] for w in said(err)] == [SPARE, HS.split(": ", 1)[1]]


def test_load_issues_python_warnings_at_the_callers_line(project):
    """First build and cached build alike; a filter turns them into errors, which carry
    the diagnostic."""
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            codegen.load("m.mdl", name="warn_load")
        assert [w.category for w in caught] == [codegen.MdlWarning] * 2
        assert {Path(w.filename).name for w in caught} == {Path(__file__).name}
        assert str(caught[1].message).splitlines()[0] == HS
    with warnings.catch_warnings():
        warnings.simplefilter("error", codegen.MdlWarning)
        with pytest.raises(codegen.MdlWarning) as info:
            codegen.load("m.mdl", name="warn_load")
    assert info.value.diagnostic.message == "`spare` is assigned but never used"
    again = pickle.loads(pickle.dumps(info.value))  # as a process pool hands it back
    assert str(again) == str(info.value) and str(again).startswith(
        str(project / "layers.mdl") + ":2:3: warning:")


def test_a_file_without_warnings_loads_silently(project):
    (project / "clean.mdl").write_text("model C() {\n  input x : f32[3]\n"
                                       "  output y = sum(x)\n}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert codegen.load("clean.mdl").C


def test_recorded_diagnostics_render_as_they_were_found():
    """The index's record of a warning, with its notes and label, renders the same,
    the main file under the name it is given now."""
    main = Source("m.mdl", "model M() {\n  input x : f32[3]\n}\n")
    other = Source("/lib/layers.mdl", "def f() {\n}\n")
    found = [Diagnostic("input `x` is never used", Loc(main, 2, 9), "warning", "here",
                        [("see this", Loc(other, 1, 5, 1)), ("plain note", None)]),
             Diagnostic("no place", None, "warning")]
    back = index.replayed(index.recorded(found, "m.mdl"), "./m.mdl")
    assert [d.render() for d in back] == [found[0].render().replace("m.mdl:", "./m.mdl:"),
                                          found[1].render()]


def test_export_says_them_and_export_onnx_warns(project, capsys):
    pytest.importorskip("onnx", reason="exporting needs onnx (the test extra has it)")
    code, err = mdlc(capsys, "export", "m.mdl", "--model", "B", "--onnx", "b.onnx")
    assert code == 0 and said(err)[1:] == [HS] and SPARE in said(err)[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        codegen.export_onnx("m.mdl", "b.onnx", model="B")
    assert [(w.category, Path(w.filename).name) for w in caught] == [
        (codegen.MdlWarning, Path(__file__).name)] * 2
