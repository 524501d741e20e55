"""window: elements grouped into windows, each window a Dataset (a structure of them).

tf.data's ``WindowDataset``: window ``i`` holds the input elements ``i * shift + j * stride``
for ``j < size`` (``shift`` defaults to ``size``); at the end, shorter windows follow unless
``drop_remainder=True``. A dict or tuple element gives a dict or tuple of datasets, as in TF;
``flat_map`` turns windows back into elements or batches.

>>> from tpudata.dataset import Dataset
>>> ds = Dataset.range(7).window(3, shift=2).flat_map(lambda w: w.batch(3))
>>> [b.tolist() for b in ds]
[[0, 1, 2], [2, 3, 4], [4, 5, 6], [6]]

State is the input's position before the first buffered element plus how many are buffered
(read again on a restore), so it is element-exact without carrying the buffer.
"""

from __future__ import annotations

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import BlockIterator, Cursor
from tpudata.dataset.core.block import Block, as_column
from tpudata.dataset.core.common import _Unary, input_spec
from tpudata.dataset.core.nest import flatten, map_structure
from tpudata.dataset.sources.files import TensorSlicesDataset


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < 1:
        raise ValueError(f"window: {name} must be a positive integer, not {value!r}")
    return int(value)


class WindowDataset(_Unary):
    def __init__(self, input_ds, size: int, shift: int | None = None, stride: int = 1,
                 drop_remainder: bool = False):
        super().__init__(input_ds)
        self.size = _positive("size", size)
        self.shift = self.size if shift is None else _positive("shift", shift)
        self.stride = _positive("stride", stride)
        self.drop_remainder = bool(drop_remainder)

    def _make_iterator(self, ctx):
        return _WindowIterator(self, self.input._make_iterator(ctx))

    def _spec(self):
        from tpudata.dataset.core.spec import DatasetSpec

        inner = input_spec(self.input)
        return None if inner is None else map_structure(DatasetSpec, inner)

    def cardinality(self):
        n = self.input.cardinality()
        if n < 0:
            return n
        if self.drop_remainder:  # TF: windows whose last element exists
            span = (self.size - 1) * self.stride + 1
            return 0 if n < span else (n - span) // self.shift + 1
        return (n + self.shift - 1) // self.shift


class _WindowIterator(BlockIterator):
    exact_want = True  # one window per next()

    def __init__(self, ds: WindowDataset, input_it: BlockIterator):
        self.ds = ds
        self.input_it = input_it
        self.cursor = Cursor(input_it)
        self.target = (ds.size - 1) * ds.stride + 1
        self.buffer: list = []  # (input state before the element, element)
        self.input_done = False

    def _read(self):
        state = self.cursor.get_state()
        try:
            return state, self.cursor.next_element()
        except StopIteration:
            self.input_done = True
            return None

    def next(self):
        ds = self.ds
        while not self.input_done and len(self.buffer) < self.target:
            item = self._read()
            if item is not None:
                self.buffer.append(item)
        if not self.buffer or (ds.drop_remainder and len(self.buffer) < self.target):
            self.buffer.clear()
            return None
        window = [e for _, e in self.buffer[::ds.stride]]
        if ds.shift >= len(self.buffer):
            for _ in range(ds.shift - len(self.buffer)):  # discard the elements between windows
                if self.input_done or self._read() is None:
                    break
            self.buffer.clear()
        else:
            del self.buffer[:ds.shift]
        return _window_block(window)

    def get_state(self):
        if self.buffer:
            return {"input": self.buffer[0][0], "buffered": len(self.buffer), "done": False}
        return {"input": self.cursor.get_state(), "buffered": 0, "done": self.input_done}

    def set_state(self, state):
        self.cursor.set_state(state["input"])
        self.buffer = []
        self.input_done = bool(state["done"])
        for _ in range(int(state["buffered"])):
            item = self._read()
            if item is None:
                raise ValueError("window: checkpoint does not match the data: the input ended "
                                 "inside the saved window (did the files change?)")
            self.buffer.append(item)

    def close(self):
        self.input_it.close()


class WindowElements(TensorSlicesDataset):
    """One window of one leaf: a dataset that a checkpoint (e.g. flat_map's) can carry."""

    def __init__(self, column):
        super().__init__(column)
        self.column = column

    def __jsonable__(self):
        return {"__window__": self.column}


def window_from_jsonable(column) -> WindowElements:
    """Inverse of ``WindowElements.__jsonable__`` (used by :func:`state.from_jsonable`)."""
    return WindowElements(column)


def _window_block(window: list) -> Block:
    """One element: the window's elements as a structure of datasets (one per leaf)."""
    tree, _ = flatten(window[0])
    rows = [flatten(e)[1] for e in window]
    out = []
    for k in range(tree.num_leaves):
        col = np.empty(1, dtype=object)
        col[0] = WindowElements(as_column([r[k] for r in rows]))
        out.append(col)
    return Block(tree, out, 1)


__all__ = ["WindowDataset", "WindowElements", "window_from_jsonable"]

registry.provide(WindowDataset, window_from_jsonable)
