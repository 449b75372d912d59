"""`mdlc graph`: every model of every example is drawn, as DOT without Graphviz's `dot`
and as SVG with it, and the pictures hold what the checked model says they should: a
box per scope, each parameter once in the box of its full name with an edge to every
place that uses it, a box per for / if / while with a box per block, every op drawn
exactly once, inputs and outputs marked."""
from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from codegen import cli
from codegen.drawing import picture
from codegen.ir.graph import walk_ops
from codegen.ops.primitives import TABLE
from codegen.ops.structured import STRUCTURED
from dsl import check_file, model_names

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = [(p, m) for p in sorted((ROOT / "examples").glob("*.mdl")) for m in model_names(p)]
IDS = [f"{p.stem}-{m}" for p, m in EXAMPLES]
NO_DOT = pytest.mark.skipif(shutil.which("dot") is None,
                            reason="Graphviz's `dot` is not installed (apt-get install graphviz)")
SVG = "{http://www.w3.org/2000/svg}"


@dataclass
class Picture:
    """What a picture holds: clusters, nodes (with the innermost cluster around each and
    their labels) and edges."""
    clusters: list[str] = field(default_factory=list)
    parent: dict[str, str] = field(default_factory=dict)  # cluster -> the one around it
    cluster_of: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    edges: set[tuple[str, str]] = field(default_factory=set)

    def heads(self, tail: str) -> list[str]:
        return sorted(h for t, h in self.edges if t == tail)

    def inside(self, cluster: str, outer: str) -> bool:
        while cluster and cluster != outer:
            cluster = self.parent[cluster]
        return cluster == outer


def read_dot(text: str) -> Picture:
    """The DOT text the graphviz package writes: one statement per line, the graph and
    its clusters opened by `digraph NAME {` and `subgraph "cluster ..." {`, closed by
    `}`."""
    pic, stack = Picture(), []
    quoted = r'"((?:[^"\\]|\\.)*)"|([\w.]+)'
    for line in text.splitlines():
        line = line.strip()
        if re.fullmatch(r"digraph \w+ \{", line):
            stack.append("")
        elif m := re.fullmatch(r'subgraph "(cluster [^"]*)" \{', line):
            pic.clusters.append(m.group(1))
            pic.parent[m.group(1)] = stack[-1]
            stack.append(m.group(1))
        elif line == "}":
            stack.pop()
        elif m := re.fullmatch(rf"(?:{quoted}) -> (?:{quoted})(?: \[.*\])?", line):
            pic.edges.add((m.group(1) or m.group(2), m.group(3) or m.group(4)))
        elif (m := re.fullmatch(rf"(?:{quoted}) \[(.*)\]", line)) and (m.group(1) or m.group(
                2)) not in ("graph", "node", "edge"):
            name = m.group(1) or m.group(2)
            pic.cluster_of[name] = stack[-1]
            label = re.search(r'label="((?:[^"\\]|\\.)*)"', m.group(3))
            pic.labels[name] = label.group(1) if label else name
    assert stack == [], "unbalanced clusters"
    return pic


def read_svg(data: bytes) -> tuple[list[str], set[str], set[tuple[str, str]]]:
    """The clusters, nodes and edges of an SVG written by `dot` (their <title>s)."""
    root = ET.fromstring(data)
    titles: dict[str, list[str]] = {"cluster": [], "node": [], "edge": []}
    for g in root.iter(f"{SVG}g"):
        if g.get("class") in titles:
            titles[g.get("class")].append(g.find(f"{SVG}title").text)
    edges = {tuple(t.split("->")) for t in titles["edge"]}
    return titles["cluster"], set(titles["node"]), edges


def dot_of(path: Path, model: str, backward: bool = False) -> Picture:
    dot, _ = picture(str(path), model=model, backward=backward)
    return read_dot(dot.source)


def scopes_above(node_cluster: str) -> str:
    """`cluster scope a/b` -> `a/b` (the scope box a node stands in; '' outside all)."""
    m = re.search(r"scope (\S+)$", node_cluster)
    return m.group(1) if m else ""


@pytest.mark.parametrize("path,model", EXAMPLES, ids=IDS)
def test_every_example_is_drawn_as_its_checked_model_says(path, model):
    graph = check_file(str(path), model=model).graph
    pic = dot_of(path, model)
    for name in graph.inputs:
        assert pic.cluster_of[f"input {name}"] == ""
    for name in graph.outputs:
        assert pic.cluster_of[f"output {name}"] == ""
    for p in graph.params.values():
        node = f"param {p.name}"
        scope = p.name.rpartition("/")[0]
        assert scopes_above(pic.cluster_of[node]) == scope, p.name
        parts = scope.split("/") if scope else []
        for i in range(len(parts)):  # a box per scope, nested
            assert f"cluster scope {'/'.join(parts[:i + 1])}" in pic.clusters
        assert p.name in pic.labels[node] and str(p.value.type) in pic.labels[node]
    structured = Counter(op.prim for op in walk_ops(graph.body) if op.prim in STRUCTURED)
    for prim, n in structured.items():
        boxes = [c for c in pic.clusters if re.fullmatch(rf"cluster {prim} \d+", c)]
        assert len(boxes) == n
        for box in boxes:
            for block in STRUCTURED[prim].blocks:
                assert f"{box} {block}" in pic.clusters
    drawn = Counter(prim for name, label in pic.labels.items() if name.startswith("op ")
                    for prim in _prims(label))
    assert drawn == _ops_drawn(graph.body)


def _prims(label: str) -> list[str]:
    """The primitives an op node names: its first lines, `a · b · c (0.5)`."""
    prims = []
    for line in label.split("\\n"):
        items = [re.sub(r" \(.*\)$", "", item) for item in line.split(" · ")]
        if not all(item in TABLE for item in items):
            break
        prims += items
    return prims


def _ops_drawn(block) -> Counter:
    """Every primitive op, but for scalar constants (written into their readers)."""
    return Counter(op.prim for op in walk_ops(block) if op.prim in TABLE and not (
        not op.inputs and TABLE[op.prim].uniform is not None and op.outputs[0].type.rank == 0))


@pytest.mark.parametrize("path,model", [
    (ROOT / "examples/sharing.mdl", "Sharing"),
    (ROOT / "examples/towers.mdl", "Towers"),
    *[(ROOT / "examples/caffe2_sharing.mdl", m)
      for m in model_names(ROOT / "examples/caffe2_sharing.mdl")]])
def test_each_parameter_is_one_node_with_an_edge_to_every_use(path, model):
    graph = check_file(str(path), model=model).graph
    pic = dot_of(path, model)
    assert sum(1 for n in pic.labels if n.startswith("param ")) == len(graph.params)
    for p in graph.params.values():
        node = f"param {p.name}"
        assert len(pic.heads(node)) == len(p.uses), p.name
        assert ("shared: " in pic.labels[node]) == (len(p.uses) > 1)


def test_a_shared_parameter_feeds_every_scope_that_uses_it():
    """The sharing example of the language page: scope_a/w is used from scope_a, from
    scope_b and from scope_b/shared_child; scope_b/unshared_child's `w` is
    scope_a/unshared_child/w."""
    pic = dot_of(ROOT / "examples/sharing.mdl", "Sharing")
    assert sorted(c for c in pic.clusters if c.startswith("cluster scope")) == [
        f"cluster scope {s}" for s in ("scope_a", "scope_a/unshared_child", "scope_b",
                                       "scope_b/shared_child", "scope_b/unshared_child",
                                       "scope_c")]

    def users(param):
        return sorted(scopes_above(pic.cluster_of[h]) for h in pic.heads(f"param {param}"))
    assert users("scope_a/w") == ["scope_a", "scope_b", "scope_b/shared_child"]
    assert users("scope_a/unshared_child/w") == ["scope_b/unshared_child"]
    assert users("scope_c/w") == ["scope_c"]
    assert "shared: 3 uses" in pic.labels["param scope_a/w"]


def test_the_char_lm_stays_readable():
    """The LSTM cell inside the loop is six nodes (two products, the gates' sum, the
    split, the cell state and the output), in a box of its scope inside the loop's body."""
    pic = dot_of(ROOT / "examples/charlm.mdl", "CharLM")
    cell = [n for n, c in pic.cluster_of.items() if re.fullmatch(r"cluster for \d+ body "
                                                                 r"scope lstm", c)]
    assert len(cell) == 6
    # the decoder is one `linear` of the loop's [T, B, H] yields: no reshapes around it
    assert len([n for n in pic.labels if n.startswith("op ")]) == 12


def test_the_backward_program_is_drawn_with_every_gradient():
    graph = check_file(str(ROOT / "examples/charlm.mdl"), model="CharLM").graph
    pic = dot_of(ROOT / "examples/charlm.mdl", "CharLM", backward=True)
    assert "cluster backward" in pic.clusters
    loops = [c for c in pic.clusters if re.fullmatch(r"cluster for \d+", c)]
    assert [pic.inside(c, "cluster backward") for c in loops] == [False, True]
    for name in graph.params:
        tails = [t for t, h in pic.edges if h == f"gradient param {name}"]
        assert len(tails) == 1, name


@NO_DOT
@pytest.mark.parametrize("path,model", EXAMPLES, ids=IDS)
def test_every_example_renders_to_svg_with_what_the_dot_text_holds(path, model, tmp_path):
    out = tmp_path / "model.svg"
    assert cli.main(["graph", str(path), "--model", model, "-o", str(out)]) == 0
    clusters, nodes, edges = read_svg(out.read_bytes())
    pic = dot_of(path, model)
    assert sorted(clusters) == sorted(pic.clusters)
    assert nodes == set(pic.labels)
    assert edges == pic.edges


@NO_DOT
def test_png_and_the_backward_program_render(tmp_path):
    out = tmp_path / "adaptive.png"
    assert cli.main(["graph", str(ROOT / "examples/control.mdl"), "--backward", "-o",
                     str(out)]) == 0
    assert out.read_bytes().startswith(b"\x89PNG")


def test_without_dot_images_are_a_usage_error_that_says_how_to_install_it(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # no `dot` on it
    sharing = str(ROOT / "examples/sharing.mdl")
    assert cli.main(["graph", sharing, "-o", str(tmp_path / "s.svg")]) == 2
    err = capsys.readouterr().err
    for hint in ("apt-get install graphviz", "brew install graphviz", "conda install",
                 "s.dot"):
        assert hint in err
    assert not (tmp_path / "s.svg").exists()
    assert cli.main(["graph", sharing, "-o", str(tmp_path / "s.dot")]) == 0
    assert (tmp_path / "s.dot").read_text().startswith("digraph Sharing {")


def test_without_o_the_dot_text_goes_to_stdout(capsys):
    assert cli.main(["graph", str(ROOT / "examples/sharing.mdl")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("digraph Sharing {") and '"param scope_a/w"' in out


def test_a_file_beside_the_working_directory_is_named_as_given(tmp_path, monkeypatch):
    """QA: `mdlc graph ../there/m.mdl` named its ops' places by their absolute path (a
    shared picture carried the author's folders), its parameters' uses as given."""
    (tmp_path / "there").mkdir()
    (tmp_path / "here").mkdir()
    (tmp_path / "there" / "m.mdl").write_text(
        "model M() {\n  input x : f32[B, 3]\n  param w : f32[3] = ones\n"
        "  output y = tanh(x * w)\n}\n")
    monkeypatch.chdir(tmp_path / "here")
    dot = picture("../there/m.mdl", {}, None, False)[0].source
    assert "../there/m.mdl:4:" in dot and "used at ../there/m.mdl:4:" in dot
    assert str(tmp_path) not in dot


BAD = "model M() {\n  input x : f32[B, 3]\n  output y = x @ x\n}\n"


@pytest.mark.parametrize("args,code,message", [
    (["{bad}"], 1, "{bad}:3:16: error: `@` needs matching inner dims"),
    (["{charlm}"], 2, "defines several models (CharLM, CharLMStep, CharLMSample); choose one"),
    (["{charlm}", "--model", "Nope"], 2, "has no model `Nope`"),
    (["{charlm}", "--model", "CharLMStep", "--backward"], 2, "minimizes nothing"),
    (["{sharing}", "-o", "{tmp}/x.jpg"], 2, "cannot tell the format of"),
    (["{sharing}", "-D", "H=3"], 2, "has no hyper-parameter H"),
    (["{tmp}/missing.mdl"], 2, "cannot read"),
])
def test_bad_requests_exit_with_a_message_and_no_traceback(args, code, message, tmp_path,
                                                           capsys):
    bad = tmp_path / "bad.mdl"
    bad.write_text(BAD)
    where = {"bad": str(bad), "charlm": str(ROOT / "examples/charlm.mdl"),
             "sharing": str(ROOT / "examples/sharing.mdl"), "tmp": str(tmp_path)}
    assert cli.main(["graph", *(a.format(**where) for a in args)]) == code
    err = capsys.readouterr().err
    assert message.format(**where) in err and "Traceback" not in err
    if code == 1 and "bad" in args[0]:
        assert " 3 |   output y = x @ x\n   |                ^" in err


def test_the_picture_in_the_docs_is_the_char_lm_as_drawn_now():
    """docs/charlm.svg (regenerate: mdlc graph examples/charlm.mdl --model CharLM -o
    docs/charlm.svg) holds the boxes, nodes and edges drawn today; its layout may come
    from another Graphviz."""
    clusters, nodes, edges = read_svg((ROOT / "docs/charlm.svg").read_bytes())
    pic = dot_of(ROOT / "examples/charlm.mdl", "CharLM")
    assert (sorted(clusters), nodes, edges) == (sorted(pic.clusters), set(pic.labels),
                                                pic.edges)
