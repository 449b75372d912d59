"""Text to AST: the LALR parser built from grammar.lark, an AST builder with one method
per rule alias, and syntax errors that say what is wrong rather than what was expected.
"""
from __future__ import annotations

import functools
import math
import unicodedata
from pathlib import Path as FsPath

from lark import Lark, Token, Transformer_NonRecursive, v_args
from lark.exceptions import (UnexpectedCharacters, UnexpectedInput, UnexpectedToken,
                             VisitError)

from codegen.ir.diagnostics import Loc, MdlSyntaxError, Source
from codegen.ir.dtypes import DTYPES, I32_MAX, decimal_int

from . import nodes as n
from .printer import expr_text

GRAMMAR = FsPath(__file__).with_name("grammar.lark")
OPENERS = {"(": ")", "[": "]", "{": "}"}
CLOSERS = {v: k for k, v in OPENERS.items()}
KEYWORDS = {"IMPORT", "DEF", "MODEL", "INPUT", "OUTPUT", "PARAM", "SCOPE", "SHARE", "FOR", "IN",
            "REVERSED", "WHILE", "IF", "ELSE", "YIELD", "RETURN", "MINIMIZE", "AS", "AND", "OR",
            "NOT", "TRUE", "FALSE", "ASSERT"}


@functools.lru_cache(maxsize=None)
def lark_parser(strict: bool = False) -> Lark:
    """The Lark LALR parser (strict=True refuses any grammar conflict; needs interegular).
    Building it takes half a second, most of a small model's front end: Lark keeps the
    built parser in a file of the temporary directory, keyed by the grammar and options."""
    return Lark(GRAMMAR.read_text(), parser="lalr", lexer="basic", strict=strict,
                propagate_positions=True, maybe_placeholders=True, cache=not strict)


def _too_deep_at(node: n.Node) -> Loc:
    """Where a node past MAX_DEPTH is shown: the statement holding its deepest part, or,
    for an expression (refused before its statement exists), where the expression starts."""
    while not isinstance(node, (n.Stmt, n.Expr)) and node.children():
        node = max(node.children(), key=lambda child: child.depth)
    place = lambda x: (x.loc.line, x.loc.col)  # noqa: E731
    while isinstance(node, n.Expr):
        earlier = [child for child in node.children() if place(child) < place(node)]
        if not earlier:
            break
        node = min(earlier, key=place)
    return node.loc


def parse(text: str, path: str = "<string>") -> n.Module:
    """Parse one .mdl source into a Module, or raise MdlSyntaxError."""
    source = Source(path, text)
    try:
        tree = lark_parser().parse(source.text)
    except UnexpectedInput as exc:
        raise _syntax_error(source, exc) from None
    try:
        return AstBuilder(source).transform(tree)
    except VisitError as exc:
        if isinstance(exc.orig_exc, MdlSyntaxError):
            raise exc.orig_exc from None
        raise


def _tok_loc(source: Source, tok: Token) -> Loc:
    return Loc(source, tok.line, tok.column, max(1, len(tok)))


def _call_hint(binding: n.Binding, arguments: list | None = None, options: str = "") -> str:
    """What to write where a loop's sequence reads as a call (`for x in f(xs)`, `for x in
    reversed(g())`), its `arguments` (where they are known; [] for `g()`) taken for
    options: "" where the sequence is no name."""
    if not isinstance(binding.seq, n.Name):
        return ""
    if arguments is not None:
        call = f"{binding.seq.id}({', '.join(expr_text(a) for a in arguments)})"
        what, bound = f"`{call}`", call
    else:
        what, bound = "a call's result", f"{binding.seq.id}(...)"
    backwards, loop = (" backwards", "reversed(ys)") if binding.reversed else ("", "ys")
    return (f"; to loop over {what}{backwards}, bind it to a name first: `ys = {bound}`, "
            f"then `for {binding.var.name} in {loop}{options}`")


def _not_a_call(binding: n.Binding) -> str:
    """The start of the message for a loop's sequence written as a call."""
    return ("`reversed` takes a named sequence, not a call's result" if binding.reversed
            else "a loop's sequence is a name, not a call's result")


def _read_as_options(arguments: list) -> bool:
    """Whether a parenthesized group in a loop's header reads as loop options
    (`recompute`, `lengths = L`) rather than a call's arguments (`xs, 0, 1`)."""
    from .control import LOOP_OPTIONS
    return all(isinstance(a, (n.Name, n.Kwarg)) and
               (a.id if isinstance(a, n.Name) else a.name) in LOOP_OPTIONS for a in arguments)


@v_args(inline=True)
class AstBuilder(Transformer_NonRecursive):
    """Builds the AST bottom-up without recursion; one method per grammar alias."""

    def __init__(self, source: Source):
        super().__init__()
        self.src = source

    def _loc(self, tok: Token) -> Loc:
        return _tok_loc(self.src, tok)

    def _node(self, cls, loc: Loc, *args):
        node = cls(loc, *args)
        if node.depth > n.MAX_DEPTH:
            raise MdlSyntaxError(f"this is nested too deeply (more than {n.MAX_DEPTH} levels: "
                                 "each operator of a chain like `a + b + c` one, each "
                                 "block `{ ... }` in another two); split it into several "
                                 "statements or functions", _too_deep_at(node))
        return node

    # ---- top level ----
    def start(self, *items):
        pick = lambda cls: [i for i in items if isinstance(i, cls)]  # noqa: E731
        loc = Loc(self.src, 1, 1)
        return n.Module(loc, pick(n.Import), pick(n.FuncDef), pick(n.ModelDef))

    def import_decl(self, kw, path):
        return n.Import(self._loc(path), str(path)[1:-1])

    def def_decl(self, kw, name, *rest):
        *args, returns, body = rest
        args = [a for a in args if a is not None]
        if returns is None:
            returns = []
        elif not isinstance(returns, list):
            returns = [returns]
        return n.FuncDef(self._loc(name), self._ident(name), args, returns, body)

    def arg(self, name, type_, default):
        return n.Arg(self._loc(name), self._ident(name), type_, default)

    def type_tuple(self, *types):
        return list(types)

    def model_decl(self, kw, name, *rest):
        *hparams, body = rest
        return n.ModelDef(self._loc(name), self._ident(name), [h for h in hparams if h], body)

    def hparam(self, name, value):
        return n.HParam(self._loc(name), self._ident(name), value)

    def scalar_type(self, name):
        return n.TypeExpr(self._loc(name), str(name), None)

    def tensor_type(self, name, *dims):
        return self._node(n.TypeExpr, self._loc(name), str(name), [d for d in dims if d])

    def leading_tensor_type(self, name, ellipsis, *dims):
        return self._node(n.TypeExpr, self._loc(name), str(name), list(dims), True)

    @v_args(inline=True, meta=True)
    def block(self, meta, *stmts):
        loc = Loc(self.src, meta.line, meta.column) if not meta.empty else Loc(self.src, 1, 1)
        return self._node(n.Block, loc, list(stmts))

    # ---- statements ----
    def assign(self, *parts):
        *targets, value = parts
        idents = [self._ident(t) for t in targets]
        return self._node(n.Assign, idents[0].loc, idents, value)

    def param_decl(self, kw, name, type_, init):
        return self._node(n.ParamDecl, self._loc(name), self._ident(name), type_, init)

    def input_decl(self, kw, name, type_):
        return n.InputDecl(self._loc(name), self._ident(name), type_)

    def output_decl(self, kw, name, value):
        return self._node(n.OutputDecl, self._loc(name), self._ident(name), value)

    def minimize_stmt(self, kw, name):
        return n.Minimize(self._loc(name), self._ident(name))

    def assert_stmt(self, kw, cond, message):
        return self._node(n.Assert, self._loc(kw), cond,
                          None if message is None else self._message(message))

    def _message(self, tok: Token) -> str:
        """An assert's message: no control characters but a tab. The error's text and the
        class's docstring (a NUL cuts the one and is no Python in the other) hold it."""
        text = str(tok)[1:-1]
        for i, ch in enumerate(text):
            if unicodedata.category(ch) == "Cc" and ch != "\t":
                raise MdlSyntaxError("an assert's message cannot hold the control character "
                                     f"U+{ord(ch):04X}", Loc(self.src, tok.line,
                                                             tok.column + 1 + i))
        return text

    def yield_stmt(self, kw, *values):
        return self._node(n.Yield, self._loc(kw), list(values))

    def return_stmt(self, kw, *values):
        return self._node(n.Return, self._loc(kw), list(values))

    def scope_stmt(self, kw, name, *rest):
        *attrs, body = rest
        return self._node(n.ScopeStmt, name.loc, name, [a for a in attrs if a], body)

    def share_stmt(self, kw, *rest):
        *pairs, body = rest
        return self._node(n.Share, self._loc(kw), pairs, body)

    def share_pair(self, source, target):
        target = None if isinstance(target, Token) else target
        return n.SharePair(source[0].loc, source, target)

    def scope_path(self, *names):
        return list(names)

    def scope_name(self, tok):
        return self._ident(tok)

    def if_stmt(self, kw, cond, then, *rest):
        orelse = rest[1] if len(rest) == 2 else None
        if isinstance(orelse, n.If):
            orelse = n.Block(orelse.loc, [orelse])
        return self._node(n.If, self._loc(kw), cond, then, orelse)

    def while_stmt(self, kw, cond, body):
        return self._node(n.While, self._loc(kw), cond, body)

    def for_stmt(self, kw, *rest):
        *parts, body = rest
        for binding, groups in parts[:-1]:
            if groups:
                raise MdlSyntaxError("loop options go after the last sequence: "
                                     "`for x in xs, y in ys (...)`", groups[0][0].loc)
        binding, groups = parts[-1]
        if len(groups) > 1:  # `for x in f(xs) (lengths = L)`: f's arguments, then options
            hint = "" if binding.reversed else _call_hint(binding, groups[0], " (...)")
            raise MdlSyntaxError("a loop takes one list of options" + hint, groups[1][0].loc)
        options = [self._loop_option(a, binding) for a in groups[0]] if groups else []
        return self._node(n.For, self._loc(kw), [p for p, _ in parts], options, body)

    def seq_binding(self, var, kw, seq, *groups):
        seq, groups = self._sequence(seq, list(groups))
        binding = n.Binding(self._loc(var), self._ident(var), seq, False)
        self._no_empty_group(binding, groups[0] if groups else None, groups[1:])
        return binding, groups

    @staticmethod
    def _no_empty_group(binding: n.Binding, call: list | None, options: list) -> None:
        """`for x in g()`: a call of no arguments read as a loop's sequence `g` and an
        empty group (it said "expected an expression, found `)`"). `call` is the group
        right after the sequence's name (None where there is none), `options` the groups
        that can only be options."""
        if call == [] and isinstance(binding.seq, n.Name):
            raise MdlSyntaxError(_not_a_call(binding) + _call_hint(binding, []),
                                 binding.seq.loc)
        if [] in options or call == []:
            raise MdlSyntaxError("a loop's options are not empty: leave out the `()`",
                                 binding.seq.loc)

    def reversed_binding(self, var, kw, rev, source, *groups):
        seq, inner = source
        binding = n.Binding(self._loc(var), self._ident(var), seq, True)
        self._no_empty_group(binding, inner[0] if inner else None, [*inner[1:], *groups])
        if inner:
            if isinstance(seq, n.Name) and not _read_as_options(inner[0]):
                # `reversed(tanh(xs))`: a call's arguments, no options (it said "loop
                # options go after the sequence", of options never written)
                raise MdlSyntaxError(_not_a_call(binding) + _call_hint(
                    binding, inner[0], " (...)" if groups else ""), inner[0][0].loc)
            raise MdlSyntaxError("loop options go after the sequence: `for x in reversed(xs) "
                                 "(...)`", inner[0][0].loc)
        return binding, list(groups)

    def reversed_source(self, seq, *groups):
        return self._sequence(seq, list(groups))

    def paren_group(self, *args):
        return list(args)

    def empty_group(self):
        return []  # `for x in g()`: refused where the binding is made

    def _sequence(self, seq, groups: list) -> tuple:
        """A loop's sequence, `range(...)` made a call of its first parenthesized group
        (in a header, `range` is always the built-in), and the groups left: options."""
        if isinstance(seq, n.Name) and seq.id == "range" and groups:
            args = groups.pop(0)
            keywords = [a for a in args if isinstance(a, n.Kwarg)]
            seq = self._node(n.Call, seq.loc, seq, [a for a in args if a not in keywords],
                             keywords, None)
        return seq, groups

    def _loop_option(self, arg, binding: n.Binding) -> n.LoopOption:
        if isinstance(arg, n.Kwarg):
            return self._node(n.LoopOption, arg.loc, arg.name, arg.value)
        if isinstance(arg, n.Name):
            return n.LoopOption(arg.loc, arg.id, None)
        raise MdlSyntaxError("a loop option is a name or `name = value` (options are "
                             f"lengths = L, recompute, checkpoint = k){_call_hint(binding)}",
                             arg.loc)

    # ---- expressions ----
    def binary(self, left, op, right):
        return self._node(n.Binary, self._loc(op), str(op), left, right)

    def unary(self, op, operand):
        if str(op) == "-" and isinstance(operand, n.IntLit) and operand.value == I32_MAX + 1:
            return n.IntLit(self._loc(op), -operand.value)  # -2147483648, the one such case
        return self._node(n.Unary, self._loc(op), str(op), operand)

    def call(self, func, *rest):
        *args, as_kw, as_name = rest
        args = [a for a in args if a is not None]
        pos = [a for a in args if not isinstance(a, n.Kwarg)]
        kw = [a for a in args if isinstance(a, n.Kwarg)]
        return self._node(n.Call, func.loc, func, pos, kw, as_name)

    def index(self, base, lsqb, *subscripts):
        return self._node(n.Index, self._loc(lsqb), base, list(subscripts))

    def slice(self, start, colon, stop):
        return self._node(n.Slice, self._loc(colon), start, stop)

    def path(self, base, dot, attr):
        return self._node(n.Path, attr.loc, base, attr)

    def kwarg(self, name, value):
        return self._node(n.Kwarg, self._loc(name), str(name), value)

    def name(self, tok):
        return n.Name(self._loc(tok), str(tok))

    def int_lit(self, tok):
        try:
            value = decimal_int(str(tok))
        except OverflowError as exc:
            raise MdlSyntaxError(f"{exc} does not fit in i32", self._loc(tok))
        if value > I32_MAX + 1:  # 2**31 only as `-2147483648` (unary minus checks the rest)
            raise MdlSyntaxError(f"integer literal {tok} does not fit in i32", self._loc(tok))
        return n.IntLit(self._loc(tok), value)

    def float_lit(self, tok):
        value = float(tok)
        if math.isinf(value):
            raise MdlSyntaxError(f"float literal {tok} is out of range", self._loc(tok))
        return n.FloatLit(self._loc(tok), value, str(tok))

    def bool_lit(self, tok):
        return n.BoolLit(self._loc(tok), str(tok) == "true")

    def list_lit(self, lsqb, *items):
        return self._node(n.ListLit, self._loc(lsqb), [i for i in items if i is not None])

    def _ident(self, tok) -> n.Ident:
        return tok if isinstance(tok, n.Ident) else n.Ident(self._loc(tok), str(tok))


# ---- syntax errors ----------------------------------------------------------
TOKEN_WORDS = {
    "NAME": "a name", "INT": "an integer", "FLOAT": "a number", "STRING": "a string",
    "LPAR": "`(`", "RPAR": "`)`", "LSQB": "`[`", "RSQB": "`]`", "LBRACE": "`{`",
    "RBRACE": "`}`", "COMMA": "`,`", "EQUAL": "`=`", "COLON": "`:`", "SEMICOLON": "`;`",
    "DOT": "`.`", "ELLIPSIS": "`...`", "COMPARE": "a comparison", "ADD_OP": "`+`", "MINUS": "`-`",
    "MUL_OP": "an operator", "POW": "`**`", "__ANON_0": "`->`", "$END": "the end of the file",
}


def _describe(tok: Token) -> str:
    if tok.type == "$END":
        return "end of file"
    return f"`{tok}`"


def _syntax_error(source: Source, exc: UnexpectedInput) -> MdlSyntaxError:
    if isinstance(exc, UnexpectedCharacters):
        loc = Loc(source, exc.line, exc.column)
        char = source.text[exc.pos_in_stream]
        if char == '"':
            return MdlSyntaxError("unterminated string", loc)
        if char.isspace() or not char.isprintable():  # a no-break or zero-width space
            name = unicodedata.name(char, "")
            return MdlSyntaxError(f"unexpected character U+{ord(char):04X}"
                                  + (f" ({name.lower()})" if name else ""), loc)
        return MdlSyntaxError(f"unexpected character `{char}`", loc)
    assert isinstance(exc, UnexpectedToken)
    tok = exc.token
    before = _tokens_before(source, tok)  # lexed once: every rule below reads them
    unclosed = _open_brackets(source, before)
    if tok.type == "$END":
        if unclosed:
            char, loc = unclosed[-1]
            return MdlSyntaxError(f"unexpected end of file: `{char}` is never closed", loc,
                                  label=f"this `{char}` needs a matching `{OPENERS[char]}`")
        return MdlSyntaxError("unexpected end of file", _end_loc(source))
    loc = _tok_loc(source, tok)
    text = str(tok)
    if text in CLOSERS and (not unclosed or unclosed[-1][0] != CLOSERS[text]):
        if unclosed:
            char, where = unclosed[-1]
            return MdlSyntaxError(f"`{text}` does not match the `{char}` opened at {where}", loc)
        return MdlSyntaxError(f"unmatched `{text}`", loc)
    left_open = _left_open(source, tok, before, unclosed)
    if left_open is not None:
        return left_open
    if tok.type == "COMPARE" and exc.state is not None and "COMPARE" not in exc.expected:
        return MdlSyntaxError("comparisons do not chain: write `a < b and b < c`", loc)
    glued = _number_into_name(before + [tok])
    if glued is not None:
        number, name = glued
        return MdlSyntaxError(f"`{number}{name}` is no number: mdl writes numbers in decimal, "
                              "without `0x`, `_` or a suffix (`16`, `1000`, `1e-3`)",
                              _tok_loc(source, number))
    if tok.type == "EQUAL" and before and before[-1].type in KEYWORDS:
        return MdlSyntaxError(f"`{before[-1]}` is a keyword and cannot be used as a name here",
                              _tok_loc(source, before[-1]))
    if tok.type == "ELSE":
        return MdlSyntaxError("`else` without a matching `if` block before it", loc)
    if tok.type == "ELLIPSIS" and _in_subscript(before):
        return MdlSyntaxError("`...` is no index: a subscript names each axis (`x[:, 0]`), "
                              "and `...` stands for any leading dims in a function's types "
                              "only", loc)
    if tok.type == "ELLIPSIS":
        return MdlSyntaxError("`...` stands for any leading dims, first in the type of a "
                              "function's argument or result: `x : f32[..., I]`", loc)
    if tok.type == "COLON" and unclosed and unclosed[-1][0] == "[" and _in_slice(before):
        return MdlSyntaxError("a slice takes no step: write `x[a:b]` (to run over a "
                              "sequence backwards, `for x in reversed(xs)`)", loc)
    header = _header_hint(source, tok, before)
    if header is not None:
        return MdlSyntaxError(header, loc)
    if set(exc.expected) <= {"COMMA", "EQUAL"} and before and before[-1].type == "NAME":
        name_loc = _tok_loc(source, before[-1])
        if _in_model_header(before):
            return MdlSyntaxError(f"hyper-parameter `{before[-1]}` needs a default: "
                                  f"`{before[-1]} = ...`", name_loc)
        if unclosed and unclosed[-1][0] == "{":
            compound = source.text[tok.start_pos:tok.end_pos + 1]
            if compound[:-1] in ("+", "-", "*", "/", "//", "%", "**") and compound[-1] == "=":
                name = before[-1]  # `y += x`: it said "a bare expression"
                return MdlSyntaxError(f"`{compound}` is not mdl: write `{name} = {name} "
                                      f"{compound[:-1]} ...`", loc)
            return MdlSyntaxError("a statement cannot be a bare expression; assign its "
                                  "value: `y = ...`", name_loc)
    if tok.type.isupper() and text.isidentifier() and tok.type != "NAME" and "NAME" in exc.expected:
        if (text == "as" and before and before[-1].line == tok.line
                and before[-1].type in ("NAME", "RSQB", "INT", "FLOAT")):  # `x as foo`
            return MdlSyntaxError("`as` names the scope of a function call (`lstm(x, h, c) "
                                  "as layer1`): it may follow a call only", loc)
        if text == "while" and before and before[-1].type == "EQUAL":  # `ys = while ...`
            return MdlSyntaxError("a `while` yields no values to assign (a `for` does: `ys = "
                                  "for x in xs { ...; yield y }`); keep what it makes in its "
                                  "state, as a tensor it writes a trip's value into", loc)
        if text == "if" and before and before[-1].type == "EQUAL":
            return MdlSyntaxError("an `if` is a statement, not a value: assign in both "
                                  "branches (`if c { y = a } else { y = b }`), or choose "
                                  "elementwise with where(c, a, b)", loc)
        if text == "reversed" and _in_for_header(before):  # among the loop's options
            return MdlSyntaxError("`reversed` is not a loop option: it goes around the "
                                  "sequence, `for x in reversed(xs) (...)`", loc)
        return MdlSyntaxError(f"`{text}` is a keyword and cannot be used as a name here", loc)
    if {"NAME", "INT", "FLOAT"} <= set(exc.expected):
        return MdlSyntaxError(f"expected an expression, found {_describe(tok)}", loc)
    expected = sorted({TOKEN_WORDS.get(e, f"`{e.lower()}`") for e in exc.expected})
    if len(expected) <= 4:
        return MdlSyntaxError(f"unexpected {_describe(tok)}, expected {_join(expected)}", loc)
    return MdlSyntaxError(f"unexpected {_describe(tok)} here", loc)


# the keywords a statement starts with
STATEMENT_KEYWORDS = {"IMPORT", "DEF", "MODEL", "INPUT", "OUTPUT", "PARAM", "SCOPE", "SHARE",
                      "FOR", "WHILE", "IF", "YIELD", "RETURN", "MINIMIZE", "ASSERT"}


def _left_open(source: Source, tok: Token, before: list[Token],
               unclosed: list[tuple[str, Loc]]) -> MdlSyntaxError | None:
    """A `(` or `[` left open at the end of a line (`y = sum(x`): the parser finds out a
    line late, at the next statement (`output z = ...`, `z = ...`; after `x[`, at that
    `=`), which is then not what is wrong. That statement starts its line, with a keyword
    or as an assignment."""
    if not unclosed or unclosed[-1][0] == "{":
        return None
    char, where = unclosed[-1]
    if tok.type == "EQUAL" and before and before[-1].type == "NAME":
        tok = before[-1]
    first = _line_start(source, tok)
    if tok.line <= where.line or not first:
        return None
    if tok.type not in STATEMENT_KEYWORDS and not (
            tok.type == "NAME" and _next_is(source, tok, "EQUAL")):
        return None
    if _closes_on_line(source, tok):  # `f(a` then `axis = 1)`: a `,` is missing instead
        return None
    return MdlSyntaxError(f"`{char}` is never closed: the statement on line {tok.line} "
                          "starts before it is", where,
                          label=f"this `{char}` needs a matching `{OPENERS[char]}`")


def _line_start(source: Source, tok: Token) -> bool:
    """Whether only blanks stand before `tok` on its line."""
    line = source.text.rfind("\n", 0, tok.start_pos) + 1
    return not source.text[line:tok.start_pos].strip()


def _closes_on_line(source: Source, tok: Token) -> bool:
    """Whether `tok`'s line, from `tok` on, closes a bracket it did not open."""
    end = source.text.find("\n", tok.start_pos)
    depth = 0
    try:
        for t in lark_parser().lex(source.text[tok.start_pos:None if end < 0 else end]):
            depth += (str(t) in OPENERS) - (str(t) in CLOSERS)
            if depth < 0:
                return True
    except UnexpectedInput:
        pass
    return False


def _next_is(source: Source, tok: Token, kind: str) -> bool:
    """Whether the token after `tok` is of type `kind`."""
    try:
        for after in lark_parser().lex(source.text[tok.end_pos:]):
            return after.type == kind
    except UnexpectedInput:
        pass
    return False


# the built-ins whose brackets hold dims, not a subscript: `zeros[B, 4]`, `full[B](0.5)`
DIM_BUILDERS = ("zeros", "ones", "full")


def _in_subscript(before: list[Token]) -> bool:
    """Whether the tokens before end inside a subscript (`x[0, `, `f(x)[`), not a tensor
    type's dims (`f32[B, `), a constructor's (`zeros[B, `) or a list (`[1, `)."""
    depth = 0
    for k in range(len(before) - 1, -1, -1):
        t = before[k]
        if t.type in ("RPAR", "RSQB", "RBRACE"):
            depth += 1
        elif t.type in ("LPAR", "LSQB", "LBRACE"):
            if depth == 0:
                owner = before[k - 1] if k else None
                return (t.type == "LSQB" and owner is not None
                        and owner.type in ("NAME", "RSQB", "RPAR")
                        and str(owner) not in DTYPES and str(owner) not in DIM_BUILDERS)
            depth -= 1
    return False


def _in_slice(before: list[Token]) -> bool:
    """Whether the subscript the tokens before end in already has its `:` (`x[0:4` or
    `x[:`), so that another `:` would be a step (`x[0:4:2]`, `x[::-1]`)."""
    depth = 0
    for t in reversed(before):
        if t.type in ("RPAR", "RSQB", "RBRACE"):
            depth += 1
        elif t.type in ("LPAR", "LSQB", "LBRACE"):
            if depth == 0:
                return False
            depth -= 1
        elif depth == 0 and t.type == "COMMA":
            return False
        elif depth == 0 and t.type == "COLON":
            return True
    return False


def _number_into_name(tokens: list[Token]) -> tuple[Token, Token] | None:
    """A number with a name written against it among the last tokens (`0x10`, `1_000`,
    `1e`): the lexer read them as two, and the error came later, as a bare expression."""
    for a, b in zip(tokens[-3:], tokens[-2:]):
        if a.type in ("INT", "FLOAT") and b.type == "NAME" and a.end_pos == b.start_pos:
            return a, b
    return None


def _in_for_header(before: list[Token]) -> bool:
    """Whether the tokens before end inside a `for` header: past `for`, with no brace
    after it (every finished `for`, and every block, ends in one)."""
    for t in reversed(before):
        if t.type == "FOR":
            return True
        if str(t) in ("{", "}"):
            return False
    return False


def _header_hint(source: Source, tok: Token, before: list[Token]) -> str | None:
    """The slips of a `for` or `share` header that read as Python's: `for y, t in ys, ts`
    (each sequence takes its own `in`), a parameter's path as a loop's sequence (`for x
    in enc.table[ids]`) and `.` on the left of a share pair: each was "unexpected `,`" or
    "unexpected `.`", with no word of what to write."""
    kinds = [t.type for t in before[-5:]]
    if tok.type == "COMMA" and kinds[-2:] == ["FOR", "NAME"]:
        return ("a loop over several sequences gives each its own `in`: `for y in ys, t in "
                "ts`, not `for y, t in ys, ts`")
    if tok.type == "DOT" and kinds[-1:] in (["LPAR"], ["COMMA"]) and _in_share_header(before):
        return ("`.` stands for the scope a `share` is in, on the right of a pair only "
                "(`share (child = .)`); on the left is the name of a scope inside it")
    if tok.type != "DOT" or not _in_for_header(before):
        return None
    if kinds[-3:-1] == ["NAME", "IN"]:
        var = before[-3]
    elif kinds[-5:-1] == ["NAME", "IN", "REVERSED", "LPAR"]:
        var = before[-5]
    else:
        return None
    path = _path_text(source.text, before[-1].start_pos)
    loop = "reversed(ys)" if kinds[-2] == "LPAR" else "ys"
    return (f"a loop's sequence is a name, not a parameter's path: bind it to a name first: "
            f"`ys = {path}`, then `for {var} in {loop}`")


def _in_share_header(before: list[Token]) -> bool:
    """Whether the tokens before end inside a `share (...)`'s parentheses."""
    for k in range(len(before) - 1, 0, -1):
        if before[k].type in ("RPAR", "LBRACE", "RBRACE"):
            return False
        if before[k].type == "LPAR":
            return before[k - 1].type == "SHARE"
    return False


def _path_text(text: str, start: int) -> str:
    """`enc.table[ids]` of a text from `start`: names, dots and whole brackets (up to a
    `]` that closes none of them, as `reversed(e.t)`'s `)` ends the path)."""
    end, depth = start, 0
    while end < len(text):
        ch = text[end]
        if depth == 0 and not (ch.isalnum() or ch in "_.["):
            break
        depth += (ch == "[") - (ch == "]")
        if depth < 0:
            break
        end += 1
    return text[start:end]


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _tokens_before(source: Source, stop: Token) -> list[Token]:
    """The tokens of the text before `stop` (as far as they lex)."""
    end = len(source.text) if stop.type == "$END" else stop.start_pos
    tokens: list[Token] = []
    try:
        tokens.extend(lark_parser().lex(source.text[:end]))
    except UnexpectedInput:
        pass
    return tokens


def _in_model_header(tokens: list[Token]) -> bool:
    depth = 0
    for i in range(len(tokens) - 1, 1, -1):
        text = str(tokens[i])
        depth += text in CLOSERS
        if text in OPENERS:
            if depth == 0:
                return text == "(" and tokens[i - 2].type == "MODEL"
            depth -= 1
    return False


def _open_brackets(source: Source, before: list[Token]) -> list[tuple[str, Loc]]:
    """The brackets still open after the tokens `before`, outermost first."""
    stack: list[tuple[str, Loc]] = []
    for tok in before:
        text = str(tok)
        if text in OPENERS:
            stack.append((text, _tok_loc(source, tok)))
        elif text in CLOSERS and stack and stack[-1][0] == CLOSERS[text]:
            stack.pop()
    return stack


def _end_loc(source: Source) -> Loc:
    lines = source.lines() or ("",)
    return Loc(source, len(lines), len(lines[-1]) + 1)
