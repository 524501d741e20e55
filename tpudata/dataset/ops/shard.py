"""shard: keep every ``num_shards``-th element, starting at ``index`` (shard files by host first).

>>> from tpudata.dataset import Dataset
>>> [int(x) for x in Dataset.range(10).shard(3, 1)]
[1, 4, 7]
"""

from __future__ import annotations

import logging
import threading
import warnings

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.core.common import _CursorIterator, _Unary, input_spec

logger = logging.getLogger(__name__)

FEW_FILES_PER_HOST = 10
_warned: set = set()  # the file splits warned about in this process
_warned_lock = threading.Lock()


class ShardDataset(_Unary):
    def __init__(self, input_ds, num_shards: int, index: int):
        super().__init__(input_ds)
        num_shards, index = int(num_shards), int(index)
        if num_shards < 1 or not 0 <= index < num_shards:
            raise ValueError(f"shard index must be in [0, {num_shards}), got {index}")
        self.num_shards, self.index = num_shards, index
        listed = input_ds._file_names()  # a file-level split: the names this host reads
        if listed is not None and listed[1] == "unseeded":
            warnings.warn(
                f"shard({num_shards}, {index}) after list_files() that shuffles without a seed: "
                "every process shuffles the files differently, so hosts read overlapping files "
                "and miss others (tf.data's pitfall too). Pass list_files(..., seed=S) with the "
                "same S on every host, or shuffle=False", UserWarning, stacklevel=3)
        if listed is not None and num_shards > 1:
            files = listed[0]
            options = (input_ds._storage_options_for(files[0]) if files else None) or {}
            self._warn_few_files(files, options, listed[1] != "listed")

    def _warn_few_files(self, files: list, storage_options: dict, shuffled: bool) -> None:
        """A file-level split (``list_files(...).shard(n, k)``) that leaves this host few files
        makes shuffling and parallel reads coarse. Warned once per process for each split (the
        torch/JAX bridges build the pipeline again in every worker and epoch); where the shards'
        manifests are there, it counts this host's records too (files differ in size, and records
        are what a host trains on). Not called for one shard, nor for a record-level split
        (``TFRecordDataset(files).shard(n, k)``: every host reads every file)."""
        num_shards, index = self.num_shards, self.index
        per_host_files = [len(range(k, len(files), num_shards)) for k in range(num_shards)]
        mine = per_host_files[index]
        if mine >= FEW_FILES_PER_HOST:
            return
        key = (num_shards, index, shuffled, hash(tuple(files)), len(files))
        with _warned_lock:
            if key in _warned:
                return
            _warned.add(key)
        empty = sum(1 for n in per_host_files if n == 0)
        starved = (f"; {empty} of {num_shards} hosts get no file at all and yield nothing - "
                   f"shard the records instead (TFRecordDataset(files).shard(n, k)) or write at "
                   f"least {num_shards} files") if empty else ""
        advice = (f"with fewer than ~{FEW_FILES_PER_HOST} files per host, shuffling and parallel "
                  f"reads are coarse - write more, smaller shards")
        counts = None
        if mine:
            try:
                from tpudata.shards.manifest import record_counts

                counts = record_counts(files, storage_options=storage_options)
            except Exception as exc:  # counting is advice only: never fail shard() for it
                logger.debug("shard: no record counts for the warning (%s)", exc)
        if counts is None:
            logger.warning("shard %d of %d gets %d of %d files; %s%s", index, num_shards, mine,
                           len(files), advice, starved)
            return
        if shuffled:  # which files a host gets depends on the shuffle: say the average
            logger.warning(
                "shard %d of %d gets %d of %d files, about %d of %d records (files are "
                "shuffled first); %s%s", index, num_shards, mine, len(files),
                round(sum(counts) * mine / max(len(files), 1)), sum(counts), advice, starved)
            return
        per_host = [sum(counts[i::num_shards]) for i in range(num_shards)]
        logger.warning(
            "shard %d of %d gets %d of %d records (%d of %d files; hosts get %d to %d records); "
            "%s%s", index, num_shards, per_host[index], sum(counts), mine, len(files),
            min(per_host), max(per_host), advice, starved)

    def _file_names(self) -> tuple | None:
        listed = self.input._file_names()  # this shard's names, where the list has one order
        if listed is None or listed[1] != "listed":
            return None
        return listed[0][self.index::self.num_shards], "listed"

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

registry.provide(ShardDataset)
