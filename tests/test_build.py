"""codegen/compile/: generated C++ to an importable extension through the cache (the runtime
compiled once, each module linked with it), the emitted CMakeLists.txt, and the top-level
CMake project (the runtime's C++ tests). Each distinct C++ build costs seconds, so the
suite compiles a few things in all and shares them through session fixtures."""
from __future__ import annotations

import errno
import importlib.util
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from codegen.backend.paths import RUNTIME_DIR
from codegen.compile import (blas as blas_module, cache, environment, extension, flags,
                             runtime)
from codegen.compile.blas import blas
from codegen.compile.cmake import render_cmakelists
from codegen.compile.commands import run_commands, side_by_side
from codegen.compile.process_tree import descendants
from codegen.compile.cpu import Cpu
from codegen.compile.environment import EXT_SUFFIX
from codegen.compile.extension import build_extension, cache_key
from codegen.compile.toolchain import EMULATED_CUDA, NVCC, Linked
from codegen.ir.diagnostics import MdlBuildError, UsageError
from codegen.targets.cpu import CPU
from codegen.targets.cuda import EMULATED_CUDA_TARGET

REPO = Path(__file__).resolve().parents[1]

# An extension module in Python's C API: it compiles in a fraction of a second, where one
# in pybind11 took ten (the cache's tests need a module, not pybind11)...
TINY = """#include <Python.h>
static long sum(long a, long b) { return a + b; }
static PyObject* add(PyObject*, PyObject* args) {
  long a, b;
  return PyArg_ParseTuple(args, "ll", &a, &b) ? PyLong_FromLong(sum(a, b)) : nullptr;
}
static PyMethodDef methods[] = {{"add", add, METH_VARARGS, nullptr}, {}};
static PyModuleDef tiny_module = {PyModuleDef_HEAD_INIT, "tiny", nullptr, -1, methods};
PyMODINIT_FUNC PyInit_tiny() { return PyModule_Create(&tiny_module); }
"""
# ... but a build killed midway needs one that takes long enough to be caught compiling.
SLOW_TINY = """#include <pybind11/pybind11.h>
PYBIND11_MODULE(tiny, m) { m.def("add", [](int a, int b) { return a + b; }); }
"""

# A model for the CMake project test: a product (the runtime's products) and a parameter.
TINY_MODEL = """model Tiny(H = 2) {
  input x : f32[B, H]
  param W : f32[H, 4]
  output y = tanh(x @ W)
}
"""

# The BLAS through the runtime's wrapper: plain, transposed, and through a packed operand.
BLAS = """#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <vector>
#include "mdl/blas.h"

PYBIND11_MODULE(blas_demo, m) {
  m.def("sgemm", [] {  // [[1, 2], [3, 4]] @ [[5, 6], [7, 8]]
    std::vector<float> a{1, 2, 3, 4}, b{5, 6, 7, 8}, c(4);
    mdl::gemm(false, false, 2, 2, 2, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2);
    return c;
  });
  m.def("packed_bt", [] {  // [[1, 2], [3, 4]] @ [[5, 6], [7, 8]]^T + [[1, 1], [1, 1]]
    std::vector<float> a{1, 2, 3, 4}, b{5, 6, 7, 8}, c(4, 1.0f);
    mdl::Arena packed;
    mdl::pack_b(packed, true, 2, 2, 2, b.data(), 2);
    mdl::gemm_packed(packed, false, 2, 2, 2, a.data(), 2, true, b.data(), 2, 1.0f, c.data(), 2);
    return c;
  });
  m.def("dgemm_at", [] {  // [[1, 2], [3, 4]]^T @ [[5, 6], [7, 8]]
    std::vector<double> a{1, 2, 3, 4}, b{5, 6, 7, 8}, c(4);
    mdl::gemm(true, false, 2, 2, 2, 1.0, a.data(), 2, b.data(), 2, 0.0, c.data(), 2);
    return c;
  });
}
"""


def load(path: Path):
    """Import an extension file as a module, as a caller of build_extension would."""
    name = path.name.removesuffix(EXT_SUFFIX)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny() -> Path:
    return build_extension({"module.cpp": TINY}, "tiny", CPU)


@pytest.fixture(scope="session")
def blas_demo() -> Path:
    return build_extension({"module.cpp": BLAS}, "blas_demo", CPU)


def test_a_built_module_imports_and_runs(tiny, mdl_cache_dir):
    assert tiny.name == "tiny" + EXT_SUFFIX and tiny.is_file()
    assert tiny.parent.parent == mdl_cache_dir
    assert load(tiny).add(2, 3) == 5


def test_an_identical_build_comes_from_the_cache(tiny, monkeypatch):
    def no_compile(*args, **kwargs):
        raise AssertionError("an identical build compiled again")
    monkeypatch.setattr(extension, "run_commands", no_compile)
    assert build_extension({"module.cpp": TINY}, "tiny", CPU) == tiny


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_a_model_generated_again_in_one_process_reads_the_same(target):
    """Generated code names values by the order it meets them, not by their ids, which
    count every value the process made: charlm generated after gru read differently, so
    the same model missed the cache (a fuzz module was built four times in one run)."""
    from codegen.compile.options import BuildOptions
    from codegen.pipeline import sources
    examples = Path(__file__).resolve().parents[1] / "examples"
    options = BuildOptions(target=target, specialize=[{"T": 6, "B": 3}])
    first = sources(examples / "charlm.mdl", "charlm", options)[1]
    sources(examples / "gru.mdl", "gru", options)
    assert sources(examples / "charlm.mdl", "charlm", options)[1] == first


def test_the_cache_directory_holds_the_module_its_sources_and_key(tiny, mdl_cache_dir):
    entry = tiny.parent
    assert (entry / "src" / "module.cpp").read_text() == TINY
    assert '"module": "tiny"' in (entry / "key.json").read_text()
    assert "module.cpp" in (entry / "build.log").read_text()  # the compiler's command line
    assert not list(entry.glob("*.o"))  # objects are not kept, only the module
    # no build directory of its own is left (another worker's may be under way)
    assert not list(mdl_cache_dir.glob(f"tmp-{cache_key({'module.cpp': TINY}, 'tiny', CPU)}-*"))


def test_the_runtime_is_built_once_and_linked_into_every_module(tiny, blas_demo, monkeypatch):
    built = runtime.build_runtime()
    assert built.object.is_file()
    assert (built.precompiled / "mdl" / "python.h.gch").is_file()
    for module in (tiny, blas_demo):
        assert str(built.object) in (module.parent / "build.log").read_text()

    def no_compile(*args, **kwargs):
        raise AssertionError("the runtime compiled again")
    monkeypatch.setattr(runtime, "run_commands", no_compile)
    assert runtime.build_runtime() == built
    # other flags are another runtime
    assert runtime.runtime_fields(True, False) != runtime.runtime_fields(False, False)


def _recorded(monkeypatch) -> list[list[str]]:
    """The compiler commands of the runtime's builds, not run: each makes an empty file of
    the output it names."""
    commands: list[list[str]] = []

    def record(work, cmds, *_):
        for command in cmds:
            commands.append(command)
            Path(command[command.index("-o") + 1]).touch()
    monkeypatch.setattr(runtime, "run_commands", record)
    return commands


@pytest.mark.parametrize("debug", [False, True])
def test_the_runtimes_glue_is_compiled_at_its_own_level(tmp_path, monkeypatch, debug):
    """python_module.cpp (pybind11's glue) at its own level (glue_optimization), without
    the BLAS's defines and headers; the rest at the models' -O3; a debug runtime all at
    -O0."""
    monkeypatch.setenv("MDL_CACHE_DIR", str(tmp_path))
    commands = _recorded(monkeypatch)
    runtime.build_runtime(debug=debug)
    compiled = {Path(c[c.index("-c") + 1]).as_posix(): c for c in commands if "-c" in c}
    assert sorted(compiled) == sorted((RUNTIME_DIR / s).as_posix()
                                      for s in runtime.RUNTIME_SOURCES)
    for source, command in compiled.items():
        levels = [f for f in command if f.startswith("-O") or f.startswith("-finline")]
        glue = source.endswith(runtime.GLUE_SOURCE)
        assert levels == (["-O0"] if debug else
                          list(runtime.glue_optimization()) if glue else ["-O3"]), source
        has_blas = [f"-I{blas().include_dir}", *blas().defines]
        assert all((f in command) != glue for f in has_blas), source


def test_one_glue_serves_every_blas(tmp_path, monkeypatch):
    """The glue's object is cached on its own, keyed without the BLAS: a runtime for
    another BLAS variant compiles the rest and links that object (python_module.cpp
    includes no BLAS header: its includes are followed here)."""
    monkeypatch.setenv("MDL_CACHE_DIR", str(tmp_path))
    commands = _recorded(monkeypatch)
    first = runtime.build_runtime()
    assert any(c[-1].endswith("python_module.o") for c in commands)
    glue = tmp_path / cache.digest(runtime.glue_fields(False, False)) / runtime.GLUE_OBJECT
    assert glue.is_file() and str(glue) in commands[-1]  # linked into the runtime object
    commands.clear()
    monkeypatch.setenv("MDL_SMALL_PRODUCTS", "blas")
    blas_module.blas.cache_clear()
    try:
        other = runtime.build_runtime()
    finally:
        monkeypatch.undo()
        blas_module.blas.cache_clear()
    assert other.object != first.object
    assert not any(c[-1].endswith("python_module.o") for c in commands)
    assert str(glue) in commands[-1]
    seen, todo = set(), [RUNTIME_DIR / runtime.GLUE_SOURCE]
    while todo:
        path = todo.pop()
        for name in re.findall(r'^#include "([^"]+)"', path.read_text(), re.M):
            found = next((d / name for d in (path.parent, RUNTIME_DIR) if (d / name).is_file()))
            if found not in seen:
                seen.add(found)
                todo.append(found)
    names = {p.relative_to(RUNTIME_DIR).as_posix() for p in seen}
    assert "mdl/module.h" in names and not names & {"mdl/blas.h", "mdl/runtime.h"}, names


# What the runtime object defines once (src/products.cpp: mdl's own product kernels;
# faults.cpp, call.cpp) and generated code only calls: defined in a header, each model's
# compile instantiated them again (the char LM's module took 4.1-4.7 s to build, 2.7 s
# without). What chooses a kernel (gemm, gemm_packed) stays inline, for the model's sizes.
OUT_OF_LINE = re.compile(r"mdl::(small_gemm::(block|panel_rows|multiply|pack\()|"
                         r"row_gemm::(strip|rows|columns)|raise_fault|Call::result_memory)")


def test_a_models_object_defines_none_of_the_runtimes_kernels(tmp_path):
    from codegen.compile.options import BuildOptions
    from codegen.pipeline import sources
    _, files = sources(REPO / "examples" / "charlm.mdl", "charlm", BuildOptions())
    source = tmp_path / "module.cpp"
    source.write_text(files["module.cpp"])
    assert re.search(r"mdl::gemm_packed\(|mdl::gemm\(", files["module.cpp"])  # it calls them
    assert re.search(r"mdl::gather\(", files["module.cpp"])  # whose bad ids raise a fault
    obj = tmp_path / "module.o"
    done = subprocess.run([flags.host_compiler()["path"], *flags.compile_flags(debug=True),
                           *(f"-I{d}" for d in flags.include_dirs()), "-c", str(source), "-o",
                           str(obj)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    symbols = subprocess.run(["nm", "-C", "--defined-only", str(obj)], capture_output=True,
                             text=True, check=True).stdout
    assert "infer_0" in symbols  # the model's own functions are there
    functions = [line for line in symbols.splitlines() if line.split(" ")[1] in "TtWw"]
    assert not [line for line in functions if OUT_OF_LINE.search(line)]


def test_the_blas_links_and_loads_by_rpath(blas_demo):
    assert load(blas_demo).sgemm() == [19, 22, 43, 50]
    assert load(blas_demo).dgemm_at() == [26, 30, 38, 44]
    assert load(blas_demo).packed_bt() == [18, 24, 40, 54]
    # A fresh interpreter with no library path: the module alone must find the BLAS.
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"from test_build import load; from pathlib import Path; "
            f"print(load(Path({str(blas_demo)!r})).sgemm())")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[19.0, 22.0, 43.0, 50.0]"


BLAS_VARIANTS = [("mkl", "own"), ("mkl", "blas"), ("mkl", "1"), ("openblas", "own"),
                 ("openblas", "blas")]


def blas_variant(choice: str, packed: str) -> dict:
    """The environment that builds with MDL_BLAS=`choice`, MDL_SMALL_PRODUCTS=`packed`."""
    if choice == "mkl" and blas_module.installed_file("mkl", "libmkl_rt.so.") is None:
        pytest.skip("MKL is installed on x86-64 Linux only")
    return {**os.environ, "MDL_BLAS": choice, "MDL_SMALL_PRODUCTS": packed}


# One variant of each BLAS: the gradients checked are f64's, and mdl's kernels take float
# products only (mdl/blas.h: own_kernel), so the variants of one BLAS run the same f64
# code; what MDL_SMALL_PRODUCTS changes is checked by the next test, compiled with each
# variant's flags. MKL's is Intel's default (=1), which other machines build only here;
# OpenBLAS's the default here. A variant's runtime is about a minute of a core to build.
@pytest.mark.parametrize("choice,packed", [("mkl", "1"), ("openblas", "own")])
def test_each_blas_builds_and_its_gradients_check(choice, packed):
    """MDL_BLAS=mkl and =openblas, whatever this CPU would choose: the runtime and a model
    built against each, whose gradients match finite differences."""
    env = blas_variant(choice, packed)
    run = subprocess.run([sys.executable, "-m", "codegen.cli", "gradcheck",
                          str(REPO / "examples" / "gru.mdl"), "--dims", "T=5,B=2"],
                         env=env, capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "worst relative error" in run.stdout


@pytest.mark.parametrize("choice,packed", BLAS_VARIANTS)
def test_each_blas_variant_multiplies_as_its_products_test_checks(choice, packed, tmp_path):
    """Each variant is the BLAS and kernels its environment asks for, and the runtime's
    products test (tests/cpp/test_blas.cpp: mdl::gemm and gemm_packed against a naive
    loop, every transpose) passes compiled with its flags."""
    env = blas_variant(choice, packed)
    built = subprocess.run([sys.executable, "-c", "from codegen.compile.blas import blas; "
                            "print(blas().name, blas().library, blas().own_kernels)"],
                           env=env, capture_output=True, text=True, cwd=REPO)
    name, library, own = built.stdout.split()
    assert name == choice and ("mkl" if choice == "mkl" else "openblas") in library
    assert own == str(packed != "blas")
    program = tmp_path / "test_blas"
    compile_it = ("import subprocess, sys; from codegen.compile.flags import *; "
                  "sys.exit(subprocess.run([host_compiler()['path'], *compile_flags(), "
                  "*('-I' + d for d in include_dirs()), 'tests/cpp/test_blas.cpp', "
                  "'cpp_runtime/src/products.cpp', '-o', "
                  f"{str(program)!r}, *link_flags(False)]).returncode)")
    run = subprocess.run([sys.executable, "-c", compile_it], env=env, capture_output=True,
                         text=True, cwd=REPO)
    assert run.returncode == 0, run.stderr
    run = subprocess.run([program], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_arena_test_passes_compiled_as_models_are(tmp_path):
    """tests/cpp/test_arena.cpp, which ctest runs under the sanitizers (a redzone after
    every slot), compiled with a model's flags: the layout without redzones, whose slots
    of sizes that are multiples of 512 bytes step past each other's 4 KiB offsets
    (mdl::slot_bytes), passes it too."""
    program = tmp_path / "test_arena"
    run = subprocess.run([flags.host_compiler()["path"], *flags.compile_flags(),
                          *(f"-I{d}" for d in flags.include_dirs()),
                          str(REPO / "tests" / "cpp" / "test_arena.cpp"), "-o", str(program),
                          *flags.link_flags(False)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    run = subprocess.run([program], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("vendor,isa,march,chosen", [
    ("Intel", "AVX-512", "", "mkl"), ("Intel", "AVX2", "", "mkl"),
    ("Intel", "AVX-512", "x86-64-v3", "mkl"), ("AMD", "AVX-512", "", "openblas"),
    ("AMD", "AVX-512", "native", "openblas"), ("AMD", "AVX2", "", "openblas"),
    ("AMD", "AVX-512", "x86-64-v3", "openblas")])
def test_the_blas_follows_the_cpu_unless_told(monkeypatch, vendor, isa, march, chosen):
    """OpenBLAS for an AMD CPU, with AVX-512 or without, built for it or restricted to
    AVX2; MKL on Intel (MKL runs its generic code on AMD: docs/build.md); MDL_BLAS
    overrides either way. Small products run mdl's own kernels with OpenBLAS and on AMD,
    with MKL on Intel those of one row (MKL's packed API the rest); MDL_SMALL_PRODUCTS
    overrides that. (GCC's choice: Clang builds take OpenBLAS, tests/test_clang.py.)"""
    if blas_module.installed_file("mkl", "libmkl_rt.so.") is None:
        pytest.skip("MKL is installed on x86-64 Linux only: OpenBLAS is the only choice")
    machine = Cpu(vendor=vendor, model=f"some {vendor} CPU", isa=isa)
    monkeypatch.setattr(blas_module, "cpu", lambda: machine)
    monkeypatch.setattr(blas_module, "host_compiler", lambda: {"gcc": True})
    monkeypatch.delenv("MDL_BLAS", raising=False)
    monkeypatch.delenv("MDL_SMALL_PRODUCTS", raising=False)
    monkeypatch.setenv("MDL_MARCH", march)
    blas.cache_clear()
    try:
        def limits(name):  # the most rows mdl's kernels take
            return 1024 if name == "openblas" or vendor == "AMD" else 1
        assert blas().name == chosen
        assert blas().own_kernels and blas().own_rows == limits(chosen)
        other = "openblas" if chosen == "mkl" else "mkl"
        monkeypatch.setenv("MDL_BLAS", other)
        blas.cache_clear()
        assert blas().name == other
        assert blas().own_kernels and blas().own_rows == limits(other)
        for packed, own, rows in (("own", 1, 1024), ("blas", 0, 0), ("8", 1, 8)):
            monkeypatch.setenv("MDL_SMALL_PRODUCTS", packed)
            blas.cache_clear()
            assert blas().name == other and blas().own_kernels == bool(own)
            assert {f"-DMDL_OWN_KERNELS={own}", f"-DMDL_OWN_ROWS={rows}"} <= set(blas().defines)
    finally:
        monkeypatch.undo()
        blas.cache_clear()


def test_the_blas_follows_its_variables_as_they_change_in_a_process(monkeypatch):
    """Once the first answer held for the process: MDL_BLAS=openblas set after a build
    still built with MKL, and MDL_BLAS=garbage was never reported."""
    monkeypatch.setenv("MDL_BLAS", "openblas")
    assert blas().name == "openblas"
    monkeypatch.setenv("MDL_BLAS", "garbage")
    with pytest.raises(MdlBuildError, match="MDL_BLAS='garbage'"):
        blas()
    monkeypatch.setenv("MDL_BLAS", "openblas")
    monkeypatch.setenv("MDL_SMALL_PRODUCTS", "blas")
    assert blas().own_rows == 0


@pytest.mark.parametrize("variable,value,expected", [
    ("MDL_BLAS", "atlas", "MDL_BLAS='atlas': expected one of mkl, openblas"),
    ("MDL_SMALL_PRODUCTS", "mine", "MDL_SMALL_PRODUCTS='mine': expected own, blas, or the "
     "most rows of a product mdl's kernels take (1 to 1024)"),
    ("MDL_SMALL_PRODUCTS", "2000", "MDL_SMALL_PRODUCTS='2000': expected own, blas")])
def test_an_unknown_blas_choice_is_a_clear_error(variable, value, expected, tmp_path):
    env = {**os.environ, variable: value}
    run = subprocess.run([sys.executable, "-m", "codegen.cli", "build",
                          str(REPO / "examples" / "gru.mdl"), "-o", str(tmp_path)],
                         env=env, capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 1
    assert expected in run.stderr
    assert "Traceback" not in run.stderr


KEY_CHANGES = {
    "source": lambda: cache_key({"module.cpp": TINY + "\n"}, "tiny", CPU),
    "file name": lambda: cache_key({"tiny.cpp": TINY}, "tiny", CPU),
    "module name": lambda: cache_key({"module.cpp": TINY}, "tiny2", CPU),
    "debug": lambda: cache_key({"module.cpp": TINY}, "tiny", CPU, debug=True),
    "sanitize": lambda: cache_key({"module.cpp": TINY}, "tiny", CPU, sanitize=True),
}


@pytest.mark.parametrize("change", KEY_CHANGES)
def test_the_key_changes_with_sources_names_and_flags(change):
    base = cache_key({"module.cpp": TINY}, "tiny", CPU)
    assert cache_key({"module.cpp": TINY}, "tiny", CPU) == base
    assert KEY_CHANGES[change]() != base


@pytest.mark.skipif(platform.machine() != "x86_64", reason="AVX-512 is x86-64's")
@pytest.mark.parametrize("march,wide", [("icelake-server", True), ("x86-64-v3", False)])
def test_loops_take_512_bit_vectors_where_the_target_has_avx512(monkeypatch, tmp_path,
                                                               march, wide):
    """Intel's chips are tuned to 256-bit vectors (icelake-server, as -march=native on an
    Intel Xeon): a release build for a target with AVX-512 asks for 512 (WIDE_VECTORS),
    and a loop of floats then takes them; a target without AVX-512 keeps its tuning."""
    monkeypatch.setenv("MDL_MARCH", march)
    release = flags.release_flags()
    assert (flags.WIDE_VECTORS in release) == wide
    source = tmp_path / "loop.cpp"
    source.write_text("void twice(float* a, long n) {\n"
                      "  for (long i = 0; i < n; ++i) a[i] = 2.f * a[i] + 1.f;\n}\n")
    subprocess.run([flags.host_compiler()["path"], *release, "-S", str(source), "-o",
                    str(tmp_path / "loop.s")], check=True)
    assert ("zmm" in (tmp_path / "loop.s").read_text()) == wide


def test_an_march_the_compiler_refuses_is_said_to_be_mdl_marchs(monkeypatch):
    """QA: MDL_MARCH=foo said the compiler "does not answer as a C++ compiler" and to set
    CXX, naming no MDL_MARCH."""
    monkeypatch.setenv("MDL_MARCH", "skylake-avx512x")
    with pytest.raises(MdlBuildError, match=re.escape(
            "MDL_MARCH='skylake-avx512x': ") + ".* does not take -march=skylake-avx512x \\(.*"
            "skylake-avx512x"):
        flags.host_compiler()


def test_the_key_changes_with_flags_runtime_headers_and_codegen_version(monkeypatch, tmp_path):
    base = cache_key({"module.cpp": TINY}, "tiny", CPU)
    monkeypatch.setattr(flags, "release_flags", lambda: ("-O2", "-march=native", "-DNDEBUG"))
    assert cache_key({"module.cpp": TINY}, "tiny", CPU) != base
    monkeypatch.undo()
    monkeypatch.setenv("MDL_MARCH", "x86-64-v3")  # mdlc bench --isa avx2's builds
    assert cache_key({"module.cpp": TINY}, "tiny", CPU) != base
    monkeypatch.undo()
    copy = tmp_path / "cpp_runtime"
    shutil.copytree(RUNTIME_DIR, copy)
    monkeypatch.setattr(environment, "RUNTIME_DIR", copy)
    same_headers = cache_key({"module.cpp": TINY}, "tiny", CPU)
    (copy / "mdl" / "extra.h").write_text("#pragma once\n")
    assert cache_key({"module.cpp": TINY}, "tiny", CPU) != same_headers
    monkeypatch.undo()
    monkeypatch.setattr(environment, "CODEGEN_VERSION", environment.CODEGEN_VERSION + 1)
    assert cache_key({"module.cpp": TINY}, "tiny", CPU) != base



# The environment's fields of an mdl from before the build variables: with none set, keys
# must stay what it computed, or every cache in use would build everything again.
OLD_ENVIRONMENT_FIELDS = {"codegen_version", "runtime", "compiler", "python", "pybind11",
                          "blas"}


@pytest.fixture
def no_build_variables(monkeypatch):
    for name in environment.BUILD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("variable", environment.BUILD_VARIABLES)
def test_the_key_changes_with_the_compilers_variables(no_build_variables, variable, tmp_path):
    """A cached module came back under other values of these, which change what the
    compilers build: Clang's link under COMPILER_PATH (another ld), nvcc under
    NVCC_APPEND_FLAGS, and in a process that set CPATH after its first build (the
    compiler's identity is probed once a process). Each is in every key, the index's
    too; unset again, the key is the old one."""
    from codegen.compile import index
    from codegen.compile.options import BuildOptions
    model = tmp_path / "m.mdl"
    model.write_text(TINY_MODEL)

    def keys():
        return (cache_key({"module.cpp": TINY}, "tiny", CPU),
                cache_key({"module.cu": TINY}, "tiny", EMULATED_CUDA_TARGET),
                cache.digest(runtime.runtime_fields(False, False)),
                index._entry(model, "m", BuildOptions()))
    base = keys()
    assert set(environment.environment_key()) == OLD_ENVIRONMENT_FIELDS
    no_build_variables.setenv(variable, "/opt/elsewhere")
    changed = keys()
    assert all(a != b for a, b in zip(base, changed))
    assert environment.environment_key()["variables"] == {variable: "/opt/elsewhere"}
    no_build_variables.setenv(variable, "")  # set but empty: GCC's LIBRARY_PATH is then "."
    assert all(k not in base + changed for k in keys())
    no_build_variables.delenv(variable)
    assert keys() == base


def test_the_cuda_key_changes_with_nvcc_s_host_compiler(no_build_variables, tmp_path):
    """nvcc compiles the host side of .cu files with `gcc` from PATH (or what NVCC_CCBIN
    names), not with CXX: another gcc first on PATH builds anew, where the key held only
    CXX's identity and a cached module of the other compiler came back."""
    from codegen.compile.cuda_toolkit import nvcc_host_compiler, toolkit
    from codegen.targets.cuda import CUDA_TARGET
    try:
        nvcc = toolkit().nvcc
    except MdlBuildError as exc:
        pytest.skip(f"no CUDA toolkit: {exc}")
    real = nvcc_host_compiler(nvcc)["path"]
    base = cache_key({"kernels.cu": TINY}, "tiny", CUDA_TARGET)
    other = tmp_path / "bin"
    other.mkdir()
    (other / "gcc").write_text(f'#!/bin/sh\n[ "$1" = --version ] && echo "gcc 99"\n'
                               f'exec {real} "$@"\n')
    (other / "gcc").chmod(0o755)
    no_build_variables.setenv("PATH", f"{other}{os.pathsep}{os.environ['PATH']}")
    assert nvcc_host_compiler(nvcc)["path"] == str(other / "gcc")
    assert cache_key({"kernels.cu": TINY}, "tiny", CUDA_TARGET) != base
    no_build_variables.setenv("NVCC_CCBIN", real)  # named: PATH's gcc is not nvcc's
    assert nvcc_host_compiler(nvcc)["path"] == real


def test_relative_directories_in_the_variables_are_keyed_where_they_point(
        no_build_variables, tmp_path):
    """The compilers run in mdlc's directory and read `include`, or an empty entry, there:
    the same text from two directories is two keys; a variable set empty is itself."""
    no_build_variables.setenv("CPATH", "include:")
    no_build_variables.setenv("LIBRARY_PATH", "")
    found = {}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        no_build_variables.chdir(tmp_path / name)
        found[name] = cache_key({"module.cpp": TINY}, "tiny", CPU)
        assert environment.build_variables() == {
            "CPATH": f"{tmp_path / name / 'include'}:{tmp_path / name}", "LIBRARY_PATH": ""}
    assert found["a"] != found["b"]


def test_a_header_on_cpath_is_not_answered_from_the_cache(tiny, no_build_variables, tmp_path):
    """The one real build: in the process that built `tiny`, a CPATH whose header shadows
    a system one builds again (and fails on it) instead of handing out the cached
    module."""
    shadow = tmp_path / "include"
    shadow.mkdir()
    for header in ("stdlib.h", "cmath", "cstdlib", "cstdint", "cstddef", "vector", "string"):
        (shadow / header).write_text("#error shadowed by CPATH\n")
    no_build_variables.setenv("CPATH", str(shadow))
    with pytest.raises(MdlBuildError, match="shadowed by CPATH"):
        build_extension({"module.cpp": TINY}, "tiny", CPU)
    no_build_variables.delenv("CPATH")
    assert build_extension({"module.cpp": TINY}, "tiny", CPU) == tiny

def test_the_cmakelists_renders_each_variant():
    release = render_cmakelists(["module.cpp"], "m", CPU)
    assert "project(m LANGUAGES CXX)" in release
    # the compiler its flags are for, unless CMake is told another
    assert f'set(CMAKE_CXX_COMPILER "{flags.host_compiler()["path"]}")' in release
    sources = " ".join(f'"{RUNTIME_DIR / s}"' for s in runtime.RUNTIME_SOURCES)
    assert f'pybind11_add_module(m MODULE module.cpp {sources})' in release
    vector_math = "".join(" " + f for f in flags.compile_flags()
                          if f == "-DMDL_LIBMVEC" or f in flags.CLANG_LIBMVEC)
    define = "".join(" " + d for d in blas().defines)
    code = " ".join(flags.code_flags())  # GCC's: -fopenmp -fno-math-errno -fno-tree-sink
    machine = " ".join(flags.machine_flags())  # -march=native, with AVX-512 WIDE_VECTORS
    assert f"target_compile_options(m PRIVATE {code} -O3 {machine} -DNDEBUG{define}" \
        f"{vector_math})" in release
    assert f'"{RUNTIME_DIR}"' in release and str(blas().library) in release
    # `cmake -S DIR -B DIR/build` needs no -D: the emitting Python and its pybind11
    import pybind11
    assert f'set(Python_EXECUTABLE "{sys.executable}")' in release
    assert f'find_package(pybind11 CONFIG REQUIRED HINTS "{pybind11.get_cmake_dir()}")' in release
    assert "BUILD_RPATH" in release
    debug = render_cmakelists(["module.cpp"], "m", CPU, debug=True)
    assert f"PRIVATE {code} -O0 -g{define}{vector_math})" in debug
    assert "set(CMAKE_BUILD_TYPE Debug)" in debug
    glue = (f'set_source_files_properties("{RUNTIME_DIR / runtime.GLUE_SOURCE}" TARGET_DIRECTORY '
            f'm PROPERTIES COMPILE_OPTIONS "{";".join(runtime.glue_optimization())}")')
    assert glue in release and "set_source_files_properties" not in debug
    sanitize = render_cmakelists(["module.cpp"], "m", CPU, sanitize=True)
    assert f"-O0 -g -fsanitize=address,undefined -fno-omit-frame-pointer{define}{vector_math})" \
        in sanitize
    assert f"target_link_options(m PRIVATE {' '.join(flags.link_flags(True)[:1])}" in sanitize


@pytest.mark.parametrize("sources, name", [
    ({"../module.cpp": TINY}, "tiny"),
    ({"CMakeLists.txt": ""}, "tiny"),
    ({"module.f90": ""}, "tiny"),
    ({"module.cpp": TINY}, "not-a-name"),
])
def test_bad_names_are_refused_before_building(sources, name):
    with pytest.raises(ValueError):
        build_extension(sources, name, CPU)


@pytest.mark.parametrize("arguments, message", [
    (dict(dtype="f16"), "dtype 'f16': expected one of f32, f64"),
    (dict(defines={"H": "big"}), "defines['H'] = 'big': a hyper-parameter takes a number, "
     "True or False"),
    (dict(specialize=[{"T": 0, "B": 2}]), "specialize 'T': 0: a dim is a name and its size "
     "an int from 1 to 2147483647"),
    # once built, though mdlc --specialize refuses it: a dim is an i32 in generated code
    (dict(specialize=[{"B": 2**31}]), "specialize 'B': 2147483648: a dim is a name"),
    # once compiled twice, and "compiled for B=3; B=3 too" in help()
    (dict(specialize=[{"B": 3}, {"B": 3}]), "specialize: B=3 is given twice"),
    (dict(name="a-b"), "module name 'a-b' is not a valid Python module name"),
    # an internal error (OSError: File name too long) once
    (dict(name="a" * 300), "module name: a name of 300 characters is too long; the "
     "module's file"),
    (dict(specialize=[{"T": "35"}]), "specialize 'T': '35'"),
    (dict(specialize={"T": 35, "B": 8}), "specialize takes a list of {dim: size} dicts"),
    # once taken: a size C++ truncated, an empty specialization, a string taken as true,
    # and raw TypeError / ValueError / AttributeError from inside
    (dict(specialize=[{"B": 10**23}]), f"specialize 'B': {10**23}"),
    (dict(specialize=[{}]), "a specialization fixes one dim or more"),
    (dict(specialize="T=3"), "specialize takes a list of {dim: size} dicts, e.g. "
     "[{'T': 35, 'B': 8}], got 'T=3'"),
    (dict(vjp="no"), "vjp takes True or False, got 'no'"),
    (dict(profile="no"), "profile takes True or False, got 'no'"),
    (dict(defines={3: 4}), "defines takes a {name: value} dict"),
    (dict(defines="H=4"), "defines takes a {name: value} dict"),
    (dict(name=3), "name takes a module name (a str), got 3"),
    # QA: an empty name built every model of the file
    (dict(model=""), "has no model `` (it has CharLM, CharLMStep, CharLMSample)"),
])
def test_bad_arguments_of_load_are_usage_errors_naming_them(arguments, message):
    """load()'s arguments are checked as the command line's are, before anything builds."""
    from codegen import load
    from dsl import UsageError
    with pytest.raises(UsageError, match=re.escape(message)):
        load(REPO / "examples" / "charlm.mdl", **arguments)


def test_numpy_scalars_are_hyper_parameters_and_sizes_too():
    from codegen.compile.options import BuildOptions
    from dsl import check_file
    np = pytest.importorskip("numpy")
    graph = check_file(str(REPO / "examples" / "charlm.mdl"), model="CharLM",
                       defines={"H": np.int64(8)}).graph
    assert [d.value for d in graph.params["lstm/U"].value.type.shape] == [8, 32]
    assert BuildOptions(specialize=[{"T": np.int32(35)}]).specialize == [{"T": 35}]


def test_a_compile_error_says_what_and_keeps_the_directory(mdl_cache_dir, capsys):
    broken = TINY.replace("tiny", "broken").replace("a + b", "a + c")
    with pytest.raises(MdlBuildError) as info:
        build_extension({"module.cpp": broken}, "broken", CPU, progress=True)
    message = str(info.value)
    kept = mdl_cache_dir / f"failed-{cache_key({'module.cpp': broken}, 'broken', CPU)}"
    assert "building `broken` failed" in message
    assert f"{kept}/src/module.cpp:2:" in message and "error:" in message
    assert "a + c" in message  # the compiler's source excerpt
    assert f"kept at {kept}" in message and "tmp-" not in message
    assert (kept / "src" / "module.cpp").read_text() == broken
    assert "error:" in (kept / "build.log").read_text()
    assert "module.cpp" in (kept / "build.log").read_text().splitlines()[0]  # the command
    assert not (mdl_cache_dir / kept.name.removeprefix("failed-")).exists()
    assert "building broken..." in capsys.readouterr().err  # progress was asked for


def test_a_link_on_a_full_disk_says_so(tmp_path):
    """ld says why a link failed without `error:`; the message quoted only collect2's
    `ld returned 1 exit status` after it, and a full disk went unsaid (a cache on a tmpfs
    of 80 MB, its runtime built, 600 KB free)."""
    from codegen.compile import commands
    kept = tmp_path / "cache" / "failed-0123"
    kept.mkdir(parents=True)
    cache.write_key(kept, {"product": "module", "module": "tiny"})
    log = ("/usr/bin/c++ -shared part0.o -o tiny.so\n"
           "/usr/bin/ld: final link failed: No space left on device\n"
           "collect2: error: ld returned 1 exit status\n")
    message = commands._describe_failure(kept, log)
    said = "/usr/bin/ld: final link failed: No space left on device"
    assert f"the compiler said:\n{said}\ncollect2: error: ld returned 1 exit status\n" \
        in message  # collect2's summary is part of ld's error, not one more
    assert "more error" not in message
    assert f"a disk is full: the build cache's ({tmp_path / 'cache'})" in message
    assert "MDL_CACHE_DIR or TMPDIR" in message
    assert "disk is full" not in commands._describe_failure(kept, log.replace(
        "No space left on device", "file truncated"))


def test_a_link_failing_in_ld_quotes_ld(tmp_path):
    """ld's own line (`cannot find -lmvec`, an option it refuses) has no `error:`: the
    message quoted collect2's `ld returned 1 exit status` alone, which says nothing of
    why. It quotes ld's line, collect2's after it, and counts a second error of ld's."""
    from codegen.compile import commands
    kept = tmp_path / "cache" / "failed-4567"
    kept.mkdir(parents=True)
    cache.write_key(kept, {"product": "module", "module": "tiny"})
    log = ("/usr/bin/c++ -shared part0.o -o tiny.so -lmvec\n"
           "/usr/bin/ld: warning: part0.o: missing .note.GNU-stack section\n"
           "/usr/bin/ld: cannot find -lmvec: No such file or directory\n"
           "/usr/bin/ld: cannot find -lgomp: No such file or directory\n"
           "collect2: error: ld returned 1 exit status\n")
    message = commands._describe_failure(kept, log)
    assert ("the compiler said:\n/usr/bin/ld: cannot find -lmvec: No such file or "
            "directory\n... and 1 more error in the full log\n") in message, message


def test_concurrent_builds_of_one_key_agree(mdl_cache_dir):
    """Two processes build the same new module at once: one compiles, the other waits on
    the lock and then finds the result; both get the same file."""
    source = TINY.replace("tiny", "twin") + f"// {uuid.uuid4()}: a new key even in a kept cache\n"
    code = ("import sys; from codegen.targets.cpu import CPU; "
            "from codegen.compile.extension import build_extension; "
            f"print(build_extension({{'module.cpp': {source!r}}}, 'twin', CPU))")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [proc.communicate(timeout=300) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], [err for _, err in results]
    assert [err for _, err in results] == ["", ""]  # no progress: stderr is no terminal
    paths = {out.strip() for out, _ in results}
    assert len(paths) == 1
    assert load(Path(paths.pop())).add(1, 1) == 2
    assert not list(mdl_cache_dir.glob(f"tmp-{cache_key({'module.cpp': source}, 'twin', CPU)}-*"))


def test_the_runtime_cpp_tests_pass_under_sanitizers(tmp_path):
    """The top-level CMakeLists.txt builds tests/cpp against cpp_runtime/; ctest runs them."""
    import ninja

    import cmake
    bin_dir = Path(cmake.CMAKE_BIN_DIR)
    configure = [bin_dir / "cmake", "-S", REPO, "-B", tmp_path, "-G", "Ninja",
                 f"-DCMAKE_MAKE_PROGRAM={Path(ninja.BIN_DIR) / 'ninja'}",
                 f"-DPython_EXECUTABLE={sys.executable}", "-DMDL_SANITIZE=ON",
                 "-DCMAKE_BUILD_TYPE=Debug"]
    for step in (configure, [bin_dir / "cmake", "--build", tmp_path],
                 [bin_dir / "ctest", "--test-dir", tmp_path, "--output-on-failure"]):
        run = subprocess.run(step, capture_output=True, text=True)
        assert run.returncode == 0, run.stdout + run.stderr
    assert "runtime.test_blas" in run.stdout and "runtime.test_arena" in run.stdout


def test_a_module_named_as_a_cmake_target_configures(tmp_path):
    """all.mdl's emitted CMakeLists.txt named its target `all`, which CMake refuses
    (`The target name "all" is reserved`): the target is mdl_all, the module still all."""
    import ninja

    import cmake
    text = render_cmakelists(["module.cpp"], "all", CPU)
    assert "pybind11_add_module(mdl_all MODULE" in text and "OUTPUT_NAME all)" in text
    (tmp_path / "module.cpp").write_text("")
    (tmp_path / "CMakeLists.txt").write_text(text)
    run = subprocess.run([Path(cmake.CMAKE_BIN_DIR) / "cmake", "-S", tmp_path, "-B",
                          tmp_path / "build", "-G", "Ninja",
                          f"-DCMAKE_MAKE_PROGRAM={Path(ninja.BIN_DIR) / 'ninja'}"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "pybind11_add_module(m MODULE" in render_cmakelists(["module.cpp"], "m", CPU)


def test_an_emitted_project_built_by_another_compiler_says_to_emit_again(tmp_path):
    """QA: an emitted (GCC's) project given -DCMAKE_CXX_COMPILER=clang++ failed on every
    source (`unknown argument: '-fno-tree-sink'`), and `CXX=clang++ cmake` was ignored."""
    import ninja

    import cmake
    other = "clang++" if flags.host_compiler()["gcc"] else "g++"
    if shutil.which(other) is None:
        pytest.skip(f"needs {other}, the other compiler than this session's")
    (tmp_path / "module.cpp").write_text("")
    (tmp_path / "CMakeLists.txt").write_text(render_cmakelists(["module.cpp"], "m", CPU))
    run = subprocess.run([Path(cmake.CMAKE_BIN_DIR) / "cmake", "-S", tmp_path, "-B",
                          tmp_path / "build", "-G", "Ninja",
                          f"-DCMAKE_MAKE_PROGRAM={Path(ninja.BIN_DIR) / 'ninja'}"],
                         capture_output=True, text=True, env={**os.environ, "CXX": other})
    said = " ".join(run.stderr.split())
    assert run.returncode != 0 and "this project was emitted for " in said, run.stderr
    assert "emit it again with that one (CXX=" in said and other in said


def test_mdl_add_model_checks_its_target_and_source_when_configured(tmp_path):
    """QA: mdl_add_model(TARGET all ...) failed in CMake's and pybind11's files; TARGET
    my-net, or a SOURCE not there, only at build time, after the runtime compiled. A
    target CMake keeps builds as mdl_NAME, the module still NAME, as `mdlc emit`'s does;
    the others are errors of the configure, each call's."""
    import ninja

    import cmake
    (tmp_path / "tiny.mdl").write_text(TINY_MODEL)
    cmake_bin = Path(cmake.CMAKE_BIN_DIR) / "cmake"

    def configure(calls: str, name: str) -> subprocess.CompletedProcess:
        (tmp_path / name).mkdir()
        (tmp_path / name / "CMakeLists.txt").write_text(
            "cmake_minimum_required(VERSION 3.25)\nproject(demo LANGUAGES CXX)\n"
            f'include("{REPO / "cmake" / "mdl.cmake"}")\n' + calls)
        return subprocess.run([cmake_bin, "-S", tmp_path / name, "-B", tmp_path / name / "b",
                               "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={Path(ninja.BIN_DIR) / 'ninja'}",
                               f"-DPython_EXECUTABLE={sys.executable}"],
                              capture_output=True, text=True)

    tiny = tmp_path / "tiny.mdl"
    run = configure(f'mdl_add_model(TARGET all SOURCE "{tiny}")\n', "reserved")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ninja_file = (tmp_path / "reserved" / "b" / "build.ninja").read_text()
    assert "build mdl_all:" in ninja_file and f"all{EXT_SUFFIX}" in ninja_file
    run = configure(f'mdl_add_model(TARGET my-net SOURCE "{tiny}")\n'
                    f'mdl_add_model(TARGET net SOURCE "{tmp_path / "nothere.mdl"}")\n', "bad")
    assert run.returncode != 0
    errors = " ".join(run.stderr.split())
    assert ("mdl_add_model(my-net): TARGET is the module's name: module name 'my-net' is "
            "not a valid Python module name") in errors, run.stderr
    assert f"mdl_add_model(net): SOURCE {tmp_path / 'nothere.mdl'} is not a file" in errors
    assert "pybind11" not in run.stderr and "Traceback" not in run.stderr


def test_mdl_cmake_with_a_python_without_mdl_says_so(tmp_path):
    """QA: include(mdl.cmake) with a Python lacking mdl's dependencies showed a traceback
    and CMake's `execute_process failed command indexes`."""
    import ninja

    import cmake
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", tmp_path / "bare"],
                   check=True)
    bare = tmp_path / "bare" / "bin" / "python"
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\nproject(demo LANGUAGES CXX)\n"
        f'include("{REPO / "cmake" / "mdl.cmake"}")\n')
    run = subprocess.run([Path(cmake.CMAKE_BIN_DIR) / "cmake", "-S", tmp_path, "-B",
                          tmp_path / "b", "-G", "Ninja",
                          f"-DCMAKE_MAKE_PROGRAM={Path(ninja.BIN_DIR) / 'ninja'}",
                          f"-DPython_EXECUTABLE={bare}"], capture_output=True, text=True)
    said = " ".join(run.stderr.split())
    assert run.returncode != 0 and "Traceback" not in run.stderr, run.stderr
    assert (f"mdl.cmake: {bare} cannot run mdl (ModuleNotFoundError: No module named "
            "'lark'): install mdl's dependencies into it") in said, run.stderr


def test_a_cmake_project_builds_a_model_that_imports_and_runs(tmp_path):
    """cmake/mdl.cmake as docs/build.md shows it: mdl_add_model compiles a model into a
    module that imports, runs, and saves a checkpoint (write_npz: a module failed to import
    without it when it was a file mdl::python did not compile). With no build type, every
    file is compiled at -O3 (mdl's product kernels were at CMake's none: -O0), but the
    pybind11 glue, at what mdl's own builds give it (GLUE_OPTIMIZATION); every file for
    this CPU as mdl's own builds are (machine_flags)."""
    import ninja

    import cmake
    (tmp_path / "tiny.mdl").write_text(TINY_MODEL)
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\nproject(demo LANGUAGES CXX)\n"
        f'include("{REPO / "cmake" / "mdl.cmake"}")\n'
        "mdl_add_model(TARGET tinymod SOURCE tiny.mdl DEFINES H=3)\n")
    bin_dir, build = Path(cmake.CMAKE_BIN_DIR), tmp_path / "build"
    for step in ([bin_dir / "cmake", "-S", tmp_path, "-B", build, "-G", "Ninja",
                  f"-DCMAKE_MAKE_PROGRAM={Path(ninja.BIN_DIR) / 'ninja'}",
                  f"-DPython_EXECUTABLE={sys.executable}"],
                 [bin_dir / "cmake", "--build", build]):
        run = subprocess.run(step, capture_output=True, text=True)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    commands = subprocess.run([Path(ninja.BIN_DIR) / "ninja", "-C", build, "-t", "commands"],
                              capture_output=True, text=True, check=True).stdout
    compiles = {Path(c[c.index("-c") + 1]).name: c for c in
                (line.split() for line in commands.splitlines() if " -c " in line)}
    assert {"products.cpp", "python_module.cpp", "module.cpp"} <= compiles.keys()
    # MDL_NATIVE: -march=native, and with AVX-512 its 512-bit vectors, as mdl's own builds
    assert all(set(flags.machine_flags()) <= set(c) for c in compiles.values()), compiles
    glue = compiles.pop(Path(runtime.GLUE_SOURCE).name)
    assert [f for f in glue if f.startswith("-O")] == [runtime.GLUE_OPTIMIZATION[0]], glue
    assert set(runtime.glue_optimization()) <= set(glue)  # CMake's c++ is mdl's here
    assert all("-O3" in c for c in compiles.values()), \
        [name for name, c in compiles.items() if "-O3" not in c]
    script = ("import numpy as np, tinymod; m = tinymod.Tiny(seed=0); "
              "y = m.forward(x=np.ones((2, 3), np.float32))['y']; "
              f"m.save({str(tmp_path / 'tiny.npz')!r}); print(y.shape)")
    run = subprocess.run([sys.executable, "-c", script], cwd=build, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "(2, 4)" and (tmp_path / "tiny.npz").is_file()


def test_a_build_killed_midway_leaves_the_cache_usable(mdl_cache_dir):
    """A process killed while compiling leaves a tmp- directory and a released lock; the
    next build of that key clears them and succeeds."""
    source = SLOW_TINY.replace("tiny", "killed") + f"// {uuid.uuid4()}\n"
    key = cache_key({"module.cpp": source}, "killed", CPU)
    code = ("from codegen.targets.cpu import CPU; from codegen.compile.extension import build_extension; "
            f"build_extension({{'module.cpp': {source!r}}}, 'killed', CPU)")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 120
    while not list(mdl_cache_dir.glob(f"tmp-{key}-*/src/module.cpp")):
        assert proc.poll() is None and time.monotonic() < deadline, "the build never started"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the compiler too
    proc.wait()
    built = build_extension({"module.cpp": source}, "killed", CPU)
    assert load(built).add(2, 2) == 4
    assert not list(mdl_cache_dir.glob(f"tmp-{key}-*"))


def _command(pid: int) -> str:
    """`pid`'s command line, its words joined by spaces; "" once it ended."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().replace("\0", " ")
    except OSError:
        return ""


def _commands_naming(text: str) -> list[int]:
    """The processes whose command line holds `text`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def _build_until_it_compiles(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """mdlc building the char LM (a key of its own), once a compiler of it runs: the
    process and the build's folder in the cache."""
    hidden = 40 + uuid.uuid4().int % 1000  # a key of its own
    proc = subprocess.Popen([sys.executable, "-m", "codegen.cli", "build",
                             str(REPO / "examples" / "charlm.mdl"), "--model", "CharLM",
                             "-D", f"H={hidden}", "-o", str(tmp_path)],
                            env={**os.environ, "PYTHONPATH": str(REPO), "MDL_BUILD_JOBS": "1"},
                            stderr=subprocess.PIPE, text=True,
                            # (SIGINT at its default: a job run in the background starts
                            # with it ignored, and mdlc would never see it)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 180
    work = []
    while not work:  # until a compiler of this build runs: its folder in the cache
        for pid in descendants(proc.pid):
            try:
                words = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
            except OSError:
                continue
            work += [Path(w).parent.parent for w in words if "/tmp-" in w and
                     w.endswith(".cpp") and Path(w).parent.name == "src"]
        assert proc.poll() is None and time.monotonic() < deadline, "no compile was seen"
        time.sleep(0.01)
    return proc, work[0]


@pytest.mark.parametrize("how, status, said", [(signal.SIGINT, 130, "mdlc: interrupted"),
                                               (signal.SIGTERM, 143, "mdlc: terminated")])
def test_a_build_signalled_alone_ends_its_compilers_and_cleans_up(mdl_cache_dir, tmp_path,
                                                                  how, status, said):
    """SIGINT or SIGTERM sent to mdlc alone (not its process group: an IDE's stop, a
    notebook's interrupt, `timeout`): its compilers end with it, and no temporary directory
    stays in the cache. Killing the driver alone once left cc1plus compiling for seconds,
    and SIGTERM left the directory too."""
    proc, work = _build_until_it_compiles(tmp_path)
    os.kill(proc.pid, how)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == status and err.strip().endswith(said), err
    time.sleep(0.2)
    assert _commands_naming(str(work)) == []
    assert not work.exists()


def _running(pid: int) -> bool:
    """Whether `pid` is a process, and not one that ended unwaited for (a zombie)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_build_killed_alone_ends_its_compilers(tmp_path):
    """SIGKILL sent to the building Python alone (the OOM killer, `kill -9`) runs nothing of
    mdl's: its compilers went on into a folder nobody would use. The build step's watchdog
    (process_tree.py) ends them, and what they started. A `compiler` here runs 60 s."""
    code = ("import sys; from pathlib import Path; from codegen.compile.commands import "
            "run_commands; run_commands(Path(sys.argv[1]), [['sh', '-c', 'sleep 60; echo "
            "compiled']], 'step', False)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)],
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 60
    while "sleep 60 " not in map(_command, started := descendants(proc.pid)):
        assert proc.poll() is None and time.monotonic() < deadline, "the step never ran"
        time.sleep(0.01)
    # the build tells its watchdog a driver's pid right after starting it: some time for
    # that to be done (a SIGKILL between the two leaves that driver unwatched)
    time.sleep(0.5)
    started = [pid for pid in started if "process_tree" not in _command(pid)]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while alive := [pid for pid in started if _running(pid)]:
        assert time.monotonic() < deadline, f"the compiler outlived the build: {alive}"
        time.sleep(0.05)


def test_a_build_step_that_ends_leaves_no_watchdog(tmp_path):
    """The watchdog of a build step that ends goes with it, ending nothing."""
    run_commands(tmp_path, [["sh", "-c", "echo compiled"]], "step", False)
    mine = [pid for pid in descendants(os.getpid()) if pid in _commands_naming("process_tree")]
    assert mine == []
    assert "compiled" in (tmp_path / "build.log").read_text()


@pytest.mark.parametrize("damage", ["truncated", "overwritten"])
def test_a_damaged_module_in_the_cache_is_built_again(tmp_path, damage):
    """key.json records the module's size and sha256: a module truncated (which crashed
    its importer with SIGBUS) or overwritten since is a miss, built again, and imports."""
    source = TINY.replace("tiny", "damaged") + f"// {uuid.uuid4()}\n"
    built = build_extension({"module.cpp": source}, "damaged", CPU)
    whole = built.read_bytes()
    if damage == "truncated":
        os.truncate(built, 1000)
    else:
        built.write_bytes(bytes(len(whole)))
    assert not cache.intact(built)
    assert build_extension({"module.cpp": source}, "damaged", CPU) == built
    assert cache.intact(built) and built.stat().st_size == len(whole)
    shutil.copyfile(built, tmp_path / built.name)  # imported apart: a bad one kills Python
    run = subprocess.run([sys.executable, "-c", "import damaged; print(damaged.add(2, 3))"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout == "5\n", run.stderr


def _product(made: list):
    def make(work: Path, final: Path) -> None:
        cache.write_key(work, {"product": "test"})
        (work / "p.o").write_bytes(b"o")
        made.append(work)
    return make


def test_abandoned_temporary_directories_of_other_keys_are_swept(tmp_path, monkeypatch):
    """A build killed (SIGKILL) leaves tmp-KEY-*; once an edit changed the key, nothing
    removed it. A miss sweeps those whose key's lock nobody holds; a running build's stays."""
    import fcntl
    monkeypatch.setenv("MDL_CACHE_DIR", str(tmp_path))
    (tmp_path / "locks").mkdir()
    dead, running = uuid.uuid4().hex, uuid.uuid4().hex
    (tmp_path / f"tmp-{dead}-abc" / "src").mkdir(parents=True)
    (tmp_path / f"tmp-{running}-def" / "src").mkdir(parents=True)
    with open(tmp_path / "locks" / f"{running}.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        cache.cached(uuid.uuid4().hex, "p.o", _product([]))
        assert not (tmp_path / f"tmp-{dead}-abc").exists()
        assert (tmp_path / f"tmp-{running}-def" / "src").is_dir()


@pytest.mark.parametrize("terminal", [True, False])
def test_a_wait_for_another_build_says_so_on_a_terminal(tmp_path, monkeypatch, capsys,
                                                        terminal):
    """Behind a build that holds the key's lock (stopped with Ctrl-Z, say), a build once
    waited without a word. Where stderr is no terminal it stays quiet, as the progress
    line does (concurrent builds' logs)."""
    import fcntl
    import threading
    monkeypatch.setenv("MDL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal)
    key, made = uuid.uuid4().hex, []
    (tmp_path / "locks").mkdir()
    with open(tmp_path / "locks" / f"{key}.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        waiting = threading.Thread(target=cache.cached, args=(key, "p.o", _product(made)))
        waiting.start()
        time.sleep(1.5)
        assert made == [] and waiting.is_alive()
    waiting.join(30)
    assert len(made) == 1
    said = ("mdl: waiting for another process's build of the same product (it holds "
            f"{tmp_path / 'locks' / key}.lock)")
    assert (said in capsys.readouterr().err) == terminal


def test_a_truncated_file_beside_a_product_is_a_miss(mdl_cache_dir):
    """The runtime's precompiled header (57 MB: too large to hash at every build) is
    recorded by its size: truncated, it failed every model's build ("while reading
    precompiled header") until someone found the cache entry; now the runtime is a miss."""
    made = []

    def make(work: Path, final: Path) -> None:
        cache.write_key(work, {"product": "runtime-like"})
        (work / "runtime.o").write_bytes(b"o" * 10)
        (work / "pre").mkdir()
        (work / "pre" / "h.gch").write_bytes(b"h" * 1000)
        made.append(work)
    key, also = uuid.uuid4().hex, ("pre/h.gch",)
    built = cache.cached(key, "runtime.o", make, also)
    assert cache.cached(key, "runtime.o", make, also) == built and len(made) == 1
    os.truncate(built.parent / "pre" / "h.gch", 100)
    assert not cache.intact(built)
    assert cache.cached(key, "runtime.o", make, also) == built and len(made) == 2
    assert (built.parent / "pre" / "h.gch").stat().st_size == 1000 and cache.intact(built)


@pytest.mark.parametrize("error, why", [
    (errno.ENOSPC, "the disk is full"),
    (errno.EROFS, "it is on a read-only file system"),
    (errno.EACCES, "it is not writable for this user"),
])
def test_an_unusable_cache_is_a_clear_error_naming_it(tmp_path, monkeypatch, error, why):
    monkeypatch.setenv("MDL_CACHE_DIR", str(tmp_path / "cache"))

    def refuse(*args, **kwargs):
        raise OSError(error, os.strerror(error), str(tmp_path / "cache" / "tmp-x"))
    monkeypatch.setattr(cache.tempfile, "mkdtemp", refuse)
    with pytest.raises(MdlBuildError) as info:
        build_extension({"module.cpp": TINY + "// unusable\n"}, "tiny", CPU)
    message = str(info.value)
    assert f"cannot use the build cache {tmp_path / 'cache'}: {why}" in message
    assert "MDL_CACHE_DIR" in message


def test_a_cache_path_that_is_a_file_is_a_clear_error(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("MDL_CACHE_DIR", str(tmp_path / "file" / "cache"))
    with pytest.raises(MdlBuildError, match=f"cannot use the build cache {tmp_path / 'file'}"):
        build_extension({"module.cpp": TINY}, "tiny", CPU)


# ---- the emulated cuda toolchain: the commands it runs (its device is tests/test_emulator.py's)
EMULATED = str(RUNTIME_DIR / "emulated")


def _includes(command: list[str]) -> list[str]:
    return [arg[2:] for arg in command if arg.startswith("-I")]


@pytest.mark.parametrize("debug, optimize", [(False, "-O1"), (True, "-O0")])
def test_the_emulated_toolchain_compiles_the_generated_cuda_as_cpp(debug, optimize):
    """The host compiler's flags, the model's code at -O1 where a release build of the
    cpu target has -O3 (it checks kernels; EmulatedCudaToolchain.flags); the emulated
    headers first; the runtime and the emulated device linked."""
    linked = Linked((Path("/c/mdl_runtime.o"), Path("/c/mdl_emulated_cuda.o")),
                    (Path("/c/precompiled"),))
    command = EMULATED_CUDA.compile("/w/src/kernels.cu", [], linked, Path("/w/part0.o"),
                                    Path("/final"), debug, False)
    assert command[0] == flags.host_compiler()["path"]  # no nvcc
    host = [optimize if flag == "-O3" else flag for flag in flags.compile_flags(debug)]
    assert command[1:1 + len(host)] == host
    assert optimize in command and "-O3" not in command and ("-g" in command) == debug
    assert _includes(command)[:3] == [EMULATED, "/c/precompiled", str(RUNTIME_DIR)]
    assert command[-6:] == ["-c", "-x", "c++", "/w/src/kernels.cu", "-o", "/w/part0.o"]
    link = EMULATED_CUDA.link([Path("/w/part0.o")], linked, Path("/w/m.so"), debug, False)
    assert link[0] == flags.host_compiler()["path"] and "-shared" in link
    objects = link.index("/w/part0.o")
    assert link[objects:objects + 3] == ["/w/part0.o", "/c/mdl_runtime.o",
                                         "/c/mdl_emulated_cuda.o"]
    assert link[-2:] == ["-ldl", "-lpthread"]
    assert link[-len(flags.link_flags(False)) - 2:-2] == flags.link_flags(False)
    assert not any("cublas" in arg or "cudart" in arg for arg in command + link)


def test_the_emulated_device_is_two_runtime_objects_compiled_as_cpp(tmp_path, monkeypatch):
    """cuda_device.cu and the emulator's scheduler, compiled as the generated code is, then
    linked into mdl_emulated_cuda.o; the emulator's other sources into mdl_emulator.o,
    which a sanitized build shares (recorded here, not run)."""
    monkeypatch.setenv("MDL_CACHE_DIR", str(tmp_path))
    commands = _recorded(monkeypatch)
    linked = EMULATED_CUDA.runtime(False, False, False)
    assert [p.name for p in linked.objects] == ["mdl_runtime.o", "mdl_emulated_cuda.o",
                                                "mdl_emulator.o"]
    assert linked.includes == (linked.objects[0].parent / runtime.PRECOMPILED,)
    device = [c for c in commands if "-c" in c and EMULATED in _includes(c)]
    compiled = sorted(Path(c[c.index("-c") + 1]).name for c in device)
    emulator = sorted(p.name for p in (RUNTIME_DIR / "src" / "emulator").glob("*.cpp"))
    assert compiled == sorted(["cuda_device.cu", *emulator]) and emulator
    for command in device:
        assert command[0] == flags.host_compiler()["path"]
        assert _includes(command)[0] == EMULATED
        assert command.index("c++") == command.index("-x") + 1 < command.index("-c")
        assert "-O3" in command and "-march=native" in command
    # (the host's runtime is built beside it, on another thread: its commands interleave)
    link, = [c for c in commands if c[-1].endswith("/mdl_emulated_cuda.o")]
    assert link[1:3] == ["-r", "-nostdlib"]
    assert sorted(Path(o).name for o in link[3:-2]) == ["cuda_device.o", "scheduler.o"]
    link, = [c for c in commands if c[-1].endswith("/mdl_emulator.o")]
    assert sorted(Path(o).name for o in link[3:-2]) == sorted(
        Path(name).stem + ".o" for name in emulator if name != "scheduler.cpp")
    # sanitized: the kernels and the scheduler again, the emulator's other sources found
    commands.clear()
    sanitized = EMULATED_CUDA.runtime(False, True, False)
    assert sanitized.objects[2] == linked.objects[2]
    assert sanitized.objects[1] != linked.objects[1]
    again = sorted(Path(c[c.index("-c") + 1]).name for c in commands
                   if "-c" in c and EMULATED in _includes(c))
    assert again == ["cuda_device.cu", "scheduler.cpp"]


def test_the_emulated_runtimes_key_names_its_sources(tmp_path, monkeypatch):
    """mdl_emulated_cuda.o held every emulator source before mdl_emulator.o took all but
    the scheduler, with the same flags and runtime files: found in a cache of then (the
    fuzzer's, here), it was linked with the new object, every emulator function defined
    twice. Its key names the sources it compiles."""
    from codegen.compile import toolchain
    monkeypatch.setenv("MDL_CACHE_DIR", str(tmp_path))
    _recorded(monkeypatch)
    made = {}

    def record(product, fields, units, *args, **kwargs):
        made[product] = (fields, [source.name for _, source in units])
        return real(product, fields, units, *args, **kwargs)
    real = toolchain.runtime_object
    monkeypatch.setattr(toolchain, "runtime_object", record)
    EMULATED_CUDA.runtime(False, False, False)
    fields, sources = made[toolchain.EMULATED_RUNTIME_OBJECT]
    assert fields["sources"] == sources == ["cuda_device.cu", "scheduler.cpp"]


def test_only_the_scheduler_reads_the_emulators_tsan_define():
    """The emulator's sources but TSAN_EMULATOR_SOURCES are one object for a sanitized
    build and a plain one: a source among them reading MDL_EMULATOR_TSAN would be
    compiled without it for --sanitize."""
    from codegen.compile.toolchain import TSAN_EMULATOR_SOURCES
    emulator = RUNTIME_DIR / "src" / "emulator"
    reading = sorted(p.name for p in [*emulator.glob("*.cpp"), *emulator.glob("*.h")]
                     if "MDL_EMULATOR_TSAN" in p.read_text())
    assert reading == sorted(TSAN_EMULATOR_SOURCES)


def test_the_device_runtime_is_built_beside_the_hosts(tmp_path, monkeypatch):
    """A GPU target's runtime object compiles on a thread of its own while the host's
    runtime compiles (neither needs the other); a failure of either is the build's error:
    the device's raised once it has ended, the host's once the device's compilers are
    killed."""
    monkeypatch.setenv("MDL_CACHE_DIR", str(tmp_path))
    spans: dict[str, list[float]] = {}

    def record(work, cmds, label, *_):
        start = time.monotonic()
        time.sleep(0.3)
        for command in cmds:
            Path(command[command.index("-o") + 1]).touch()
        spans.setdefault(label, []).append(start)
        spans[label].append(time.monotonic())
    monkeypatch.setattr(runtime, "run_commands", record)
    # (the host's probe of its compiler, a real compile and link, would start it late)
    monkeypatch.setattr(runtime, "check_compiler", lambda work: None)
    EMULATED_CUDA.runtime(False, False, False)
    host = spans["building the mdl runtime (once per cache)"]
    device = spans["building the mdl emulated cuda runtime (once per cache)"]
    assert device[0] < host[1] and host[0] < device[1]  # at once
    ended = []

    def late():
        time.sleep(0.3)
        ended.append("late")
        raise MdlBuildError("the device's object failed")
    with pytest.raises(MdlBuildError, match="the device's object failed"):
        side_by_side(late, lambda: "host", "waiting", False)
    assert ended == ["late"]
    with pytest.raises(ValueError, match="the host's"):
        side_by_side(lambda: ended.append("device"), lambda: int("the host's"), "w", False)
    assert ended == ["late", "device"]
    # the host's side failing (or Ctrl-C) kills the device's compilers, never waits on them
    begun = time.monotonic()
    with pytest.raises(ValueError, match="the host's"):
        side_by_side(lambda: run_commands(tmp_path, [["sleep", "37.25"]], "s", False),
                     lambda: time.sleep(0.3) or int("the host's"), "w", False)
    assert time.monotonic() - begun < 10
    assert subprocess.run(["pgrep", "-f", "sleep 37.25"], capture_output=True).returncode == 1


def test_a_sanitized_emulated_cuda_build_is_thread_sanitized_and_keyed_apart():
    """`--emulate --sanitize`: the kernels under ThreadSanitizer (races between CUDA
    threads, tests/test_emulator_races.py), not AddressSanitizer, whose runtime cannot
    share a process with it; nvcc builds still refuse --sanitize, naming --emulate."""
    sanitized = EMULATED_CUDA.fields(False, True)
    assert "-fsanitize=thread" in sanitized["flags"] and "-g" in sanitized["flags"]
    assert not any("address" in f for f in sanitized["flags"] + sanitized["link"])
    assert "-fsanitize=thread" in sanitized["link"]
    assert "-fsanitize=thread" not in EMULATED_CUDA.fields(False, False)["flags"]
    sources = {"module.cu": "// the same text\n"}
    assert (cache_key(sources, "m", EMULATED_CUDA_TARGET, sanitize=True)
            != cache_key(sources, "m", EMULATED_CUDA_TARGET))
    with pytest.raises(UsageError, match="with --emulate to check its kernels for races"):
        NVCC.check(True)


def test_a_sanitized_emulated_build_is_refused_where_no_process_could_import_it(monkeypatch):
    """Without a ThreadSanitizer runtime that starts a process here (none shipped, or
    Clang 14's, which ended every process at once on this kind of machine), the build is
    refused before anything compiles, saying why."""
    from codegen.compile import sanitizers

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled")
    monkeypatch.setattr(extension, "run_commands", no_compile)
    monkeypatch.setattr(runtime, "run_commands", no_compile)
    monkeypatch.setattr(sanitizers, "tsan_runtime", lambda: "libtsan.so")
    sanitizers.tsan_refusal.cache_clear()
    try:
        with pytest.raises(UsageError, match=r"^--sanitize with --emulate builds for "
                           r"ThreadSanitizer, and .* ships no ThreadSanitizer runtime: build "
                           r"without --sanitize, or with GCC \(CXX=g\+\+\)$"):
            build_extension({"module.cu": ""}, "m", EMULATED_CUDA_TARGET, sanitize=True)
    finally:
        sanitizers.tsan_refusal.cache_clear()


def test_each_toolchain_has_keys_of_its_own():
    sources = {"module.cu": "// the same text\n"}
    keys = {cache_key(sources, "m", t, debug=debug)
            for t in (CPU, EMULATED_CUDA_TARGET) for debug in (False, True)}
    assert len(keys) == 4
    assert EMULATED_CUDA.fields(False, False)["toolchain"] == "emulated-cuda"


def test_the_emitted_cmake_project_compiles_in_parts(tmp_path, monkeypatch):
    """`mdlc emit` writes a file a part (the part's units as #defines, then the whole
    source included) and its CMakeLists.txt compiles those side by side; the module
    imports and computes what a module from mdl's own build does."""
    import ninja
    import numpy as np

    import cmake
    from codegen import cli
    from codegen.pipeline import load
    monkeypatch.setenv("MDL_BUILD_JOBS", "3")
    charlm = REPO / "examples" / "charlm.mdl"
    out = tmp_path / "emitted"
    assert cli.main(["emit", str(charlm), "-o", str(out), "--name", "charlm_parts"]) == 0
    parts = sorted(p.name for p in out.glob("module.part*.cpp"))
    assert parts == ["module.part0.cpp", "module.part1.cpp", "module.part2.cpp"]
    lists = (out / "CMakeLists.txt").read_text()
    assert "MODULE module.part0.cpp module.part1.cpp module.part2.cpp " in lists
    assert " module.cpp " not in lists          # included by the parts, never compiled alone
    bin_dir = Path(cmake.CMAKE_BIN_DIR)
    for step in ([bin_dir / "cmake", "-S", out, "-B", out / "build", "-G", "Ninja",
                  f"-DCMAKE_MAKE_PROGRAM={Path(ninja.BIN_DIR) / 'ninja'}"],
                 [bin_dir / "cmake", "--build", out / "build"]):
        run = subprocess.run(step, capture_output=True, text=True)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    script = ("import sys, numpy as np, charlm_parts; m = charlm_parts.CharLM(seed=3); "
              "t = np.arange(12, dtype=np.int32).reshape(4, 3) % 96; "
              "out = m.forward(tokens=t, targets=t, lengths=np.full(3, 4, np.int32)); "
              "np.save(sys.argv[1], out['loss'])")
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path / "loss.npy")],
                         cwd=out / "build", capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    t = np.arange(12, dtype=np.int32).reshape(4, 3) % 96
    own = load(charlm).CharLM(seed=3).forward(tokens=t, targets=t,
                                               lengths=np.full(3, 4, np.int32))["loss"]
    assert np.load(tmp_path / "loss.npy") == own


def test_a_compiler_without_the_openmp_runtime_a_module_needs_is_named(monkeypatch, tmp_path):
    """A compiler that cannot build and link OpenMP code with the runtime a module links
    (Clang without its libomp package, docs/build.md "Compilers") is refused before the
    runtime's build, saying what to install."""
    monkeypatch.setattr(runtime, "openmp_library", lambda: "mdl_no_such_omp")
    with pytest.raises(MdlBuildError, match="does not build OpenMP code with -fopenmp and "
                                            "libmdl_no_such_omp .*: install"):
        runtime.check_compiler(tmp_path)
