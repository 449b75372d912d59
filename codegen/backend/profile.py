"""A profiled build (`mdlc build --profile`): every instruction the renderer writes that
does work (a fused loop, a kernel, products, a copy, a loop or branch with all it runs)
and every whole function is a site, timed by the target (`Target.time_start`,
`time_stop`) into the model's count of it (mdl::ProfileCount). The model's table of its
sites (mdl::ProfileSite) says for each what runs there, the .mdl source of its first op
and the site it runs inside; `profile()` hands them to Python, where codegen/profile.py
makes a report."""
from __future__ import annotations

from dataclasses import dataclass

from .lower import Concurrent, Copy, Fused, Kernel, Structured, View

# a fused loop's ops named, at most
NAMED_OPS = 4


@dataclass(frozen=True)
class Site:
    function: str   # forward, training forward, backward
    parent: int     # the site this one runs inside (-1: none, a whole function)
    where: str      # file:line:col of its first op with a source ("" for none)
    what: str


def timed(ins) -> bool:
    """Whether an instruction does work of its own (a view only names memory)."""
    return not isinstance(ins, View)


def describe(ins) -> tuple[str, str]:
    """(what runs, where in the .mdl sources) of an instruction."""
    if isinstance(ins, Fused):
        names = list(dict.fromkeys(op.prim for op in ins.ops))
        what = ", ".join(names[:NAMED_OPS]) + (f", ... ({len(ins.ops)} ops)"
                                               if len(names) > NAMED_OPS else "")
        return what, _where(op.loc for op in ins.ops)
    if isinstance(ins, Kernel):
        return ins.op.prim, _where([ins.op.loc])
    if isinstance(ins, Structured):
        return ins.op.prim, _where([ins.op.loc])
    if isinstance(ins, Concurrent):
        return f"{len(ins.arms)} loops at once", _where(a.op.loc for a in ins.arms)
    if isinstance(ins, Copy):
        return "copy", ""
    kernels = ins.kernels  # products.Products: run together
    prims = list(dict.fromkeys(k.op.prim for k in kernels))
    return " ".join(prims) + f" x{len(kernels)}", _where(k.op.loc for k in kernels)


def _where(locs) -> str:
    """The first source position among `locs`, a std library file as imported."""
    for loc in locs:
        if loc is not None:
            shown = loc.source.library_name or loc.source.shown
            return f"{shown}:{loc.line}:{loc.col}"
    return ""
