"""AST expressions back to text, for messages."""
from __future__ import annotations

from . import nodes as n


def expr_text(e: n.Expr | None) -> str:
    if e is None:
        return ""
    if isinstance(e, n.Name):
        return e.id
    if isinstance(e, (n.IntLit, n.BoolLit)):
        return str(e.value).lower()
    if isinstance(e, n.FloatLit):
        return e.text
    if isinstance(e, n.Binary):
        return f"{expr_text(e.left)} {e.op} {expr_text(e.right)}"
    if isinstance(e, n.Unary):
        return f"{e.op}{' ' if e.op == 'not' else ''}{expr_text(e.operand)}"
    if isinstance(e, n.Path):
        return f"{expr_text(e.base)}.{e.attr.name}"
    if isinstance(e, n.ListLit):
        return "[" + ", ".join(expr_text(i) for i in e.items) + "]"
    if isinstance(e, n.Slice):
        return f"{expr_text(e.start)}:{expr_text(e.stop)}"
    if isinstance(e, n.Index):
        return f"{expr_text(e.base)}[{', '.join(expr_text(s) for s in e.subscripts)}]"
    if isinstance(e, n.Call):
        args = [expr_text(a) for a in e.args] + [f"{k.name} = {expr_text(k.value)}"
                                                 for k in e.kwargs]
        as_name = f" as {e.as_name.name}" if e.as_name else ""
        return f"{expr_text(e.func)}({', '.join(args)}){as_name}"
    return "?"
