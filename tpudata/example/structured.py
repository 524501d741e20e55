"""Parsing of the structured features (see :mod:`tpudata.example.features`), batch-level.

Each structured feature is assembled with numpy from the :class:`VarLenValues` of the Example
features it reads, so it costs one pass over the batch buffer like every other feature.

>>> from tpudata.example.codec import encode_example
>>> from tpudata.example.parse import parse_examples
>>> recs = [encode_example({"i": [3, 1], "v": [1.0, 2.0]}), encode_example({"i": [0], "v": [5.0]})]
>>> s = parse_examples(recs, {"s": SparseFeature("i", "v", np.float32, 4)})["s"]
>>> s.indices.tolist(), s.values.tolist(), s.dense_shape
([[0, 1], [0, 3], [1, 0]], [2.0, 1.0, 5.0], (2, 4))
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tpudata.errors import SpecError
from tpudata.example.features import (
    FixedLenSequenceFeature,
    RaggedFeature,
    RowLengths,
    RowLimits,
    RowSplits,
    RowStarts,
    SparseFeature,
    ValueRowIds,
)
from tpudata.example.parse import VarLenValues
from tpudata.example.spec import BYTES, INT64


class SparseValues:
    """A ``tf.SparseTensor``'s parts: ``indices`` ``[nnz, rank]``, ``values``, ``dense_shape``.

    >>> s = SparseValues(np.array([[0, 2], [1, 0]]), np.array([5, 6]), (2, 3))
    >>> s.to_dense().tolist(), s[1].indices.tolist()
    ([[0, 0, 5], [6, 0, 0]], [[0]])
    """

    __slots__ = ("indices", "values", "dense_shape")

    def __init__(self, indices: np.ndarray, values: np.ndarray, dense_shape: tuple):
        self.indices = np.asarray(indices, dtype=np.int64).reshape(-1, len(dense_shape))
        self.values = values
        self.dense_shape = tuple(int(d) for d in dense_shape)

    def __len__(self) -> int:
        return self.dense_shape[0]

    def __getitem__(self, i: int) -> "SparseValues":
        """Row ``i`` (the batch dimension dropped), as ``tf.io.parse_single_example`` gives it."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"row {i} out of range for {len(self)} rows")
        i %= len(self)
        sel = self.indices[:, 0] == i
        return SparseValues(self.indices[sel, 1:], self.values[sel], self.dense_shape[1:])

    def __eq__(self, other) -> bool:
        if not isinstance(other, SparseValues):
            return NotImplemented
        return (self.dense_shape == other.dense_shape and np.array_equal(self.indices, other.indices)
                and np.array_equal(self.values, other.values))

    def __repr__(self) -> str:
        return f"SparseValues(indices={self.indices!r}, values={self.values!r}, dense_shape={self.dense_shape})"

    def to_dense(self, default_value=None) -> np.ndarray:
        """A dense array of ``dense_shape`` (``0`` or ``b""`` where no value is set)."""
        if default_value is None:
            default_value = b"" if self.values.dtype == BYTES else 0
        out = np.full(self.dense_shape, default_value, dtype=self.values.dtype)
        out[tuple(self.indices.T)] = self.values
        return out


class RaggedValues:
    """A ``tf.RaggedTensor``'s parts: ``flat_values`` and ``nested_row_splits`` (outermost first).

    >>> r = RaggedValues(np.arange(5), [np.array([0, 2, 2]), np.array([0, 1, 3, 5])])
    >>> r.to_list(), r.ragged_rank, [row.tolist() for row in r[0]]
    ([[[0], [1, 2]], []], 2, [[0], [1, 2]])
    """

    __slots__ = ("flat_values", "nested_row_splits")

    def __init__(self, flat_values: np.ndarray, nested_row_splits):
        self.flat_values = flat_values
        self.nested_row_splits = tuple(np.asarray(s) for s in nested_row_splits)
        if not self.nested_row_splits:
            raise ValueError("a RaggedValues needs at least one row_splits array")

    @property
    def ragged_rank(self) -> int:
        return len(self.nested_row_splits)

    @property
    def row_splits(self) -> np.ndarray:
        return self.nested_row_splits[0]

    def __len__(self) -> int:
        return len(self.nested_row_splits[0]) - 1

    def __getitem__(self, i: int):
        """Row ``i``: a RaggedValues one level down, a VarLenValues, or a flat array."""
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"row {i} out of range for {n} rows")
        i %= n
        start, stop = int(self.nested_row_splits[0][i]), int(self.nested_row_splits[0][i + 1])
        inner = []
        for splits in self.nested_row_splits[1:]:
            sub = splits[start : stop + 1]
            inner.append(sub - sub[0])
            start, stop = int(sub[0]), int(sub[-1])
        values = self.flat_values[start:stop]
        if not inner:
            return values
        if len(inner) == 1:
            return VarLenValues(values, inner[0])
        return RaggedValues(values, inner)

    def __eq__(self, other) -> bool:
        if not isinstance(other, RaggedValues):
            return NotImplemented
        return (self.ragged_rank == other.ragged_rank
                and all(np.array_equal(a, b) for a, b in zip(self.nested_row_splits, other.nested_row_splits))
                and np.array_equal(self.flat_values, other.flat_values))

    def __repr__(self) -> str:
        return f"RaggedValues({self.to_list()!r})"

    def to_list(self) -> list:
        """Nested Python lists, as ``tf.RaggedTensor.to_list()``."""
        out = []
        for i in range(len(self)):
            row = self[i]
            out.append(row.tolist() if isinstance(row, np.ndarray)
                       else [r.tolist() for r in row] if isinstance(row, VarLenValues) else row.to_list())
        return out


# -- assembly from VarLenValues -------------------------------------------------------------------
def parse_fixed_sequence(name: str, feat: FixedLenSequenceFeature, vals: VarLenValues, where) -> np.ndarray:
    """Dense ``(batch, max_len) + shape``, padded with ``feat.default_value``."""
    if not feat.allow_missing:
        raise SpecError(
            f"feature {name!r}: FixedLenSequenceFeature requires allow_missing=True when parsing "
            "Examples (as in tf.io.parse_example); records without the feature give zero items"
        )
    counts = vals.row_lengths
    stride = feat.num_elements
    n = len(counts)
    if stride == 0:
        if counts.any():
            r = int(np.flatnonzero(counts)[0])
            raise SpecError(f"feature {name!r} in record {where(r)}: shape {feat.shape} holds no values "
                            f"but the record has {int(counts[r])}")
        return np.empty((n, 0) + feat.shape, dtype=feat.dtype)
    bad = counts % stride != 0
    if bad.any():
        r = int(np.argmax(bad))
        raise SpecError(
            f"feature {name!r} in record {where(r)}: {int(counts[r])} value(s) is not a multiple of "
            f"the {stride} value(s) of one item of shape {feat.shape}"
        )
    max_len = int(counts.max()) // stride if n else 0
    out = np.full((n, max_len * stride), feat.default_value, dtype=feat.dtype)
    if len(vals.values):
        rows = np.repeat(np.arange(n), counts)
        cols = np.arange(len(vals.values)) - np.repeat(vals.row_splits[:-1], counts)
        out[rows, cols] = vals.values
    return out.reshape((n, max_len) + feat.shape)


def parse_sparse(name: str, feat: SparseFeature, indices: list, vals: VarLenValues, where) -> SparseValues:
    """A SparseValues of dense shape ``(batch,) + size`` from index and value features."""
    counts = vals.row_lengths
    n = len(counts)
    for key, idx in zip(feat.index_keys, indices):
        diff = idx.row_lengths != counts
        if diff.any():
            r = int(np.argmax(diff))
            raise SpecError(
                f"sparse feature {name!r} in record {where(r)}: index feature {key!r} has "
                f"{int(idx.row_lengths[r])} value(s) but value feature {feat.value_key!r} has "
                f"{int(counts[r])}; each value needs exactly one index per dimension"
            )
    for key, idx, size in zip(feat.index_keys, indices, feat.sizes):
        out = (idx.values < 0) | (idx.values >= size)
        if out.any():
            j = int(np.argmax(out))
            r = int(np.searchsorted(idx.row_splits, j, side="right")) - 1
            raise SpecError(
                f"sparse feature {name!r} in record {where(r)}: index {int(idx.values[j])} in "
                f"feature {key!r} is outside [0, {size})"
            )
    rows = np.repeat(np.arange(n, dtype=np.int64), counts)
    coords = [rows] + [idx.values.astype(np.int64) for idx in indices]
    values = vals.values
    if not feat.already_sorted and len(values) > 1:
        order = np.lexsort(tuple(reversed(coords)))
        coords = [c[order] for c in coords]
        values = values[order]
    ind = np.stack(coords, axis=1) if len(values) else np.empty((0, len(coords)), dtype=np.int64)
    return SparseValues(ind, values, (n,) + feat.sizes)


def _partition_splits(p, arr: np.ndarray, count: int) -> np.ndarray:
    """Row splits over ``count`` items for one record's partition tensor ``arr``, validated."""
    if p.is_uniform:
        if count % p.length:
            raise ValueError(f"{count} item(s) do not split into rows of UniformRowLength({p.length})")
        return np.arange(0, count + 1, p.length, dtype=np.int64)
    arr = arr.astype(np.int64, copy=False)
    kind = type(p).__name__
    if isinstance(p, RowSplits):
        if len(arr) == 0:
            splits = np.zeros(1, dtype=np.int64)
        else:
            splits = arr
            if splits[0] != 0:
                raise ValueError(f"{kind} {p.key!r} must start with 0, got {splits.tolist()[:8]}")
    elif isinstance(p, RowLengths):
        if (arr < 0).any():
            raise ValueError(f"{kind} {p.key!r} has a negative length")
        splits = np.concatenate([[0], np.cumsum(arr)])
    elif isinstance(p, RowStarts):
        if len(arr) and arr[0] != 0:
            raise ValueError(f"{kind} {p.key!r} must start with 0, got {arr.tolist()[:8]}")
        splits = np.concatenate([arr, [count]])
    elif isinstance(p, RowLimits):
        splits = np.concatenate([[0], arr])
    elif isinstance(p, ValueRowIds):
        if len(arr) != count:
            raise ValueError(f"{kind} {p.key!r} has {len(arr)} row id(s) for {count} item(s)")
        if (arr < 0).any() or (np.diff(arr) < 0).any():
            raise ValueError(f"{kind} {p.key!r} must be non-negative and non-decreasing")
        nrows = int(arr[-1]) + 1 if count else 0
        splits = np.concatenate([[0], np.cumsum(np.bincount(arr, minlength=nrows))])
    else:  # pragma: no cover - RaggedFeature checks the partition types
        raise TypeError(p)
    if (np.diff(splits) < 0).any():
        raise ValueError(f"{kind} {p.key!r} gives decreasing row splits {splits.tolist()[:8]}")
    if splits[-1] != count:
        raise ValueError(f"{kind} {p.key!r} covers {int(splits[-1])} item(s) but there are {count}")
    return splits


def parse_ragged(name: str, feat: RaggedFeature, vals: VarLenValues, parts: dict, where: Callable):
    """VarLenValues without partitions, else RaggedValues with the batch splits outermost."""
    if not feat.partitions:
        return vals
    n = len(vals)
    per_level: list[list[np.ndarray]] = [[] for _ in feat.partitions]
    outer_rows = np.empty(n, dtype=np.int64)
    for r in range(n):
        count = int(vals.row_splits[r + 1] - vals.row_splits[r])
        levels = []
        for p in reversed(feat.partitions):  # innermost first
            arr = np.empty(0, dtype=np.int64) if p.is_uniform else parts[p.key][r]
            try:
                splits = _partition_splits(p, arr, count)
            except ValueError as e:
                raise SpecError(f"ragged feature {name!r} in record {where(r)}: {e}") from None
            levels.append(splits)
            count = len(splits) - 1
        outer_rows[r] = count
        for k, splits in enumerate(reversed(levels)):
            per_level[k].append(splits)
    nested = [np.concatenate([[0], np.cumsum(outer_rows)])]
    for level in per_level:
        offsets = np.cumsum([0] + [int(s[-1]) for s in level[:-1]])
        nested.append(np.concatenate([[0]] + [s[1:] + o for s, o in zip(level, offsets)]))
    # innermost uniform partitions are dense dimensions of the values, as in tf.RaggedTensor
    inner = []
    for p in reversed(feat.partitions):
        if not p.is_uniform:
            break
        inner.insert(0, p.length)
    flat = vals.values
    if inner:
        nested = nested[: len(nested) - len(inner)]
        flat = flat.reshape((-1,) + tuple(inner))
    return RaggedValues(flat, [s.astype(feat.row_splits_dtype) for s in nested])


def needed_keys(name: str, feat) -> list:
    """``(key, dtype)`` of every Example feature a structured feature reads."""
    if isinstance(feat, FixedLenSequenceFeature):
        return [(name, feat.dtype)]
    if isinstance(feat, SparseFeature):
        return [(k, INT64) for k in feat.index_keys] + [(feat.value_key, feat.dtype)]
    keys = [(feat.value_key or name, feat.dtype)]
    return keys + [(p.key, INT64) for p in feat.partitions if not p.is_uniform]


def assemble(name: str, feat, varlen: Callable, where: Callable):
    """Build one structured feature; ``varlen(key, dtype)`` parses a feature as VarLenValues."""
    if isinstance(feat, FixedLenSequenceFeature):
        return parse_fixed_sequence(name, feat, varlen(name, feat.dtype), where)
    if isinstance(feat, SparseFeature):
        indices = [varlen(k, INT64) for k in feat.index_keys]
        return parse_sparse(name, feat, indices, varlen(feat.value_key, feat.dtype), where)
    parts = {p.key: varlen(p.key, INT64) for p in feat.partitions if not p.is_uniform}
    return parse_ragged(name, feat, varlen(feat.value_key or name, feat.dtype), parts, where)


__all__ = ["RaggedValues", "SparseValues"]
