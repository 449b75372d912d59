"""The AST: small dataclasses, one per grammar construct, each with its source location.

`depth` is the height of the subtree; the parser refuses input deeper than
`MAX_DEPTH` so that every later recursive walk stays far from Python's stack limit.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from codegen.ir.diagnostics import Loc

MAX_DEPTH = 200


@dataclass(eq=False)
class Node:
    loc: Loc
    depth: int = field(default=1, init=False, repr=False, compare=False)

    def __post_init__(self):
        self.depth = max((child.depth for child in self.children()), default=0) + 1

    def children(self) -> list[Node]:
        """The nodes this one holds, in its fields' order (lists and pairs opened)."""
        out: list[Node] = []
        for f in fields(self):
            value = getattr(self, f.name)
            for item in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(item, Node):
                    out.append(item)
                elif isinstance(item, tuple):
                    out += [x for x in item if isinstance(x, Node)]
        return out


@dataclass(eq=False)
class Ident(Node):
    """A name as written, with its place (variables, scope names, keywords as names)."""
    name: str


# ---- expressions ------------------------------------------------------------
class Expr(Node):
    pass


@dataclass(eq=False)
class Name(Expr):
    id: str


@dataclass(eq=False)
class IntLit(Expr):
    value: int


@dataclass(eq=False)
class FloatLit(Expr):
    value: float
    text: str


@dataclass(eq=False)
class BoolLit(Expr):
    value: bool


@dataclass(eq=False)
class ListLit(Expr):
    items: list[Expr]


@dataclass(eq=False)
class Binary(Expr):
    """`loc` is the operator's place: errors about an operation point at it."""
    op: str
    left: Expr
    right: Expr


@dataclass(eq=False)
class Unary(Expr):
    op: str  # "-" or "not"
    operand: Expr


@dataclass(eq=False)
class Kwarg(Node):
    name: str
    value: Expr


@dataclass(eq=False)
class Call(Expr):
    func: Expr
    args: list[Expr]
    kwargs: list[Kwarg]
    as_name: Ident | None = None


@dataclass(eq=False)
class Slice(Expr):
    start: Expr | None
    stop: Expr | None


@dataclass(eq=False)
class Index(Expr):
    base: Expr
    subscripts: list[Expr]


@dataclass(eq=False)
class Path(Expr):
    """`a.b`: a parameter named relative to the current scope."""
    base: Expr
    attr: Ident


# ---- types ------------------------------------------------------------------
@dataclass(eq=False)
class TypeExpr(Node):
    """`f32[E, 4*H]`; `dims` is None for a bare name (`f32`, `int`, `bool`). `leading`:
    written `f32[..., I]` (a function's argument or result), any dims before `dims`."""
    name: str
    dims: list[Expr] | None
    leading: bool = False


# ---- statements -------------------------------------------------------------
class Stmt(Node):
    pass


@dataclass(eq=False)
class Block(Node):
    stmts: list[Stmt]


@dataclass(eq=False)
class Binding(Node):
    var: Ident
    seq: Expr  # a Name, or an Index of one
    reversed: bool


@dataclass(eq=False)
class LoopOption(Node):
    name: str
    value: Expr | None


@dataclass(eq=False)
class For(Stmt):
    bindings: list[Binding]
    options: list[LoopOption]
    body: Block


@dataclass(eq=False)
class Assign(Stmt):
    targets: list[Ident]
    value: Expr | For


@dataclass(eq=False)
class ParamDecl(Stmt):
    name: Ident
    type: TypeExpr
    init: Expr | None


@dataclass(eq=False)
class InputDecl(Stmt):
    name: Ident
    type: TypeExpr


@dataclass(eq=False)
class OutputDecl(Stmt):
    name: Ident
    value: Expr | None


@dataclass(eq=False)
class Minimize(Stmt):
    name: Ident


@dataclass(eq=False)
class Assert(Stmt):
    """`assert cond, "message"`: checked on every call (the message may be None)."""
    cond: Expr
    message: str | None


@dataclass(eq=False)
class Yield(Stmt):
    values: list[Expr]


@dataclass(eq=False)
class Return(Stmt):
    values: list[Expr]


@dataclass(eq=False)
class ScopeStmt(Stmt):
    name: Ident
    attrs: list[Kwarg]
    body: Block


@dataclass(eq=False)
class SharePair(Node):
    """`source = target`; `target` None means `.` (the scope the share stands in)."""
    source: list[Ident]
    target: list[Ident] | None


@dataclass(eq=False)
class Share(Stmt):
    pairs: list[SharePair]
    body: Block


@dataclass(eq=False)
class If(Stmt):
    cond: Expr
    then: Block
    orelse: Block | None


@dataclass(eq=False)
class While(Stmt):
    cond: Expr
    body: Block


# ---- top level --------------------------------------------------------------
@dataclass(eq=False)
class Arg(Node):
    name: Ident
    type: TypeExpr
    default: Expr | None


@dataclass(eq=False)
class FuncDef(Node):
    name: Ident
    args: list[Arg]
    returns: list[TypeExpr]
    body: Block


@dataclass(eq=False)
class HParam(Node):
    name: Ident
    value: Expr


@dataclass(eq=False)
class ModelDef(Node):
    name: Ident
    hparams: list[HParam]
    body: Block


@dataclass(eq=False)
class Import(Node):
    path: str


@dataclass(eq=False)
class Module(Node):
    imports: list[Import]
    functions: list[FuncDef]
    models: list[ModelDef]
