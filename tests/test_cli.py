"""`mdlc` as a user runs it: output, exit statuses, JSON, no tracebacks; a cached `mdlc
build` answered by the index, and everything that must make it build again."""
import errno
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from codegen import cli, load
from codegen.compile import environment, flags, index
from codegen.compile.cache import record_product, write_key
from codegen.compile.environment import EXT_SUFFIX, environment_key
from codegen.compile.index import lookup
from codegen.compile.options import BuildOptions
from codegen.pipeline import build
from codegen.compile.toolchain import HOST
from dsl import UsageError, imports
from dsl.parser import parse
from dsl.program import load_program
from source_files import NEEDS_TWO_STEPS

GOOD = """model M(H = 4) {
  input x : f32[B, H]
  param w : f32[H] = ones
  output y = sum(x * w)
  minimize y
}
"""


def mdlc(*args, cwd=None):
    env = {"PYTHONPATH": str(Path(__file__).parents[1]), "PATH": "/usr/bin:/bin",
           "MDL_CACHE_DIR": os.environ["MDL_CACHE_DIR"],  # the session's cache (conftest)
           **{k: os.environ[k] for k in ("CXX",) if k in os.environ}}  # the session's compiler
    return subprocess.run([sys.executable, "-m", "codegen.cli", *args], capture_output=True,
                          text=True, cwd=cwd, env=env)


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "good.mdl"
    path.write_text(GOOD)
    return path


def test_version():
    r = mdlc("--version")
    assert r.returncode == 0 and r.stdout.startswith("mdlc ") and "code generator" in r.stdout


def test_check_ok_prints_a_summary(good):
    r = mdlc("check", str(good))
    assert r.returncode == 0, r.stderr
    assert "model M(H=4): ok" in r.stdout and "output y : f32   (minimized)" in r.stdout


def test_check_params_table(good):
    r = mdlc("check", str(good), "--params", "-D", "H=8")
    assert r.returncode == 0
    row = [line for line in r.stdout.splitlines() if line.startswith("w ")][0]
    assert "f32[8]" in row and "ones" in row and f"{good}:4:22" in row


def test_the_params_table_prints_numbers_short_and_json_keeps_them_whole(tmp_path):
    path = tmp_path / "k.mdl"
    path.write_text("model M() { input x : f32[B, 3]\n"
                    "  scope s (regularizer = l2(0.123456789)) {\n"
                    "    param w : f32[3] = uniform(-0.17677669529663687, 0.17677669529663687) }\n"
                    "  output y = sum(x * s.w) }\n")
    table = mdlc("check", str(path), "--params").stdout
    assert "uniform(-0.176777, 0.176777)" in table and "l2(0.123457)" in table
    data = json.loads(mdlc("check", str(path), "--json").stdout)
    assert data["params"]["s/w"]["init"] == "uniform(-0.17677669529663687, 0.17677669529663687)"


def test_check_without_model_checks_every_model_of_the_file(tmp_path):
    path = tmp_path / "two.mdl"
    path.write_text(GOOD + GOOD.replace("model M(", "model N("))
    out = mdlc("check", str(path)).stdout
    assert "model M(H=4): ok" in out and "model N(H=4): ok" in out
    r = mdlc("check", str(path), "--json")
    assert r.returncode == 2 and "--json describes one: choose it with --model NAME" in r.stderr


def test_check_refuses_what_a_build_of_its_dtype_refuses(tmp_path):
    """An f64 parameter: `mdlc check` (f32 by default, as a build) said ok, and the
    build of the same options refused it."""
    path = tmp_path / "p.mdl"
    path.write_text("model P() {\n  input x : f64[B, 4]\n  param w : f64[4] = ones\n"
                    "  output s = sum(x * w)\n}\n")
    r = mdlc("check", str(path))
    assert r.returncode == 1 and "p.mdl:3:9: error: parameter `w` is f64, and a module " \
        "holds its weights in its build's float type, f32" in r.stderr, r.stderr
    assert mdlc("check", str(path), "--dtype", "f64").returncode == 0


def test_check_json_matches_the_interface(good):
    r = mdlc("check", str(good), "--json")
    assert r.returncode == 0
    data = json.loads(r.stdout)
    assert data == {
        "model": "M",
        "inputs": {"x": {"dtype": "f32", "shape": ["B", 4]}},
        "outputs": {"y": {"dtype": "f32", "shape": []}},
        "params": {"w": {"dtype": "f32", "shape": [4], "init": "ones", "trainable": True,
                         "regularizer": None, "uses": [f"{good}:4:22"]}},
    }


def test_check_json_gives_errors_as_json(tmp_path):
    """--json printed nothing on stdout for a file with errors (they went to stderr as
    text only): an editor or a script had no diagnostics to read."""
    bad = tmp_path / "bad.mdl"
    bad.write_text('import "std/rnn.mdl"\nmodel M() {\n  input x : f32[B, 3]\n'
                   "  output y = linear(x, 0)\n}\n")
    r = mdlc("check", str(bad), "--json")
    assert r.returncode == 1 and "error: dims must be positive" in r.stderr
    [error] = json.loads(r.stdout)["errors"]
    assert {k: error[k] for k in ("severity", "message", "file", "line", "col", "length")} == {
        "severity": "error", "message": "dims must be positive, got 0 (n = 0)", "file": str(bad),
        "line": 4, "col": 14, "length": 6}
    assert error["notes"][0]["file"].endswith("rnn.mdl") and error["notes"][0]["line"] > 0
    syntax = tmp_path / "syntax.mdl"
    syntax.write_text("model M() {\n  input x : f32[B\n  output y = x\n}\n")
    r = mdlc("check", str(syntax), "--json")
    assert r.returncode == 1
    # at the `[` left open, which the next line's statement shows (until 2026-12-07 that
    # statement's `output`, 3:3)
    assert [(e["line"], e["col"]) for e in json.loads(r.stdout)["errors"]] == [(2, 16)]


def test_a_file_that_starts_with_a_byte_order_mark_is_checked(tmp_path):
    """Editors on Windows write one: it is skipped, not an unexpected character."""
    path = tmp_path / "bom.mdl"
    path.write_text(GOOD, encoding="utf-8-sig")
    r = mdlc("check", str(path))
    assert r.returncode == 0 and r.stdout.startswith("model M"), r.stderr


def test_errors_exit_1_with_location_and_no_traceback(tmp_path):
    bad = tmp_path / "bad.mdl"
    bad.write_text("model M() {\n  input x : f32[B]\n  output y = x @ x\n}\n")
    r = mdlc("check", str(bad))
    assert r.returncode == 1
    assert r.stderr.startswith(f"{bad}:3:16: error: `@` multiplies a matrix")
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("args, message", [
    (["-D", "Q=1"], "has no hyper-parameter Q"),
    (["-D", "H=1.5"], "`H` is int"),
    (["-D", "H=2147483648"], "an integer hyper-parameter must fit in i32"),
    (["-D", "H=" + "9" * 4400], "-D H: an integer of 4400 digits is out of range"),
    (["--model", "Nope"], "has no model `Nope`"),
    (["-D", "H"], "expected K=V"),
    (["-D", "H=1_000"], "-D H: '1_000' is not a number, true or false"),  # once: H=1000.0
    (["-D", "H= 3"], "-D H: ' 3' is not a number"),
    (["-D", "H=\u0663"], "-D H: '\u0663' is not a number"),
    (["-D", "H=1e400"], "-D H: 1e400 is out of range of f64"),  # once: shown as inf
    (["-D", "H=inf"], "-D H: 'inf' is not a number, true or false"),
    (["-D", "H=nan"], "-D H: 'nan' is not a number, true or false"),
])
def test_usage_errors_exit_2(good, args, message):
    r = mdlc("check", str(good), *args)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr


def test_a_default_a_define_pushes_past_i32_is_located(tmp_path):
    """`G = H + 1` at -D H=2147483647: the error blamed a `-D G=2147483648` never given."""
    path = tmp_path / "derived.mdl"
    path.write_text("model A(H = 8, G = H + 1) {\n  input x : f32[B]\n"
                    "  output y = sum(x) * f32(G)\n}\n")
    r = mdlc("check", str(path), "-D", "H=2147483647")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"{path}:1:22: error: `G` is 2147483648 with these -D values: "
                               "an integer hyper-parameter must fit in i32")
    # with no -D, the default itself is out of range: it spoke of -D values all the same
    path.write_text("model A(H = 2 ** 40) {\n  input x : f32[B]\n  output y = sum(x)\n}\n")
    r = mdlc("check", str(path))
    assert r.returncode == 1 and r.stderr.startswith(
        f"{path}:1:15: error: `H`'s default is 1099511627776: an integer hyper-parameter must "
        "fit in i32"), r.stderr


def test_a_default_naming_a_later_hyper_parameter_says_so(tmp_path):
    """QA: `model A(H = G * 2, G = 4)` said only "unknown name `G`", though G is declared
    one step to the right: defaults are read in order."""
    path = tmp_path / "order.mdl"
    path.write_text("model A(H = G * 2, G = 4) {\n  input x : f32[H]\n  output y = sum(x)\n}\n")
    r = mdlc("check", str(path))
    assert r.returncode == 1 and r.stderr.startswith(
        f"{path}:1:13: error: unknown name `G`: hyper-parameter `G` is declared after this "
        "one (column 20); a default can use only the hyper-parameters before it"), r.stderr
    # the other order is fine, and a name no hyper-parameter has stays a plain unknown name
    path.write_text("model A(G = 4, H = G * 2) {\n  input x : f32[H]\n  output y = sum(x)\n}\n")
    assert mdlc("check", str(path)).returncode == 0
    path.write_text("model A(H = K * 2, G = 4) {\n  input x : f32[H]\n  output y = sum(x)\n}\n")
    r = mdlc("check", str(path))
    assert r.returncode == 1 and "declared after" not in r.stderr and "unknown name `K`" in r.stderr


def test_an_integer_past_a_double_for_a_float_hyper_parameter_is_a_usage_error(tmp_path):
    """QA: load's and check_file's defines={"S": 10**400} raised a raw OverflowError
    (mdlc's -D refused it already)."""
    from dsl import UsageError, check_file
    path = tmp_path / "scaled.mdl"
    path.write_text("model D(S = 0.5) {\n  input x : f32[3]\n  output y = sum(x) * S\n}\n")
    with pytest.raises(UsageError, match=r"^defines\['S'\]: an integer of 401 digits is out "
                                         "of range"):
        check_file(str(path), defines={"S": 10**400})


def test_a_define_is_named_as_the_user_gave_it(tmp_path):
    """QA: `-D H=1e3` was echoed as `-D H=1000.0`, and Python's defines= errors spoke of
    `-D`, which a Python caller never wrote."""
    from dsl import UsageError, check_file
    path = tmp_path / "sized.mdl"
    path.write_text("model A(H = 8, G = H + 1) {\n  input x : f32[G]\n  output y = sum(x)\n}\n")
    r = mdlc("check", str(path), "-D", "H=1e3")
    assert r.returncode == 2 and r.stderr == "mdlc: error: -D H=1e3: `H` is int (default 8)\n"
    with pytest.raises(UsageError, match=r"^defines\['H'\] = 1000.0: `H` is int \(default 8\)$"):
        check_file(str(path), defines={"H": 1e3})
    with pytest.raises(UsageError, match=r"^defines\['H'\] = 4000000000: an integer "
                                         "hyper-parameter must fit in i32"):
        check_file(str(path), defines={"H": 4_000_000_000})
    from dsl import MdlError
    with pytest.raises(MdlError, match="`G` is 2147483648 with these defines: "):
        check_file(str(path), defines={"H": 2147483647})


TWO_MODELS = """
model Train(H = 4) {
  input x : f32[B, H]
  output y = sum(x)
}
model Decode(H = 4, L = 3) {
  input x : f32[B, H]
  output y = sum(x) * L
}
"""


@pytest.mark.parametrize("command", ["gradcheck", "profile", "export"])
@pytest.mark.parametrize("seed, message", [
    ("-1", "-1 is not a seed (0 to 2**64 - 1)"),
    (str(2**64), f"{2**64} is not a seed (0 to 2**64 - 1)"),
    ("x", "expected an integer, got 'x'"),
])
def test_a_seed_a_model_cannot_take_is_a_usage_error(good, command, seed, message, capsys):
    """Checked as the command line is read, before anything is built or drawn (a
    negative seed was the random inputs' error), and before what else is missing."""
    with pytest.raises(SystemExit) as exited:
        cli.main([command, str(good), "--seed", seed])
    assert exited.value.code == 2
    assert f"argument --seed: {message}" in capsys.readouterr().err


def test_emit_refuses_emulate_which_would_change_nothing_it_writes(tmp_path, capsys):
    """QA: `mdlc emit --target cuda --emulate` wrote the GPU's sources and nvcc's CMake
    project, the flag dropped without a word, and failed where cuBLAS was missing, which
    the emulated device does not use."""
    path = tmp_path / "m.mdl"
    path.write_text("model M() {\n  input x : f32[B]\n  output y = x + 1.0\n}\n")
    out = tmp_path / "out"
    assert cli.main(["emit", str(path), "--target", "cuda", "--emulate", "-o", str(out)]) == 2
    assert "mdlc build --target cuda --emulate` builds them" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("flag, message", [
    ("--grad", "model `M` minimizes nothing: it has no backward pass to print"),
    ("--vjp", "model `M` has no float output: it has no vector-Jacobian product to print"),
])
def test_the_ir_of_a_backward_the_model_has_not_is_a_usage_error(tmp_path, flag, message,
                                                                  capsys):
    """As gradcheck and graph --backward say (it was an error of the file, unlocated)."""
    path = tmp_path / "m.mdl"
    path.write_text("model M() {\n  input x : i32[B]\n  output y = x + 1\n}\n")
    assert cli.main(["emit", "--ir", flag, str(path)]) == 2
    assert f"mdlc: error: {message}" in capsys.readouterr().err


def test_a_define_sets_the_models_of_the_file_that_have_it(tmp_path):
    """Checked or built together, the models of a file each take the hyper-parameters
    they declare (only the decoder has a step count L); a name none of them has is a
    usage error naming what each has, and one model chosen with --model takes them all."""
    path = tmp_path / "two.mdl"
    path.write_text(TWO_MODELS)
    r = mdlc("check", str(path), "-D", "L=7", "-D", "H=2")
    assert r.returncode == 0, r.stderr
    assert "model Train(H=2): ok" in r.stdout and "model Decode(H=2, L=7): ok" in r.stdout
    r = mdlc("check", str(path), "-D", "Q=1")
    assert r.returncode == 2 and ("no model of " in r.stderr and "has a hyper-parameter Q "
                                  "(`Train` has H; `Decode` has H, L)" in r.stderr)
    r = mdlc("check", str(path), "--model", "Train", "-D", "L=7")
    assert r.returncode == 2 and "model `Train` has no hyper-parameter L (it has H)" in r.stderr
    # gradcheck builds the file's models together, and took another model's L unsaid
    r = mdlc("gradcheck", str(path), "--model", "Train", "-D", "L=7")
    assert r.returncode == 2 and "model `Train` has no hyper-parameter L (it has H)" in r.stderr
    built = load(path, defines={"L": 5}, name="two_models")
    assert built.Decode().forward(x=np.ones((2, 4), np.float32))["y"] == 40.0


@pytest.mark.parametrize("args, message", [
    (["build", "GOOD", "-o", "FILE"], "-o takes a folder, and `FILE` is a file"),
    (["build", "GOOD", "-o", "FILE/sub"], "cannot write `FILE/sub`: Not a directory"),
    (["emit", "GOOD", "-o", "FILE/sub"], "cannot write `FILE/sub`: Not a directory"),
    # a folder to make with a file in its place said "File exists"
    (["export", "GOOD", "--onnx", "FILE/m.onnx"], "cannot write `FILE/m.onnx`: `FILE` is a "
     "file, not a folder"),
    (["export", "GOOD", "--onnx", "DIR"], "cannot write `DIR`: Is a directory"),
    (["graph", "GOOD", "-o", "FILE/m.dot"], "cannot write `FILE/m.dot`: `FILE` is a file, "
     "not a folder"),
    # the file that failed, not the folder it goes in
    (["emit", "GOOD", "-o", "DIR"], "cannot write `DIR/module.cpp`: Is a directory"),
    (["build", "GOOD", "--name", "class"], "module name 'class' is not a valid Python module "
     "name (a keyword"),
])
def test_outputs_that_cannot_be_written_are_usage_errors(good, tmp_path, args, message):
    """A place to write that is a file, lies under one, or is a folder where a file goes:
    exit 2 naming it (it was an internal error, exit 3, saying to report a bug)."""
    (tmp_path / "file").write_text("")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "module.cpp").mkdir()
    names = {"GOOD": str(good), "FILE": str(tmp_path / "file"), "DIR": str(tmp_path / "dir")}
    for k, v in names.items():
        args = [a.replace(k, v) for a in args]
        message = message.replace(k, v)
    r = mdlc(*args)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("stem", ["class", "os"])
def test_a_file_named_as_a_keyword_builds_a_module_import_can_name(tmp_path, stem):
    """`import os` finds Python's own os (frozen, or imported already) before an os.so."""
    path = tmp_path / f"{stem}.mdl"
    path.write_text(GOOD)
    r = mdlc("build", str(path), "-o", str(tmp_path))
    assert r.returncode == 0 and r.stdout.strip().endswith(f"m_{stem}{EXT_SUFFIX}")


def test_gradcheck_takes_a_file_whose_name_makes_no_module_name(tmp_path):
    """QA: gradcheck and profile, which build a module of their own, refused `mödel é.mdl`,
    saying to give a --name they do not take."""
    path = tmp_path / "mödel é.mdl"
    path.write_text(GOOD)
    r = mdlc("gradcheck", str(path), "--dims", "B=2")
    assert r.returncode == 0 and "worst relative error" in r.stdout, r.stderr


def test_a_closed_stdout_drops_the_output_as_print_does(good):
    """QA: `mdlc check F >&-` (stdout closed when the process started: sys.stdout None)
    did the work, then exited 3, "internal error ... a bug in mdlc"."""
    env = {"PYTHONPATH": str(Path(__file__).parents[1]), "PATH": "/usr/bin:/bin",
           "MDL_CACHE_DIR": os.environ["MDL_CACHE_DIR"]}
    run = subprocess.run([sys.executable, "-m", "codegen.cli", "check", str(good)],
                         stdout=None, stderr=subprocess.PIPE, text=True, env=env,
                         preexec_fn=lambda: os.close(1))
    assert run.returncode == 0 and run.stderr == "", run.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args, code", [(["check", "missing.mdl"], 2),
                                        (["check", "{bad}"], 1)])
def test_a_stderr_that_refuses_the_error_keeps_the_exit_status(tmp_path, args, code):
    """QA: with stderr on a full device a usage error exited 1 (the OSError of its
    message ended the process), where scripts read the status since no one reads stderr."""
    bad = tmp_path / "bad.mdl"
    bad.write_text("model M() {\n  output y = nope\n}\n")
    env = {"PYTHONPATH": str(Path(__file__).parents[1]), "PATH": "/usr/bin:/bin",
           "MDL_CACHE_DIR": os.environ["MDL_CACHE_DIR"]}
    with open("/dev/full", "w") as full:
        run = subprocess.run([sys.executable, "-m", "codegen.cli",
                              *(a.format(bad=bad) for a in args)], stdout=subprocess.PIPE,
                             stderr=full, env=env, cwd=tmp_path)
    assert run.returncode == code


def test_a_build_compiles_with_stderr_closed(tmp_path, monkeypatch):
    """QA: with stderr closed at the start (sys.stderr None, as in pythonw), every build
    that compiled raised AttributeError: 'NoneType' object has no attribute 'isatty'."""
    path = tmp_path / "closed.mdl"
    path.write_text(GOOD.replace("H = 4", "H = 7"))
    monkeypatch.setattr(sys, "stderr", None)
    m = load(path, name="stderr_closed").M(seed=0)
    assert m.forward(x=np.ones((2, 7), np.float32))["y"] == 14.0


@pytest.mark.parametrize("stem", ["numpy", "codegen", "lark"])
def test_a_file_named_as_what_mdl_imports_builds_a_module_that_does_not_shadow_it(stem):
    """QA: `mdlc build numpy.mdl` wrote numpy.so, which `import numpy` then found in
    that folder (the model's own users' NumPy included)."""
    from codegen.compile.options import module_name_for
    assert module_name_for(f"models/{stem}.mdl") == f"m_{stem}"
    assert module_name_for(f"models/{stem}.mdl", name=stem) == stem  # --name is as given


def test_every_package_mdl_imports_is_a_name_no_model_module_takes():
    """`torch.mdl` built torch.so, which a script beside it that used codegen.pytorch
    imported as torch: MDL_IMPORTS was a list by hand, without torch, onnx, onnxruntime,
    openvino or google (protobuf). Every top-level name codegen and dsl import that is not
    Python's own is in it."""
    import ast
    from codegen.compile.options import MDL_IMPORTS, module_name_for
    imported = set()
    for root in ("codegen", "dsl"):
        for path in (Path(__file__).parents[1] / root).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    imported |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    imported.add(node.module.split(".")[0])
    imported -= set(sys.stdlib_module_names)
    assert imported >= {"torch", "onnx", "numpy", "lark"}  # the scan found the imports
    assert imported <= MDL_IMPORTS, sorted(imported - MDL_IMPORTS)
    assert module_name_for("models/torch.mdl") == "m_torch"


def test_a_file_name_that_is_not_utf8_is_written_escaped(tmp_path, capsys):
    """QA: loop\xff.mdl with an assert in a `for` (whose message names the file) was an
    internal error writing the stub (UnicodeEncodeError), after an empty .pyi that the next
    emit refused to replace; a profiled build's sites gave profile() a UnicodeDecodeError."""
    path = Path(os.fsdecode(bytes(tmp_path) + b"/loop\xff.mdl"))
    path.write_text("model L() {\n  input xs : f32[T, B]\n  h = zeros[B]\n  for x in xs {\n"
                    "    assert x >= 0.0, \"nonneg\"\n    h = h + x\n  }\n"
                    "  output y = sum(h)\n}\n")
    for _ in range(2):
        assert cli.main(["emit", str(path), "-o", str(tmp_path / "out"), "--name", "m"]) == 0
    # the docstring's escape of the escape: the text says loop\xff.mdl
    assert "of the `for` at loop\\\\xff.mdl:4" in (tmp_path / "out" / "m.pyi").read_text()
    capsys.readouterr()
    path.write_text("model L() {\n  output y = 1.0 +\n}\n")
    assert cli.main(["check", str(path)]) == 1
    assert "loop\\xff.mdl:3:1: error:" in capsys.readouterr().err


def test_control_characters_of_a_file_name_are_written_escaped(tmp_path, capsys):
    """QA: a newline in a file's name split `FILE:LINE:COL: error:` over two lines (and an
    escape character reached the terminal): they are written as Python writes them."""
    path = tmp_path / "two\nlines\x1b.mdl"
    path.write_text("model L() {\n  output y = 1.0 +\n}\n")
    assert cli.main(["check", str(path)]) == 1
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith(str(tmp_path)) and first.endswith(
        "two\\nlines\\x1b.mdl:3:1: error: expected an expression, found `}`")


def test_a_module_name_that_is_not_ascii_is_a_usage_error(tmp_path, good):
    """Python would look for `PyInitU_` and the name's punycode, not the `PyInit_é` the
    module exports: every way to a module name refuses it, saying what to do."""
    path = tmp_path / "é.mdl"
    path.write_text(GOOD)
    for args in (["emit", path, "-o", tmp_path], ["build", path, "-o", tmp_path],
                 ["build", good, "--name", "é", "-o", tmp_path]):
        r = mdlc(*map(str, args))
        assert r.returncode == 2 and "is not ASCII" in r.stderr, r.stderr
        assert "give the module an ASCII identifier as its name (mdlc's --name, load's " \
            "name=)" in r.stderr
    with pytest.raises(UsageError, match="give the module an ASCII identifier as its name"):
        load(path)


def test_an_unknown_option_shows_its_commands_usage(tmp_path, good):
    """QA: `mdlc build F --bogus` printed mdlc's own usage (the list of commands), where
    every other bad option of a command shows that command's."""
    r = mdlc("build", str(good), "--bogus", "-o", str(tmp_path))
    assert r.returncode == 2 and r.stderr.startswith("usage: mdlc build ")
    assert "mdlc build: error: unrecognized arguments: --bogus" in r.stderr


def test_missing_file_is_an_error_not_a_crash(tmp_path):
    """A FILE that cannot be read is a usage error, exit 2 (it was 1, an error in a file,
    while a missing --inputs file was 2); a directory given as FILE too."""
    r = mdlc("check", str(tmp_path / "missing.mdl"))
    assert r.returncode == 2
    assert mdlc("build", str(tmp_path)).returncode == 2
    # no place in a file to name: the tool's name starts the line, as a usage error's
    assert r.stderr.startswith(f"mdlc: error: cannot read `{tmp_path / 'missing.mdl'}`")


@pytest.mark.parametrize("args", [["build", "-o", ""], ["emit", "-o", ""],
                                  ["graph", "-o", ""], ["export", "--onnx", ""]])
def test_an_empty_output_name_is_refused(good, tmp_path, args):
    """`-o ""` wrote a build into the current directory; `--onnx ""` said "cannot write `.`"."""
    (tmp_path / "here").mkdir()
    r = mdlc(args[0], str(good), *args[1:], cwd=tmp_path / "here")
    assert r.returncode == 2 and "expected a path, got ''" in r.stderr
    assert list((tmp_path / "here").iterdir()) == []


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
@pytest.mark.parametrize("command", ["check", "build"])
def test_a_source_without_end_is_refused_not_read_until_memory_runs_out(command, tmp_path):
    """`mdlc build`'s index read the 64 MiB it takes of a file token by token (for its
    imports) before the full build refused it: 85 s, where `check` took one."""
    started = time.monotonic()
    r = mdlc(command, "/dev/zero", *(["-o", str(tmp_path)] if command == "build" else []))
    assert r.returncode == 1 and "holds more than 64 MiB" in r.stderr, r.stderr
    assert time.monotonic() - started < 30


FLAGGED = """
model F(S = 0.5, USE = true) {
  input x : f32[B, 4]
  if USE { y = S * x } else { y = x }
  output loss = sum(y * y)
  minimize loss
}
"""


@pytest.mark.skipif(not os.path.exists("/dev/stdin"), reason="needs /dev/stdin")
def test_a_source_from_a_pipe_is_read_once(tmp_path):
    """A pipe (`mdlc graph <(gen.py)`) holds its text for one read: graph read it to check
    and again to draw (an internal error, KeyError), gradcheck said "defines no model"."""
    def piped(*args):
        env = {"PYTHONPATH": str(Path(__file__).parents[1]), "PATH": "/usr/bin:/bin",
               "MDL_CACHE_DIR": os.environ["MDL_CACHE_DIR"],
               **{k: os.environ[k] for k in ("CXX",) if k in os.environ}}
        return subprocess.run([sys.executable, "-m", "codegen.cli", *args], input=FLAGGED,
                              capture_output=True, text=True, env=env)
    r = piped("graph", "/dev/stdin", "-o", str(tmp_path / "f.dot"))
    assert r.returncode == 0 and (tmp_path / "f.dot").is_file(), r.stderr
    r = piped("gradcheck", "/dev/stdin")
    assert r.returncode == 0 and "worst relative error" in r.stdout, r.stderr
    # hyper-parameters are shown as written: `true`, not Python's `True`
    r = piped("check", "/dev/stdin", "-D", "USE=false")
    assert r.stdout.startswith("model F(S=0.5, USE=false): ok"), r.stdout


def test_a_source_read_as_text_mode_reads_it(tmp_path):
    path = tmp_path / "crlf.mdl"
    path.write_bytes(b"model M() {\r\n  input x : f32[3]\r\n  output y = x * 2.0\r\n}\r\n")
    assert mdlc("check", str(path)).returncode == 0
    path.write_bytes(b"model M() {\r  input x : f32[3]\r  output y = xx\r}")
    r = mdlc("check", str(path))
    assert r.returncode == 1 and "crlf.mdl:3:14: error:" in r.stderr, r.stderr


def test_internal_errors_exit_3_and_say_so(good, monkeypatch, capsys):
    def broken(args):
        raise KeyError("boom")
    monkeypatch.setitem(cli.COMMANDS, "check", broken)
    assert cli.main(["check", str(good)]) == 3
    err = capsys.readouterr().err
    assert "internal error" in err and "bug in mdlc" in err and "Traceback" not in err


def test_warnings_go_to_stderr(tmp_path):
    path = tmp_path / "w.mdl"
    path.write_text("model M() { input x : f32[B]; input u : f32[B]; output y = x }")
    r = mdlc("check", str(path))
    assert r.returncode == 0 and "warning: input `u` is never used" in r.stderr


def test_specializing_an_unknown_dim_is_a_usage_error(good, capsys):
    assert cli.main(["build", str(good), "--specialize", "Q=3"]) == 2
    assert "the specialization Q=3 names Q, not a symbolic dim of model `M` (it has B)" in \
        capsys.readouterr().err


def test_only_the_targets_that_exist_are_offered(good, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["build", str(good), "--target", "tpu"])
    assert exit_.value.code == 2
    assert "invalid choice: 'tpu' (choose from 'cpu', 'cuda')" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["build", "emit", "gradcheck"])
def test_emulate_is_for_the_cuda_target(good, command, capsys):
    assert cli.main([command, str(good), "--emulate"]) == 2
    err = capsys.readouterr().err
    assert err == ("mdlc: error: --emulate is for --target cuda: it runs the cuda target's "
                   "generated code on the CPU\n")


@pytest.mark.parametrize("name", sorted(cli.EXAMPLES))
def test_each_command_shows_examples_that_parse(name, capsys):
    with pytest.raises(SystemExit):
        cli.parser().parse_args([name, "--help"])
    assert "examples:\n  mdlc " + name in capsys.readouterr().out
    for example in cli.EXAMPLES[name]:
        assert cli.parser().parse_args(example.split()[1:]).command == name


def test_a_specialization_applies_to_the_models_with_its_dims(tmp_path, capsys):
    path = tmp_path / "two.mdl"
    path.write_text(GOOD + "model Tiny() { input x : f32[3]; output y = sum(x) }\n")
    assert cli.main(["emit", str(path), "--specialize", "B=2", "-o", str(tmp_path)]) == 0
    assert cli.main(["build", str(path), "--specialize", "Q=2"]) == 2
    assert ("the specialization Q=2 fits no model: none has all of Q as symbolic dims "
            "(`M` has B; `Tiny` has none)") in capsys.readouterr().err


# ---- a cached `mdlc build`: the index (codegen/compile/index.py) answers without the compiler
def test_a_cached_build_imports_only_what_the_index_needs(tmp_path, good):
    """The second `mdlc build` of a file finds its module through the index: it imports
    neither the front end's parser nor the IR tables, NumPy or Jinja (docs/build.md)."""
    out = tmp_path / "out"
    assert mdlc("build", str(good), "-o", str(out)).returncode == 0
    code = ("import sys; from codegen import cli; "
            f"assert cli.main(['build', {str(good)!r}, '-o', {str(out)!r}]) == 0; "
            "print(sorted(m for m in ('lark', 'numpy', 'jinja2', 'dsl.check', "
            "'codegen.pipeline', 'codegen.ops', 'codegen.targets.registry') "
            "if m in sys.modules))")
    # what chooses the build (the compiler, the BLAS, the machine) is kept: a module made
    # with CXX=clang++ is not the one GCC's lookup finds
    env = {"PYTHONPATH": str(Path(__file__).parents[1]), "PATH": "/usr/bin:/bin",
           "MDL_CACHE_DIR": os.environ["MDL_CACHE_DIR"],
           **{k: v for k, v in os.environ.items() if k in BUILD_CHOICES}}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [str(out / ("good" + EXT_SUFFIX)), "[]"]


BUILD_CHOICES = ("CXX", "MDL_BLAS", "MDL_MARCH", "MDL_SMALL_PRODUCTS", "MDL_CUDA_ARCH",
                 "CUDA_HOME", "CUDA_PATH")


def test_an_edited_file_is_built_again(tmp_path, good):
    first = lookup_after_build(good)
    good.write_text(GOOD.replace("H = 4", "H = 5"))
    assert lookup(good, "good", BuildOptions()) is None
    second = lookup_after_build(good)
    assert second != first and second.is_file()


def lookup_after_build(path: Path) -> Path:
    r = mdlc("build", str(path), "-o", str(path.parent / "out"))
    assert r.returncode == 0, r.stderr
    return lookup(path, path.stem, BuildOptions())


IMPORTING = 'import "std/rnn.mdl"\nimport "layers.mdl"\n' + GOOD


@pytest.fixture
def remembered(tmp_path, monkeypatch):
    """A .mdl file importing a sibling and a file of a (copied) standard library, and an
    index entry for it naming a stand-in module whose key.json is current."""
    std = tmp_path / "dsl"
    shutil.copytree(imports.STD_ROOT / "std", std / "std")
    monkeypatch.setattr(imports, "STD_ROOT", std)
    project = tmp_path / "project"
    project.mkdir()
    (project / "layers.mdl").write_text("fn double(x) { return 2 * x }\n")
    path = project / "m.mdl"
    path.write_text(IMPORTING)
    _remember(path, tmp_path / "built")
    return path


def _remember(path: Path, directory: Path) -> Path:
    """An index entry for `path` naming a stand-in module in `directory`, current."""
    built = directory / (path.stem + EXT_SUFFIX)
    built.parent.mkdir()
    built.write_text("")
    write_key(built.parent, {"product": "module", **HOST.fields(False, False),
                             **environment_key()})
    record_product(built)
    index.remember(path, path.stem, BuildOptions(), built, HOST)
    assert lookup(path, path.stem, BuildOptions()) == built
    return built


def _edit(path: Path) -> None:
    path.write_text(path.read_text() + "\n// edited\n")


CHANGES = {
    "the file": lambda path, mp: _edit(path),
    "an imported file": lambda path, mp: _edit(path.parent / "layers.mdl"),
    "an imported std/*.mdl": lambda path, mp: _edit(imports.STD_ROOT / "std" / "rnn.mdl"),
    "a file shadowing a std import": lambda path, mp: shutil.copytree(
        imports.STD_ROOT / "std", path.parent / "std"),
    "the compiler's sources": lambda path, mp: mp.setattr(index, "_compiler_digest",
                                                          lambda: "changed"),
    "the C++ compiler": lambda path, mp: mp.setattr(
        environment, "host_compiler", lambda: {**flags.host_compiler(), "identity": "new"}),
    "the toolchain's flags": lambda path, mp: mp.setattr(
        HOST, "fields", lambda debug, sanitize: {"toolchain": "host", "flags": ["-O1"]}),
    "the module, deleted": lambda path, mp: (
        path.parents[1] / "built" / ("m" + EXT_SUFFIX)).unlink(),
    "the module, truncated": lambda path, mp: (
        path.parents[1] / "built" / ("m" + EXT_SUFFIX)).write_text("#"),
}


@pytest.mark.parametrize("change", CHANGES)
def test_the_index_answers_only_while_what_it_read_is_unchanged(remembered, monkeypatch,
                                                                change):
    CHANGES[change](remembered, monkeypatch)
    assert lookup(remembered, "m", BuildOptions()) is None


@pytest.mark.parametrize("options", [BuildOptions(dtype="f64"), BuildOptions(defines={"H": 8}),
                                     BuildOptions(debug=True), BuildOptions(vjp=True),
                                     BuildOptions(target="cuda", emulate=True)])
def test_other_options_are_another_entry(remembered, options):
    assert lookup(remembered, "m", options) is None
    assert lookup(remembered, "m2", BuildOptions()) is None
    assert lookup(remembered, "m", BuildOptions()) is not None


def test_an_entry_of_an_older_mdl_is_no_answer(remembered):
    entry = index._entry(remembered, "m", BuildOptions())
    entry.write_text(json.loads(entry.read_text())["built"])  # a bare path, as before
    assert lookup(remembered, "m", BuildOptions()) is None


def _with_env(command: list[str], cwd, **env) -> subprocess.CompletedProcess:
    base = {"PYTHONPATH": str(Path(__file__).parents[1]), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "codegen.cli", *command],
                          capture_output=True, text=True, cwd=cwd, env={**base, **env})


@pytest.mark.parametrize("cxx, message", [
    ("/nonexistent/g++", "CXX='/nonexistent/g++' names no program on the PATH"),
    ("true", "does not answer as a C++ compiler"),  # once an IndexError, or the cache blamed
    # the C driver: it built modules that Python could not import (undefined symbol)
    ("gcc", "does not link C++ into a shared object, so modules it links could not be "
            "imported"),
])
def test_a_compiler_that_is_none_is_named(good, tmp_path, cxx, message):
    done = _with_env(["build", str(good), "-o", str(tmp_path / "out")], tmp_path,
                     CXX=cxx, MDL_CACHE_DIR=str(tmp_path / "cache"))
    assert done.returncode == 1 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr


def test_a_cpp_driver_whose_linker_fails_is_not_told_to_be_a_cpp_driver(good, tmp_path):
    """g++ with a linker that fails (here an option ld refuses) was told to set CXX to
    g++ or clang++ ("does not link C++"): that advice is for a C driver, whose object
    builds and does not load. A build that fails says so, with the linker's words."""
    wrapper = tmp_path / "g++-broken-ld"
    wrapper.write_text('#!/bin/sh\nexec g++ "$@" -Wl,--no-such-option-mdl\n')
    wrapper.chmod(0o755)
    done = _with_env(["build", str(good), "-o", str(tmp_path / "out")], tmp_path,
                     CXX=str(wrapper), MDL_CACHE_DIR=str(tmp_path / "cache"))
    assert done.returncode == 1 and "could not build a shared object" in done.stderr, \
        done.stderr
    assert "no-such-option-mdl" in done.stderr and "C++ driver" not in done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr


def test_emit_replaces_its_own_files_but_no_others(good, tmp_path):
    """Its default folder is the current one: it once replaced a project's CMakeLists.txt
    (mdl's own, run from the repository's root)."""
    assert mdlc("emit", str(good), cwd=tmp_path).returncode == 0
    assert mdlc("emit", str(good), cwd=tmp_path).returncode == 0  # its own: replaced
    (tmp_path / "CMakeLists.txt").write_text("project(mine)\n")
    done = mdlc("emit", str(good), cwd=tmp_path)
    assert done.returncode == 2 and "CMakeLists.txt` exists and mdl did not write it" in \
        done.stderr
    assert (tmp_path / "CMakeLists.txt").read_text() == "project(mine)\n"


def test_emit_replaces_the_stub_of_a_file_of_many_models(tmp_path):
    """QA: the stub's mark comes after its models' names, past the first 512 bytes of a
    file of 30 models (or of one with a long name), so a second emit or build into the
    same folder (as mdl.cmake's mdl_add_model runs at every edit) refused the stub."""
    many = tmp_path / "many.mdl"
    many.write_text("".join(f"model EncoderVariant{i:02d}() {{ input x : f32[3]; "
                            f"output y = sum(x) * {i}.0 }}\n" for i in range(30)))
    for _ in range(2):
        done = mdlc("emit", str(many), "-o", str(tmp_path / "out"))
        assert done.returncode == 0, done.stderr
    assert "EncoderVariant29" in (tmp_path / "out" / "many.pyi").read_text()


def test_emit_removes_the_sources_an_earlier_emit_wrote_and_this_one_did_not(good, tmp_path):
    """A cuda emit's kernels.cu, and parts of a model once split in more, stayed beside
    the new files as if of this model; a file of such a name mdl did not write stays."""
    from test_cuda import _nvcc_missing
    if (why := _nvcc_missing()) is not None:  # a cuda emit's CMake project names cuBLAS
        pytest.skip(f"no CUDA toolkit: {why}")
    assert mdlc("emit", str(good), "--target", "cuda", "-o", str(tmp_path)).returncode == 0
    assert (tmp_path / "kernels.cu").is_file()
    (tmp_path / "module.part7.cpp").write_text("// Generated by mdl: part 8 of 8 of module.cpp\n")
    (tmp_path / "module.part8.cpp").write_text("// mine\n")
    done = mdlc("emit", str(good), "-o", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "CMakeLists.txt", "good.mdl", "good.pyi", "module.cpp", "module.part8.cpp"]


def test_build_replaces_its_own_stub_never_one_written_by_hand(good, tmp_path):
    (tmp_path / "good.pyi").write_text("def mine() -> int: ...\n")
    done = mdlc("build", str(good), "-o", str(tmp_path))
    assert done.returncode == 2 and "good.pyi` exists and mdl did not write it, and build " \
        "would replace it" in done.stderr, done.stderr
    assert (tmp_path / "good.pyi").read_text() == "def mine() -> int: ...\n"
    (tmp_path / "good.pyi").unlink()
    for _ in range(2):  # its own, written before, it replaces
        assert mdlc("build", str(good), "-o", str(tmp_path)).returncode == 0


def test_a_build_over_a_module_a_python_runs_leaves_that_python_running(good, tmp_path):
    """The new module was written into the old one's file, which the Python that imported
    it maps: its next call crashed (a segfault). It is renamed over it now."""
    assert mdlc("build", str(good), "-o", str(tmp_path)).returncode == 0
    script = f"""
import subprocess, sys
import numpy as np
sys.path.insert(0, {str(tmp_path)!r})
import good
m = good.M()
before = m.forward(x=np.ones((2, 4), np.float32))["y"]
rebuilt = subprocess.run({[sys.executable, "-m", "codegen.cli", "build", str(good), "-o",
                           str(tmp_path), "-D", "H=8"]!r}, capture_output=True, text=True)
assert rebuilt.returncode == 0, rebuilt.stderr
assert m.forward(x=np.ones((2, 4), np.float32))["y"] == before == 8.0
print("ran on")
"""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env)
    assert ran.returncode == 0 and "ran on" in ran.stdout, ran.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("args, message", [
    (["--grad"], "--grad prints the backward pass with --ir"),
    (["--ir", "-o", "out"], "-o names a folder for the sources, and --ir prints the IR"),
    # they were dropped without a word
    (["--ir", "--target", "cuda", "--specialize", "B=2"], "--ir prints the IR that every "
     "target and specialization starts from: --target, --specialize would change nothing"),
    (["--ir", "--name", "other"], "--name would change nothing of it"),
    (["--ir", "--grad", "--vjp"], "--grad prints the minimized output's backward, --vjp the "
     "vector-Jacobian product's: give one"),
])
def test_emit_options_that_would_do_nothing_are_usage_errors(good, tmp_path, args, message):
    done = mdlc("emit", str(good), *args, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr
    assert not list(tmp_path.glob("*.cpp"))


def test_ctrl_c_ends_a_command_without_a_traceback(good, monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt
    monkeypatch.setitem(cli.COMMANDS, "build", interrupted)
    assert cli.main(["build", str(good)]) == 130
    assert capsys.readouterr().err == "mdlc: interrupted\n"


# Imports where the parser reads them: newlines are insignificant (docs/language.md).
IMPORT_LAYOUTS = {
    "two on a line": 'import "a.mdl" import "b.mdl"\n',
    "after a definition's brace": 'def f(x: f32[3]) -> f32[3] { return x } import "b.mdl"\n',
    "a comment between": 'import "a.mdl" # and import "c.mdl"\nimport\n# why\n"b.mdl"\n',
    "after a string": 'import "a.mdl"import"b.mdl"\n',
}


@pytest.mark.parametrize("layout", IMPORT_LAYOUTS)
def test_the_index_follows_every_import_the_parser_reads(tmp_path, layout):
    """The index reads a file's imports as the parser does (the parser is the oracle), so
    editing any of them is a miss, not the old module."""
    text = IMPORT_LAYOUTS[layout] + GOOD
    assert imports.imported_paths(text) == [i.path for i in parse(text).imports]
    assert "b.mdl" in imports.imported_paths(text)
    for name in ("a.mdl", "b.mdl"):
        (tmp_path / name).write_text("")
    path = tmp_path / "m.mdl"
    path.write_text(text)
    _remember(path, tmp_path / "built")
    _edit(tmp_path / "b.mdl")
    assert lookup(path, "m", BuildOptions()) is None


def test_a_symlinked_file_imports_next_to_the_link_in_the_index_too(tmp_path):
    """The front end finds a symlinked main file's imports next to the link, and so does
    the index: editing the helper beside the link is a miss."""
    for folder, name in (("real", "unused"), ("project", "used")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "helper.mdl").write_text(
            f"def {name}(x: f32[3]) -> f32[3] {{\n  return x\n}}\n")
    (tmp_path / "real" / "m.mdl").write_text('import "helper.mdl"\n' + GOOD)
    link = tmp_path / "project" / "m.mdl"
    link.symlink_to(tmp_path / "real" / "m.mdl")
    assert "used" in load_program(link.read_text(), str(link)).functions
    _remember(link, tmp_path / "built")
    _edit(tmp_path / "project" / "helper.mdl")
    assert lookup(link, "m", BuildOptions()) is None


def test_an_index_that_is_a_file_is_done_without(tmp_path, monkeypatch):
    """The index only saves work: `index` being a file is no entry to read, and writing
    one is skipped, not an internal error."""
    monkeypatch.setenv("MDL_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "index").write_text("")
    path = tmp_path / "m.mdl"
    path.write_text(GOOD)
    built = tmp_path / "built" / ("m" + EXT_SUFFIX)
    index.remember(path, "m", BuildOptions(), built, HOST)
    assert lookup(path, "m", BuildOptions()) is None


def test_a_read_only_cache_holding_the_module_answers_without_an_index(good, monkeypatch):
    """A cache on a read-only file system that holds the module but no index entry (one
    shipped without index/, or built by an older mdl) still builds: from the module."""
    built = build(good)
    index._entry(good, "good", BuildOptions()).unlink()

    def read_only(self, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
    for method in ("mkdir", "write_text", "write_bytes", "touch"):
        monkeypatch.setattr(Path, method, read_only)
    assert build(good) == built
    assert lookup(good, "good", BuildOptions()) is None


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("command", [["check"], ["graph"], ["build", "-o", "{out}"],
                                     ["emit", "-o", "{out}"]])
def test_an_output_that_cannot_be_written_is_said_not_a_bug(tmp_path, command):
    """build and emit blamed a full stdout on their -o folder ("cannot write `out`")."""
    (path := tmp_path / "ok.mdl").write_text("model M() {\n  input x : f32[B]\n  output y = x\n}\n")
    args = [command[0], str(path), *(a.format(out=tmp_path / "out") for a in command[1:])]
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "codegen.cli", *args],
                              stdout=full, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr == "mdlc: error: cannot write the output: No space left on device\n"


def test_a_dim_named_twice_in_one_list_is_refused(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["profile", "x.mdl", "--dims", "T=3,T=4"])
    assert done.value.code == 2 and "T is given twice in 'T=3,T=4'" in capsys.readouterr().err


@pytest.mark.parametrize("command, option", [("profile", "--dims"), ("gradcheck", "--dims"),
                                             ("export", "--specialize")])
def test_dims_given_in_two_options_are_merged(command, option):
    """`--dims T=2 --dims B=2` dropped T=2 without a word (argparse keeps the last)."""
    args = ["x.mdl", option, "T=2", option, "B=5"] + (["--onnx", "x.onnx"]
                                                      if command == "export" else [])
    parsed = cli.parser().parse_args([command, *args])
    assert getattr(parsed, "dims" if option == "--dims" else "specialize") == {"T": 2, "B": 5}


@pytest.mark.parametrize("given, message", [
    (["--dims", "T=2", "--dims", "T=3"], "argument --dims: T is given twice"),
    (["-D", "H=4", "-D", "H=5"], "argument -D: H is given twice"),  # QA: H=5, no word
    (["--dims", "T=٣"], "expected NAME=SIZE[,NAME=SIZE...], got 'T=٣'"),  # not 3
    (["--dims", "T=²"], "expected NAME=SIZE[,NAME=SIZE...], got 'T=²'"),  # not `_dims value`
    (["--dims", "T=0"], "T=0: a size is 1 to 2147483647"),  # once "expected NAME=SIZE"
    (["--dims", "T=-1"], "T=-1: a size is 1 to 2147483647"),
    (["--dims", "T=99999999999"], "T=99999999999: a size is 1 to 2147483647"),  # once built
])
def test_dims_that_are_not_plain_sizes_are_refused(capsys, given, message):
    with pytest.raises(SystemExit) as done:
        cli.main(["gradcheck", "x.mdl", *given])
    assert done.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("args", [["export", "{src}", "--onnx", "{src}"],
                                  ["graph", "{src}", "-o", "{src}"],
                                  ["export", "{link}", "--onnx", "{src}"]])
def test_an_output_over_the_models_own_source_is_refused(tmp_path, capsys, args):
    """`mdlc export m.mdl --onnx m.mdl` replaced the model with ONNX bytes, exit 0."""
    if args[0] == "export":
        pytest.importorskip("onnx")
    src = tmp_path / "m.mdl"
    src.write_text(FLAGGED)
    (tmp_path / "link.mdl").symlink_to(src)
    given = [a.format(src=src, link=tmp_path / "link.mdl") for a in args]
    assert cli.main(given) == 2
    assert "is the model's source file: writing it would replace the model" in \
        capsys.readouterr().err
    assert src.read_text() == FLAGGED


@pytest.mark.parametrize("args, said", [
    (["export", "{main}", "--onnx", "{lib}"], "is a file the model imports"),
    (["graph", "{main}", "-o", "{lib}"], "is a file the model imports"),
    (["export", "{main}", "--params", "{ckpt}", "--onnx", "{ckpt}"],
     "is the checkpoint the parameters come from: writing it would replace the trained "
     "weights"),
])
def test_an_output_over_an_imported_file_or_the_checkpoint_is_refused(tmp_path, capsys,
                                                                      args, said):
    """QA: `--onnx lib.mdl` replaced a file the model imports with ONNX bytes, and
    `--params w.npz --onnx w.npz` the trained weights; only the main file was kept."""
    if args[0] == "export":
        pytest.importorskip("onnx")
    (tmp_path / "lib.mdl").write_text("def twice(x : f32[B]) -> f32[B] {\n  return x * 2.0\n}\n")
    (tmp_path / "main.mdl").write_text('import "lib.mdl"\n\nmodel M() {\n'
                                       '  input x : f32[B]\n  output y = twice(x)\n}\n')
    (tmp_path / "w.npz").write_bytes(b"weights")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    given = [a.format(main=tmp_path / "main.mdl", lib=tmp_path / "lib.mdl",
                      ckpt=tmp_path / "w.npz") for a in args]
    assert cli.main(given) == 2
    assert said in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize("command", [["build", "-o", "{out}"],
                                     ["export", "--onnx", "{out}/s.onnx"]])
def test_a_specialization_no_call_can_run_is_refused(tmp_path, capsys, command):
    """Compiled (or exported) for T = 1, where `zeros[T - 2]` refuses every call."""
    if command[0] == "export":
        pytest.importorskip("onnx")
    path = tmp_path / "sb.mdl"
    path.write_text(NEEDS_TWO_STEPS)
    args = [a.format(out=tmp_path) for a in command]
    assert cli.main([args[0], str(path), *args[1:], "--specialize", "T=1"]) == 2
    assert ("the specialization T=1: model `Sb` refuses every call at these dims: they make "
            "T - 2, the size of a value at sb.mdl:4:12, -1") in capsys.readouterr().err


@pytest.mark.parametrize("command", ["check", "build", "emit", "graph", "gradcheck"])
def test_an_empty_model_name_is_refused(capsys, command):
    """build and emit took `--model ""` for every model, export for the one, the others
    looked for a model named ``."""
    with pytest.raises(SystemExit) as done:
        cli.main([command, "x.mdl", "--model", ""])
    assert done.value.code == 2
    assert "argument --model: expected a model's name, got ''" in capsys.readouterr().err
