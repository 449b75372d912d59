"""What `pip install .` ships: every Python package, the templates, the runtime's C++ and
the standard library. A wheel built from this tree, installed into a fresh virtual
environment, builds and runs a model from another directory."""
from __future__ import annotations

import shutil
import site
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MODEL = """import "std/rnn.mdl"
model Tiny(H = 8) {
  input xs : f32[T, B, 4]
  h = zeros[B, H]
  hs = for x in xs {
    h = tanh(linear(x, H) + linear(h, H) as recur)
    yield h
  }
  output total = sum(hs)
}
"""
CHECK = """import numpy as np, codegen, tiny
assert {venv!r} in codegen.__file__, codegen.__file__
out = tiny.Tiny(seed=0).forward(xs=np.ones((3, 2, 4), np.float32))
print(out["total"].shape)
"""


def _setuptools() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_python_package_is_listed():
    found = {str(p.parent.relative_to(REPO)).replace("/", ".")
             for top in ("dsl", "codegen") for p in (REPO / top).rglob("__init__.py")}
    data = set(_setuptools()["package-dir"])
    assert set(_setuptools()["packages"]) == found | data


def test_every_runtime_file_is_shipped():
    """Models compile against the runtime where they are built: the wheel holds all of it
    (the emulated cuda device too)."""
    runtime = REPO / "cpp_runtime"
    shipped = {p for pattern in _setuptools()["package-data"]["codegen.cpp_runtime"]
               for p in runtime.glob(pattern)}
    files = {p for p in runtime.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert sorted(str(p.relative_to(runtime)) for p in files - shipped) == []


def test_a_wheel_works_from_a_fresh_virtual_environment(tmp_path):
    source = tmp_path / "source"  # a copy, so that building leaves this tree untouched
    skipped = shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", ".pytest_cache",
                                     ".hypothesis")
    # the top level's build/ is CMake's (docs/build.md); codegen/compile/ is a package
    shutil.copytree(REPO, source, ignore=lambda folder, names: skipped(folder, names) | (
        {"build"} if Path(folder) == REPO else set()))
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path / "dist"), str(source)])
    wheel, = (tmp_path / "dist").glob("mdl-*.whl")
    venv = tmp_path / "venv"
    # the venv sees this environment's packages (lark, numpy, ...) after its own, where it
    # gets its own mdl: through a .pth of its site-packages, since --system-site-packages
    # would show it the base interpreter's when this environment is itself a venv
    run([sys.executable, "-m", "venv", str(venv)])
    inner = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / \
        "site-packages"
    outer = site.getsitepackages() + ([site.getusersitepackages()] if site.ENABLE_USER_SITE
                                      else [])
    (inner / "outer.pth").write_text("import site; " + "; ".join(
        f"site.addsitedir({d!r})" for d in outer) + "\n")
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
         "--no-index", str(wheel)])
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "tiny.mdl").write_text(MODEL)
    run([str(venv / "bin" / "mdlc"), "build", "tiny.mdl", "-o", "out"], cwd=work)
    done = run([str(venv / "bin" / "python"), "-c", CHECK.format(venv=str(venv))],
               cwd=work / "out")
    assert done.stdout.strip() == "()"


def run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        pytest.fail(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")
    return done
