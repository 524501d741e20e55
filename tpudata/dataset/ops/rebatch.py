"""rebatch: the rows of batched elements regrouped into batches of other sizes.

tf.data's ``Dataset.rebatch(batch_size, drop_remainder=False)``: the same as
``unbatch().batch(batch_size)``, with ``batch_size`` also a list of sizes used in turn.

>>> from tpudata.dataset import Dataset
>>> [b.tolist() for b in Dataset.range(10).batch(4).rebatch([2, 3])]
[[0, 1], [2, 3, 4], [5, 6], [7, 8, 9]]

State is the unbatched input's position plus the number of batches made (which size is next).
"""

from __future__ import annotations

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.ops.batch import UnbatchDataset, _as_batch_column, stack_rows
from tpudata.dataset.core.block import Block
from tpudata.dataset.core.common import _CursorIterator, _Unary, input_spec
from tpudata.dataset.core.nest import flatten, unflatten


class RebatchDataset(_Unary):
    def __init__(self, input_ds, batch_size, drop_remainder: bool = False):
        super().__init__(input_ds)
        sizes = np.asarray(batch_size).reshape(-1)
        if sizes.size == 0 or sizes.dtype.kind not in "iu" or np.any(sizes < 1):
            raise ValueError(f"rebatch: batch_size must be a positive integer or a list of them, "
                             f"not {batch_size!r}")
        self.sizes = [int(s) for s in sizes]
        self.drop_remainder = bool(drop_remainder)
        spec = input_spec(input_ds)
        if spec is not None and any(len(s.shape) == 0 for s in flatten(spec)[1]):
            raise ValueError("rebatch: expected a dataset whose elements have rank >= 1 but "
                             "found scalars; add a batch() first")

    def _make_iterator(self, ctx):
        it = _RebatchIterator(UnbatchDataset(self.input)._make_iterator(ctx))
        it.sizes, it.drop_remainder = self.sizes, self.drop_remainder
        return it

    def _spec(self):
        from tpudata.dataset.core.spec import TensorSpec, VarLenSpec

        inner = input_spec(self.input)
        if inner is None:
            return None
        tree, leaves = flatten(inner)
        same = len(set(self.sizes)) == 1
        dim = self.sizes[0] if same and self.drop_remainder else None
        return unflatten(tree, [(VarLenSpec if isinstance(s, VarLenSpec) else TensorSpec)(
            (dim,) + tuple(s.shape[1:]), s.dtype) for s in leaves])


class _RebatchIterator(_CursorIterator):
    exact_want = True
    counters = ("produced",)
    produced = 0
    sizes: list = [1]
    drop_remainder = False

    def next(self):
        size = self.sizes[self.produced % len(self.sizes)]
        block = self.cursor.take(size)
        if block is None or (self.drop_remainder and block.n < size):
            return None
        # every batch before this one was full: its first row's number follows from the sizes
        turns, part = divmod(self.produced, len(self.sizes))
        first = turns * sum(self.sizes) + sum(self.sizes[:part])
        block = stack_rows(block, first, f"rebatch({size})")
        self.produced += 1
        return Block(block.tree, [_as_batch_column(c) for c in block.leaves], 1)


__all__ = ["RebatchDataset"]

registry.provide(RebatchDataset)
