"""take and skip: the first ``count`` elements, or all but them (negative: all / none).

>>> from tpudata.dataset import Dataset
>>> [int(x) for x in Dataset.range(10).skip(3).take(4)]
[3, 4, 5, 6]
"""

from __future__ import annotations

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import INFINITE, UNKNOWN
from tpudata.dataset.core.common import _CursorIterator, _Unary, input_spec


class TakeDataset(_Unary):
    def __init__(self, input_ds, count: int):
        super().__init__(input_ds)
        self.count = int(count)

    def _make_iterator(self, ctx):
        it = _TakeIterator(self.input._make_iterator(ctx))
        it.remaining = self.count if self.count >= 0 else -1
        return it

    def cardinality(self):
        c = self.input.cardinality()
        if self.count < 0:
            return c
        return self.count if c in (INFINITE, UNKNOWN) and c == INFINITE else (
            min(c, self.count) if c >= 0 else UNKNOWN)

    def _spec(self):
        return input_spec(self.input)


class _TakeIterator(_CursorIterator):
    counters = ("remaining",)
    remaining = 0

    def next(self):
        if self.remaining == 0:
            return None
        block = self.cursor.next_block(None if self.remaining < 0 else self.remaining)
        if block is not None and self.remaining > 0:
            self.remaining -= block.n
        return block


class SkipDataset(_Unary):
    def __init__(self, input_ds, count: int):
        super().__init__(input_ds)
        self.count = int(count)

    def _make_iterator(self, ctx):
        it = _SkipIterator(self.input._make_iterator(ctx))
        it.to_skip = self.count if self.count >= 0 else 1 << 62
        return it

    def cardinality(self):
        c = self.input.cardinality()
        return max(0, c - self.count) if c >= 0 and self.count >= 0 else c

    def _spec(self):
        return input_spec(self.input)


class _SkipIterator(_CursorIterator):
    counters = ("to_skip",)
    to_skip = 0

    def next(self):
        while self.to_skip > 0:
            block = self.cursor.next_block(self.to_skip)
            if block is None:
                return None
            self.to_skip -= block.n
        return self.cursor.next_block()


__all__ = ["SkipDataset", "TakeDataset"]

registry.provide(SkipDataset, TakeDataset)
