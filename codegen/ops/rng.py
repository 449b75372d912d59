"""Counter-based random numbers, bit for bit the same as cpp_runtime/mdl/rng.h: a value
depends only on (key, counter), so the reference interpreter and native code draw the
same dropout masks, and no op's draws depend on which other ops ran."""
from __future__ import annotations

import numpy as np

MASK = (1 << 64) - 1


def mix(x):
    """The splitmix64 finalizer, on Python ints or uint64 arrays."""
    if isinstance(x, int):
        x = (x + 0x9E3779B97F4A7C15) & MASK
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
        return x ^ (x >> 31)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def derive(key: int, n: int) -> int:
    """A key for a sub-stream (a call, an op's salt)."""
    return mix((key ^ mix(n & MASK)) & MASK)


def uniform01(key: int, counters: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        bits = mix(np.uint64(key) + counters.astype(np.uint64))
    return (bits >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


class Stream:
    """Successive uniforms of one (key, salt) stream: draws continue where the last ended
    (a dropout inside a loop draws a fresh mask every step)."""

    def __init__(self, key: int):
        self.key = key
        self.counter = 0

    def random(self, shape) -> np.ndarray:
        n = int(np.prod(shape, dtype=np.int64))
        out = uniform01(self.key, np.arange(self.counter, self.counter + n, dtype=np.uint64))
        self.counter += n
        return out.reshape(shape)
