"""Block columns behind one protocol.

A leaf column of a :class:`~tpudata.dataset.core.block.Block` holds ``n`` elements along its first
axis. Three kinds exist, each with a :class:`ColumnOps` implementation found by the column's
type (no ``isinstance`` switches in the ops):

- ``np.ndarray`` - element ``i`` is ``col[i]`` (object arrays hold bytes or per-element objects
  such as the :class:`VarLenValues` / :class:`RecordColumn` of a batched element);
- :class:`VarLenValues` - ragged rows (a VarLenFeature before batching);
- :class:`RecordColumn` - serialized records still sitting in their read buffers (zero-copy);
  its subclass :class:`BytesColumn` holds a parsed bytes feature the same way, and is what users
  see for that feature after ``batch`` (a read-only array of bytes that can go to C as views).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tpudata import _outpool
from tpudata.example.parse import VarLenValues
from tpudata.tfrecord.batch import MultiBatch, RecordBatch


class RecordColumn:
    """Records ``buffers[buf_idx[i]][offsets[i]:offsets[i] + lengths[i]]`` (bytes elements).

    ``buf_idx`` is ``None`` when every record is in ``buffers[0]``. ``sources`` holds, per buffer,
    ``(path, base_offset)`` so parse errors can name the file and offset.
    """

    __slots__ = ("buffers", "sources", "buf_idx", "offsets", "lengths")

    def __init__(self, buffers, sources, buf_idx, offsets, lengths):
        self.buffers = buffers
        self.sources = sources
        self.buf_idx = buf_idx
        self.offsets = offsets
        self.lengths = lengths

    @classmethod
    def from_batch(cls, batch: RecordBatch | MultiBatch) -> "RecordColumn":
        if isinstance(batch, MultiBatch):
            return cls(list(batch.buffers), batch.sources, batch.bidx, batch.offsets,
                       batch.lengths)
        base = batch.base_offset if batch.framed else None
        return cls([batch.buffer], [(batch.path, base)], None, batch.offsets, batch.lengths)

    @classmethod
    def from_bytes(cls, records: Sequence) -> "RecordColumn":
        return cls.from_batch(RecordBatch.from_records(records))

    def __len__(self) -> int:
        return len(self.offsets)

    def slice(self, i: int, j: int) -> "RecordColumn":
        bi = None if self.buf_idx is None else self.buf_idx[i:j]
        return type(self)(self.buffers, self.sources, bi, self.offsets[i:j], self.lengths[i:j])

    def take(self, idx: np.ndarray) -> "RecordColumn":
        bi = None if self.buf_idx is None else self.buf_idx[idx]
        return type(self)(self.buffers, self.sources, bi, self.offsets[idx], self.lengths[idx])

    @staticmethod
    def concat(cols: Sequence["RecordColumn"]) -> "RecordColumn":
        if len(cols) == 1:
            return cols[0]
        # a parsed bytes feature stays one (e.g. padded by batch with b"" rows)
        cls = BytesColumn if any(isinstance(c, BytesColumn) for c in cols) else RecordColumn
        buffers: list = []
        sources: list = []
        where: dict = {}
        idx_parts = []
        for c in cols:
            if c.buf_idx is None:  # the common case: one buffer
                key = id(c.buffers[0])
                k = where.get(key)
                if k is None:
                    k = where[key] = len(buffers)
                    buffers.append(c.buffers[0])
                    sources.append(c.sources[0])
                idx_parts.append((k, len(c)))  # expanded below, all at once when possible
                continue
            remap = np.empty(len(c.buffers), dtype=np.int32)
            for k, (buf, src) in enumerate(zip(c.buffers, c.sources)):
                key = id(buf)
                if key not in where:
                    where[key] = len(buffers)
                    buffers.append(buf)
                    sources.append(src)
                remap[k] = where[key]
            idx_parts.append(remap[c.buf_idx])
        if len(buffers) == 1:
            buf_idx = None
        elif all(type(p) is tuple for p in idx_parts):  # one buffer per part: one repeat
            ks, ns = zip(*idx_parts)
            buf_idx = np.repeat(np.array(ks, dtype=np.int32), ns)
        else:
            buf_idx = np.concatenate([np.full(p[1], p[0], dtype=np.int32) if type(p) is tuple
                                      else p for p in idx_parts])
        return cls(buffers, sources, buf_idx, np.concatenate([c.offsets for c in cols]),
                   np.concatenate([c.lengths for c in cols]))

    def as_batch(self) -> RecordBatch | MultiBatch:
        """The records for one pass: a RecordBatch of the one buffer, else a MultiBatch."""
        if self.buf_idx is None:
            return RecordBatch.of_source(self.buffers[0], self.sources[0], self.offsets, self.lengths)
        return MultiBatch(self.buffers, self.buf_idx, self.offsets, self.lengths, self.sources)

    def to_list(self) -> list[bytes]:
        return self.as_batch().to_list()

    def packed(self) -> np.ndarray:
        """The values back to back in one new uint8 array (``lengths`` cut it)."""
        lengths = np.asarray(self.lengths, dtype=np.int64)
        if not len(lengths) or int(lengths.sum()) < 64 * len(lengths):  # small values: C splits, one join
            return np.frombuffer(b"".join(self.to_list()), dtype=np.uint8)
        starts = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=starts[1:])
        out = np.empty(int(starts[-1]), dtype=np.uint8)
        self.copy_to(out, starts)
        return out

    def copy_to(self, dst: np.ndarray, starts: np.ndarray) -> None:
        """Copy value ``i`` to ``dst[starts[i]:starts[i] + lengths[i]]`` (uint8, no bytes objects)."""
        srcs = [np.frombuffer(b, dtype=np.uint8) for b in self.buffers]
        which = [0] * len(self.lengths) if self.buf_idx is None else self.buf_idx.tolist()
        for b, o, s, n in zip(which, starts.tolist(), self.offsets.tolist(), self.lengths.tolist()):
            if n:
                dst[o : o + n] = srcs[b][s : s + n]

    def __reduce__(self):
        """Pickles as its values packed in one array (an out-of-band buffer under protocol 5),
        never as the read buffers they sit in."""
        return (_unpack_column, (type(self), self.packed(), np.asarray(self.lengths, np.int64)))

    def to_array(self) -> np.ndarray:
        arr = np.empty(len(self), dtype=object)
        if len(self):
            arr[:] = self.to_list()
        return arr

    def compact(self) -> "RecordColumn":
        """A copy in one new buffer, so the (large) read buffers can be freed."""
        return RecordColumn.from_bytes(self.to_list())

    @property
    def nbytes(self) -> int:
        return int(self.lengths.sum())

    def __repr__(self) -> str:
        return f"<RecordColumn of {len(self)} records in {len(self.buffers)} buffer(s)>"


def _unpack_column(cls, flat: np.ndarray, lengths: np.ndarray) -> RecordColumn:
    offsets = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        np.cumsum(lengths[:-1], out=offsets[1:])
    return cls([flat], [(None, None)], None, offsets, lengths)


class BytesColumn(RecordColumn):
    """A batch of a parsed bytes feature, still in the read buffers: a read-only 1-d array of bytes.

    ``parse`` makes one for a scalar bytes ``FixedLenFeature`` that holds most of each record
    (e.g. ``image/encoded``), and ``batch`` keeps it, so a batch-level op such as
    :func:`tpudata.image.resnet_preprocess_batch` reads each value in place (no bytes object per
    value). Indexing gives ``bytes``; ``np.asarray``/``tolist()`` copy out. A ``shuffle`` keeps
    it one where the values are large (its buffer holds them where they are, see
    ``ops/shuffle_store.py``); small values come out of a shuffle as a plain object array.

    >>> col = BytesColumn.from_bytes([b"ab", b"cde"])
    >>> col[1], len(col), col.shape, col.tolist(), np.asarray(col).dtype
    (b'cde', 2, (2,), [b'ab', b'cde'], dtype('O'))
    """

    __slots__ = ()
    dtype = np.dtype(object)
    ndim = 1

    @property
    def shape(self) -> tuple:
        return (len(self),)

    @property
    def size(self) -> int:
        return len(self)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.take(np.arange(len(self))[i])
        if isinstance(i, (int, np.integer)):
            k = int(i) + len(self) if i < 0 else int(i)
            if not 0 <= k < len(self):
                raise IndexError(f"index {i} is out of bounds for a column of {len(self)}")
            b = 0 if self.buf_idx is None else int(self.buf_idx[k])
            o = int(self.offsets[k])
            return bytes(memoryview(self.buffers[b]).cast("B")[o : o + int(self.lengths[k])])
        idx = np.asarray(i)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        return self.take(idx.astype(np.int64))

    def __iter__(self):
        return iter(self.to_list())

    def tolist(self) -> list[bytes]:
        return self.to_list()

    def __array__(self, dtype=None, copy=None):
        arr = self.to_array()
        return arr if dtype is None else arr.astype(dtype)

    def __eq__(self, other):
        return np.asarray(self) == (np.asarray(other) if isinstance(other, BytesColumn) else other)

    def __ne__(self, other):
        return np.logical_not(self.__eq__(other))

    __hash__ = None  # type: ignore[assignment]

    def views(self) -> tuple[list, np.ndarray | None, np.ndarray, np.ndarray]:
        """``(buffers, buf_idx, offsets, lengths)``: value ``i`` is
        ``buffers[buf_idx[i] or 0][offsets[i]:offsets[i] + lengths[i]]`` (for C kernels)."""
        return self.buffers, self.buf_idx, self.offsets, self.lengths

    def __repr__(self) -> str:
        head = ", ".join(repr(v if len(v) <= 16 else v[:16] + b"...") for v in self[:3].tolist())
        more = ", ..." if len(self) > 3 else ""
        return f"BytesColumn([{head}{more}], n={len(self)})"


class ColumnOps:
    """What the engine does with a leaf column (one implementation per column kind)."""

    @staticmethod
    def slice(col, i: int, j: int):
        raise NotImplementedError

    @staticmethod
    def take(col, idx: np.ndarray):
        raise NotImplementedError

    @staticmethod
    def concat(cols: list):
        raise NotImplementedError

    @staticmethod
    def nbytes(col) -> int:
        raise NotImplementedError

    @staticmethod
    def items(col) -> list:
        """The elements as user-facing values."""
        raise NotImplementedError

    @staticmethod
    def compact(col):
        """A copy that holds no read buffers (for caches)."""
        return col


class _RecordOps(ColumnOps):
    @staticmethod
    def slice(col, i, j):
        return col.slice(i, j)

    @staticmethod
    def take(col, idx):
        return col.take(idx)

    @staticmethod
    def concat(cols):
        return RecordColumn.concat([c if isinstance(c, RecordColumn) else RecordColumn.from_bytes(list(c))
                                    for c in cols])

    @staticmethod
    def nbytes(col):
        return col.nbytes

    @staticmethod
    def items(col):
        return col.to_list()

    @staticmethod
    def compact(col):
        return col.to_array()


class _VarLenOps(ColumnOps):
    @staticmethod
    def slice(col, i, j):
        s = col.row_splits
        return VarLenValues(col.values[s[i] : s[j]], s[i : j + 1] - s[i])

    @staticmethod
    def take(col, idx):
        s = col.row_splits
        lengths = (s[1:] - s[:-1])[idx]
        starts = s[:-1][idx]
        splits = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(lengths, out=splits[1:])
        gather = np.repeat(starts - splits[:-1], lengths) + np.arange(splits[-1], dtype=np.int64)
        return VarLenValues(col.values[gather], splits)

    @staticmethod
    def concat(cols):
        first = cols[0]
        values = np.concatenate([c.values for c in cols])
        splits = [first.row_splits]
        offset = first.row_splits[-1]
        for c in cols[1:]:
            splits.append(c.row_splits[1:] + offset)
            offset += c.row_splits[-1]
        return VarLenValues(values, np.concatenate(splits))

    @staticmethod
    def nbytes(col):
        return int(col.values.nbytes + col.row_splits.nbytes)

    @staticmethod
    def items(col):
        return col.to_list()


class _ArrayOps(ColumnOps):
    @staticmethod
    def slice(col, i, j):
        return col[i:j]

    @staticmethod
    def take(col, idx):
        return col[idx]

    @staticmethod
    def concat(cols):
        try:
            return _outpool.concatenate(cols)
        except ValueError:  # elements of different shapes: keep them as objects
            out = np.empty(sum(len(c) for c in cols), dtype=object)
            pos = 0
            for c in cols:
                for k in range(len(c)):
                    out[pos] = c[k]
                    pos += 1
            return out

    @staticmethod
    def nbytes(col):
        if col.dtype == object:
            total = 0
            for v in col.ravel()[:64].tolist():
                total += len(v) if isinstance(v, (bytes, str)) else getattr(v, "nbytes", 64)
            return int(total * max(1, col.size) / max(1, min(col.size, 64))) + col.nbytes
        return int(col.nbytes)

    @staticmethod
    def items(col):
        if col.dtype == object:
            if col.ndim == 1:
                return [materialize(v) for v in col.tolist()]
            return [col[i] for i in range(len(col))]  # e.g. a batch of bytes: an object array
        return list(col)


_OPS: dict = {RecordColumn: _RecordOps, VarLenValues: _VarLenOps, np.ndarray: _ArrayOps}


def column_ops(col) -> type[ColumnOps]:
    """The :class:`ColumnOps` of a column (by type)."""
    ops = _OPS.get(type(col))
    if ops is None:
        for kind, found in _OPS.items():
            if isinstance(col, kind):
                return found
        raise TypeError(f"not a block column: {type(col).__name__}")
    return ops


def materialize(value):
    """The user-facing form of a per-element object stored in an object column."""
    if isinstance(value, BytesColumn):
        return value
    if isinstance(value, RecordColumn):
        return value.to_array()
    return value


# -- the engine's column operations ----------------------------------------------------------------
def leaf_len(col) -> int:
    return len(col)


def leaf_slice(col, i: int, j: int):
    return column_ops(col).slice(col, i, j)


def leaf_take(col, idx: np.ndarray):
    return column_ops(col).take(col, idx)


def leaf_concat(cols: list):
    if len(cols) == 1:
        return cols[0]
    kinds = {column_ops(c) for c in cols}
    ops = _RecordOps if _RecordOps in kinds else column_ops(cols[0])  # records absorb bytes
    return ops.concat(cols)


def leaf_nbytes(col) -> int:
    return column_ops(col).nbytes(col)


def leaf_items(col) -> list:
    """The column's elements as Python/numpy values (what users see)."""
    return column_ops(col).items(col)


def leaf_compact(col):
    """Copy records out of read buffers; other columns are already compact."""
    return column_ops(col).compact(col)


__all__ = ["BytesColumn", "ColumnOps", "RecordColumn", "column_ops", "leaf_compact", "leaf_concat", "leaf_items",
           "leaf_len", "leaf_nbytes", "leaf_slice", "leaf_take", "materialize"]
