"""A generated module compiled in parts side by side (codegen/compile/parts.py): the units a
source marks, how they are dealt out, MDL_BUILD_JOBS, and modules built in parts computing
what the same module compiled whole does (nvcc's parts: tests/test_cuda.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from codegen.compile import parts
from codegen.compile.extension import build_extension
from codegen.compile.toolchain import EMULATED_CUDA, HOST
from codegen.ir.diagnostics import MdlBuildError
from codegen.pipeline import BuildOptions, load, sources
from codegen.targets.cpu import CPU

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_every_function_and_the_tables_are_units():
    """charlm.mdl: CharLM's three functions, two models that only infer, and the tables
    (each model's and the entry point: one unit written in four places)."""
    _, files = sources(EXAMPLES / "charlm.mdl", "charlm", BuildOptions())
    text = files["module.cpp"]
    sizes = parts.units(text)
    assert sorted(sizes) == ["0", "1", "2", "3", "4", "tables"]
    assert text.count("#if MDL_PART(tables)") == 4
    assert sum(sizes.values()) > 0.9 * len(text)  # the includes and declarations are not
    assert parts.units("int main() {}\n") == {}


@pytest.mark.parametrize("sizes, jobs, part_bytes, expected", [
    ({"a": 50, "b": 40, "c": 30, "d": 20, "t": 10}, 1, 1, [["a", "b", "c", "d", "t"]]),
    ({"a": 50, "b": 40, "c": 30, "d": 20, "t": 10}, 2, 1, [["a", "d", "t"], ["b", "c"]]),
    ({"a": 50, "b": 40, "c": 30, "d": 20, "t": 10}, 8, 1, [["a"], ["b"], ["c"], ["d"], ["t"]]),
    # each part at least part_bytes: 150 bytes make two parts of 60, not three
    ({"a": 50, "b": 40, "c": 30, "d": 20, "t": 10}, 8, 60, [["a", "d", "t"], ["b", "c"]]),
    ({"a": 50, "b": 40}, 4, 1000, [["a", "b"]]),
    ({"only": 7}, 4, 1, [["only"]]),
    ({}, 4, 1, [[]]),
])
def test_units_are_dealt_largest_first_to_the_lightest_part(sizes, jobs, part_bytes, expected):
    assert parts.split(sizes, jobs, part_bytes) == expected


def test_the_flags_of_a_part():
    assert parts.defines(["3", "tables"]) == ["-DMDL_SPLIT", "-DMDL_IN_3", "-DMDL_IN_tables"]


@pytest.mark.parametrize("value, jobs", [("3", 3), ("1", 1), (" 2 ", 2)])
def test_mdl_build_jobs_sets_the_compiles_at_once(monkeypatch, value, jobs):
    monkeypatch.setenv("MDL_BUILD_JOBS", value)
    assert parts.build_jobs() == jobs


def test_an_empty_mdl_build_jobs_is_the_default_as_other_variables(monkeypatch):
    monkeypatch.setenv("MDL_BUILD_JOBS", "")
    assert parts.build_jobs() == len(__import__("os").sched_getaffinity(0))


@pytest.mark.parametrize("value", ["0", "-2", "two", "\u00b3"])
def test_a_bad_mdl_build_jobs_is_refused(monkeypatch, value):
    monkeypatch.setenv("MDL_BUILD_JOBS", value)
    with pytest.raises(MdlBuildError, match="MDL_BUILD_JOBS=.*expected a whole number"):
        parts.build_jobs()


def test_without_it_a_build_runs_a_compile_a_core(monkeypatch):
    import os
    monkeypatch.delenv("MDL_BUILD_JOBS", raising=False)
    assert parts.build_jobs() == len(os.sched_getaffinity(0))


def _split_everything(monkeypatch, toolchain, jobs: int = 3) -> None:
    """Every unit worth a part: `jobs` parts for any module of that many units."""
    monkeypatch.setenv("MDL_BUILD_JOBS", str(jobs))
    monkeypatch.setattr(type(toolchain), "part_bytes", 1)


def _build_log(module) -> str:
    return (Path(module.__file__).parent / "build.log").read_text()


def test_a_module_built_in_parts_computes_what_it_does_whole(monkeypatch):
    """The char LM (three models, five functions) in three parts and whole: the same
    losses, outputs and gradients, from the same initial parameters; the parts' objects
    are gone from the cache once linked."""
    options = dict(dtype="f64", defines={"H": 12})
    monkeypatch.setenv("MDL_BUILD_JOBS", "1")
    whole = load(EXAMPLES / "charlm.mdl", name="charlm_whole", **options)
    _split_everything(monkeypatch, HOST)
    split = load(EXAMPLES / "charlm.mdl", name="charlm_parts", **options)
    assert "-DMDL_SPLIT" not in _build_log(whole)
    log = _build_log(split)
    assert log.count("-DMDL_SPLIT") == 3 and log.count("-DMDL_IN_tables") == 1
    assert not list(Path(split.__file__).parent.glob("*.o"))
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 96, (8, 3)).astype(np.int32)
    batch = dict(tokens=ids[:-1], targets=ids[1:], lengths=np.array([7, 5, 2], np.int32))
    a, b = whole.CharLM(seed=1), split.CharLM(seed=1)
    out_a, out_b = a.forward(**batch, training=True), b.forward(**batch, training=True)
    np.testing.assert_allclose(out_b["loss"], out_a["loss"], rtol=1e-13)
    grads_a, grads_b = a.backward(), b.backward()
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        np.testing.assert_allclose(grads_b[name], grads_a[name], rtol=1e-12, atol=1e-14)
    step_a, step_b = whole.CharLMStep(params=a), split.CharLMStep(params=b)
    state = np.zeros((3, 12))
    x = dict(token=ids[0], h=state, c=state)
    for key, value in step_a.forward(**x).items():
        np.testing.assert_allclose(step_b.forward(**x)[key], value, rtol=1e-13)


def test_a_part_that_does_not_compile_is_reported_as_a_whole_build_is(monkeypatch):
    """A compile error in one part: MdlBuildError quoting the compiler's error at the
    generated source's line, as a build compiled whole reports it."""
    _split_everything(monkeypatch, HOST, jobs=2)
    broken = ('#include "mdl/python.h"\n'
              "#ifdef MDL_SPLIT\n#define MDL_PART(unit) MDL_IN_##unit\n#else\n"
              "#define MDL_PART(unit) 1\n#endif\n"
              "#if MDL_PART(0)\nint fine() { return 1; }\n#endif\n"
              "#if MDL_PART(1)\nint broken() { return nothing; }\n#endif\n")
    with pytest.raises(MdlBuildError, match=r"module\.cpp:11:\d+: error: .*nothing"):
        build_extension({"module.cpp": broken}, "broken_part", CPU)


def unstatic_kernels(text: str) -> list[str]:
    """The `__global__` functions `text` defines neither `static` nor in a template."""
    lines = text.splitlines()
    return [line.strip() for i, line in enumerate(lines) if "__global__ " in line
            and not line.lstrip().startswith(("static", "#"))
            and not (i and lines[i - 1].lstrip().startswith("template"))]


def test_every_kernel_the_runtime_headers_define_can_be_in_every_part():
    """A module compiled in parts includes the runtime's headers in each part: a kernel
    they define outside a template must be `static`, or each part's object defines it
    and the link fails (range_kernel did: 37 of 41 fuzz programs on the emulated device
    failed to build)."""
    runtime = Path(__file__).resolve().parents[1] / "cpp_runtime"
    offenders = [f"{header.relative_to(runtime)}: {line}"
                 for header in sorted(runtime.rglob("*.h"))
                 for line in unstatic_kernels(header.read_text())]
    assert not offenders, "\n".join(offenders)
    assert unstatic_kernels("__global__ void k(int* out) {}") == ["__global__ void k(int* out) {}"]
    assert unstatic_kernels("template <class T>\n__global__ void k(T* out) {}") == []


def test_an_emulated_cuda_module_built_in_parts_runs(monkeypatch):
    """The cuda target's code for the emulated device, its module.cpp in three parts
    beside its kernels.cu (which takes a fourth core): the GRU classifier's training step
    as the cpu target computes it."""
    options = dict(dtype="f64", defines={"H": 8})
    cpu = load(EXAMPLES / "gru.mdl", name="gru_cpu_h8", **options)
    _split_everything(monkeypatch, EMULATED_CUDA, jobs=4)
    emulated = load(EXAMPLES / "gru.mdl", name="gru_emulated_parts", target="cuda",
                    emulate=True, **options)
    assert _build_log(emulated).count("-DMDL_SPLIT") == 3
    a, b = cpu.GRUClassifier(seed=0), emulated.GRUClassifier(seed=0)
    rng = np.random.default_rng(3)
    batch = dict(xs=rng.standard_normal((5, 2, 8)), lengths=np.array([5, 3], np.int32),
                 labels=np.array([1, 3], np.int32))
    out_a, out_b = a.forward(**batch, training=True), b.forward(**batch, training=True)
    np.testing.assert_allclose(out_b["loss"], out_a["loss"], rtol=1e-10)
    grads_a, grads_b = a.backward(), b.backward()
    for name in grads_a:
        np.testing.assert_allclose(grads_b[name], grads_a[name], rtol=1e-9, atol=1e-12)
