"""The README holds: every code block holding a `model` checks (the first one is what a
newcomer copies first), the tour's commands and Python (then the Python of "Using it")
run from a checkout's root, the set-up's test command is the one .ci/run calls, and
every relative link leads to a file."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dsl import check_source

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TEXT = README.read_text()
BLOCKS = [b for b in re.findall(r"^```\w*\n(.*?)^```", TEXT, re.S | re.M)
          if re.search(r"^model \w+", b, re.M)]


def section(title: str) -> str:
    """The README's text under `## title`, up to the next section."""
    start = TEXT.index(f"\n## {title}\n")
    end = TEXT.find("\n## ", start + 1)
    return TEXT[start:end if end >= 0 else None]


def test_the_readme_has_a_model():
    assert BLOCKS


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_each_readme_model_checks(block):
    graph = check_source(block, str(README)).graph
    assert graph.outputs


def test_the_tour_runs(tmp_path):
    """The tour's sh and python blocks, in order, then the Python of "Using it", in a
    directory holding the examples (run as tests/test_tutorial.py runs the tutorial:
    `mdlc` this checkout's, each command exiting 0, the Python as one session, in a
    child process)."""
    blocks = re.findall(r"^```(sh|python)\n(.*?)^```", section("A tour"), re.S | re.M)
    assert [lang for lang, _ in blocks] == ["sh", "python"]
    # "Using it"'s Python goes on in the tour's session
    blocks += re.findall(r"^```(python)\n(.*?)^```", section("Using it"), re.S | re.M)
    assert len(blocks) == 3
    page = tmp_path / "tour.md"
    page.write_text("".join(f"```{lang}\n{code}```\n\n" for lang, code in blocks))
    work = tmp_path / "checkout"
    shutil.copytree(ROOT / "examples", work / "examples")
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "test_tutorial.py"),
                           str(work), str(page)], cwd=work, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=900)
    assert done.returncode == 0, done.stdout
    assert (work / "charlm.npz").exists() and (work / "charlm128.npz").exists()


def test_the_set_up_commands():
    """Two commands: the main job, and the test suite's, which .ci/run ends with."""
    commands = re.findall(r"^```sh\n(.*?)\n```", section("Set-up"), re.S | re.M)
    assert commands == ["python3 -m pip install -e . && python3 examples/train_charlm.py",
                        'python3 -m pip install -e ".[test,cuda]" && python3 -m pytest -q']
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == commands[1]


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_leads_to_a_file_and_heading():
    links = re.findall(r"\]\(([^)#\s]+)(?:#([^)]*))?\)", TEXT)
    relative = [(t, anchor) for t, anchor in links if not re.match(r"\w+://", t)]
    assert ("docs/charlm.svg", "") in relative and ("docs/tutorial.md", "") in relative
    assert [t for t, _ in relative if not (ROOT / t).exists()] == []
    for target, anchor in relative:
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (ROOT / target).read_text(), re.M)
            assert anchor in map(slug, headings), f"{target} has no heading #{anchor}"
