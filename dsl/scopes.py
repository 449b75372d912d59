"""Parameter naming: scope frames, call-site counters, inherited attributes, and `share`
remapping with exactly the semantics of Caffe2's ParameterSharing.

Paths are tuples of names. A `share` block adds overrides {source: target}, both relative
to the (unresolved) scope where it stands; nested blocks add to the outer ones and the
outer ones return when a block ends. A scope resolves through the longest prefix that has
an override, recursively, and keeps the rest of its path (Caffe2's
`_resolve_scope_overrides`).
"""
from __future__ import annotations

import difflib
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from codegen.ir.diagnostics import Loc, MdlNameError
from codegen.ir.graph import Init, Regularizer

Path = tuple[str, ...]


@dataclass(frozen=True)
class ScopeAttrs:
    """What a scope hands down to nested scopes and parameters."""
    init: Init | None = None
    regularizer: Regularizer | None = None
    trainable: bool = True


@dataclass
class Frame:
    """A block that opens a scope (model, `scope`, function call), with its counters."""
    path: Path
    attrs: ScopeAttrs
    counters: dict[str, int] = field(default_factory=dict)


@dataclass
class Mapping:
    """One `SOURCE = TARGET` of a `share` block, as written (`loc` names it; a function's
    block entered at each call is one), and the parameters declared through it."""
    source: Path
    target: Path
    here: Path                        # the scope the block stands in
    loc: Loc
    names: set[str] = field(default_factory=set)


class Scopes:
    def __init__(self) -> None:
        self.frames = [Frame((), ScopeAttrs())]
        # each open block's overrides: {source: (target, its Mapping)}, both paths whole
        self.share_blocks: list[dict[Path, tuple[Path, Mapping]]] = []
        self.mappings: dict[Loc, Mapping] = {}  # every share pair entered, by its place
        self.declared: list[tuple[str, frozenset[Loc]]] = []  # name, the mappings it took

    @property
    def frame(self) -> Frame:
        return self.frames[-1]

    @contextmanager
    def enter(self, name: str, **attrs):
        """Open a child scope `name` of the current one (a new block: counters restart)."""
        inherited = replace(self.frame.attrs, **attrs)
        self.frames.append(Frame(self.frame.path + (name,), inherited))
        try:
            yield
        finally:
            self.frames.pop()

    def call_scope_name(self, function: str, as_name: str | None) -> str:
        """The child scope a call opens: `as NAME`, else linear, linear_1, ... per block."""
        if as_name is not None:
            return as_name
        count = self.frame.counters.get(function, 0)
        self.frame.counters[function] = count + 1
        return function if count == 0 else f"{function}_{count}"

    @contextmanager
    def share(self, pairs: list[tuple[Path, Path, Loc]]):
        """Add the overrides of one `share` block, relative to the current scope."""
        here = self.frame.path
        overrides: dict[Path, tuple[Path, Mapping]] = {}
        for source, target, loc in pairs:
            if target[:len(source)] == source:
                what = "is the same as" if target == source else "lies inside"
                raise MdlNameError(f"share target `{_dotted(target) or '.'}` {what} its source "
                                   f"`{_dotted(source)}`", loc)
            overrides[here + source] = (here + target, self.mappings.setdefault(
                loc, Mapping(source, target, here, loc)))
        self.share_blocks.append(overrides)
        try:
            for source, _, loc in pairs:
                self._check_acyclic(here + source, loc)
            yield
        finally:
            self.share_blocks.pop()

    def _overrides(self) -> dict[Path, tuple[Path, Mapping]]:
        merged: dict[Path, tuple[Path, Mapping]] = {}
        for block in self.share_blocks:
            merged.update(block)
        return merged

    def _check_acyclic(self, path: Path, loc: Loc) -> None:
        if self._resolved(path) is None:
            raise MdlNameError("these share blocks map scopes in a cycle: "
                               f"`{_dotted(path)}` never resolves", loc)

    def resolve(self, candidate: Path) -> Path:
        """The scope that `candidate` stands for once every override applies."""
        resolved = self._resolved(candidate)
        assert resolved is not None, "a cycle of share blocks passed _check_acyclic"
        return resolved

    def _resolved(self, candidate: Path, applied: list[Mapping] | None = None) -> Path | None:
        """resolve's answer, None for a cycle; the mappings it applies are added to
        `applied`. Hop by hop, the overrides merged once: it recursed with
        them merged again at every hop, so a chain of n shares took n**3 steps (a chain of
        2000 in one block, minutes) and one past Python's recursion limit was called a
        cycle."""
        overrides = self._overrides()
        seen: set[Path] = set()
        tail: Path = ()
        while True:
            best, best_len = None, 0
            for i in range(1, len(candidate) + 1):
                if candidate[:i] in overrides:
                    best, best_len = overrides[candidate[:i]], i
            if best is None:
                return candidate + tail
            if candidate in seen:
                return None
            seen.add(candidate)
            if applied is not None:
                applied.append(best[1])
            tail = candidate[best_len:] + tail
            candidate = best[0]

    def param_name(self, name: str, path: Path | None = None) -> str:
        """The full name of parameter `name` in the current scope (or `path`)."""
        return "/".join(self.resolve(self.frame.path if path is None else path) + (name,))

    def declare(self, name: str) -> str:
        """The full name of parameter `name` declared in the current scope, noted with the
        share mappings it went through (for share_warnings)."""
        applied: list[Mapping] = []
        resolved = self._resolved(self.frame.path, applied)
        assert resolved is not None, "a cycle of share blocks passed _check_acyclic"
        full = "/".join(resolved + (name,))
        took = frozenset(m.loc for m in applied)
        for loc in took:
            self.mappings[loc].names.add(full)
        self.declared.append((full, took))
        return full

    def share_warnings(self) -> list[tuple[str, Loc]]:
        """What a `share` block's mapping does not do, as warnings: map a parameter (no
        parameter inside the block is declared under its source), or, where its target is
        spelled close to a scope that holds parameters, tie any (a typo in `dec = encodr`
        left `dec`'s parameters untied, and the model checked without a word)."""
        out = []
        for m in self.mappings.values():
            said = f"`share ({_dotted(m.source)} = {_dotted(m.target) or '.'})`"
            if not m.names:
                out.append((f"{said} maps no parameter: none inside the block is declared "
                            f"under `{_dotted(m.source)}`", m.loc))
                continue
            others = {full for full, took in self.declared if m.loc not in took}
            if m.names & others or not m.target:
                continue
            scopes = {_dotted(tuple(full.split("/")[len(m.here):k]))
                      for full in others if full.split("/")[:len(m.here)] == list(m.here)
                      for k in range(len(m.here) + 1, len(full.split("/")))}
            near = difflib.get_close_matches(_dotted(m.target), sorted(scopes), n=1)
            if near:
                out.append((f"{said} ties `{_dotted(m.source)}`'s parameters to no other: none "
                            f"outside it is under `{_dotted(m.target)}`; did you mean "
                            f"`{near[0]}`?", m.loc))
        return out


def _dotted(path: Path) -> str:
    return ".".join(path)
