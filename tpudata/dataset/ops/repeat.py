"""repeat: the dataset ``count`` times (forever when None); each epoch reshuffles.

>>> from tpudata.dataset import Dataset
>>> [int(x) for x in Dataset.range(3).repeat(2)]
[0, 1, 2, 0, 1, 2]
"""

from __future__ import annotations

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import INFINITE, BlockIterator
from tpudata.dataset.core.common import _Unary, input_spec


class RepeatDataset(_Unary):
    def __init__(self, input_ds, count: int | None):
        super().__init__(input_ds)
        self.count = -1 if count is None else int(count)

    def _make_iterator(self, ctx):
        return _RepeatIterator(self.input, ctx, self.count)

    def cardinality(self):
        c = self.input.cardinality()
        if self.count < 0:
            return 0 if c == 0 else INFINITE
        return c * self.count if c >= 0 else c

    def _spec(self):
        return input_spec(self.input)


class _RepeatIterator(BlockIterator):
    def __init__(self, input_ds, ctx, count):
        self.input_ds, self.ctx, self.count = input_ds, ctx, count
        self.epoch = 0
        self.produced = False
        self.it = input_ds._make_iterator(ctx.child(0)) if count != 0 else None

    def next(self):
        while self.it is not None:
            self.it.want = self.want  # pass the consumer's demand on
            block = self.it.next()
            if block is not None:
                self.produced = True
                return block
            self.it.close()
            if not self.produced:  # an empty epoch: repeating forever would never end
                self.it = None
                return None
            self.epoch += 1
            self.produced = False
            if 0 <= self.count <= self.epoch:
                self.it = None
                return None
            self.it = self.input_ds._make_iterator(self.ctx.child(self.epoch))
        return None

    def get_state(self):
        return {"epoch": self.epoch, "produced": self.produced,
                "input": None if self.it is None else self.it.get_state()}

    def set_state(self, state):
        self.close()
        self.epoch, self.produced = int(state["epoch"]), bool(state["produced"])
        if state["input"] is None:
            self.it = None
            return
        self.it = self.input_ds._make_iterator(self.ctx.child(self.epoch))
        self.it.set_state(state["input"])

    def close(self):
        if self.it is not None:
            self.it.close()


__all__ = ["RepeatDataset"]

registry.provide(RepeatDataset)
