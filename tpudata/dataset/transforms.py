"""Element-wise transformations: shard, take, skip, repeat, map, filter, parse, zip."""

from __future__ import annotations

import collections
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from tpudata.dataset.base import INFINITE, UNKNOWN, BlockIterator, Cursor, Dataset
from tpudata.dataset.block import Block, RecordColumn, leaf_take
from tpudata.dataset.nest import Tree, flatten
from tpudata.example.batching import concat_parsed
from tpudata.example.parse import parse_examples
from tpudata.example.spec import normalize_spec

logger = logging.getLogger(__name__)

AUTOTUNE = -1
FEW_FILES_PER_HOST = 10


def _threads(n: int | None) -> int:
    if n is None:
        return 0
    return (os.cpu_count() or 2) if n == AUTOTUNE else max(0, int(n))


class _Unary(Dataset):
    def __init__(self, input_ds: Dataset):
        super().__init__()
        if not isinstance(input_ds, Dataset):
            raise TypeError(f"expected a Dataset, got {type(input_ds).__name__}")
        self.input = input_ds


class _CursorIterator(BlockIterator):
    """Base for iterators that read their input through a Cursor plus a few counters."""

    counters: tuple = ()

    def __init__(self, input_it: BlockIterator):
        self.input_it = input_it
        self.cursor = Cursor(input_it)

    def get_state(self):
        return {"cursor": self.cursor.get_state(), **{k: getattr(self, k) for k in self.counters}}

    def set_state(self, state):
        self.cursor.set_state(state["cursor"])
        for k in self.counters:
            setattr(self, k, type(getattr(self, k))(state[k]))

    def close(self):
        self.input_it.close()


# -- shard / take / skip --------------------------------------------------------------------------
class ShardDataset(_Unary):
    def __init__(self, input_ds, num_shards: int, index: int):
        super().__init__(input_ds)
        num_shards, index = int(num_shards), int(index)
        if num_shards < 1 or not 0 <= index < num_shards:
            raise ValueError(f"shard index must be in [0, {num_shards}), got {index}")
        self.num_shards, self.index = num_shards, index
        files = getattr(input_ds, "files", None)
        if files is not None:
            mine = len(range(index, len(files), num_shards))
            if mine < FEW_FILES_PER_HOST:
                logger.warning(
                    "shard %d of %d gets %d of %d files; with fewer than ~%d files per host, "
                    "shuffling and parallel reads are coarse - write more, smaller shards",
                    index, num_shards, mine, len(files), FEW_FILES_PER_HOST)

    def _make_iterator(self, ctx):
        it = _ShardIterator(self.input._make_iterator(ctx))
        it.n, it.i = self.num_shards, self.index
        return it

    def cardinality(self):
        c = self.input.cardinality()
        return c if c < 0 else len(range(self.index, c, self.num_shards))


class _ShardIterator(_CursorIterator):
    counters = ("seen",)

    def __init__(self, input_it):
        super().__init__(input_it)
        self.seen = 0

    def next(self):
        while True:
            block = self.cursor.next_block()
            if block is None:
                return None
            first = (self.i - self.seen) % self.n
            self.seen += block.n
            idx = np.arange(first, block.n, self.n)
            if len(idx):
                return block.take(idx)


class TakeDataset(_Unary):
    def __init__(self, input_ds, count: int):
        super().__init__(input_ds)
        self.count = int(count)

    def _make_iterator(self, ctx):
        it = _TakeIterator(self.input._make_iterator(ctx))
        it.remaining = self.count if self.count >= 0 else -1
        return it

    def cardinality(self):
        c = self.input.cardinality()
        if self.count < 0:
            return c
        return self.count if c in (INFINITE, UNKNOWN) and c == INFINITE else (
            min(c, self.count) if c >= 0 else UNKNOWN)


class _TakeIterator(_CursorIterator):
    counters = ("remaining",)
    remaining = 0

    def next(self):
        if self.remaining == 0:
            return None
        block = self.cursor.next_block(None if self.remaining < 0 else self.remaining)
        if block is not None and self.remaining > 0:
            self.remaining -= block.n
        return block


class SkipDataset(_Unary):
    def __init__(self, input_ds, count: int):
        super().__init__(input_ds)
        self.count = int(count)

    def _make_iterator(self, ctx):
        it = _SkipIterator(self.input._make_iterator(ctx))
        it.to_skip = self.count if self.count >= 0 else 1 << 62
        return it

    def cardinality(self):
        c = self.input.cardinality()
        return max(0, c - self.count) if c >= 0 and self.count >= 0 else c


class _SkipIterator(_CursorIterator):
    counters = ("to_skip",)
    to_skip = 0

    def next(self):
        while self.to_skip > 0:
            block = self.cursor.next_block(self.to_skip)
            if block is None:
                return None
            self.to_skip -= block.n
        return self.cursor.next_block()


# -- repeat ---------------------------------------------------------------------------------------
class RepeatDataset(_Unary):
    def __init__(self, input_ds, count: int | None):
        super().__init__(input_ds)
        self.count = -1 if count is None else int(count)

    def _make_iterator(self, ctx):
        return _RepeatIterator(self.input, ctx, self.count)

    def cardinality(self):
        c = self.input.cardinality()
        if self.count < 0:
            return 0 if c == 0 else INFINITE
        return c * self.count if c >= 0 else c


class _RepeatIterator(BlockIterator):
    def __init__(self, input_ds, ctx, count):
        self.input_ds, self.ctx, self.count = input_ds, ctx, count
        self.epoch = 0
        self.produced = False
        self.it = input_ds._make_iterator(ctx.child(0)) if count != 0 else None

    def next(self):
        while self.it is not None:
            block = self.it.next()
            if block is not None:
                self.produced = True
                return block
            self.it.close()
            if not self.produced:  # an empty epoch: repeating forever would never end
                self.it = None
                return None
            self.epoch += 1
            self.produced = False
            if 0 <= self.count <= self.epoch:
                self.it = None
                return None
            self.it = self.input_ds._make_iterator(self.ctx.child(self.epoch))
        return None

    def get_state(self):
        return {"epoch": self.epoch, "produced": self.produced,
                "input": None if self.it is None else self.it.get_state()}

    def set_state(self, state):
        self.close()
        self.epoch, self.produced = int(state["epoch"]), bool(state["produced"])
        if state["input"] is None:
            self.it = None
            return
        self.it = self.input_ds._make_iterator(self.ctx.child(self.epoch))
        self.it.set_state(state["input"])

    def close(self):
        if self.it is not None:
            self.it.close()


# -- ordered parallel block processing ------------------------------------------------------------
class _BlockMapIterator(BlockIterator):
    """Applies ``fn(block) -> Block | None`` to each input block, optionally on a thread pool,
    keeping the input order. State is the input's position after the last block returned."""

    def __init__(self, input_it: BlockIterator, fn: Callable, threads: int):
        self.input_it = input_it
        self.fn = fn
        self.threads = threads
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="tpudata-map") if threads else None
        self.pending: collections.deque = collections.deque()
        self.input_done = False

    def _submit(self) -> bool:
        if self.input_done:
            return False
        before = self.input_it.get_state()
        block = self.input_it.next()
        if block is None:
            self.input_done = True
            return False
        fut = self.pool.submit(self.fn, block) if self.pool else None
        self.pending.append((before, fut, block))
        return True

    def next(self):
        while True:
            if self.pool is None:
                if not self._submit():
                    return None
                _, _, block = self.pending.popleft()
                out = self.fn(block)
            else:
                while len(self.pending) < self.threads + 1 and self._submit():
                    pass
                if not self.pending:
                    return None
                _, fut, _ = self.pending.popleft()
                out = fut.result()
            if out is not None and out.n:
                return out

    def get_state(self):
        if self.pending:
            return self.pending[0][0]
        return self.input_it.get_state()

    def set_state(self, state):
        self._drain()
        self.input_done = False
        self.input_it.set_state(state)

    def _drain(self):
        for _, fut, _ in self.pending:
            if fut is not None:
                fut.cancel()
        for _, fut, _ in self.pending:
            if fut is not None and not fut.cancelled():
                try:
                    fut.result()
                except Exception:  # discarded work
                    pass
        self.pending.clear()

    def close(self):
        self._drain()
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
        self.input_it.close()


# -- parse ----------------------------------------------------------------------------------------
def _records_leaf(block: Block):
    if block.tree.kind != "leaf":
        raise TypeError(
            f"parse() needs serialized tf.train.Example records as elements, got {block.tree}; "
            "parse before building tuples/dicts")
    return block.leaves[0]


def _parse_column(col, spec: dict, base_row: int) -> dict:
    """Parse a column of records (RecordColumn or array of bytes) into per-record features."""
    if not isinstance(col, RecordColumn):
        if len(col) and not isinstance(col.ravel()[0], (bytes, bytearray, memoryview)):
            raise TypeError(f"parse() needs bytes elements, got {type(col.ravel()[0]).__name__}")
        col = RecordColumn.from_bytes(list(col))
    parts, positions = [], []
    for batch, pos in col.groups():
        parts.append(parse_examples(batch, spec, base_row=base_row))
        positions.append(pos)
    if positions[0] is None:
        return parts[0]
    merged = concat_parsed(parts)
    order = np.argsort(np.concatenate(positions), kind="stable")
    return {k: leaf_take(v, order) for k, v in merged.items()}


class ParseDataset(_Unary):
    def __init__(self, input_ds, features, num_parallel_calls=None):
        super().__init__(input_ds)
        self.spec = normalize_spec(features)
        self.threads = _threads(num_parallel_calls)
        self.tree, _ = flatten({k: 0 for k in self.spec})

    def _parse_block(self, block: Block) -> Block:
        col = _records_leaf(block)
        bytes_like = (bytes, bytearray, memoryview)
        if isinstance(col, RecordColumn) or (
            isinstance(col, np.ndarray) and col.dtype == object and col.ndim == 1
            and (not len(col) or isinstance(col[0], bytes_like))
        ):
            parsed = _parse_column(col, self.spec, 0)
            origin = None if block.origin is None else block.origin.with_kind("parsed")
            return Block(self.tree, [parsed[k] for k in self.tree.keys], block.n, origin)
        if not (isinstance(col, np.ndarray) and col.dtype == object):
            raise TypeError(
                f"parse() needs serialized tf.train.Example records (bytes) as elements, not "
                f"{getattr(col, 'dtype', type(col).__name__)} values")
        # elements are batches of records: parse each batch whole
        rows = []
        for element in (col[i] for i in range(len(col))):
            parsed = _parse_column(element if isinstance(element, RecordColumn) else np.asarray(element),
                                   self.spec, 0)
            rows.append([parsed[k] for k in self.tree.keys])
        return Block.from_elements(self.tree, rows)

    def _make_iterator(self, ctx):
        return _BlockMapIterator(self.input._make_iterator(ctx), self._parse_block, self.threads)

    def cardinality(self):
        return self.input.cardinality()


def parse_dataset(input_ds: Dataset, features, num_parallel_calls=None) -> Dataset:
    """``input.parse(features)``; parsing moves ahead of a directly preceding shuffle.

    Shuffling decides its order from element counts only, so shuffle-then-parse and
    parse-then-shuffle give identical elements; parsing first keeps compact arrays (not raw read
    buffers) in the shuffle buffer.
    """
    from tpudata.dataset.shuffle import ShuffleDataset

    if isinstance(input_ds, ShuffleDataset):
        inner = parse_dataset(input_ds.input, features, num_parallel_calls)
        return ShuffleDataset(inner, input_ds.buffer_size, input_ds.seed,
                              input_ds.reshuffle_each_iteration)
    return ParseDataset(input_ds, features, num_parallel_calls)


# -- zip ------------------------------------------------------------------------------------------
class ZipDataset(Dataset):
    def __init__(self, datasets):
        super().__init__()
        self.tree, self.datasets = flatten(datasets)
        if not self.datasets or not all(isinstance(d, Dataset) for d in self.datasets):
            raise TypeError("zip() needs a (nested) tuple or dict of Datasets")

    def _make_iterator(self, ctx):
        return _ZipIterator([d._make_iterator(ctx.child(k)) for k, d in enumerate(self.datasets)],
                            self.tree)

    def cardinality(self):
        cards = [d.cardinality() for d in self.datasets]
        finite = [c for c in cards if c >= 0]
        if finite:
            return min(finite)
        return UNKNOWN if UNKNOWN in cards else INFINITE


class _ZipIterator(BlockIterator):
    def __init__(self, its, tree):
        self.its = its
        self.cursors = [Cursor(it) for it in its]
        self.tree = tree

    def next(self):
        n = min(c.available() for c in self.cursors)
        if n == 0:
            return None
        parts = [c.next_block(n) for c in self.cursors]
        leaves = []
        trees = []
        for p in parts:
            trees.append(p.tree)
            leaves.extend(p.leaves)
        return Block(_graft(self.tree, trees), leaves, n)

    def get_state(self):
        return {"cursors": [c.get_state() for c in self.cursors]}

    def set_state(self, state):
        for c, s in zip(self.cursors, state["cursors"]):
            c.set_state(s)

    def close(self):
        for it in self.its:
            it.close()


def _graft(tree: Tree, subtrees: list) -> Tree:
    """Replace the leaves of ``tree`` by ``subtrees`` in order."""
    it = iter(subtrees)

    def go(t):
        if t.kind == "leaf":
            return next(it)
        return Tree(t.kind, t.keys, [go(c) for c in t.children])

    return go(tree)


__all__ = ["AUTOTUNE", "ParseDataset", "RepeatDataset",
           "ShardDataset", "SkipDataset", "TakeDataset", "ZipDataset", "parse_dataset"]
