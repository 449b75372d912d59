"""Fixtures shared by the whole suite."""
from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def mdl_cache_dir(tmp_path_factory):
    """One temporary build cache for the session: the suite never writes to ~/.cache/mdl,
    and a module built by one test is reused by the others (subprocesses inherit it)."""
    # MDL_TEST_CACHE keeps builds between runs while developing; CI starts empty
    kept = os.environ.get("MDL_TEST_CACHE")
    path = Path(kept) if kept else tmp_path_factory.mktemp("mdl-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MDL_CACHE_DIR", str(path))
        yield path
