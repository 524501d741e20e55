"""Exact per-host (or per-rank, per-worker) record and batch counts for the sharding used.

``ceil(ceil(N / hosts) / B)`` is wrong under file-level sharding (``list_files(...).shard(H, h)``):
files of 10 and 2 records on 2 hosts with ``B = 4`` give host 0 three batches and host 1 one.
These helpers count from the shards' manifests (or indexes) instead, so every host can pad to the
same number of steps: ``batch(B, pad_remainder=True, num_batches=equal_num_batches(...))``.

>>> records_per_split([10, 2], 2, "files"), records_per_split([10, 2], 2, "records")
([10, 2], [6, 6])
>>> batches_per_split([10, 2], 4, 2, "files"), equal_num_batches([10, 2], 4, 2, "files")
([3, 1], 3)
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Mapping
from typing import Iterable, Sequence

from tpudata import storage
from tpudata._keywords import storage_options_dict, strict_keywords

logger = logging.getLogger(__name__)

SPLITS = ("files", "records", "auto")


def resolve_split(split: str, num_files: int, num_splits: int) -> str:
    """``"files"`` or ``"records"``; ``"auto"`` takes files when they divide evenly."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    if num_splits < 1:
        raise ValueError(f"the number of hosts/readers must be >= 1, not {num_splits}")
    if split == "auto":
        return "files" if num_files % num_splits == 0 else "records"
    return split


def records_per_split(counts: Sequence[int], num_splits: int, split: str = "auto") -> list[int]:
    """Records that reader ``k`` of ``num_splits`` gets from files of ``counts`` records.

    ``"files"``: reader ``k`` reads files ``k, k + n, ...`` (``Dataset.shard`` on the file list);
    ``"records"``: record ``i`` of the concatenation goes to reader ``i % n``
    (``TFRecordDataset(files).shard(n, k)``).
    """
    mode = resolve_split(split, len(counts), num_splits)
    if mode == "files":
        return [int(sum(counts[k::num_splits])) for k in range(num_splits)]
    total = int(sum(counts))
    return [len(range(k, total, num_splits)) for k in range(num_splits)]


def batches_per_split(counts: Sequence[int], batch_size: int, num_splits: int,
                      split: str = "auto", drop_remainder: bool = False) -> list[int]:
    """Batches each reader would produce on its own (before padding to equal counts)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, not {batch_size}")
    per = records_per_split(counts, num_splits, split)
    if drop_remainder:
        return [n // batch_size for n in per]
    return [math.ceil(n / batch_size) for n in per]


def equal_num_batches(counts: Sequence[int], batch_size: int, num_splits: int,
                      split: str = "auto", drop_remainder: bool = False) -> int:
    """The number of steps every reader runs so none waits on another.

    With padding (the default) it is the largest per-reader count: pass it as
    ``batch(B, pad_remainder=True, num_batches=...)``; readers that run out pad with
    zero-weight batches. With ``drop_remainder`` it is the smallest: ``.take()`` that many.
    """
    per = batches_per_split(counts, batch_size, num_splits, split, drop_remainder)
    return min(per) if drop_remainder else max(per)


@strict_keywords
def file_record_counts(files: str | Iterable[str], progress: bool = True,
                       storage_options: Mapping | None = None) -> list[int]:
    """Records in each file: from the manifests when they cover the files, else by a scan
    (``storage_options``, a dict, goes to fsspec)."""
    from tqdm.auto import tqdm  # noqa: PLC0415

    from tpudata.shards.manifest import record_counts  # noqa: PLC0415
    from tpudata.tfrecord.reader import TFRecordFileReader  # noqa: PLC0415

    storage_options = storage_options_dict("file_record_counts", storage_options)
    names = storage.expand(files, **storage_options) if isinstance(files, str) else list(files)
    counts = record_counts(names, storage_options=storage_options)
    if counts is not None:
        return counts
    logger.info("no manifest covers %d file(s): counting their records by a scan", len(names))
    out = []
    no_bar = not progress or not sys.stderr.isatty()  # a bar only on a terminal
    for name in tqdm(names, desc="counting records", unit="file", disable=no_bar, leave=False):
        with TFRecordFileReader(name, storage_options=storage_options) as reader:
            out.append(sum(len(b) for b in reader))
    return out


__all__ = [
    "SPLITS",
    "batches_per_split",
    "equal_num_batches",
    "file_record_counts",
    "records_per_split",
    "resolve_split",
]
