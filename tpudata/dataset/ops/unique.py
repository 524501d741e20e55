"""unique: each distinct element once, in first-seen order (tf.data's ``Dataset.unique``).

>>> [int(x) for x in Dataset.from_tensor_slices([1, 3, 1, 2, 3]).unique()]
[1, 3, 2]

Elements must be integer or bytes scalars, as in TF. The values seen so far are part of the
state (as in TF), so a restore neither repeats nor loses an element.
"""

from __future__ import annotations

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import UNKNOWN, Dataset, from_jsonable, jsonable
from tpudata.dataset.core.iterator import BlockIterator, Cursor
from tpudata.dataset.core.spec import BYTES, TensorSpec, _static


class UniqueDataset(Dataset):
    def __init__(self, input_ds: Dataset):
        super().__init__()
        if not isinstance(input_ds, Dataset):
            raise TypeError(f"expected a Dataset, got {type(input_ds).__name__}")
        spec = _static(input_ds)
        if spec is not None and not (isinstance(spec, TensorSpec) and spec.shape == () and (
                spec.dtype == BYTES or np.dtype(spec.dtype).kind in "iu")):
            raise TypeError(f"unique() needs integer or bytes scalar elements, not {spec!r}")
        self.input = input_ds

    def _make_iterator(self, ctx):
        return _UniqueIterator(self.input._make_iterator(ctx))

    def _spec(self):
        return _static(self.input)

    def cardinality(self) -> int:
        return 0 if self.input.cardinality() == 0 else UNKNOWN


def _key(value):
    if isinstance(value, (bytes, np.integer, int)):
        return value if isinstance(value, bytes) else int(value)
    raise TypeError(f"unique() needs integer or bytes scalar elements, not {type(value).__name__}")


class _UniqueIterator(BlockIterator):
    exact_want = True  # never more elements than asked for

    def __init__(self, input_it: BlockIterator):
        self.input_it = input_it
        self.cursor = Cursor(input_it)
        self.seen: set = set()
        self.order: list = []  # the seen values in first-seen order (for the state)

    def next(self):
        c = self.cursor
        while c._fill():
            block, i = c.block, c.pos
            key = _key(c.next_element())
            if key not in self.seen:
                self.seen.add(key)
                self.order.append(key)
                return block.slice(i, i + 1)
        return None

    def get_state(self):
        return {"cursor": self.cursor.get_state(), "seen": jsonable(list(self.order))}

    def set_state(self, state):
        self.cursor.set_state(state["cursor"])
        self.order = list(from_jsonable(state["seen"]))
        self.seen = set(self.order)

    def close(self):
        self.input_it.close()


__all__ = ["UniqueDataset"]

registry.provide(UniqueDataset)
