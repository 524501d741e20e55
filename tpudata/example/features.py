"""tf.io's structured feature specs: FixedLenSequenceFeature, SparseFeature, RaggedFeature.

They are parsed from the variable-length values of one or more Example features (see
:mod:`tpudata.example.structured`) and give what ``tf.io.parse_example`` gives:

- :class:`FixedLenSequenceFeature` -> a dense array ``(batch, max_len) + shape``, padded with
  ``default_value`` (``tf.io.parse_example`` pads to the longest record of the batch);
- :class:`SparseFeature` -> :class:`~tpudata.example.structured.SparseValues` (a SparseTensor);
- :class:`RaggedFeature` -> :class:`~tpudata.example.parse.VarLenValues` without partitions,
  :class:`~tpudata.example.structured.RaggedValues` with them (a RaggedTensor).

>>> FixedLenSequenceFeature([2], np.float32, allow_missing=True).shape
(2,)
>>> RaggedFeature(np.int64, partitions=[RaggedFeature.RowLengths("lengths")]).ragged_rank
2
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpudata.errors import SpecError
from tpudata.example.spec import BYTES, INT64, _normalize_shape, normalize_dtype


@dataclass(frozen=True)
class FixedLenSequenceFeature:
    """``tf.io.FixedLenSequenceFeature``: any number of ``shape``-sized items per record.

    As in ``tf.io.parse_example``, ``allow_missing`` must be ``True`` when parsing Examples (a
    record without the feature gives zero items). ``default_value`` pads the shorter records
    (``0`` or ``b""`` by default).
    """

    shape: tuple = ()
    dtype: Any = np.float32
    allow_missing: bool = False
    default_value: Any = None
    num_elements: int = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "shape", _normalize_shape(self.shape))
        dtype = normalize_dtype(self.dtype)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "num_elements", int(np.prod(self.shape, dtype=np.int64)))
        value = self.default_value
        if value is None:
            value = b"" if dtype == BYTES else 0
        arr = np.asarray(value, dtype=object if dtype == BYTES else None)
        if arr.size != 1:
            raise SpecError(
                f"FixedLenSequenceFeature default_value must be a scalar (it pads records to the "
                f"longest one), not {self.default_value!r}"
            )
        item = arr.reshape(()).item()
        if dtype == BYTES:
            if isinstance(item, str):
                item = item.encode()
            if not isinstance(item, bytes):
                raise SpecError(f"default_value {self.default_value!r} of a bytes feature must be bytes/str")
        else:
            try:
                item = np.asarray(item).astype(dtype).item()
            except (TypeError, ValueError):
                raise SpecError(f"default_value {self.default_value!r} is not {dtype}") from None
        object.__setattr__(self, "default_value", item)


@dataclass(frozen=True)
class SparseFeature:
    """``tf.io.SparseFeature``: a SparseTensor built from index feature(s) and a value feature.

    ``index_key`` names one int64 feature (or a list, one per dimension of ``size``);
    ``value_key`` the values. Each record's indices and values must have the same length and
    every index must lie in ``[0, size)`` (TensorFlow does not check that; tpudata raises
    :class:`~tpudata.errors.SpecError`). Entries are sorted by index within each record
    unless ``already_sorted=True``.
    """

    index_key: Any
    value_key: str
    dtype: Any
    size: Any
    already_sorted: bool = False

    def __post_init__(self):
        keys = (self.index_key,) if isinstance(self.index_key, str) else tuple(self.index_key)
        sizes = (self.size,) if isinstance(self.size, (int, np.integer)) else tuple(self.size)
        if not keys or not all(isinstance(k, str) for k in keys):
            raise SpecError(f"SparseFeature index_key must be a str or a list of str, not {self.index_key!r}")
        if not isinstance(self.value_key, str):
            raise SpecError(f"SparseFeature value_key must be a str, not {self.value_key!r}")
        try:
            sizes = tuple(int(s) for s in sizes)
        except (TypeError, ValueError):
            raise SpecError(f"SparseFeature size must be an int or a list of ints, not {self.size!r}") from None
        if len(sizes) != len(keys) or any(s < 0 for s in sizes):
            raise SpecError(
                f"SparseFeature size {self.size!r} must give one non-negative size per index_key "
                f"({len(keys)} key(s))"
            )
        object.__setattr__(self, "index_key", keys[0] if isinstance(self.index_key, str) else keys)
        object.__setattr__(self, "size", sizes[0] if isinstance(self.size, (int, np.integer)) else sizes)
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))

    @property
    def index_keys(self) -> tuple:
        return (self.index_key,) if isinstance(self.index_key, str) else tuple(self.index_key)

    @property
    def sizes(self) -> tuple:
        return (self.size,) if isinstance(self.size, int) else tuple(self.size)


@dataclass(frozen=True)
class _KeyedPartition:
    """A row partition read from the int64 feature ``key`` of each record."""

    key: str
    is_uniform = False


class RowSplits(_KeyedPartition):
    """Row ``i`` holds items ``splits[i]:splits[i+1]`` (feature ``key`` holds the splits)."""


class RowLengths(_KeyedPartition):
    """Row ``i`` holds ``lengths[i]`` items (feature ``key``)."""


class RowStarts(_KeyedPartition):
    """Row ``i`` starts at item ``starts[i]`` (feature ``key``)."""


class RowLimits(_KeyedPartition):
    """Row ``i`` ends before item ``limits[i]`` (feature ``key``)."""


class ValueRowIds(_KeyedPartition):
    """Item ``j`` belongs to row ``ids[j]``, non-decreasing (feature ``key``)."""


@dataclass(frozen=True)
class UniformRowLength:
    """Every row holds ``length`` items (not read from a feature)."""

    length: int
    is_uniform = True

    def __post_init__(self):
        if int(self.length) < 1:
            raise SpecError(f"UniformRowLength needs a length >= 1, not {self.length!r}")
        object.__setattr__(self, "length", int(self.length))


_PARTITIONS = (RowSplits, RowLengths, RowStarts, RowLimits, ValueRowIds, UniformRowLength)


@dataclass(frozen=True)
class RaggedFeature:
    """``tf.io.RaggedFeature``: values (``value_key``, the spec's name by default) split into
    nested rows by ``partitions`` (outermost first), under the batch dimension.

    Partitions are ``RaggedFeature.RowSplits(key)``, ``RowLengths(key)``, ``RowStarts(key)``,
    ``RowLimits(key)``, ``ValueRowIds(key)`` (each read from an int64 feature of the record)
    and ``UniformRowLength(n)``. Partitions are always validated (TF checks them only with
    ``validate=True`` and otherwise may drop values silently).
    """

    RowSplits = RowSplits
    RowLengths = RowLengths
    RowStarts = RowStarts
    RowLimits = RowLimits
    ValueRowIds = ValueRowIds
    UniformRowLength = UniformRowLength

    dtype: Any
    value_key: Any = None
    partitions: tuple = ()
    row_splits_dtype: Any = np.int32
    validate: bool = False

    def __post_init__(self):
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        if self.value_key is not None and not isinstance(self.value_key, str):
            raise SpecError(f"RaggedFeature value_key must be a str, not {self.value_key!r}")
        parts = tuple(self.partitions)
        for p in parts:
            if not isinstance(p, _PARTITIONS):
                raise SpecError(
                    f"RaggedFeature partitions must be RaggedFeature.RowSplits/RowLengths/RowStarts/"
                    f"RowLimits/ValueRowIds/UniformRowLength, not {p!r}"
                )
            if not p.is_uniform and not isinstance(p.key, str):
                raise SpecError(f"{type(p).__name__} needs a feature name, not {p.key!r}")
        object.__setattr__(self, "partitions", parts)
        dt = np.dtype(self.row_splits_dtype)
        if dt not in (np.dtype(np.int32), INT64):
            raise SpecError(f"RaggedFeature row_splits_dtype must be int32 or int64, not {self.row_splits_dtype!r}")
        object.__setattr__(self, "row_splits_dtype", dt)

    @property
    def ragged_rank(self) -> int:
        """Ragged dimensions of the parsed batch (the batch dimension's splits included)."""
        return 1 + len(self.partitions)


STRUCTURED = (FixedLenSequenceFeature, SparseFeature, RaggedFeature)

__all__ = ["FixedLenSequenceFeature", "RaggedFeature", "SparseFeature"]
