"""shard: keep every ``num_shards``-th element, starting at ``index`` (shard files by host first).

>>> from tpudata.dataset import Dataset
>>> [int(x) for x in Dataset.range(10).shard(3, 1)]
[1, 4, 7]
"""

from __future__ import annotations

import logging
import warnings

import numpy as np

from tpudata.dataset.common import _CursorIterator, _Unary, input_spec

logger = logging.getLogger(__name__)

FEW_FILES_PER_HOST = 10


class ShardDataset(_Unary):
    def __init__(self, input_ds, num_shards: int, index: int):
        super().__init__(input_ds)
        num_shards, index = int(num_shards), int(index)
        if num_shards < 1 or not 0 <= index < num_shards:
            raise ValueError(f"shard index must be in [0, {num_shards}), got {index}")
        self.num_shards, self.index = num_shards, index
        if getattr(input_ds, "unseeded_file_shuffle", False):
            warnings.warn(
                f"shard({num_shards}, {index}) after list_files() that shuffles without a seed: "
                "every process shuffles the files differently, so hosts read overlapping files "
                "and miss others (tf.data's pitfall too). Pass list_files(..., seed=S) with the "
                "same S on every host, or shuffle=False", UserWarning, stacklevel=3)
        files = getattr(input_ds, "files", None)
        if files is not None:
            mine = len(range(index, len(files), num_shards))
            if mine < FEW_FILES_PER_HOST:
                logger.warning(
                    "shard %d of %d gets %d of %d files; with fewer than ~%d files per host, "
                    "shuffling and parallel reads are coarse - write more, smaller shards",
                    index, num_shards, mine, len(files), FEW_FILES_PER_HOST)

    def _make_iterator(self, ctx):
        it = _ShardIterator(self.input._make_iterator(ctx))
        it.n, it.i = self.num_shards, self.index
        return it

    def cardinality(self):
        c = self.input.cardinality()
        return c if c < 0 else len(range(self.index, c, self.num_shards))

    def _spec(self):
        return input_spec(self.input)


class _ShardIterator(_CursorIterator):
    counters = ("seen",)

    def __init__(self, input_it):
        super().__init__(input_it)
        self.seen = 0

    def next(self):
        while True:
            block = self.cursor.next_block()
            if block is None:
                return None
            first = (self.i - self.seen) % self.n
            self.seen += block.n
            idx = np.arange(first, block.n, self.n)
            if len(idx):
                return block.take(idx)

__all__ = ["ShardDataset"]
