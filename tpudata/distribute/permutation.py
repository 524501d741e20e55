"""A seeded bijective permutation of ``range(n)`` in O(1) memory: a Feistel network over the
smallest even power of two >= n, with cycle walking back into range, evaluated on whole numpy
arrays of positions.

>>> p = IndexPermutation(10, seed=3)
>>> sorted(p(np.arange(10)).tolist()) == list(range(10))
True
>>> p(np.arange(10)).tolist() == IndexPermutation(10, seed=3)(np.arange(10)).tolist()
True
"""

from __future__ import annotations

import hashlib

import numpy as np

ROUNDS = 6
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def derive_seed(*parts: int) -> int:
    """A 64-bit seed from integers (stable across processes and Python versions)."""
    h = hashlib.blake2b(b",".join(str(int(p)).encode() for p in parts), digest_size=8)
    return int.from_bytes(h.digest(), "little")


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


class IndexPermutation:
    """``perm(positions) -> indices``: a permutation of ``range(n)`` chosen by ``seed``."""

    def __init__(self, n: int, seed: int):
        if n < 0:
            raise ValueError(f"n must be >= 0, not {n}")
        self.n = int(n)
        bits = max(2, (max(self.n - 1, 1)).bit_length())
        bits += bits % 2
        self.half = bits // 2
        self.mask = np.uint64((1 << self.half) - 1)
        self.keys = [np.uint64(derive_seed(seed, r)) for r in range(ROUNDS)]

    def _rounds(self, x: np.ndarray) -> np.ndarray:
        h = np.uint64(self.half)
        left, right = x >> h, x & self.mask
        for key in self.keys:
            left, right = right, left ^ (_mix(right ^ key) & self.mask)
        return (left << h) | right

    def __call__(self, positions) -> np.ndarray:
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and (pos.min() < 0 or pos.max() >= self.n):
            raise IndexError(f"positions must lie in [0, {self.n})")
        x = pos.astype(np.uint64)
        with np.errstate(over="ignore"):
            x = self._rounds(x)
            out = x >= np.uint64(self.n)
            while out.any():  # cycle walking: at most a few rounds (the domain is < 4n)
                x[out] = self._rounds(x[out])
                out = x >= np.uint64(self.n)
        return x.astype(np.int64)


__all__ = ["IndexPermutation", "derive_seed"]
