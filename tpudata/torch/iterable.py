"""``torch.utils.data.IterableDataset`` s over tpudata: exact epochs across ranks x workers.

:class:`TFRecordIterable` streams TFRecord files through a tpudata :class:`~tpudata.Dataset`
pipeline; :class:`SourceIterable` reads a random-access source in a global shuffle order. Both
split by rank first, then by DataLoader worker, deliver every record exactly once per epoch, pad
so that every reader yields the same number of batches (the padding rows have weight 0 in
``mask_key``), know their ``len()``, and save/restore mid-epoch through ``state_dict()`` /
``load_state_dict()`` (what ``torchdata.stateful_dataloader.StatefulDataLoader`` calls in each
worker). Use them with ``DataLoader(ds, batch_size=None, num_workers=...)``: they batch already.

In a DataLoader worker a batch leaves through a reused shared-memory slot
(:mod:`tpudata.torch.shared`) and arrives in the main process as the same dict of tensors /
``bytes`` / :class:`ByteStrings` as without workers; ``shared_memory=False`` yields plain dicts
in the worker instead (for a ``collate_fn`` that wants to see them there), at the cost of torch's
per-tensor sharing and pickled byte strings.

The epoch lives in one int64 of shared memory, so ``set_epoch`` in the main process reaches
workers that persist across epochs (``persistent_workers=True``) at their next ``iter()``. A
DataLoader that batches again (``batch_size`` left at its default of 1) is refused with
:class:`~tpudata.errors.DataLoaderConfigError` when it calls ``iter()``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Callable, Iterable, Iterator

import torch
import torch.utils.data

# the Dataset ops import lazily; import the ones every pipeline here uses now, so that forked
# DataLoader workers inherit them instead of importing them again at every epoch
import tpudata.dataset.ops.batch  # noqa: F401
import tpudata.dataset.ops.parse  # noqa: F401
import tpudata.dataset.parallel.prefetch  # noqa: F401
import tpudata.dataset.ops.shuffle  # noqa: F401
from tpudata import storage
from tpudata._keywords import storage_options_dict, strict_keywords
from tpudata.distribute.batches import SourceBatches
from tpudata.errors import DataLoaderConfigError, SplitError
from tpudata.distribute.counts import equal_num_batches, file_record_counts
from tpudata.distribute.pipeline import split_batches, split_mode
from tpudata.torch.shared import in_worker, pack
from tpudata.torch.split import Split, current_split, rank_and_world
from tpudata.torch.tensors import BYTES_AS, to_torch

logger = logging.getLogger(__name__)


class _SplitIterable(torch.utils.data.IterableDataset):
    """Shared machinery: the split, epochs, tensors and the resumable state."""

    def __init__(self, batch_size: int, num_workers: int | None, rank: int | None,
                 world_size: int | None, mask_key: str, bytes_as: str, shared_memory: bool):
        if bytes_as not in BYTES_AS:
            raise ValueError(f"bytes_as must be one of {BYTES_AS}, not {bytes_as!r}")
        self.bytes_as = bytes_as
        self.shared_memory = bool(shared_memory)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, not {batch_size}")
        self.batch_size = int(batch_size)
        self.num_workers = num_workers
        self.rank, self.world_size = rank_and_world(rank, world_size)
        self.mask_key = mask_key
        # shared with DataLoader workers (inherited by fork, passed as shared memory to
        # forkserver/spawn workers; a plain pickle copies it): set_epoch reaches persistent ones
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_()
        self._pending: dict | None = None
        self._it = None
        self._split: Split | None = None

    @property
    def epoch(self) -> int:
        return int(self._epoch[0])

    @epoch.setter
    def epoch(self, epoch: int) -> None:
        self._epoch[0] = int(epoch)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (reshuffles where the pipeline shuffles), as DistributedSampler does;
        DataLoader workers, persistent ones too, read it at their next ``iter()``."""
        self.epoch = int(epoch)

    def _readers(self) -> int:
        if self.num_workers is None:
            raise TypeError(
                "len() needs the DataLoader's worker count: pass num_workers=... (the same as the "
                "DataLoader's) when making this dataset")
        return self.world_size * max(1, self.num_workers)

    def batches_per_reader(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def __len__(self) -> int:
        """Batches this rank's DataLoader yields per epoch (equal on every rank)."""
        return self.batches_per_reader() * max(1, self.num_workers or 0)

    def _open(self, split: Split, state: dict | None):  # pragma: no cover - overridden
        raise NotImplementedError

    def __iter__(self) -> Iterator:
        if _collating_fetcher(sys._getframe(1)):
            raise DataLoaderConfigError(
                f"{type(self).__name__} yields whole batches ({self.batch_size} rows each, with a "
                f"{self.mask_key!r} mask), but this DataLoader batches them again (its batch_size "
                f"defaults to 1): pass DataLoader(dataset, batch_size=None, ...); a collate_fn then "
                f"gets each whole batch")
        return self._batches()

    def _batches(self) -> Iterator:
        pending, self._pending = self._pending, None
        epoch = self.epoch if pending is None else int(pending["epoch"])
        split = current_split(self.rank, self.world_size, self.num_workers, epoch)
        if pending is not None and list(pending["split"]) != [split.index, split.count]:
            raise SplitError(
                f"this state was saved by reader {pending['split'][0]} of {pending['split'][1]} "
                f"but is restored by reader {split.index} of {split.count}: restore with the same "
                f"ranks and DataLoader workers")
        self._split = split
        it = self._it = self._open(split, None if pending is None else pending["state"])
        packed = self.shared_memory and in_worker()
        try:
            for batch in it:
                out = pack(batch, self.bytes_as) if packed else None
                yield to_torch(batch, self.bytes_as) if out is None else out
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    def state_dict(self) -> dict:
        """Position of the batches produced so far (JSON-serialisable)."""
        if self._it is None or self._split is None:
            return {"epoch": self.epoch, "split": None, "state": None} if self._pending is None \
                else dict(self._pending)
        return {"epoch": self._split.epoch, "split": [self._split.index, self._split.count],
                "state": self._it.get_state()}

    def load_state_dict(self, state: dict) -> None:
        """Resume at ``state`` on the next ``iter()``."""
        if state.get("split") is None:
            self.epoch = int(state["epoch"])
            self._pending = None
            return
        self._pending = dict(state)
        self.epoch = int(state["epoch"])


def _collating_fetcher(frame) -> bool:
    """Whether ``iter()`` is called by a DataLoader fetcher that collates (``batch_size`` is not
    None): the fetcher calls ``iter(dataset)`` from its ``__init__`` (in the main process without
    workers, in each worker with them), after setting ``auto_collation``. Neither the dataset
    nor ``get_worker_info()`` is told the DataLoader's arguments, so its frame is looked at."""
    try:
        from torch.utils.data._utils.fetch import _BaseDatasetFetcher  # noqa: PLC0415
    except ImportError:  # pragma: no cover - another torch layout: no check
        return False
    for _ in range(3):
        if frame is None:
            return False
        owner = frame.f_locals.get("self")
        if isinstance(owner, _BaseDatasetFetcher):
            return bool(getattr(owner, "auto_collation", False))
        frame = frame.f_back
    return False


class TFRecordIterable(_SplitIterable):
    """Batches of TFRecord ``files`` through a tpudata pipeline, split over ranks x workers.

    ``pipeline(ds, split)`` turns this reader's records (a :class:`~tpudata.Dataset` of bytes)
    into dict elements, one per record (``parse``, ``map``, ``shuffle`` are fine; ``filter`` would
    make the equal-step count wrong); the default yields ``{"record": bytes}``. ``split="files"``
    gives each reader whole files (they must divide evenly), ``"records"`` deals records round
    robin, ``"auto"`` takes files when they divide. Every reader yields
    ``equal_num_batches(...)`` batches of ``batch_size`` rows with a float32 ``mask_key``.
    ``storage_options`` (a dict) goes to fsspec.
    """

    @strict_keywords
    def __init__(self, files: str | Iterable[str], batch_size: int, *,
                 pipeline: Callable | None = None, split: str = "auto",
                 num_workers: int | None = None, rank: int | None = None,
                 world_size: int | None = None, mask_key: str = "weight",
                 counts: list[int] | None = None, progress: bool = True, bytes_as: str = "list",
                 shared_memory: bool = True, storage_options: Mapping | None = None):
        super().__init__(batch_size, num_workers, rank, world_size, mask_key, bytes_as,
                         shared_memory)
        storage_options = storage_options_dict("TFRecordIterable", storage_options)
        self.files = storage.expand(files, **storage_options) if isinstance(files, str) else list(files)
        if not self.files:
            raise FileNotFoundError(f"no files match {files!r}")
        self.pipeline = pipeline
        self.split = split
        self.storage_options = storage_options
        self.counts = list(counts) if counts is not None else file_record_counts(
            self.files, progress=progress, storage_options=storage_options)
        if len(self.counts) != len(self.files):
            raise ValueError(f"counts: {len(self.counts)} numbers for {len(self.files)} files")
        if num_workers is not None:
            split_mode(split, len(self.files), self._readers())  # fail early if it cannot work

    def batches_per_reader(self, readers: int | None = None) -> int:
        readers = readers or self._readers()
        return equal_num_batches(self.counts, self.batch_size, readers,
                                 split_mode(self.split, len(self.files), readers))

    def _open(self, split: Split, state):
        ds = split_batches(self.files, self.counts, self.batch_size, split.index, split.count,
                           pipeline=self.pipeline, split=self.split, mask_key=self.mask_key,
                           context=split, storage_options=self.storage_options)
        return ds.iterator(state)


class SourceIterable(_SplitIterable):
    """Globally shuffled batches of a random-access ``source`` (e.g. :class:`TFRecordSource`).

    Reader ``k`` of ``n`` takes positions ``k, k + n, ...`` of the epoch's permutation
    (:class:`~tpudata.distribute.IndexSampler`), so any ranks x workers count splits exactly;
    ``transform(records) -> dict of arrays`` (e.g. ``lambda r: tpudata.parse_examples(r, spec)``).
    """

    @strict_keywords
    def __init__(self, source, batch_size: int, *, transform: Callable | None = None,
                 seed: int = 0, shuffle: bool = True, num_workers: int | None = None,
                 rank: int | None = None, world_size: int | None = None,
                 mask_key: str = "weight", bytes_as: str = "list", shared_memory: bool = True):
        super().__init__(batch_size, num_workers, rank, world_size, mask_key, bytes_as,
                         shared_memory)
        self.source = source
        self.transform = transform
        self.seed = seed
        self.shuffle = shuffle

    def batches_per_reader(self, readers: int | None = None) -> int:
        readers = readers or self._readers()
        return -(-len(self.source) // (self.batch_size * readers))

    def _open(self, split: Split, state):
        it = SourceBatches(self.source, self.batch_size, seed=self.seed, shuffle=self.shuffle,
                           num_epochs=split.epoch + 1, shard_index=split.index,
                           shard_count=split.count, transform=self.transform,
                           mask_key=self.mask_key)
        it.set_state(state if state is not None else {"epoch": split.epoch, "position": 0})
        return it


class DatasetIterable(_SplitIterable):
    """Any tpudata pipeline's batches (packed text, mixtures): ``make(split)`` returns reader
    ``split.index`` of ``split.count``'s :class:`~tpudata.Dataset` of batches (e.g.
    ``elastic_hosts(host_pipeline, split.count, split.index)``). Equal step counts and ``len()``
    are the pipeline's business (``repeat`` and ``take``); a state restores on the same ranks x
    workers."""

    @strict_keywords
    def __init__(self, make: Callable, *, num_workers: int | None = None, rank: int | None = None,
                 world_size: int | None = None, bytes_as: str = "list",
                 shared_memory: bool = True):
        super().__init__(1, num_workers, rank, world_size, "", bytes_as, shared_memory)
        self.make = make

    def batches_per_reader(self) -> int:
        raise TypeError("a DatasetIterable does not know its length (the pipeline's own)")

    def _open(self, split: Split, state):
        return self.make(split).iterator(state)


__all__ = ["DatasetIterable", "SourceIterable", "TFRecordIterable"]
