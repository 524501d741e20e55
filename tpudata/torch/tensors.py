"""numpy batches -> torch: numbers without a copy; byte strings as lists or one uint8 tensor.

With ``bytes_as="tensor"`` the byte strings of a batch become :class:`ByteStrings`: one uint8
tensor plus offsets; decoders such as ``torchvision.io.decode_jpeg`` take ``strings.tensor(i)``
as it is. The default ``"list"`` gives lists of ``bytes``. (Out of DataLoader workers the
iterables send whole batches through reused shared memory instead: :mod:`tpudata.torch.shared`.)

>>> b = to_torch({"n": np.arange(3), "s": np.array([b"ab", b"", b"c"], dtype=object)}, "tensor")
>>> b["n"].tolist(), len(b["s"]), b["s"][0], b["s"].tolist()
([0, 1, 2], 3, b'ab', [b'ab', b'', b'c'])
"""

from __future__ import annotations

import numpy as np
import torch

from tpudata.dataset.core.columns import BytesColumn


def _uint8(n: int, shared: bool) -> torch.Tensor:
    """An empty uint8 tensor of ``n`` bytes, in shared memory if asked (share_memory_() would
    copy)."""
    if shared:
        return torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(n))
    return torch.empty(n, dtype=torch.uint8)


class ByteStrings:
    """A batch of byte strings: ``values`` (uint8 tensor) and ``offsets`` (int64, ``n + 1``).

    ``strings[i]`` is bytes, ``strings.tensor(i)`` a zero-copy uint8 view, ``tolist()`` all of
    them as bytes; compares equal to a list of the same bytes.
    """

    __slots__ = ("values", "offsets")

    def __init__(self, values: torch.Tensor, offsets: torch.Tensor):
        self.values = values
        self.offsets = offsets

    @classmethod
    def from_numpy(cls, arr: np.ndarray, shared: bool = False) -> "ByteStrings":
        items = arr.ravel().tolist()
        lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
        offsets = np.zeros(len(items) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = _uint8(int(offsets[-1]), shared)
        view = values.numpy()
        for o, n, item in zip(offsets[:-1].tolist(), lengths.tolist(), items):
            if n:
                view[o : o + n] = np.frombuffer(item, dtype=np.uint8)
        return cls(values, torch.from_numpy(offsets))

    @classmethod
    def from_column(cls, col: BytesColumn, shared: bool = False) -> "ByteStrings":
        """From a parsed bytes column still in the read buffers: each value is copied once,
        straight into the tensor (no bytes object per value)."""
        lengths = np.asarray(col.lengths, dtype=np.int64)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = _uint8(int(offsets[-1]), shared)
        col.copy_to(values.numpy(), offsets)
        return cls(values, torch.from_numpy(offsets))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def tensor(self, i: int) -> torch.Tensor:
        """String ``i`` as a uint8 tensor view (no copy)."""
        return self.values[int(self.offsets[i]) : int(self.offsets[i + 1])]

    def __getitem__(self, i: int) -> bytes:
        if not -len(self) <= i < len(self):
            raise IndexError(f"string {i} out of range for a batch of {len(self)}")
        i %= len(self)
        return self.values.numpy()[int(self.offsets[i]) : int(self.offsets[i + 1])].tobytes()

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def tolist(self) -> list[bytes]:
        return list(self)

    def __eq__(self, other) -> bool:
        if isinstance(other, ByteStrings):
            return self.tolist() == other.tolist()
        if isinstance(other, list):
            return self.tolist() == other
        return NotImplemented

    def __repr__(self) -> str:
        return f"ByteStrings({len(self)} strings, {self.values.numel()} bytes)"


def _in_worker() -> bool:
    from torch.utils.data import get_worker_info  # noqa: PLC0415

    return get_worker_info() is not None


BYTES_AS = ("list", "tensor")


def to_torch(batch, bytes_as: str = "list", _shared: bool | None = None):
    """numpy arrays -> tensors without a copy (``torch.from_numpy``); arrays of byte strings ->
    lists of bytes, or :class:`ByteStrings` with ``bytes_as="tensor"``; dicts/lists kept."""
    if bytes_as not in BYTES_AS:
        raise ValueError(f"bytes_as must be one of {BYTES_AS}, not {bytes_as!r}")
    if isinstance(batch, dict):
        return {k: to_torch(v, bytes_as, _shared) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_torch(v, bytes_as, _shared) for v in batch)
    if isinstance(batch, BytesColumn):  # a parsed bytes feature still in the read buffers
        if bytes_as == "list":
            return batch.tolist()
        return ByteStrings.from_column(batch, _in_worker() if _shared is None else _shared)
    if isinstance(batch, np.ndarray):
        if batch.dtype == object or batch.dtype.kind == "S":
            if bytes_as == "list":
                return batch.tolist()
            shared = _in_worker() if _shared is None else _shared
            return ByteStrings.from_numpy(batch.astype(object), shared)
        if batch.dtype.kind in "UV":
            return batch.tolist()
        if not batch.flags.writeable:  # torch wants writable memory; copy only then
            batch = batch.copy()
        return torch.from_numpy(batch)
    return batch


__all__ = ["BYTES_AS", "ByteStrings", "to_torch"]
