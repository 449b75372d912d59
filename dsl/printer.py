"""AST expressions back to text, for messages: parenthesized where the grammar's
precedence needs it (`(a or b) and c`), so the text reads as the expression does."""
from __future__ import annotations

from . import nodes as n

# How tightly each operator binds (dsl/grammar.lark, lowest first); 10: an operand
_BINARY = {"or": 1, "and": 2, "<": 4, "<=": 4, ">": 4, ">=": 4, "==": 4, "!=": 4,
           "+": 5, "-": 5, "*": 6, "/": 6, "%": 6, "@": 6, "//": 6, "**": 8}
_UNARY = {"not": 3, "-": 7}


def _binds(e: n.Expr) -> int:
    if isinstance(e, n.Binary):
        return _BINARY.get(e.op, 10)
    if isinstance(e, n.Unary):
        return _UNARY.get(e.op, 10)
    return 10


def _operand(e: n.Expr, least: int) -> str:
    """e's text, in parentheses where it binds less tightly than `least`."""
    text = expr_text(e)
    return f"({text})" if _binds(e) < least else text


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
        p = _binds(e)
        # left-associative but for `**`; comparisons do not chain
        left = p + 1 if p in (4, 8) else p
        right = p if p == 8 else p + 1
        return f"{_operand(e.left, left)} {e.op} {_operand(e.right, right)}"
    if isinstance(e, n.Unary):
        return f"{e.op}{' ' if e.op == 'not' else ''}{_operand(e.operand, _binds(e))}"
    if isinstance(e, n.Path):
        return f"{_operand(e.base, 10)}.{e.attr.name}"
    if isinstance(e, n.ListLit):
        return "[" + ", ".join(expr_text(i) for i in e.items) + "]"
    if isinstance(e, n.Slice):
        return f"{expr_text(e.start)}:{expr_text(e.stop)}"
    if isinstance(e, n.Index):
        return f"{_operand(e.base, 10)}[{', '.join(expr_text(s) for s in e.subscripts)}]"
    if isinstance(e, n.Call):
        args = [expr_text(a) for a in e.args] + [f"{k.name} = {expr_text(k.value)}"
                                                 for k in e.kwargs]
        as_name = f" as {e.as_name.name}" if e.as_name else ""
        return f"{expr_text(e.func)}({', '.join(args)}){as_name}"
    return "?"
