"""Feeding several hosts, ranks and workers: global shuffles, exact splits, equal step counts.

Framework-free (numpy only); :mod:`tpudata.torch` and :mod:`tpudata.jax` build on it.
"""

from tpudata.distribute.batches import SourceBatches, pad_rows, records_batch
from tpudata.distribute.counts import (
    batches_per_split,
    equal_num_batches,
    file_record_counts,
    records_per_split,
    resolve_split,
)
from tpudata.distribute.pipeline import split_batches, split_mode
from tpudata.distribute.permutation import IndexPermutation, derive_seed
from tpudata.distribute.sampler import PAD, IndexSampler

__all__ = [
    "PAD",
    "IndexPermutation",
    "IndexSampler",
    "SourceBatches",
    "batches_per_split",
    "derive_seed",
    "equal_num_batches",
    "file_record_counts",
    "pad_rows",
    "records_batch",
    "records_per_split",
    "resolve_split",
    "split_batches",
    "split_mode",
]
