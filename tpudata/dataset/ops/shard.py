"""shard: keep every ``num_shards``-th element, starting at ``index`` (shard files by host first).

>>> from tpudata.dataset import Dataset
>>> [int(x) for x in Dataset.range(10).shard(3, 1)]
[1, 4, 7]
"""

from __future__ import annotations

import logging
import warnings

import numpy as np

from tpudata.dataset.core.common import _CursorIterator, _Unary, input_spec

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
            shuffled = getattr(input_ds, "unseeded_file_shuffle", None) is not None
            self._warn_few_files(list(files), getattr(input_ds, "storage_options", None) or {},
                                 shuffled)

    def _warn_few_files(self, files: list, storage_options: dict, shuffled: bool) -> None:
        """Few files per host make shuffling and parallel reads coarse. Where the shards'
        manifests are there, the warning counts this host's records too (files can differ
        in size, and records are what a host trains on)."""
        num_shards, index = self.num_shards, self.index
        mine = len(range(index, len(files), num_shards))
        if mine >= FEW_FILES_PER_HOST:
            return
        counts = None
        try:
            from tpudata.shards.manifest import record_counts

            counts = record_counts(files, **storage_options)
        except Exception as exc:  # counting is advice only: never fail shard() for it
            logger.debug("shard: no record counts for the warning (%s)", exc)
        if counts is None:
            logger.warning(
                "shard %d of %d gets %d of %d files; with fewer than ~%d files per host, "
                "shuffling and parallel reads are coarse - write more, smaller shards",
                index, num_shards, mine, len(files), FEW_FILES_PER_HOST)
            return
        if shuffled:  # which files a host gets depends on the shuffle: say the average
            logger.warning(
                "shard %d of %d gets %d of %d files, about %d of %d records (files are "
                "shuffled first); with fewer than ~%d files per host, shuffling and parallel "
                "reads are coarse - write more, smaller shards", index, num_shards, mine,
                len(files), round(sum(counts) * mine / max(len(files), 1)), sum(counts),
                FEW_FILES_PER_HOST)
            return
        per_host = [sum(counts[i::num_shards]) for i in range(num_shards)]
        logger.warning(
            "shard %d of %d gets %d of %d records (%d of %d files; hosts get %d to %d records); "
            "with fewer than ~%d files per host, shuffling and parallel reads are coarse - "
            "write more, smaller shards", index, num_shards, per_host[index], sum(counts), mine,
            len(files), min(per_host), max(per_host), FEW_FILES_PER_HOST)

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
