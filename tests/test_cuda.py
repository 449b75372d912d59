"""The cuda target (docs/cuda.md). Wherever nvcc is installed (CI has it, but no GPU):
every example builds for it, the generated CUDA compiled and linked with the runtime and
cuBLAS, and its module imports; without a GPU, making a model raises the documented
RuntimeError, and nothing crashes. With a GPU: every example against the reference
interpreter, as tests/test_native.py checks the cpu target."""
from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_native import MODELS, assert_example_matches

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
FILES = sorted({file for file, _ in MODELS})
NO_DEVICE = "no CUDA device was found"


def _nvcc_missing() -> str | None:
    from codegen.ir.diagnostics import MdlBuildError
    try:
        from codegen.compile.cuda_toolkit import toolkit
        toolkit()
    except MdlBuildError as exc:
        return str(exc)
    return None


pytestmark = pytest.mark.skipif(_nvcc_missing() is not None,
                                reason=f"no CUDA toolkit: {_nvcc_missing()}")


def build(file: str, dtype: str):
    """`file`'s module for the cuda target in `dtype` (one nvcc build)."""
    from codegen.pipeline import load
    return load(EXAMPLES / file, target="cuda", dtype=dtype,
                name=f"{Path(file).stem}_{dtype}_cuda")


@pytest.fixture(scope="session")
def gpu() -> bool:
    """Whether a model can run here: making one raises the no-device error otherwise."""
    try:
        build("towers.mdl", "f32").Towers(seed=0)
    except RuntimeError as exc:
        assert str(exc).startswith(NO_DEVICE), exc
        return False
    return True


def built_dtypes(file: str, gpu: bool) -> tuple[str, ...]:
    """The dtypes `file` is built in: both on a GPU, which runs them; without one, where
    the builds are only compiled and linked, one each, f32 and f64 in turn down the sorted
    files, so that nvcc still compiles both across the examples at half the builds (the
    emulated device runs every example's CUDA in both: tests/test_cuda_emulated.py)."""
    return ("f32", "f64") if gpu else (("f32", "f64")[FILES.index(file) % 2],)


@pytest.fixture(scope="session")
def cuda_modules(gpu) -> dict:
    """The examples' modules for the cuda target in their `built_dtypes`: {(file, dtype):
    module}, built up to eight at a time (each build is one nvcc)."""
    keys = [(file, dtype) for file in FILES for dtype in built_dtypes(file, gpu)]
    with ThreadPoolExecutor(min(8, os.cpu_count() or 2)) as pool:
        return dict(zip(keys, pool.map(lambda key: build(*key), keys)))


@pytest.mark.parametrize("file, model", MODELS, ids=[f"{f}:{m}" for f, m in MODELS])
def test_every_example_builds_and_imports(cuda_modules, gpu, file, model):
    for dtype in built_dtypes(file, gpu):
        module = cuda_modules[(file, dtype)]
        assert Path(module.__file__).name.startswith(f"{Path(file).stem}_{dtype}_cuda")
        cls = getattr(module, model)
        if not gpu:
            with pytest.raises(RuntimeError, match=f"^{NO_DEVICE}.*--target cpu"):
                cls(seed=0)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("file, model", MODELS, ids=[f"{f}:{m}" for f, m in MODELS])
def test_example_matches_the_reference_on_the_gpu(cuda_modules, gpu, file, model, dtype):
    if not gpu:
        pytest.skip("no CUDA device here: the cuda target was built and linked only")
    assert_example_matches(cuda_modules[(file, dtype)], file, model, dtype)


def mdlc(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "codegen.cli", *args], capture_output=True,
                          text=True, timeout=600, cwd=cwd)


def test_the_cli_builds_and_emits_for_cuda(tmp_path, cuda_modules, gpu):
    done = mdlc("build", str(EXAMPLES / "towers.mdl"), "--target", "cuda", "-o", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).is_file()
    done = mdlc("emit", str(EXAMPLES / "towers.mdl"), "--target", "cuda", "-o",
                str(tmp_path / "emitted"))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "emitted").iterdir()) == [
        "CMakeLists.txt", "kernels.cu", "module.cpp", "towers.pyi"]
    cmake = (tmp_path / "emitted" / "CMakeLists.txt").read_text()
    assert "LANGUAGES CXX CUDA" in cmake and "cuda_device.cu" in cmake
    # the kernels in kernels.cu; module.cpp, plain C++, declares and launches them
    kernels = (tmp_path / "emitted" / "kernels.cu").read_text()
    host = (tmp_path / "emitted" / "module.cpp").read_text()
    assert "__global__" in kernels and "__global__" not in host
    assert "void infer_0_k0(" in host and "mdl::cuda::launch(infer_0_k0," in host


@pytest.mark.parametrize("command", [["gradcheck"], ["profile", "--dims", "T=3,B=2",
                                                      "--calls", "1"]])
def test_gradcheck_and_profile_on_cuda(cuda_modules, gpu, command):
    """Without a GPU a clean error (exit 2, no traceback; profile's was an internal error);
    with one, the gradients check and the profile is made."""
    done = mdlc(command[0], str(EXAMPLES / "gru.mdl"), "--target", "cuda", *command[1:])
    if gpu:
        assert done.returncode == 0, done.stdout + done.stderr
        return
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"mdlc: error: {NO_DEVICE}"), done.stderr
    assert "Traceback" not in done.stderr


def test_the_emitted_cmake_project_builds_with_cmakes_cuda_language(tmp_path, gpu):
    """`mdlc emit --target cuda` writes a CMake project (LANGUAGES CXX CUDA) that builds
    the same module; it finds the emitting Python and its pybind11 by itself."""
    import ninja

    import cmake
    from codegen.compile.cuda_toolkit import toolkit
    done = mdlc("emit", str(EXAMPLES / "towers.mdl"), "--target", "cuda", "-o",
                str(tmp_path / "src"))
    assert done.returncode == 0, done.stderr
    bin_dir = Path(cmake.CMAKE_BIN_DIR)
    for step in ([bin_dir / "cmake", "-S", tmp_path / "src", "-B", tmp_path / "build", "-G",
                  "Ninja", f"-DCMAKE_MAKE_PROGRAM={Path(ninja.BIN_DIR) / 'ninja'}",
                  f"-DCMAKE_CUDA_COMPILER={toolkit().nvcc}"],
                 [bin_dir / "cmake", "--build", tmp_path / "build"]):
        run = subprocess.run(step, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout + run.stderr
    check = ("import towers\ntry:\n    towers.Towers(seed=0)\n    print('made')\n"
             "except RuntimeError as exc:\n    print(exc)\n")
    run = subprocess.run([sys.executable, "-c", check], cwd=tmp_path / "build",
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("made" if gpu else NO_DEVICE), run.stdout


def test_nvcc_builds_have_keys_of_their_own():
    """The same sources built by nvcc, by the emulated toolchain and by the host compiler
    are three cache entries."""
    from codegen.compile.extension import cache_key
    from codegen.targets.registry import target
    sources = {"module.cu": "// the same text\n"}
    keys = {cache_key(sources, "m", target(name, emulate))
            for name, emulate in (("cuda", False), ("cuda", True), ("cpu", False))}
    assert len(keys) == 3


def test_nvcc_builds_a_module_in_parts_and_links_them(monkeypatch, gpu):
    """The C++ compiler compiles module.cpp in parts beside nvcc's kernels.cu, each part
    launching kernels of that other object (no relocatable device code: a launch names a
    kernel by its host stub's address), and the objects link into a module whose models
    are made, on a GPU, or refused for the want of one (codegen/compile/parts.py)."""
    from codegen.compile.cuda_toolkit import toolkit
    from codegen.compile.flags import host_compiler
    from codegen.compile.toolchain import NVCC
    from codegen.pipeline import load
    monkeypatch.setenv("MDL_BUILD_JOBS", "3")  # a core for kernels.cu, two for the parts
    monkeypatch.setattr(type(NVCC), "part_bytes", 1)  # every unit worth a part
    module = load(EXAMPLES / "gru.mdl", name="gru_nvcc_parts", target="cuda")
    log = (Path(module.__file__).parent / "build.log").read_text().splitlines()
    parts = [line for line in log if "-DMDL_SPLIT" in line]
    assert len(parts) == 2
    assert all(line.startswith(host_compiler()["path"]) for line in parts)
    assert sum(line.startswith(toolkit().nvcc) and "kernels.cu -o" in line
               for line in log) == 1
    if gpu:
        module.GRUClassifier(seed=0)
    else:
        with pytest.raises(RuntimeError, match=f"^{NO_DEVICE}"):
            module.GRUClassifier(seed=0)


def test_the_kernels_go_to_nvcc_and_the_host_code_to_the_cpp_compiler():
    """A module's two halves (docs/build.md, "The cuda target's two halves"): kernels.cu by
    nvcc for the GPU's architectures, its host side (the kernels' stubs) at -O0; module.cpp
    by the C++ compiler with the cpu target's flags, the precompiled header found first and
    CUDA's headers after the runtime's."""
    from codegen.backend.paths import RUNTIME_DIR
    from codegen.compile import flags
    from codegen.compile.cuda_toolkit import toolkit
    from codegen.compile.toolchain import NVCC, Linked
    linked = Linked((Path("/c/mdl_runtime.o"), Path("/c/mdl_cuda_runtime.o")),
                    (Path("/c/precompiled"),))
    host = NVCC.compile("/w/src/module.cpp", ["-DMDL_SPLIT", "-DMDL_IN_0"], linked,
                        Path("/w/part0.o"), Path("/final"), False, False)
    assert host[0] == flags.host_compiler()["path"]
    assert host[1:1 + len(flags.compile_flags())] == flags.compile_flags()
    includes = [f[2:] for f in host if f.startswith("-I")]
    assert includes[:2] == ["/c/precompiled", str(RUNTIME_DIR)]
    assert toolkit().cuda_include in includes and toolkit().cublas_include in includes
    assert host[-6:] == ["-DMDL_SPLIT", "-DMDL_IN_0", "-c", "/w/src/module.cpp", "-o",
                         "/w/part0.o"]
    kernels = NVCC.compile("/w/src/kernels.cu", [], linked, Path("/w/part1.o"),
                           Path("/final"), False, False)
    assert kernels[0] == toolkit().nvcc and "/c/precompiled" not in " ".join(kernels)
    assert "-O0" in kernels and "-O3" not in kernels
    assert all(flag in kernels for flag in toolkit().arch_flags)
    assert kernels[-4:] == ["-c", "/w/src/kernels.cu", "-o", "/w/part1.o"]


def test_sanitizers_are_for_the_cpu_target(tmp_path):
    done = mdlc("build", str(EXAMPLES / "towers.mdl"), "--target", "cuda", "--sanitize",
                "-o", str(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr  # a usage error, as --profile's
    assert "mdlc: error: --sanitize builds are for the cpu target" in done.stderr
    assert "Traceback" not in done.stderr
