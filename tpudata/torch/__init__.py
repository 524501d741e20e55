"""PyTorch bridge (optional extra ``tpudata[torch]``): imports torch; tpudata itself never does.

- :class:`TFRecordIterable` / :class:`SourceIterable`: ``IterableDataset`` s split by rank, then
  by DataLoader worker, exactly once per epoch, equal batch counts on every rank, resumable with
  torchdata's ``StatefulDataLoader``.
- :class:`DatasetIterable`: any pipeline's batches (packed text, mixtures), one per reader.
- :class:`MapDataset`: map-style wrapper of a random-access source (batched ``__getitems__``).
"""

from tpudata.torch.iterable import DatasetIterable, SourceIterable, TFRecordIterable
from tpudata.torch.mapstyle import MapDataset, collate_batch
from tpudata.torch.split import Split, rank_and_world
from tpudata.torch.tensors import ByteStrings, to_torch

__all__ = [
    "ByteStrings",
    "DatasetIterable",
    "MapDataset",
    "SourceIterable",
    "Split",
    "TFRecordIterable",
    "collate_batch",
    "rank_and_world",
    "to_torch",
]
