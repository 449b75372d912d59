"""The Python on the docs pages that teach the module API runs: each page's ```python
blocks, in order, in one namespace, from the repository root (a page reads as one
session). Blocks on other pages are fragments (native.md's tour) checked elsewhere."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["training.md", "cuda.md", "onnx.md", "profiling.md", "from_pytorch.md", "ir.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@pytest.mark.parametrize("page", PAGES)
def test_the_pages_python_runs(page, monkeypatch):
    if page == "cuda.md":
        from codegen.compile.cuda_toolkit import toolkit
        from codegen.ir.diagnostics import MdlBuildError
        try:
            toolkit()
        except MdlBuildError as exc:
            pytest.skip(f"no CUDA toolkit: {exc}")
    if page == "from_pytorch.md":
        pytest.importorskip("torch", reason="the page's model has a PyTorch twin")
    blocks = BLOCK.findall((ROOT / "docs" / page).read_text())
    assert blocks, f"docs/{page} has no python block"
    monkeypatch.chdir(ROOT)
    namespace: dict = {"__name__": f"docs_{page}"}
    for k, code in enumerate(blocks):
        exec(compile(code, f"docs/{page} (python block {k + 1})", "exec"), namespace)
