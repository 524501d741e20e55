"""A map-style ``torch.utils.data.Dataset`` over a random-access source.

``DataLoader`` calls ``__getitems__`` with a whole batch of indices (one sorted, coalesced read
instead of one per record); any sampler works, e.g. ``DistributedSampler`` for ranks.
"""

from __future__ import annotations

from typing import Callable

import torch.utils.data


class MapDataset(torch.utils.data.Dataset):
    """``len(source)`` items; item ``i`` is ``transform(source[i])`` (the record bytes by default).

    ``batch_transform(records) -> batch`` (e.g. parse a list of Examples into arrays) is used by
    ``__getitems__`` instead, with ``collate_fn=tpudata.torch.collate_batch`` in the DataLoader.
    """

    def __init__(self, source, transform: Callable | None = None,
                 batch_transform: Callable | None = None):
        self.source = source
        self.transform = transform
        self.batch_transform = batch_transform

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i: int):
        rec = self.source[i]
        return rec if self.transform is None else self.transform(rec)

    def __getitems__(self, indices: list):
        records = self.source.__getitems__(indices)
        if self.batch_transform is not None:
            return _Batch(self.batch_transform(records))
        if self.transform is not None:
            return [self.transform(r) for r in records]
        return records


class _Batch:
    """A whole batch from ``batch_transform``, passed through ``collate_batch`` as is."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def collate_batch(items):
    """collate_fn for :class:`MapDataset`: whole batches become tensors; lists collate as usual."""
    from tpudata.torch.tensors import to_torch  # noqa: PLC0415

    if isinstance(items, _Batch):
        return to_torch(items.value)
    if items and isinstance(items[0], (bytes, bytearray)):
        return list(items)
    return torch.utils.data.default_collate(items)


__all__ = ["MapDataset", "collate_batch"]
