"""concatenate: every element of one dataset, then every element of another.

>>> from tpudata.dataset import Dataset
>>> [int(x) for x in Dataset.range(3).concatenate(Dataset.range(10, 12))]
[0, 1, 2, 10, 11]

As in tf.data the two must have the same structure and dtypes (checked from the declared
specs when both are known, otherwise at the first element of the second dataset); the spec is
the most specific one compatible with both (dimensions that differ become None). State is which
dataset is being read and its position.
"""

from __future__ import annotations

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import INFINITE, UNKNOWN, BlockIterator, Dataset
from tpudata.dataset.core.common import input_spec
from tpudata.dataset.core.nest import flatten, unflatten
from tpudata.dataset.core.spec import declared_only
from tpudata.errors import SpecError


def _merge_specs(a, b, op: str = "concatenate"):
    """The most specific spec compatible with ``a`` and ``b``; raises when they cannot agree."""
    ta, la = flatten(a)
    tb, lb = flatten(b)
    if ta != tb:
        raise SpecError(f"{op}: the datasets have different structures ({ta} and {tb}); "
                        "map one of them to the other's structure first")
    merged = []
    for x, y in zip(la, lb):
        if x.dtype != y.dtype:
            raise SpecError(f"{op}: the datasets have different dtypes ({x.dtype} and "
                            f"{y.dtype}); cast one of them with map() first")
        if len(x.shape) != len(y.shape):
            raise SpecError(f"{op}: the datasets' elements have different ranks "
                            f"({x.shape} and {y.shape}); reshape one of them with map() first")
        shape = tuple(d if d == e else None for d, e in zip(x.shape, y.shape))
        merged.append(type(x)(shape, x.dtype))
    return unflatten(ta, merged)


class ConcatenateDataset(Dataset):
    def __init__(self, first: Dataset, second: Dataset):
        super().__init__()
        for d in (first, second):
            if not isinstance(d, Dataset):
                raise TypeError(f"concatenate() needs a Dataset, not {type(d).__name__}")
        self.datasets = (first, second)
        with declared_only():  # no user code at construction: traced specs are checked later
            a, b = input_spec(first), input_spec(second)
        if a is not None and b is not None:
            _merge_specs(a, b)  # refuse incompatible datasets now, as tf.data does

    def _make_iterator(self, ctx):
        return _ConcatenateIterator(self.datasets, ctx)

    def _spec(self):
        a, b = (input_spec(d) for d in self.datasets)
        return None if a is None or b is None else _merge_specs(a, b)

    def cardinality(self):
        a, b = (d.cardinality() for d in self.datasets)
        if INFINITE in (a, b):
            return INFINITE
        if UNKNOWN in (a, b):
            return UNKNOWN
        return a + b


class _ConcatenateIterator(BlockIterator):
    def __init__(self, datasets, ctx):
        self.datasets, self.ctx = datasets, ctx
        self.which = 0
        self.tree = None  # the first dataset's structure and leaves, checked against the second's
        self.it = datasets[0]._make_iterator(ctx.child(0))

    def next(self):
        while self.it is not None:
            self.it.want = self.want
            block = self.it.next()
            if block is not None:
                if self.which == 0:
                    self.tree = (block.tree, _kinds(block))
                elif self.tree is not None:
                    self._check(block)
                return block
            self.it.close()
            self.which += 1
            self.it = None
            if self.which < 2:
                self.it = self.datasets[1]._make_iterator(self.ctx.child(1))
        return None

    def _check(self, block) -> None:
        tree, kinds = self.tree
        if block.tree != tree:
            raise SpecError(f"concatenate: the second dataset's elements have the structure "
                            f"{block.tree}, the first's {tree}")
        for i, (a, b) in enumerate(zip(kinds, _kinds(block))):
            if None not in (a, b) and a != b:
                raise SpecError(f"concatenate: leaf {i} of the second dataset's elements is "
                                f"{b[0]} of rank {b[1]}, the first's {a[0]} of rank {a[1]}: "
                                f"make them agree (e.g. a map that casts) before concatenating")
        self.tree = None  # checked once

    def get_state(self):
        return {"which": self.which, "input": None if self.it is None else self.it.get_state()}

    def set_state(self, state):
        self.close()
        self.which = int(state["which"])
        self.it = None
        if state["input"] is not None:
            self.it = self.datasets[self.which]._make_iterator(self.ctx.child(self.which))
            self.it.set_state(state["input"])

    def close(self):
        if self.it is not None:
            self.it.close()


def _kinds(block) -> list:
    """Each leaf's (dtype, element rank) where its column is a plain array (else None)."""
    return [(col.dtype, col.ndim - 1) if isinstance(col, np.ndarray) and col.dtype != object
            else None for col in block.leaves]


__all__ = ["ConcatenateDataset"]

registry.provide(ConcatenateDataset)
