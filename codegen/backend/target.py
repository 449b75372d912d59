"""A target: what one kind of machine decides about the emitted code. Lowering, fusion,
views and the memory plan are shared (lower.py, plan.py); the renderer (render.py,
structured.py) walks the lowered instructions and asks its target for every piece that
differs between machines: the function skeleton, how a fused elementwise group becomes
code (a loop nest on a CPU, a kernel and its launch on a GPU), how memory is copied and
filled, where parameters, inputs, results and saved values live, how a scalar is read
on the host (a branch condition), where tapes live, and each kernel primitive's
statements. Its `Dialect` spells scalars; its `Toolchain` (codegen/build/toolchain.py) builds
what it generates.

To add a target: subclass `Target` in backend/<name>.py, attach its kernel statements
to the primitive table as `extra[<name>]` (targets/<name>_kernels.py, as targets/cpu_kernels.py
does), and register it in targets/registry.py.
"""
from __future__ import annotations

import abc
import functools
from typing import Callable

from ..ir.graph import Value
from ..ops.primitives import TABLE
from .dialect import Dialect


class Target(abc.ABC):
    name: str
    dialect: Dialect
    toolchain: object  # the Toolchain building its code (codegen/build/toolchain.py)
    source: str = "module.cpp"   # the generated file's name (its language)
    headers: tuple[str, ...] = ()  # what generated code includes after mdl/python.h
    device: str = "nullptr"      # the runtime's mdl::Device of its models (model.h)
    # Whether loop-invariant right operands of products are packed once before their
    # loop (backend/pack.py); the target's `pack` and its matmul statements then agree.
    packs_operands: bool = False

    def kernel(self, ins) -> Callable:
        """The statements of a lowered kernel (lower.Kernel) on this target:
        lines(r, op, inputs, in_ptrs, out_ptrs) -> [C++ statements]. A product with
        `ins.accumulate` adds itself into its output's memory (its loop's state)."""
        lines = TABLE[ins.op.prim].extra[self.name]
        return functools.partial(lines, accumulate=True) if ins.accumulate else lines

    @abc.abstractmethod
    def call(self, name: str) -> str:
        """The start of a call of runtime function `name`, up to its first argument (the
        runtime's kernels take the same arguments on every target; backend/kernels.py)."""

    def pack(self, r, pack) -> list[str]:
        """Statements packing `pack.kernel`'s right operand into the model's pack buffer
        `pack.index`; targets with `packs_operands` override it."""
        raise TypeError(f"the {self.name} target packs no operands")

    # Generated functions take the runtime's State (`m`) and Call (`c`) on every target
    # (cpp_runtime/mdl/model.h); on a GPU their pointers are device memory.
    def parameter(self, index: int) -> str:
        """A pointer to the model's parameter `index` (its own, or one it shares)."""
        return f"m.param[{index}]"

    def input(self, k: int, ctype: str) -> str:
        """A pointer to the call's input k."""
        return f"static_cast<{ctype}*>(c.inputs[{k}])"

    def output(self, k: int) -> str:
        """The lvalue receiving a pointer to the call's result k (an output or gradient)."""
        return f"c.outputs[{k}]"

    def saved(self, k: int) -> str:
        """The lvalue holding value k that a training forward keeps for its backward."""
        return f"m.saved[{k}]"

    @abc.abstractmethod
    def function(self, r, body: list[str]) -> str:
        """The whole text of the function `r.spec` whose statements are `body`: its
        signature, the dims, the arena its memory plan `r.plan` lays out."""

    @abc.abstractmethod
    def fused(self, r, ins) -> None:
        """Emit a lower.Fused group: compute its ops elementwise, store `ins.stores`."""

    @abc.abstractmethod
    def assign(self, r, dst: Value, src: Value) -> None:
        """Emit dst = src elementwise: `dst` a view (possibly strided), `src` any layout
        of a broadcastable shape, or a constant."""

    @abc.abstractmethod
    def scalar(self, pointer: str) -> str:
        """An expression reading element 0 of `pointer` on the host (a branch or loop
        condition)."""

    @abc.abstractmethod
    def copy(self, dst: str, src: str, count: str) -> str:
        """A statement copying `count` contiguous elements."""

    @abc.abstractmethod
    def fill(self, dst: str, count: str, value: str) -> str:
        """A statement setting `count` contiguous elements to `value`."""

    @abc.abstractmethod
    def scratch(self, k: int, nbytes: str) -> str:
        """An expression: scratch buffer k of the model, holding at least `nbytes` bytes
        (a value sized at run time, render.Renderer._late_values), as a char pointer."""

    @abc.abstractmethod
    def tape_clear(self, k: int) -> str:
        """A statement emptying tape k (a while loop's pushes) before the loop runs."""

    @abc.abstractmethod
    def tape_push(self, k: int, pointer: str, nbytes: str) -> str:
        """A statement appending `nbytes` bytes at `pointer` to tape k."""

    @abc.abstractmethod
    def tape_data(self, k: int, ctype: str) -> str:
        """An expression: tape k's records as one array of `ctype`."""
