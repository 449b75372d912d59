"""The README's models check: every code block holding a `model` (the first one is what a
newcomer copies first)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from dsl import check_source

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = [b for b in re.findall(r"^```\w*\n(.*?)^```", README.read_text(), re.S | re.M)
          if re.search(r"^model \w+", b, re.M)]


def test_the_readme_has_a_model():
    assert BLOCKS


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_each_readme_model_checks(block):
    graph = check_source(block, str(README)).graph
    assert graph.outputs
