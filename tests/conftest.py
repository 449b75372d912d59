"""Fixtures shared by the whole suite."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="session", autouse=True)
def mdl_cache_dir(tmp_path_factory):
    """One temporary build cache for the run: the suite never writes to ~/.cache/mdl,
    and a module built by one test is reused by the others (subprocesses inherit it).
    pytest-xdist's workers share it (the directory above each worker's own): the cache
    takes concurrent builds (docs/build.md), so a module one worker built, another finds."""
    # MDL_TEST_CACHE keeps builds between runs while developing; CI starts empty
    kept = os.environ.get("MDL_TEST_CACHE")
    if kept:
        path = Path(kept)
    elif os.environ.get("PYTEST_XDIST_WORKER"):
        path = tmp_path_factory.getbasetemp().parent / "mdl-cache"
        path.mkdir(exist_ok=True)
    else:
        path = tmp_path_factory.mktemp("mdl-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MDL_CACHE_DIR", str(path))
        # pytest-xdist runs a worker a core already: a build compiled in parts side by side
        # (codegen/compile/parts.py) would only make them wait on each other, so builds
        # compile whole here unless told otherwise; tests/test_parts.py splits its own
        if "MDL_BUILD_JOBS" not in os.environ:
            patch.setenv("MDL_BUILD_JOBS", "1")
        yield path


CHARLM = Path(__file__).resolve().parents[1] / "examples" / "charlm.mdl"
CHARLM_DIMS = {"T": 6, "B": 3}


@pytest.fixture(scope="session")
def charlm64():
    """examples/charlm.mdl (CharLM and CharLMStep) in f64 with H = 16, specialized for
    T=6, B=3: the module the training, checkpoint and sharing tests use."""
    from codegen.pipeline import load
    return load(CHARLM, dtype="f64", defines={"H": 16}, specialize=[CHARLM_DIMS],
                name="charlm_h16_f64")


@pytest.fixture(scope="session")
def charlm64_generic():
    """The same module without specializations: only the generic code."""
    from codegen.pipeline import load
    return load(CHARLM, dtype="f64", defines={"H": 16}, name="charlm_h16_f64_generic")


def charlm_batch(seed: int, T: int = 6, B: int = 3, full: bool = False) -> dict:
    """Random tokens, next-character targets and lengths (some short unless `full`)."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 96, (T + 1, B)).astype(np.int32)
    lengths = np.full(B, T, np.int32) if full else rng.integers(1, T + 1, B).astype(np.int32)
    return {"tokens": tokens[:-1], "targets": tokens[1:], "lengths": lengths}
