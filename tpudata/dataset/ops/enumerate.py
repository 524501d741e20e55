"""enumerate: ``(index, element)`` pairs, the index an int64 counting from ``start``.

tf.data builds it as ``zip((range(start, max_int64), ds))``; the order and dtypes are the same.

>>> from tpudata.dataset import Dataset
>>> [(int(i), int(x)) for i, x in Dataset.range(10, 13).enumerate(start=5)]
[(5, 10), (6, 11), (7, 12)]

State is the input's position plus the next index.
"""

from __future__ import annotations

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.core.block import Block
from tpudata.dataset.core.common import _CursorIterator, _Unary, input_spec
from tpudata.dataset.core.nest import LEAF, Tree


class EnumerateDataset(_Unary):
    def __init__(self, input_ds, start: int = 0):
        super().__init__(input_ds)
        if isinstance(start, bool) or not isinstance(start, (int, np.integer)):
            raise TypeError(f"enumerate(start=...) needs an integer, not {type(start).__name__}")
        self.start = int(start)

    def _make_iterator(self, ctx):
        it = _EnumerateIterator(self.input._make_iterator(ctx))
        it.index = self.start
        return it

    def cardinality(self):
        return self.input.cardinality()

    def _spec(self):
        from tpudata.dataset.core.spec import TensorSpec

        inner = input_spec(self.input)
        return None if inner is None else (TensorSpec((), np.dtype(np.int64)), inner)


class _EnumerateIterator(_CursorIterator):
    counters = ("index",)
    index = 0

    def next(self):
        block = self.cursor.next_block(max(1, self.want))
        if block is None:
            return None
        idx = np.arange(self.index, self.index + block.n, dtype=np.int64)
        self.index += block.n
        return Block(Tree("tuple", None, [LEAF, block.tree]), [idx, *block.leaves], block.n)

    exact_want = True


__all__ = ["EnumerateDataset"]

registry.provide(EnumerateDataset)
