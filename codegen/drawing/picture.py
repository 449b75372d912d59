"""The picture of one model of a file: its forward graph as checked, or (`backward`)
the joint forward and backward program autodiff and the passes make of it."""
from __future__ import annotations

from typing import Any

import graphviz

from dsl import UsageError

from ..ir.diagnostics import Diagnostic
from ..pipeline import differentiate
from .draw import Drawing
from .scopes import scoped_model


def picture(path: str, defines: dict[str, Any] | None = None, model: str | None = None,
            backward: bool = False) -> tuple[graphviz.Digraph, list[Diagnostic]]:
    """The picture of `model` (the file's only model when None) and the checker's
    warnings; MdlError for errors in the file, UsageError for a bad request."""
    scoped = scoped_model(path, defines, model)
    graph, scope_of = scoped.graph, scoped.forward_scopes()
    if backward:
        if graph.loss is None:
            raise UsageError(f"model `{graph.name}` minimizes nothing: it has no backward "
                             "pass to draw")
        graph, scope_of = differentiate(graph), scoped.by_location()
    hparams = ", ".join(f"{k}={v}" for k, v in graph.hparams.items())
    title = f"model {graph.name}({hparams})" + (", forward and backward" if backward else "")
    return Drawing(graph, scope_of).picture(title), scoped.warnings
