"""One reader's part of a set of TFRecord files as a tpudata pipeline with an exact step count.

Reader ``index`` of ``count`` (hosts, ranks x workers, JAX processes) gets whole files
(``split="files"``) or every ``count``-th record (``"records"``); ``"auto"`` takes files when they
divide evenly. Its batches are padded (weight 0 in ``mask_key``) up to
:func:`~tpudata.distribute.counts.equal_num_batches`, so every reader runs the same steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Callable, Sequence

from tpudata._keywords import strict_keywords
from tpudata.distribute.counts import equal_num_batches, resolve_split
from tpudata.errors import SplitError


def split_mode(split: str, num_files: int, count: int) -> str:
    """:func:`resolve_split`, refusing a file split that cannot be even (saying what to do)."""
    mode = resolve_split(split, num_files, count)
    if mode == "files" and num_files % count:
        raise SplitError(
            f"{num_files} files cannot be split evenly over {count} readers (ranks x DataLoader "
            f"workers, or processes): use split='records' (or 'auto'), or a reader count that "
            f"divides the files")
    return mode


@strict_keywords
def split_batches(files: Sequence[str], counts: Sequence[int], batch_size: int, index: int,
                  count: int, *, pipeline: Callable | None = None, split: str = "auto",
                  mask_key: str = "weight", context=None, storage_options: Mapping | None = None):
    """The :class:`~tpudata.Dataset` of reader ``index`` of ``count``: equal, padded batches.

    ``pipeline(ds, context)`` turns the reader's records into dict elements, one per record
    (default ``{"record": bytes}``); ``context`` is passed through (e.g. the epoch).
    ``storage_options`` (a dict) goes to fsspec.
    """
    from tpudata.dataset import TFRecordDataset  # noqa: PLC0415

    if not 0 <= index < count:
        raise ValueError(f"need 0 <= index < count, got {index} of {count}")
    mode = split_mode(split, len(files), count)
    if mode == "files":
        ds = TFRecordDataset(list(files[index::count]), storage_options=storage_options)
    else:
        ds = TFRecordDataset(list(files), storage_options=storage_options).shard(count, index)
    ds = pipeline(ds, context) if pipeline is not None else ds.map(_record_dict)
    steps = equal_num_batches(counts, batch_size, count, mode)
    return ds.batch(batch_size, pad_remainder=True, mask_key=mask_key, num_batches=steps)


def _record_dict(record):
    return {"record": record}


__all__ = ["split_batches", "split_mode"]
