"""`mdlc check` as a user runs it: output, exit statuses, JSON, no tracebacks."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codegen import cli

GOOD = """model M(H = 4) {
  input x : f32[B, H]
  param w : f32[H] = ones
  output y = sum(x * w)
  minimize y
}
"""


def mdlc(*args, cwd=None):
    env = {"PYTHONPATH": str(Path(__file__).parents[1]), "PATH": "/usr/bin:/bin",
           "MDL_CACHE_DIR": os.environ["MDL_CACHE_DIR"]}  # the session's cache (conftest)
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
    (["--model", "Nope"], "has no model `Nope`"),
    (["-D", "H"], "expected K=V"),
])
def test_usage_errors_exit_2(good, args, message):
    r = mdlc("check", str(good), *args)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr


def test_missing_file_is_an_error_not_a_crash(tmp_path):
    r = mdlc("check", str(tmp_path / "missing.mdl"))
    assert r.returncode == 1 and "cannot read" in r.stderr


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
    assert "--specialize names Q, not a symbolic dim of model `M` (it has B)" in \
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
    assert ("--specialize Q=2 fits no model: none has all of Q as symbolic dims "
            "(`M` has B; `Tiny` has none)") in capsys.readouterr().err
