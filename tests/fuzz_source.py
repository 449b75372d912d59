"""A generated program (tests/fuzz_generate.py) as a tree of statements: its .mdl source
text, and the smaller programs the fuzzer's shrinker tries when it fails."""
from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar, Iterator

IMPORT = 'import "std/rnn.mdl"'


@dataclass
class Stmt:
    """One statement. A compound one has a head ("for e0 in xs<options> {"), bodies, and
    the line that closes each body ("} else {", "}"). A for's options, targets and
    yielded values are kept apart, so that the shrinker can drop them one by one."""
    OPTIONS: ClassVar[str] = "\x00options"
    head: str
    bodies: list[list[Stmt]] = field(default_factory=list)
    closers: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)
    yields: list[str] = field(default_factory=list)

    def lines(self, indent: int) -> list[str]:
        pad = "  " * indent
        options = f" ({', '.join(self.options)})" if self.options else ""
        assign = f"{', '.join(self.targets)} = " if self.targets else ""
        out = [pad + assign + self.head.replace(self.OPTIONS, options)]
        for i, (body, closer) in enumerate(zip(self.bodies, self.closers)):
            for s in body:
                out += s.lines(indent + 1)
            if i == 0 and self.yields:
                out.append(f"{pad}  yield {', '.join(self.yields)}")
            out.append(pad + closer)
        return out


@dataclass
class Program:
    """One model: its hyper-parameters and inputs, the functions it defines, its body,
    outputs and the terms of its minimized loss."""
    name: str
    hypers: dict[str, tuple] = field(default_factory=dict)   # name -> (value, default text)
    inputs: dict[str, str] = field(default_factory=dict)     # name -> type
    defs: dict[str, str] = field(default_factory=dict)       # function name -> source
    body: list[Stmt] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    loss: list[str] = field(default_factory=list)
    lengths: set[str] = field(default_factory=set)           # inputs used as lengths
    few_steps: int = 0        # an `if T > k` guards a size T - k: k at most, else 0
    seed: int = 0                                            # of its inputs and weights
    covered: Counter = field(default_factory=Counter)        # constructs drawn

    def model_source(self) -> str:
        hypers = ", ".join(f"{k} = {text}" for k, (_, text) in self.hypers.items())
        lines = [f"model {self.name}({hypers}) {{"]
        lines += [f"  input {name} : {t}" for name, t in self.inputs.items()]
        for s in self.body:
            lines += s.lines(1)
        lines += ["  " + o for o in self.outputs]
        lines += [f"  output loss = {' + '.join(self.loss)}", "  minimize loss", "}"]
        return "\n".join(lines)

    def source(self) -> str:
        return module_source([self])

    def size(self) -> int:
        return len(self.model_source()) + sum(map(len, self.defs.values()))


def module_source(programs: list[Program]) -> str:
    """One .mdl file holding every program (functions shared by name written once), so
    that they build as one module, one class per model."""
    defs: dict[str, str] = {}
    for p in programs:
        defs.update(p.defs)
    return "\n\n".join([IMPORT, *defs.values(), *(p.model_source() for p in programs)]) + "\n"


def smaller(program: Program) -> list[Program]:
    """Every program one step smaller: a statement dropped, a compound statement replaced
    by one of its bodies, a for's option dropped, a loss term, output, input or function
    dropped. Many are ill-typed; the shrinker keeps those the front end accepts."""
    out = []
    base = program.name.split("_v")[0]
    for edit in _edits(program):
        p = copy.deepcopy(program)
        edit(p)
        p.name = f"{base}_v{len(out)}"
        out.append(p)
    return out


def _edits(program: Program) -> Iterator:
    for place in _places(program.body):
        s = _at(program.body, place)
        yield lambda p, place=place: _replace(p.body, place, [])
        for b in range(len(s.bodies)):
            yield lambda p, place=place, b=b: _replace(p.body, place, _at(p.body, place).bodies[b])
        for o in range(len(s.options)):
            yield lambda p, place=place, o=o: _at(p.body, place).options.pop(o)
        for t in range(len(s.targets)):
            yield lambda p, place=place, t=t: _drop_target(_at(p.body, place), t)
    if len(program.loss) > 1:
        for i in range(len(program.loss)):
            yield lambda p, i=i: p.loss.pop(i)
    for i in range(len(program.outputs)):
        yield lambda p, i=i: p.outputs.pop(i)
    for name in program.inputs:
        yield lambda p, name=name: p.inputs.pop(name)
    for name in program.defs:
        yield lambda p, name=name: p.defs.pop(name)


def _drop_target(s: Stmt, t: int) -> None:
    s.targets.pop(t)
    s.yields.pop(t)


def _places(stmts: list[Stmt], prefix: tuple = ()) -> Iterator[tuple]:
    """Where each statement is: (i0,), (i0, body, i1), ..."""
    for i, s in enumerate(stmts):
        yield prefix + (i,)
        for b, body in enumerate(s.bodies):
            yield from _places(body, prefix + (i, b))


def _holder(body: list[Stmt], place: tuple) -> list[Stmt]:
    for i, b in zip(place[0:-1:2], place[1:-1:2]):
        body = body[i].bodies[b]
    return body


def _at(body: list[Stmt], place: tuple) -> Stmt:
    return _holder(body, place)[place[-1]]


def _replace(body: list[Stmt], place: tuple, stmts: list[Stmt]) -> None:
    holder = _holder(body, place)
    holder[place[-1]:place[-1] + 1] = stmts
