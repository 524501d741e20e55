"""Blocks: runs of consecutive dataset elements stored column by column.

Every transformation in :mod:`tpudata.dataset` works on :class:`Block` objects instead of single
elements, so per-element Python work is avoided on the hot paths. A block holds a structure
(:class:`~tpudata.dataset.nest.Tree`) and one *leaf column* per structure leaf, each with a
leading dimension of ``n`` elements. Leaf columns are:

- ``np.ndarray`` - element ``i`` is ``leaf[i]`` (object arrays hold bytes or per-element objects
  such as the :class:`VarLenValues` / :class:`RecordColumn` of a batched element);
- :class:`VarLenValues` - ragged rows (a VarLenFeature before batching);
- :class:`RecordColumn` - serialized records still sitting in their read buffers (zero-copy).
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from tpudata.dataset.nest import LEAF, Tree, unflatten
from tpudata.example.parse import VarLenValues
from tpudata.tfrecord.batch import RecordBatch
from tpudata.tfrecord.framing import split


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
    def from_batch(cls, batch: RecordBatch) -> "RecordColumn":
        base = batch.base_offset if batch.framed else None
        return cls([batch.buffer], [(batch.path, base)], None, batch.offsets, batch.lengths)

    @classmethod
    def from_bytes(cls, records: Sequence) -> "RecordColumn":
        return cls.from_batch(RecordBatch.from_records(records))

    def __len__(self) -> int:
        return len(self.offsets)

    def slice(self, i: int, j: int) -> "RecordColumn":
        bi = None if self.buf_idx is None else self.buf_idx[i:j]
        return RecordColumn(self.buffers, self.sources, bi, self.offsets[i:j], self.lengths[i:j])

    def take(self, idx: np.ndarray) -> "RecordColumn":
        bi = None if self.buf_idx is None else self.buf_idx[idx]
        return RecordColumn(self.buffers, self.sources, bi, self.offsets[idx], self.lengths[idx])

    @staticmethod
    def concat(cols: Sequence["RecordColumn"]) -> "RecordColumn":
        if len(cols) == 1:
            return cols[0]
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
                idx_parts.append(np.full(len(c), k, dtype=np.int32))
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
        buf_idx = None if len(buffers) == 1 else np.concatenate(idx_parts)
        return RecordColumn(buffers, sources, buf_idx, np.concatenate([c.offsets for c in cols]),
                            np.concatenate([c.lengths for c in cols]))

    def groups(self) -> Iterator[tuple[RecordBatch, np.ndarray | None]]:
        """``(RecordBatch, positions)`` per buffer (positions None: the whole column, in order)."""
        if self.buf_idx is None:
            yield self._batch(0, self.offsets, self.lengths), None
            return
        for b in np.unique(self.buf_idx).tolist():
            pos = np.flatnonzero(self.buf_idx == b)
            yield self._batch(b, self.offsets[pos], self.lengths[pos]), pos

    def _batch(self, b: int, offsets, lengths) -> RecordBatch:
        path, base = self.sources[b]
        if base is None:
            return RecordBatch(self.buffers[b], offsets, lengths, None, 0, framed=False)
        return RecordBatch(self.buffers[b], offsets, lengths, path, base)

    def to_list(self) -> list[bytes]:
        if self.buf_idx is None:
            return split(self.buffers[0], self.offsets, self.lengths)
        out: list = [None] * len(self)
        for batch, pos in self.groups():
            for p, rec in zip(pos.tolist(), batch.to_list()):
                out[p] = rec
        return out

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


# -- leaf-column operations -----------------------------------------------------------------------
def leaf_len(col) -> int:
    return len(col)


def leaf_slice(col, i: int, j: int):
    if isinstance(col, RecordColumn):
        return col.slice(i, j)
    if isinstance(col, VarLenValues):
        s = col.row_splits
        return VarLenValues(col.values[s[i] : s[j]], s[i : j + 1] - s[i])
    return col[i:j]


def leaf_take(col, idx: np.ndarray):
    if isinstance(col, RecordColumn):
        return col.take(idx)
    if isinstance(col, VarLenValues):
        s = col.row_splits
        lengths = (s[1:] - s[:-1])[idx]
        starts = s[:-1][idx]
        splits = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(lengths, out=splits[1:])
        gather = np.repeat(starts - splits[:-1], lengths) + np.arange(splits[-1], dtype=np.int64)
        return VarLenValues(col.values[gather], splits)
    return col[idx]


def leaf_concat(cols: list):
    first = cols[0]
    if len(cols) == 1:
        return first
    if isinstance(first, RecordColumn):
        if not all(isinstance(c, RecordColumn) for c in cols):
            cols = [c if isinstance(c, RecordColumn) else RecordColumn.from_bytes(list(c)) for c in cols]
        return RecordColumn.concat(cols)
    if isinstance(first, VarLenValues):
        values = np.concatenate([c.values for c in cols])
        splits = [first.row_splits]
        offset = first.row_splits[-1]
        for c in cols[1:]:
            splits.append(c.row_splits[1:] + offset)
            offset += c.row_splits[-1]
        return VarLenValues(values, np.concatenate(splits))
    if any(isinstance(c, RecordColumn) for c in cols):
        return leaf_concat([RecordColumn.from_bytes(list(c)) if not isinstance(c, RecordColumn) else c
                            for c in cols])
    try:
        return np.concatenate(cols)
    except ValueError:  # elements of different shapes: keep them as objects
        out = np.empty(sum(len(c) for c in cols), dtype=object)
        pos = 0
        for c in cols:
            for k in range(len(c)):
                out[pos] = c[k]
                pos += 1
        return out


def leaf_nbytes(col) -> int:
    if isinstance(col, RecordColumn):
        return col.nbytes
    if isinstance(col, VarLenValues):
        return int(col.values.nbytes + col.row_splits.nbytes)
    if col.dtype == object:
        total = 0
        for v in col.ravel()[:64].tolist():
            total += len(v) if isinstance(v, (bytes, str)) else getattr(v, "nbytes", 64)
        return int(total * max(1, col.size) / max(1, min(col.size, 64))) + col.nbytes
    return int(col.nbytes)


def leaf_items(col) -> list:
    """The column's elements as Python/numpy values (what users see)."""
    if isinstance(col, RecordColumn):
        return col.to_list()
    if isinstance(col, VarLenValues):
        return col.to_list()
    if col.dtype == object:
        if col.ndim == 1:
            return [materialize(v) for v in col.tolist()]
        return [col[i] for i in range(len(col))]  # e.g. a batch of bytes: an object array
    return list(col)


def materialize(value):
    """The user-facing form of a per-element object stored in an object column."""
    if isinstance(value, RecordColumn):
        return value.to_array()
    return value


def leaf_compact(col):
    """Copy records out of read buffers; other columns are already compact."""
    if isinstance(col, RecordColumn):
        return col.to_array()
    return col


def as_column(values: list):
    """Stack per-element values into a column: an array when shapes and dtypes agree."""
    if not values:
        return np.empty(0, dtype=object)
    first = values[0]
    if isinstance(first, (bytes, str)) or isinstance(first, (RecordColumn, VarLenValues)):
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    try:
        arrs = [np.asarray(v) for v in values]
    except (ValueError, TypeError):
        arrs = None
    if arrs is not None and arrs[0].dtype != object:
        shape, dtype = arrs[0].shape, arrs[0].dtype
        if all(a.shape == shape and a.dtype == dtype for a in arrs):
            return np.stack(arrs) if shape else np.array(arrs, dtype=dtype)
    out = np.empty(len(values), dtype=object)
    for k, v in enumerate(values):
        out[k] = v
    return out


class Origin:
    """Where each element of a block came from: a TFRecord frame in a plain (uncompressed) file.

    ``kind`` is "records" (the element is the record) or "parsed" (the element is the record
    parsed by the op that made the block). ``paths[pid[i]]`` and ``offsets[i]`` locate element
    ``i``'s frame, so a shuffle checkpoint can name elements instead of carrying them.
    """

    __slots__ = ("kind", "paths", "pid", "offsets")

    def __init__(self, kind: str, paths: tuple, pid: np.ndarray, offsets: np.ndarray):
        self.kind, self.paths, self.pid, self.offsets = kind, paths, pid, offsets

    @classmethod
    def of_batch(cls, batch: RecordBatch) -> "Origin":
        n = len(batch)
        return cls("records", (batch.path,), np.zeros(n, np.int32),
                   np.asarray(batch.record_offsets, dtype=np.int64))

    def with_kind(self, kind: str) -> "Origin":
        return Origin(kind, self.paths, self.pid, self.offsets)

    def slice(self, i: int, j: int) -> "Origin":
        return Origin(self.kind, self.paths, self.pid[i:j], self.offsets[i:j])

    def take(self, idx) -> "Origin":
        return Origin(self.kind, self.paths, self.pid[idx], self.offsets[idx])

    @staticmethod
    def concat(origins: list) -> "Origin | None":
        if any(o is None for o in origins) or len({o.kind for o in origins}) != 1:
            return None
        first = origins[0].paths
        if all(o.paths is first for o in origins):  # one set of files
            return Origin(origins[0].kind, first, np.concatenate([o.pid for o in origins]),
                          np.concatenate([o.offsets for o in origins]))
        paths: list = []
        where: dict = {}
        pids = []
        for o in origins:
            if len(o.paths) == 1:
                p = o.paths[0]
                if p not in where:
                    where[p] = len(paths)
                    paths.append(p)
                pids.append(np.full(len(o.pid), where[p], np.int32))
                continue
            remap = np.empty(len(o.paths), np.int32)
            for k, p in enumerate(o.paths):
                if p not in where:
                    where[p] = len(paths)
                    paths.append(p)
                remap[k] = where[p]
            pids.append(remap[o.pid])
        return Origin(origins[0].kind, tuple(paths), np.concatenate(pids),
                      np.concatenate([o.offsets for o in origins]))


class Block:
    """``n`` consecutive elements of structure ``tree``, one column per leaf.

    ``origin`` (optional :class:`Origin`) says which file frames the elements came from.
    """

    __slots__ = ("tree", "leaves", "n", "origin")

    def __init__(self, tree: Tree, leaves: list, n: int | None = None, origin: Origin | None = None):
        self.tree = tree
        self.leaves = leaves
        self.n = leaf_len(leaves[0]) if n is None else n
        self.origin = origin

    @classmethod
    def of_records(cls, batch: RecordBatch, plain_file: bool = False) -> "Block":
        """The batch's records; ``plain_file``: they sit in an uncompressed TFRecord file."""
        origin = Origin.of_batch(batch) if plain_file and batch.framed and batch.path else None
        return cls(LEAF, [RecordColumn.from_batch(batch)], len(batch), origin)

    @classmethod
    def from_elements(cls, tree: Tree, rows: list[list]) -> "Block":
        """From per-element flattened leaves (``rows[i]`` = leaves of element i)."""
        cols = [as_column([r[k] for r in rows]) for k in range(tree.num_leaves)]
        return cls(tree, cols, len(rows))

    def __len__(self) -> int:
        return self.n

    def slice(self, i: int, j: int) -> "Block":
        j = min(j, self.n)
        if i == 0 and j == self.n:
            return self
        origin = None if self.origin is None else self.origin.slice(i, j)
        return Block(self.tree, [leaf_slice(c, i, j) for c in self.leaves], max(0, j - i), origin)

    def take(self, idx: np.ndarray) -> "Block":
        origin = None if self.origin is None else self.origin.take(idx)
        return Block(self.tree, [leaf_take(c, idx) for c in self.leaves], len(idx), origin)

    @staticmethod
    def concat(blocks: list["Block"]) -> "Block":
        blocks = [b for b in blocks if b.n] or blocks[:1]
        if len(blocks) == 1:
            return blocks[0]
        tree = blocks[0].tree
        for b in blocks[1:]:
            if b.tree != tree:
                raise ValueError(f"elements change structure: {tree} then {b.tree}")
        cols = [leaf_concat([b.leaves[k] for b in blocks]) for k in range(len(blocks[0].leaves))]
        return Block(tree, cols, sum(b.n for b in blocks), Origin.concat([b.origin for b in blocks]))

    def compact(self) -> "Block":
        return Block(self.tree, [leaf_compact(c) for c in self.leaves], self.n)

    @property
    def nbytes(self) -> int:
        return sum(leaf_nbytes(c) for c in self.leaves)

    def elements(self) -> Iterator:
        """The block's elements as user-facing structures."""
        if self.tree.kind == "leaf":
            yield from leaf_items(self.leaves[0])
            return
        cols = [leaf_items(c) for c in self.leaves]
        for row in zip(*cols):
            yield unflatten(self.tree, row)

    def element(self, i: int):
        return next(iter(self.slice(i, i + 1).elements()))

    def __repr__(self) -> str:
        return f"<Block of {self.n} elements {self.tree}>"
