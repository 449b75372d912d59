"""docs/tutorial.md runs as a reader would run it: its blocks in order, in an empty
directory.

- ```mdl: the first line is `# file: NAME`; the block is written to NAME (a later block
  naming the same file replaces it) and every model in it must check without warnings.
- ```mdl-error: must fail to check with the message of the `<!-- error: ... -->` note
  after it; nothing is written.
- ```sh: each line runs in bash (`mdlc` is this checkout's) and must exit 0. A line that
  draws an image (.svg, .png, .pdf) is skipped when Graphviz's `dot` is missing. A
  ```text block right after an sh block lists lines its output must hold, in that order
  (`...` stands for lines left out).
- ```python: run in one namespace, as one session started in that directory.
- Other ```text blocks are illustrations.

The page runs in a child process (`python3 tests/test_tutorial.py DIR [PAGE]`), so what
it does to the process (the BLAS's thread count, the modules it imports) stays there;
tests/test_readme.py runs the README's tour the same way."""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import doc_blocks
from doc_blocks import Block

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "tutorial.md"
FILE = re.compile(r"^# file: (\S+)")
MODEL = re.compile(r"^\s*model\s+(\w+)", re.MULTILINE)
IMAGE = re.compile(r"\.(svg|png|pdf)\b")
LANGUAGES = ("mdl", "mdl-error", "sh", "text", "python")


def blocks(page: str, name: str = PAGE.name) -> list[Block]:
    return doc_blocks.blocks(page, name, LANGUAGES)


def run_page(page: str, workdir: Path, name: str = PAGE.name) -> None:
    """Run every block of `page` (called `name` in messages) in `workdir`; an
    AssertionError (or the block's own exception) says which block failed and why."""
    os.chdir(workdir)
    sys.path.insert(0, str(workdir))  # as `python3` started there: the built module imports
    session: dict = {"__name__": "__main__"}
    with tempfile.TemporaryDirectory(prefix="mdlc-bin-") as bin_dir:
        env = shell_env(Path(bin_dir))
        for block in blocks(page, name):
            if block.lang == "mdl":
                check_mdl(block, workdir)
            elif block.lang == "mdl-error":
                check_mdl_error(block)
            elif block.lang == "sh":
                run_commands(block, workdir, env)
            elif block.lang == "python":
                # blank lines first, so that a traceback's line numbers are the page's
                exec(compile("\n" * block.line + block.text, name, "exec"), session)


def shell_env(bin_dir: Path) -> dict:
    """The environment of the page's commands: `mdlc` is this checkout's, run by this
    Python; no colour."""
    mdlc = bin_dir / "mdlc"
    mdlc.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m codegen.cli "$@"\n')
    mdlc.chmod(mdlc.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "NO_COLOR": "1"}
    env.pop("FORCE_COLOR", None)
    return env


def check_mdl(block: Block, workdir: Path) -> None:
    """Save the block as the file it names; every model in it checks without warnings."""
    from dsl import MdlError, check_source
    target = FILE.match(block.text)
    assert target, f"{block.where}: an mdl block starts with `# file: NAME`"
    path = workdir / target.group(1)
    path.write_text(block.text)
    for model in MODEL.findall(block.text):
        try:
            checked = check_source(block.text, path.name, model=model)
        except MdlError as exc:
            raise AssertionError(f"{block.where}: model {model} does not check:\n"
                                 f"{exc.render()}") from None
        assert not checked.warnings, f"{block.where}: model {model} warns:\n" + \
            "\n".join(w.render() for w in checked.warnings)


def check_mdl_error(block: Block) -> None:
    from dsl import MdlError, check_source
    try:
        check_source(block.text, "error.mdl")
    except MdlError as exc:
        assert block.expected in exc.render(), \
            f"{block.where}: expected {block.expected!r}, got:\n{exc.render()}"
    else:
        raise AssertionError(f"{block.where}: this mdl-error block checks")


def run_commands(block: Block, workdir: Path, env: dict) -> None:
    """Each line of an sh block, then the shown output against what they printed."""
    printed: list[str] = []
    for command in block.text.splitlines():
        if not command.strip() or command.lstrip().startswith("#"):
            continue
        if IMAGE.search(command) and shutil.which("dot") is None:
            continue  # the page says the image needs Graphviz's dot
        done = subprocess.run(command, shell=True, executable="/bin/bash", cwd=workdir,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=600)
        assert done.returncode == 0, \
            f"{block.where}: `{command}` exited {done.returncode}:\n{done.stdout}"
        printed += [line.rstrip() for line in done.stdout.splitlines()]
    at = 0
    for line in block.shown:
        if line.strip() == "...":
            continue
        found = next((k for k in range(at, len(printed)) if printed[k] == line), None)
        assert found is not None, \
            f"{block.where}: the page shows {line!r}, which the output lacks (in this " \
            "order):\n" + "\n".join(printed)
        at = found + 1


def test_the_page_has_every_kind_of_block():
    page = blocks(PAGE.read_text())
    kinds = {b.lang for b in page}
    assert kinds == set(LANGUAGES)
    assert all(FILE.match(b.text) for b in page if b.lang == "mdl")
    assert any(b.shown for b in page if b.lang == "sh")


def test_the_tutorial_runs(tmp_path):
    """The whole page, in a child process, in an empty directory. With Graphviz, the
    picture it draws is the one the page shows (docs/tiedlm.svg; its layout may come from
    another Graphviz, what it holds may not)."""
    done = subprocess.run([sys.executable, __file__, str(tmp_path)], cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout
    if shutil.which("dot"):
        drawn = tmp_path / "tiedlm.svg"
        assert svg_contents(drawn) == svg_contents(PAGE.parent / "tiedlm.svg"), \
            "docs/tiedlm.svg is not what the tutorial draws now: copy it from the " \
            "tutorial's `mdlc graph tiedlm.mdl -o tiedlm.svg`"


def svg_contents(path: Path) -> tuple[set, set, set]:
    """The titles of an SVG's clusters, nodes and edges (Graphviz writes each element's
    name as its <title>): what a picture holds, apart from its layout."""
    ns = "{http://www.w3.org/2000/svg}"
    kinds: dict[str, set] = {"cluster": set(), "node": set(), "edge": set()}
    for g in ET.parse(path).iter(f"{ns}g"):
        title = g.find(f"{ns}title")
        if g.get("class") in kinds and title is not None:
            kinds[g.get("class")].add(title.text)
    return kinds["cluster"], kinds["node"], kinds["edge"]


def test_the_picture_is_the_one_the_page_shows():
    assert "![TiedLM as mdlc graph draws it](tiedlm.svg)" in PAGE.read_text()
    clusters, nodes, edges = svg_contents(PAGE.parent / "tiedlm.svg")
    assert {"cluster scope encoder", "cluster scope decoder"} <= clusters
    assert "param encoder/embedding" in nodes
    assert len([e for e in edges if e.startswith("param encoder/embedding->")]) == 2


BROKEN = [  # (a page, what its failure says)
    ("```mdl\nmodel M() { input x : f32[3]; output y = sum(x) }\n```\n",
     "starts with `# file: NAME`"),
    ("```mdl\n# file: m.mdl\nmodel M() { input x : f32[3]; output y = sum(xx) }\n```\n",
     "model M does not check"),
    ("```mdl\n# file: m.mdl\nmodel M() { input x : f32[3]; input z : f32[3]; "
     "output y = sum(x) }\n```\n", "model M warns"),
    ("```mdl-error\nmodel M() { input x : f32[3]; output y = sum(x) }\n```\n"
     "<!-- error: unknown name -->\n", "this mdl-error block checks"),
    ("```mdl-error\nmodel M() { input x : f32[3]; output y = sum(xx) }\n```\n"
     "<!-- error: another message -->\n", "expected 'another message'"),
    ("```sh\nmdlc check missing.mdl\n```\n", "exited 2"),
    ("```mdl\n# file: m.mdl\nmodel M() { input x : f32[3]; output y = sum(x) }\n```\n"
     "```sh\nmdlc check m.mdl\n```\n\n```text\nmodel M(): ok\n...\n  output z : f32\n```\n",
     "the page shows '  output z : f32'"),
    ("```sh\necho b; echo a\n```\n```text\na\nb\n```\n", "the page shows 'b'"),
    ("```python\nx = 1\n```\n\n```python\nassert x == 2, 'x is not 2'\n```\n", "x is not 2"),
]


@pytest.mark.parametrize("page, message", BROKEN, ids=[f"broken{i}" for i in range(len(BROKEN))])
def test_a_broken_page_fails(page, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(AssertionError, match=re.escape(message)):
        run_page(page, tmp_path)


if __name__ == "__main__":
    page = Path(sys.argv[2]) if len(sys.argv) > 2 else PAGE
    run_page(page.read_text(), Path(sys.argv[1]), page.name)
