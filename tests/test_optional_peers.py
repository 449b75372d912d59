"""The README's test command passes where only mdl and its test extra are installed: a test
that needs an optional peer (PyTorch, JAX, OpenVINO, mypy, Graphviz's `dot` program) skips,
with a reason, where the peer is absent. CI installs the peers (.ci/run), so an unguarded
use would pass there and fail only for a user; this file reads every file of tests/ and
finds such uses.

A use is guarded when, before it in its own or an enclosing scope, `pytest.importorskip`
imports the peer, or a `skipif` marker (a decorator, a module's `pytestmark`, or a
module-level name bound to one) names it in its condition; an import is also guarded
inside `try: ... except ImportError`. Uses are imports of the peers and of mdl's modules
that import them (codegen.pytorch, codegen.distributed), and `mdlc graph` drawing an
image (a test naming "graph" and a .svg, .png or .pdf file), which runs `dot`; a test that
takes `dot` off PATH itself needs no guard. Every `skipif` gives its reason."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
PEERS = {"torch": "torch", "jax": "jax", "jaxlib": "jax", "mypy": "mypy",  # package: peer
         "openvino": "openvino"}
NEEDING = {"codegen.pytorch": "torch", "codegen.distributed": "torch"}  # mdl modules
IMAGE = re.compile(r"\.(svg|png|pdf)$")
GUARDED_EXCEPTIONS = {"ImportError", "ModuleNotFoundError"}


def peer_of(module: str) -> str | None:
    """The peer importing `module` needs, if any."""
    if module.split(".")[0] in PEERS:
        return PEERS[module.split(".")[0]]
    return next((p for m, p in NEEDING.items() if module == m or module.startswith(m + ".")),
                None)


def _call_name(node: ast.AST) -> str:
    """`pytest.mark.skipif` -> "skipif", `importorskip` -> "importorskip"."""
    func = node.func if isinstance(node, ast.Call) else node
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _named_peers(node: ast.AST) -> set[str]:
    """The peers a skip condition names: strings ("torch", "dot") and names (`torch`)."""
    words = {n.value for n in ast.walk(node)
             if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    words |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return {PEERS.get(w, w) for w in words if w in PEERS or w == "dot"}


def _skipif_peers(node: ast.AST, markers: dict[str, set[str]]) -> set[str]:
    """What a marker expression (a decorator, a pytestmark) skips without."""
    if isinstance(node, ast.Call) and _call_name(node) == "skipif":
        return _named_peers(node.args[0]) if node.args else set()
    if isinstance(node, ast.Name):
        return markers.get(node.id, set())
    if isinstance(node, (ast.List, ast.Tuple)):
        return set().union(*(_skipif_peers(e, markers) for e in node.elts))
    return set()


def _importorskipped(stmt: ast.stmt) -> set[str]:
    """The peers a simple statement imports through pytest.importorskip."""
    return {PEERS.get(c.args[0].value, c.args[0].value) for c in ast.walk(stmt)
            if isinstance(c, ast.Call) and _call_name(c) == "importorskip" and c.args
            and isinstance(c.args[0], ast.Constant)}


def _imported(stmt: ast.stmt) -> list[str]:
    """The modules a simple statement imports (import_module calls too)."""
    if isinstance(stmt, ast.Import):
        return [a.name for a in stmt.names]
    if isinstance(stmt, ast.ImportFrom):  # `from codegen import pytorch` imports a module too
        base = stmt.module or ""
        return [base] if peer_of(base) else [f"{base}.{a.name}" for a in stmt.names]
    return [c.args[0].value for c in ast.walk(stmt)
            if isinstance(c, ast.Call) and _call_name(c) == "import_module" and c.args
            and isinstance(c.args[0], ast.Constant)]


def _draws_an_image(fn: ast.AST) -> bool:
    strings = [n.value for n in ast.walk(fn)
               if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return "graph" in strings and any(IMAGE.search(s) for s in strings)


def _hides_dot(fn: ast.AST) -> bool:
    """The test sets PATH itself (to a directory without `dot`)."""
    return any(isinstance(c, ast.Call) and _call_name(c) == "setenv" and c.args
               and isinstance(c.args[0], ast.Constant) and c.args[0].value == "PATH"
               for c in ast.walk(fn))


def problems(source: str, where: str) -> list[str]:
    """Every unguarded use of an optional peer in a test file's source, and every skipif
    without a reason, as `where:line: what`."""
    tree = ast.parse(source)
    out = [f"{where}:{c.lineno}: a skipif without a reason" for c in ast.walk(tree)
           if isinstance(c, ast.Call) and _call_name(c) == "skipif"
           and not any(k.arg == "reason" for k in c.keywords)]
    markers = {t.id: _skipif_peers(s.value, {}) for s in tree.body if isinstance(s, ast.Assign)
               for t in s.targets if isinstance(t, ast.Name)}
    _check(tree.body, set(), {k: v for k, v in markers.items() if v}, where, out)
    return out


def _check(body: list[ast.stmt], guarded: set[str], markers: dict[str, set[str]], where: str,
           out: list[str]) -> None:
    guarded = set(guarded)
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            inner = guarded.union(*(_skipif_peers(d, markers) for d in stmt.decorator_list))
            if (not isinstance(stmt, ast.ClassDef) and _draws_an_image(stmt)
                    and "dot" not in inner and not _hides_dot(stmt)):
                out.append(f"{where}:{stmt.lineno}: `{stmt.name}` draws an image with `dot` "
                           "without a skip where it is absent")
            _check(stmt.body, inner, markers, where, out)
        elif isinstance(stmt, ast.Try):
            catches = {getattr(n, "id", "") for h in stmt.handlers if h.type
                       for n in ast.walk(h.type)}
            tried = guarded | (set(PEERS.values()) if catches & GUARDED_EXCEPTIONS else set())
            _check(stmt.body, tried, markers, where, out)
            for part in (*(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody):
                _check(part, guarded, markers, where, out)
        elif hasattr(stmt, "body"):  # if, for, while, with: their statements in order
            for part in (stmt.body, getattr(stmt, "orelse", [])):
                _check(part, guarded, markers, where, out)
        else:
            for module in _imported(stmt):
                peer = peer_of(module)
                if peer and peer not in guarded:
                    out.append(f"{where}:{stmt.lineno}: imports {module} without a skip "
                               f"where {peer} is absent")
            guarded |= _importorskipped(stmt)
            if isinstance(stmt, ast.Assign) and any(getattr(t, "id", "") == "pytestmark"
                                                    for t in stmt.targets):
                guarded |= _skipif_peers(stmt.value, markers)


@pytest.mark.parametrize("path", sorted(TESTS.glob("*.py")), ids=lambda p: p.name)
def test_every_use_of_an_optional_peer_skips_without_it(path):
    assert problems(path.read_text(), path.name) == []


SNIPPETS = [  # (a test file's text, the problems found in it)
    ("import torch\n", ["t.py:1: imports torch without a skip where torch is absent"]),
    ("def test_a():\n    from jax import numpy\n",
     ["t.py:2: imports jax without a skip where jax is absent"]),
    ("def test_a():\n    from codegen.pytorch import as_module\n",
     ["t.py:2: imports codegen.pytorch without a skip where torch is absent"]),
    ("def test_a():\n    from codegen import distributed\n",
     ["t.py:2: imports codegen.distributed without a skip where torch is absent"]),
    ("torch = pytest.importorskip('torch', reason='no torch')\nimport torch.nn\n", []),
    ("def test_a():\n    import torch\n    pytest.importorskip('torch')\n",
     ["t.py:2: imports torch without a skip where torch is absent"]),
    ("def test_a():\n    pytest.importorskip('torch')\n    from codegen.pytorch import m\n", []),
    ("@pytest.mark.skipif(find_spec('jax') is None, reason='no JAX')\n"
     "def test_a():\n    import jax\n", []),
    ("@pytest.mark.skipif(find_spec('jax') is None)\ndef test_a():\n    import jax\n",
     ["t.py:1: a skipif without a reason"]),
    ("pytestmark = pytest.mark.skipif(find_spec('torch') is None, reason='r')\nimport torch\n",
     []),
    ("try:\n    import torch\nexcept ImportError:\n    torch = None\n", []),
    ("try:\n    import torch\nexcept KeyError:\n    pass\n",
     ["t.py:2: imports torch without a skip where torch is absent"]),
    ("def test_a(tmp_path):\n    cli.main(['graph', 'm.mdl', '-o', str(tmp_path / 'm.svg')])\n",
     ["t.py:1: `test_a` draws an image with `dot` without a skip where it is absent"]),
    ("NO_DOT = pytest.mark.skipif(shutil.which('dot') is None, reason='no dot')\n"
     "@NO_DOT\ndef test_a(tmp_path):\n    cli.main(['graph', 'm.mdl', '-o', 'm.png'])\n", []),
    ("def test_a(monkeypatch):\n    monkeypatch.setenv('PATH', '/nowhere')\n"
     "    assert cli.main(['graph', 'm.mdl', '-o', 'm.pdf']) == 2\n", []),
    ("def test_a():\n    cli.main(['graph', 'm.mdl', '-o', 'm.dot'])\n", []),
]


@pytest.mark.parametrize("source, found", SNIPPETS)
def test_the_check_finds_unguarded_uses(source, found):
    assert problems(source, "t.py") == found
