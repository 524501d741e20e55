"""This JAX process's input: its part of the files or of a random-access source, equal steps."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Callable, Iterable

from tpudata import storage
from tpudata._keywords import storage_options_dict, strict_keywords
from tpudata.distribute.batches import SourceBatches
from tpudata.distribute.counts import file_record_counts
from tpudata.distribute.pipeline import split_batches
from tpudata.jax.arrays import process_split


@strict_keywords
def tfrecord_batches(files: str | Iterable[str], batch_size: int, *, pipeline: Callable | None = None,
                     split: str = "auto", mask_key: str = "weight", counts=None,
                     process_index: int | None = None, process_count: int | None = None,
                     progress: bool = True, storage_options: Mapping | None = None):
    """This process's :class:`~tpudata.Dataset` of padded batches (``batch_size`` rows each).

    Every process gets the same number of batches, counted from the manifests or indexes for
    the split used (see :func:`tpudata.distribute.split_batches`); ``pipeline(ds, None)`` maps
    records to dict elements (e.g. ``lambda ds, _: ds.parse(spec)``). ``storage_options`` (a
    dict) goes to fsspec.
    """
    storage_options = storage_options_dict("tfrecord_batches", storage_options)
    index, count = process_split(process_index, process_count)
    names = storage.expand(files, **storage_options) if isinstance(files, str) else list(files)
    if counts is None:
        counts = file_record_counts(names, progress=progress, storage_options=storage_options)
    return split_batches(names, counts, batch_size, index, count, pipeline=pipeline, split=split,
                         mask_key=mask_key, storage_options=storage_options)


@strict_keywords
def source_batches(source, batch_size: int, *, transform: Callable | None = None, seed: int = 0,
                   shuffle: bool = True, num_epochs: int | None = 1, mask_key: str = "weight",
                   process_index: int | None = None, process_count: int | None = None) -> SourceBatches:
    """This process's globally shuffled batches of ``source`` (state: ``{"epoch", "position"}``,
    restorable on any number of processes)."""
    index, count = process_split(process_index, process_count)
    return SourceBatches(source, batch_size, seed=seed, shuffle=shuffle, num_epochs=num_epochs,
                         shard_index=index, shard_count=count, transform=transform,
                         mask_key=mask_key)


__all__ = ["source_batches", "tfrecord_batches"]
