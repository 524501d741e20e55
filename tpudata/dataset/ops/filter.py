"""filter: keep the elements for which a predicate holds, calling it element by element.

>>> [int(x) for x in Dataset.range(10).filter(lambda x: x % 3 == 0)]
[0, 3, 6, 9]

The predicate runs in the consumer's thread, only for elements the consumer asks for (plus the
rejected ones before them). State is the input position of the next element to test.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import Dataset
from tpudata.dataset.core.iterator import BlockIterator, Cursor
from tpudata.dataset.ops.map import call, function_name


class PredicateDataset(Dataset):
    """An op that calls a user ``predicate`` per element (``filter``, ``take_while``): the
    argument checks, the name and the element spec (the input's) they share."""

    _functions = ("predicate",)
    op = "predicate"

    def __init__(self, input_ds: Dataset, predicate: Callable):
        super().__init__()
        if not isinstance(input_ds, Dataset):
            raise TypeError(f"expected a Dataset, got {type(input_ds).__name__}")
        if not callable(predicate):
            raise TypeError(f"{self.op}() needs a callable, not {type(predicate).__name__}")
        self.input = input_ds
        self.predicate = predicate
        self.name = f"{self.op}({function_name(predicate)})"

    def _spec(self):
        from tpudata.dataset.core.spec import _static

        return _static(self.input)


class FilterDataset(PredicateDataset):
    op = "filter"

    def _make_iterator(self, ctx):
        return _FilterIterator(self, self.input._make_iterator(ctx))


def _truth(value, op: str) -> bool:
    arr = np.asarray(value)
    if arr.shape != ():
        raise TypeError(f"{op}: the predicate must return a scalar boolean, not shape {arr.shape}")
    return bool(arr)


class _FilterIterator(BlockIterator):
    exact_want = True  # never more elements than asked for

    def __init__(self, ds: FilterDataset, input_it: BlockIterator):
        self.ds = ds
        self.input_it = input_it
        self.cursor = Cursor(input_it)

    def next(self):
        c = self.cursor
        while c._fill():
            block, i = c.block, c.pos
            element = c.next_element()
            if _truth(call(self.ds.predicate, element), self.ds.name):
                return block.slice(i, i + 1)
        return None

    def get_state(self):
        return self.cursor.get_state()

    def set_state(self, state):
        self.cursor.set_state(state)

    def close(self):
        self.input_it.close()


__all__ = ["FilterDataset", "PredicateDataset"]

registry.provide(FilterDataset)
