"""tf.data's buffered shuffle, computed a block at a time.

The algorithm is TensorFlow's: fill a buffer with ``buffer_size`` elements; then for every new
input element pick a uniformly random slot, emit its element and put the new one in its place;
when the input ends, emit what is left in random order. :class:`_ShuffleIterator` processes a
whole input block per step with numpy and produces exactly what the element-by-element loop would
for the same random picks.

Checkpoints stay small: instead of the buffered elements, the state holds which input positions
the buffer holds, the random generator's state and an earlier input position to replay from
(restoring re-reads the input from there). This needs a deterministic input pipeline.
"""

from __future__ import annotations

import collections
import secrets

import numpy as np

from tpudata.dataset.base import BlockIterator, Cursor, Dataset
from tpudata.dataset.block import Block, RecordColumn, as_column
from tpudata.example.parse import VarLenValues


class ShuffleDataset(Dataset):
    def __init__(self, input_ds: Dataset, buffer_size: int, seed: int | None = None,
                 reshuffle_each_iteration: bool = True):
        super().__init__()
        if int(buffer_size) < 1:
            raise ValueError(f"shuffle buffer_size must be >= 1, not {buffer_size}")
        self.input = input_ds
        self.buffer_size = int(buffer_size)
        self.seed = seed
        self.reshuffle_each_iteration = reshuffle_each_iteration
        # seed=None: random, but fixed for this dataset (and recorded in iterator state)
        self._seed = int(seed) if seed is not None else secrets.randbits(63)

    def _make_iterator(self, ctx):
        return _ShuffleIterator(self, ctx)

    def cardinality(self):
        return self.input.cardinality()


def _to_buffer(col):
    """Buffer columns are plain arrays that support scatter assignment."""
    if isinstance(col, RecordColumn):
        return col.to_array(), "records"
    if isinstance(col, VarLenValues):
        return as_column(col.to_list()) if len(col) else np.empty(0, dtype=object), ("varlen",
                                                                                      col.values.dtype)
    return col, None


def _from_buffer(col, kind):
    if kind is not None and kind != "records" and kind[0] == "varlen":
        rows = [np.asarray(r, dtype=kind[1]) for r in col.tolist()] if len(col) else []
        return VarLenValues.from_rows(rows, kind[1])
    return col


class _ShuffleIterator(BlockIterator):
    def __init__(self, ds: ShuffleDataset, ctx):
        self.ds = ds
        self.size = ds.buffer_size
        self.seed = ds._seed
        self.path = ctx.path if ds.reshuffle_each_iteration else ()
        self.input_it = ds.input._make_iterator(ctx)
        self.cursor = Cursor(self.input_it)
        self._reset()

    def _reset(self):
        self.rng = np.random.Generator(
            np.random.PCG64(np.random.SeedSequence(self.seed, spawn_key=self.path)))
        self.tree = None
        self.kinds: list = []
        self.cols: list = []  # buffer columns, capacity self.size
        self.src = np.empty(0, dtype=np.int64)  # input position of each buffered element
        self.fill = 0
        self.count_in = 0
        self.phase = "fill"
        self.drain_pos = 0
        self.snapshots: collections.deque = collections.deque()

    # -- buffer helpers --------------------------------------------------------------------------
    def _convert(self, block: Block):
        cols, kinds = [], []
        for leaf in block.leaves:
            c, k = _to_buffer(leaf)
            cols.append(c)
            kinds.append(k)
        if self.tree is None:
            self.tree, self.kinds = block.tree, kinds
        elif block.tree != self.tree:
            raise ValueError(f"elements change structure: {self.tree} then {block.tree}")
        return cols

    def _ensure_capacity(self, cols):
        if not self.cols:
            self.cols = [np.empty((self.size,) + c.shape[1:], dtype=c.dtype) for c in cols]
            self.src = np.zeros(self.size, dtype=np.int64)

    def _emit(self, cols, n: int) -> Block:
        return Block(self.tree, [_from_buffer(c, k) for c, k in zip(cols, self.kinds)], n)

    def _snapshot(self):
        self.snapshots.append((self.count_in, self.cursor.get_state()))
        oldest = int(self.src[: self.fill].min()) if self.fill else self.count_in
        while len(self.snapshots) >= 2 and self.snapshots[1][0] <= oldest:
            self.snapshots.popleft()

    # -- iteration -------------------------------------------------------------------------------
    def next(self):
        while True:
            if self.phase == "fill":
                self._snapshot()
                block = self.cursor.take(self.size - self.fill)
                if block is None:
                    self._start_drain()
                    continue
                cols = self._convert(block)
                self._ensure_capacity(cols)
                sl = slice(self.fill, self.fill + block.n)
                for buf, c in zip(self.cols, cols):
                    buf[sl] = c
                self.src[sl] = self.count_in + np.arange(block.n)
                self.fill += block.n
                self.count_in += block.n
                if self.fill == self.size:
                    self.phase = "steady"
                continue
            if self.phase == "steady":
                self._snapshot()
                block = self.cursor.next_block()
                if block is None:
                    self._start_drain()
                    continue
                return self._steady(block)
            if self.phase == "drain":
                if self.drain_pos >= self.fill:
                    self.phase = "done"
                    return None
                end = min(self.fill, self.drain_pos + 65536)
                out = self._emit([c[self.drain_pos : end] for c in self.cols], end - self.drain_pos)
                self.drain_pos = end
                return out
            return None

    def _steady(self, block: Block) -> Block:
        k = block.n
        cols = self._convert(block)
        picks = self.rng.integers(0, self.size, size=k)
        order = np.argsort(picks, kind="stable")  # same slot -> consecutive, in time order
        sp = picks[order]
        same = np.empty(k, dtype=bool)
        same[0] = False
        same[1:] = sp[1:] == sp[:-1]
        prev_sorted = np.where(same, np.concatenate([[-1], order[:-1]]), -1)
        prev = np.empty(k, dtype=np.int64)
        prev[order] = prev_sorted  # the earlier input in this block that filled the same slot
        from_buf = prev < 0
        out_cols = []
        for buf, c in zip(self.cols, cols):
            out = np.empty((k,) + buf.shape[1:], dtype=buf.dtype if buf.dtype == c.dtype else object)
            out[from_buf] = buf[picks[from_buf]]
            out[~from_buf] = c[prev[~from_buf]]
            out_cols.append(out)
        last = np.empty(k, dtype=bool)
        last[-1] = True
        last[:-1] = sp[1:] != sp[:-1]
        slots, times = sp[last], order[last]
        for buf, c in zip(self.cols, cols):
            buf[slots] = c[times]
        self.src[slots] = self.count_in + times
        self.count_in += k
        return self._emit(out_cols, k)

    def _start_drain(self):
        perm = self.rng.permutation(self.fill)
        self.cols = [c[perm] for c in self.cols[: len(self.cols)]] if self.cols else []
        self.src = self.src[: self.fill][perm] if self.fill else self.src[:0]
        self.phase = "drain"
        self.drain_pos = 0

    # -- state -----------------------------------------------------------------------------------
    def get_state(self):
        if self.phase == "drain":
            held = self.src[self.drain_pos : self.fill]
        else:
            held = self.src[: self.fill]
        snap_count, snap_state = self.snapshots[0] if self.snapshots else (self.count_in,
                                                                            self.cursor.get_state())
        return {"seed": self.seed, "phase": self.phase, "rng": self.rng.bit_generator.state,
                "count_in": self.count_in, "held": held.copy(), "snap_count": snap_count,
                "snap": snap_state}

    def set_state(self, state):
        self.seed = int(state["seed"])
        self._reset()
        held = np.asarray(state["held"], dtype=np.int64)
        count_in = int(state["count_in"])
        snap_count = int(state["snap_count"])
        # re-read the input from the snapshot and put back the elements the buffer held
        self.cursor.set_state(state["snap"])
        pos = snap_count
        order = np.argsort(held, kind="stable")
        sorted_held = held[order]
        cols_by_slot = None
        while pos < count_in:
            block = self.cursor.take(count_in - pos)
            if block is None:
                raise ValueError("cannot restore the shuffle: the input ended early during replay")
            cols = self._convert(block)
            if cols_by_slot is None:
                cols_by_slot = [np.empty((len(held),) + c.shape[1:], dtype=c.dtype) for c in cols]
            lo, hi = np.searchsorted(sorted_held, [pos, pos + block.n])
            slots = order[lo:hi]
            for dst, c in zip(cols_by_slot, cols):
                dst[slots] = c[sorted_held[lo:hi] - pos]
            pos += block.n
        self.count_in = count_in
        self.phase = state["phase"]
        self.rng.bit_generator.state = state["rng"]
        n = len(held)
        if cols_by_slot is not None:
            if self.phase == "drain":
                self.cols = cols_by_slot
                self.fill = n
                self.src = held.copy()
            else:
                self._ensure_capacity(cols_by_slot)
                for buf, c in zip(self.cols, cols_by_slot):
                    buf[:n] = c
                self.src[:n] = held
                self.fill = n
        self.snapshots.clear()
        self.snapshots.append((snap_count, state["snap"]))
        if self.phase == "drain":
            self.drain_pos = 0

    def close(self):
        self.input_it.close()
