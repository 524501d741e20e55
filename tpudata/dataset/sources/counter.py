"""counter: start, start + step, ... forever (tf.data's ``Dataset.counter``).

>>> [int(x) for x in Dataset.counter(10, 5).take(3)]
[10, 15, 20]
"""

from __future__ import annotations

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import INFINITE, Dataset
from tpudata.dataset.core.block import Block
from tpudata.dataset.core.nest import LEAF
from tpudata.dataset.sources.files import _ArrayIterator

_FOREVER = (1 << 63) - 1  # positions: more than any pipeline will read


class CounterDataset(Dataset):
    def __init__(self, start=0, step=1, dtype=np.int64):
        super().__init__()
        self.start, self.step, self.dtype = int(start), int(step), np.dtype(dtype)

    def _make_iterator(self, ctx):
        def make(i, j):
            values = self.start + self.step * np.arange(i, j, dtype=np.int64)
            return Block(LEAF, [values.astype(self.dtype)], j - i)

        return _ArrayIterator(make, _FOREVER)

    def _spec(self):
        from tpudata.dataset.core.spec import TensorSpec

        return TensorSpec((), self.dtype)

    def cardinality(self) -> int:
        return INFINITE


__all__ = ["CounterDataset"]

registry.provide(CounterDataset)
