"""What the table's NumPy references get besides their operands (`ref(ctx, attrs, *xs)`):
the dims of this run, the float dtype it computes in, whether it trains, and each random
op's stream. The reference interpreter and constant folding both evaluate references in
one."""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DTYPES
from ..ir.shapes import Dim, DimError
from .rng import Stream, derive


class OutOfRange(Exception):
    """What a NumPy reference raises for data outside what it indexes: `value` at flat
    `position` of operand `operand`, which had to lie in [0, `bound`). The interpreter
    raises the IndexError a generated module raises for it (codegen/ir/origins.py words
    both), naming the data by what it is computed from."""

    def __init__(self, kind: str, operand: int, value: int, position: int, bound: int):
        super().__init__(kind, operand, value, position, bound)
        self.kind, self.operand = kind, operand
        self.value, self.position, self.bound = int(value), int(position), int(bound)


class Held:
    """The values `stop_gradient` let through in one run, in the order they came, then
    the same values in place of theirs in later runs (`replay`): finite differences of
    a function whose stopped values stay put, what its gradient is the derivative of.
    The runs must take the same path (branches, trips), as finite differences need."""

    def __init__(self):
        self.values: list[np.ndarray] = []
        self.replaying = False
        self.at = 0

    def replay(self) -> Held:
        self.replaying, self.at = True, 0
        return self

    def through(self, x: np.ndarray) -> np.ndarray:
        if not self.replaying:
            self.values.append(np.array(x, copy=True))
            return x
        if self.at >= len(self.values) or self.values[self.at].shape != np.shape(x):
            raise ValueError("this run took another path than the one whose stopped values "
                             "were held")
        self.at += 1
        return self.values[self.at - 1]


class Context:
    """What references need besides their operands: dims, dtypes, training, RNG, and
    the values `stop_gradient` holds (`held`, a Held, or None: none held)."""

    def __init__(self, dims: dict[str, int], dtype, training: bool, seed: int,
                 held: Held | None = None):
        self.dims = dims
        self.float = np.dtype(dtype)
        self.training = training
        self.seed = seed
        self.streams: dict[int, Stream] = {}
        self.held = held

    def dim(self, d, default=None) -> int:
        """The size a dim stands for; `default` for a dim known only at run time."""
        d = Dim.of(d)
        try:
            return d.evaluate(self.dims)
        except DimError:
            if default is None:
                raise ValueError(f"the size {d} is not known here") from None
            return default

    def np_dtype(self, name: str):
        dtype = DTYPES[name]  # floats: the precision this run computes in
        return self.float if dtype.is_float else np.dtype(dtype.numpy)

    def rng(self, salt: int) -> Stream:
        """The random stream of one op (its salt) in this run: counter-based, the same
        numbers as native code (codegen.ops.rng)."""
        if salt not in self.streams:
            self.streams[salt] = Stream(derive(self.seed, salt))
        return self.streams[salt]
