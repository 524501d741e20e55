"""Batches from a random-access source in a globally shuffled order, with (epoch, position) state.

>>> from tpudata.tfrecord import write_records
>>> from tpudata.source import TFRecordSource
>>> _ = write_records("memory://doc/gb.tfrecord", [b"a", b"b", b"c"])
>>> src = TFRecordSource(["memory://doc/gb.tfrecord"], progress=False)
>>> it = SourceBatches(src, 2, shuffle=False)
>>> [(b["record"].tolist(), b["weight"].tolist()) for b in it]
[([b'a', b'b'], [1.0, 1.0]), ([b'c', b''], [1.0, 0.0])]
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tpudata.distribute.sampler import IndexSampler


def pad_rows(batch: dict, batch_size: int, mask_key: str, mask: np.ndarray) -> dict:
    """Pad every array of ``batch`` (valid rows first) to ``batch_size`` rows; add the mask."""
    out = {}
    for key, value in batch.items():
        arr = value if isinstance(value, np.ndarray) else None
        if arr is None:
            raise TypeError(
                f"batch entry {key!r} is a {type(value).__name__}; padding needs numpy arrays "
                f"(use FixedLenFeature, or make the transform return arrays)")
        if len(arr) < batch_size:
            pad = np.zeros((batch_size - len(arr),) + arr.shape[1:], dtype=arr.dtype)
            if arr.dtype == object:
                pad[...] = b""
            arr = np.concatenate([arr, pad])
        out[key] = arr
    if mask_key in out:
        raise ValueError(f"the batch already has a {mask_key!r} entry: choose another mask_key")
    out[mask_key] = mask
    return out


def records_batch(records: list) -> dict:
    """The default transform: ``{"record": object array of bytes}``."""
    arr = np.empty(len(records), dtype=object)
    arr[:] = records
    return {"record": arr}


class SourceBatches:
    """Iterates ``source`` (``__len__`` + ``__getitems__``) in :class:`IndexSampler` order.

    Each batch is ``transform(records)`` (default :func:`records_batch`; e.g.
    ``lambda r: tpudata.parse_examples(r, spec)``) padded to ``batch_size`` rows, plus a float32
    ``mask_key`` entry (1 real, 0 padding). ``get_state()`` is the sampler's
    ``{"epoch", "position"}``.
    """

    def __init__(self, source, batch_size: int, *, seed: int = 0, shuffle: bool = True,
                 num_epochs: int | None = 1, shard_index: int = 0, shard_count: int = 1,
                 transform: Callable[[list], dict] | None = None, mask_key: str = "weight"):
        self.source = source
        self.batch_size = int(batch_size)
        self.sampler = IndexSampler(len(source), seed=seed, shuffle=shuffle, num_epochs=num_epochs,
                                    shard_index=shard_index, shard_count=shard_count)
        self.transform = transform or records_batch
        self.mask_key = mask_key
        self._gen = None

    def __len__(self) -> int:
        """Batches left in the current epoch (the same on every host)."""
        return self.sampler.steps_left(self.batch_size)

    def __iter__(self) -> "SourceBatches":
        return self

    def __next__(self) -> dict:
        if self._gen is None:
            self._gen = self.sampler.batches(self.batch_size)
        idx, mask = next(self._gen)
        valid = idx[mask > 0]
        records = self.source.__getitems__(valid) if len(valid) else []
        return pad_rows(self.transform(records), self.batch_size, self.mask_key, mask)

    def get_state(self) -> dict:
        return self.sampler.get_state()

    def set_state(self, state: dict) -> None:
        self.sampler.set_state(state)
        self._gen = None

    def close(self) -> None:
        self._gen = None


__all__ = ["SourceBatches", "pad_rows", "records_batch"]
