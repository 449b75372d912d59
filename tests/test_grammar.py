"""The grammar itself: LALR without conflicts, keywords reserved, scope names free."""
import pytest

from codegen.ir.diagnostics import MdlSyntaxError
from dsl import nodes as n
from dsl.parser import lark_parser, parse


def test_grammar_has_no_conflicts():
    lark_parser(strict=True)  # strict mode refuses any shift/reduce or reduce/reduce conflict


def test_keywords_are_reserved_but_allowed_as_scope_names():
    module = parse("model M() { scope if { scope for { param w : f32[2] } } }")
    scope = module.models[0].body.stmts[0]
    assert scope.name.name == "if" and scope.body.stmts[0].name.name == "for"
    with pytest.raises(MdlSyntaxError, match="keyword"):
        parse("model M() { if = 1 }")


@pytest.mark.parametrize("text, shape", [
    ("a or b and not c", "(a or (b and (not c)))"),
    ("a + b * c ** d ** e", "(a + (b * (c ** (d ** e))))"),
    ("-a ** 2", "(-(a ** 2))"),
    ("a - b - c", "((a - b) - c)"),
    ("a @ b + c", "((a @ b) + c)"),
    ("a < b + c", "(a < (b + c))"),
    ("f(x)[0].w", "f(x)[0].w"),
])
def test_precedence(text, shape):
    expr = parse(f"model M() {{ y = {text} }}").models[0].body.stmts[0].value
    assert _paren(expr) == shape


def _paren(e):
    if isinstance(e, n.Binary):
        return f"({_paren(e.left)} {e.op} {_paren(e.right)})"
    if isinstance(e, n.Unary):
        return f"({e.op}{' ' if e.op == 'not' else ''}{_paren(e.operand)})"
    if isinstance(e, n.Name):
        return e.id
    if isinstance(e, n.IntLit):
        return str(e.value)
    if isinstance(e, n.Call):
        return f"{_paren(e.func)}({', '.join(_paren(a) for a in e.args)})"
    if isinstance(e, n.Index):
        return f"{_paren(e.base)}[{', '.join(_paren(s) for s in e.subscripts)}]"
    if isinstance(e, n.Path):
        return f"{_paren(e.base)}.{e.attr.name}"
    raise AssertionError(type(e))


def test_statements_separate_by_newline_or_semicolon():
    a = parse("model M() {\n x = 1\n y = 2\n}").models[0].body.stmts
    b = parse("model M() { x = 1; y = 2;; }").models[0].body.stmts
    assert [s.targets[0].name for s in a] == [s.targets[0].name for s in b] == ["x", "y"]


def test_every_node_has_a_location():
    module = parse('import "std/rnn.mdl"\nmodel M(H = 2) {\n  hs = for x in reversed(xs) '
                   '(lengths = n, recompute) { yield lstm(x, h, c) as cell }\n}')
    loop = module.models[0].body.stmts[0].value
    assert (loop.loc.line, loop.loc.col) == (3, 8)
    assert loop.bindings[0].reversed and [o.name for o in loop.options] == ["lengths",
                                                                            "recompute"]
    call = loop.body.stmts[0].values[0]
    assert call.as_name.name == "cell" and (call.as_name.loc.line, call.as_name.loc.col) == (3, 80)
