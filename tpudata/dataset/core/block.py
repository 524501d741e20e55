"""Blocks: runs of consecutive dataset elements stored column by column.

Transformations that do not run user code work on :class:`Block` objects instead of single
elements, so per-element Python work is avoided on the hot paths. A block holds a structure
(:class:`~tpudata.dataset.core.nest.Tree`) and one *leaf column* per structure leaf, each with a
leading dimension of ``n`` elements; the column kinds and their operations are in
:mod:`tpudata.dataset.core.columns`. A block is an optimisation: no state depends on how elements
are split into blocks.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from tpudata import _outpool
from tpudata.dataset.core.columns import (
    RecordColumn, leaf_compact, leaf_concat, leaf_items, leaf_len, leaf_nbytes, leaf_slice,
    leaf_take, materialize,
)
from tpudata.dataset.core.deferred import Deferred
from tpudata.dataset.core.nest import LEAF, Tree, unflatten
from tpudata.example.parse import VarLenValues
from tpudata.tfrecord.batch import RecordBatch


def as_column(values: list, copy: bool = True):
    """Stack per-element values into a column: an array when shapes and dtypes agree.

    ``copy=False``: a single array value becomes a view with a leading axis (no ``np.stack``
    copy), e.g. a whole batch that a batch-level ``map`` function returned.
    """
    if not values:
        return np.empty(0, dtype=object)
    first = values[0]
    if not copy and len(values) == 1 and type(first) is np.ndarray and first.dtype != object:
        return first[None]
    if isinstance(first, (bytes, str)):
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    if isinstance(first, (RecordColumn, VarLenValues, Deferred)):  # kept as they are: a slice assignment
        out = np.empty(len(values), dtype=object)  # would copy array-likes (BytesColumn) out
        for k, v in enumerate(values):
            out[k] = v
        return out
    try:
        arrs = [np.asarray(v) for v in values]
    except (ValueError, TypeError):
        arrs = None
    if arrs is not None and arrs[0].dtype != object:
        shape, dtype = arrs[0].shape, arrs[0].dtype
        if all(a.shape == shape and a.dtype == dtype for a in arrs):
            return _outpool.stack(arrs) if shape else np.array(arrs, dtype=dtype)
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
    def from_elements(cls, tree: Tree, rows: list[list], copy: bool = True) -> "Block":
        """From per-element flattened leaves (``rows[i]`` = leaves of element i); ``copy=False``:
        a block of one element keeps its arrays as they are (see :func:`as_column`)."""
        cols = [as_column([r[k] for r in rows], copy) for k in range(tree.num_leaves)]
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


__all__ = ["Block", "Origin", "RecordColumn", "as_column", "leaf_compact", "leaf_concat",
           "leaf_items", "leaf_len", "leaf_nbytes", "leaf_slice", "leaf_take", "materialize"]
