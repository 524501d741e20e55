"""take_while: elements while a predicate holds; the first False ends the dataset (tf.data's).

>>> [int(x) for x in Dataset.range(10).take_while(lambda x: x < 4)]
[0, 1, 2, 3]

The predicate runs in the consumer's thread, element by element, only for elements the
consumer asks for. State is the input position of the next element to test, or only that a
False was seen (then the dataset stays ended).
"""

from __future__ import annotations

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import UNKNOWN, Dataset  # noqa: F401 (the doctest above)
from tpudata.dataset.ops.filter import PredicateDataset, _truth
from tpudata.dataset.core.iterator import BlockIterator, Cursor
from tpudata.dataset.ops.map import call


class TakeWhileDataset(PredicateDataset):
    op = "take_while"

    def _make_iterator(self, ctx):
        return _TakeWhileIterator(self, self.input._make_iterator(ctx))

    def cardinality(self) -> int:
        return 0 if self.input.cardinality() == 0 else UNKNOWN


class _TakeWhileIterator(BlockIterator):
    exact_want = True  # never more elements than asked for

    def __init__(self, ds: TakeWhileDataset, input_it: BlockIterator):
        self.ds = ds
        self.input_it = input_it
        self.cursor = Cursor(input_it)
        self.done = False

    def next(self):
        c = self.cursor
        if self.done or not c._fill():
            return None
        if c._items is None:
            c._items = list(c.block.elements())
        block, i = c.block, c.pos
        if not _truth(call(self.ds.predicate, c._items[i]), self.ds.name):
            self.done = True  # ended: the input is not read again, its position not needed
            return None
        c.pos += 1
        return block.slice(i, i + 1)

    def get_state(self):
        if self.done:
            return {"cursor": None, "done": True}
        return {"cursor": self.cursor.get_state(), "done": False}

    def set_state(self, state):
        self.done = bool(state["done"])
        if not self.done:
            self.cursor.set_state(state["cursor"])

    def close(self):
        self.input_it.close()


__all__ = ["TakeWhileDataset"]

registry.provide(TakeWhileDataset)
