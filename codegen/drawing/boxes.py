"""The nested boxes of a picture (Graphviz clusters): each holds nodes and smaller
boxes, and is emitted into a `graphviz.Digraph` once the whole model is laid out."""
from __future__ import annotations

from dataclasses import dataclass, field

import graphviz

SCOPE_STYLE = {"style": "rounded,filled", "fillcolor": "#0000000c", "color": "#888888"}


@dataclass
class Box:
    """A cluster: `key` names it uniquely in the picture (Graphviz wants the `cluster`
    prefix); `attrs` are its Graphviz attributes, its label among them."""
    key: str
    attrs: dict[str, str]
    nodes: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    boxes: dict[str, Box] = field(default_factory=dict)

    def node(self, name: str, **attrs: str) -> str:
        self.nodes.append((name, attrs))
        return name

    def box(self, key: str, **attrs: str) -> Box:
        """The child box named `key` in the whole picture (made, with `attrs`, the first
        time)."""
        if key not in self.boxes:
            self.boxes[key] = Box(key, attrs)
        return self.boxes[key]

    def scope(self, path: tuple[str, ...]) -> Box:
        """The box of the scope `path` below this box, nested one box per name."""
        box = self
        for i, name in enumerate(path):
            full = "scope " + "/".join(path[:i + 1])
            box = box.box(f"{self.key} {full}".strip(), label=name, tooltip=full,
                          **SCOPE_STYLE)
        return box

    def emit(self, into: graphviz.Digraph) -> None:
        """Write this box's nodes and boxes into `into` (the box itself is `into`)."""
        for name, attrs in self.nodes:
            into.node(name, **attrs)
        for child in self.boxes.values():
            with into.subgraph(name="cluster " + child.key) as sub:
                sub.attr(**child.attrs)
                child.emit(sub)
