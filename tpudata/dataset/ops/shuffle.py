"""tf.data's buffered shuffle, computed a block at a time, with exact and small checkpoints.

The algorithm is TensorFlow's: fill a buffer with ``buffer_size`` elements; then for every new
input element pick a uniformly random slot, emit its element and put the new one in its place;
when the input ends, emit what is left in random order. :class:`_ShuffleIterator` processes a
whole input block per step with numpy and produces exactly what the element-by-element loop would
for the same random picks.

Checkpoints never replay the input, so they are exact even over inputs that are not
deterministic (a random ``map``/``filter`` upstream): the state holds the input's current
position, the random generator and the buffered elements. When the buffered elements are
records of plain TFRecord files (or Examples parsed from them), the state names them by
(file, byte offset) - about 16 bytes per element - and a restore reads just those records
again (random access); otherwise the state carries the elements themselves, as tf.data does.
"""

from __future__ import annotations

import concurrent.futures as cf
import struct
import weakref

import numpy as np

from tpudata.dataset.core import registry
from tpudata import storage
from tpudata.dataset.core.base import BlockIterator, Cursor, Dataset
from tpudata.dataset.core.block import LEAF, Block, Origin, RecordColumn, as_column, leaf_nbytes
from tpudata.dataset.core.fingerprint import state_tree
from tpudata.dataset.core.nest import tree_to_json
from tpudata.dataset.core.seeds import ProcessSeeded
from tpudata.dataset.core.columns import BytesColumn
from tpudata.dataset.io.spill import Spills
from tpudata.dataset.ops.shuffle_store import STORE_MIN, ByteStore
from tpudata.example.parse import VarLenValues


class ShuffleDataset(ProcessSeeded, Dataset):
    # ``fn(block) -> Block``: this shuffle's elements for a block of the records a checkpoint
    # names (a parse below it, or ``_as_records``), set by the graph passes of
    # ops/shuffle_parse.py; None where they did not run. With a parse, a checkpoint names parsed elements by
    # (file, offset) too.
    _rebuild = None

    def __init__(self, input_ds: Dataset, buffer_size: int, seed: int | None = None,
                 reshuffle_each_iteration: bool = True, *, spill_url: str | None = None,
                 spill_bytes: int = 16 << 20, spill_keep: int | None = None):
        super().__init__()
        self.spill_url = None if not spill_url else str(spill_url).rstrip("/")
        self.spill_bytes = int(spill_bytes)
        if spill_keep is not None and int(spill_keep) < 1:
            raise ValueError(f"spill_keep must be >= 1 or None, not {spill_keep}")
        self.spill_keep = None if spill_keep is None else int(spill_keep)
        if int(buffer_size) < 1:
            raise ValueError(f"shuffle buffer_size must be >= 1, not {buffer_size}")
        self.input = input_ds
        self.buffer_size = int(buffer_size)
        self.reshuffle_each_iteration = reshuffle_each_iteration
        # seed=None: random, but fixed for this dataset in this process (and recorded in
        # iterator state); a forked or spawned worker draws its own (see process_seed)
        self._init_seed(seed)

    def _make_iterator(self, ctx):
        return _ShuffleIterator(self, ctx)

    def _file_names(self) -> tuple | None:
        listed = self.input._file_names()  # a shuffled file list: the same names, reordered
        return None if listed is None else (listed[0], "unseeded" if self.seed is None else "seeded")

    def cardinality(self):
        return self.input.cardinality()

    def _spec(self):
        from tpudata.dataset.core.spec import _static

        return _static(self.input)


# A buffer column's kind: None (a plain array), ("varlen", dtype) (ragged rows, as objects) or
# ("store", "records" | "bytes"): records or a parsed bytes feature, as ByteStore entries.
_STORED = {"records": RecordColumn, "bytes": BytesColumn}


def _stored_as(kind):
    """The column class of a stored buffer kind, or None (not stored)."""
    return _STORED[kind[1]] if kind is not None and kind[0] == "store" else None


def _from_buffer(col, kind):
    if kind is not None and kind[0] == "varlen":
        rows = [np.asarray(r, dtype=kind[1]) for r in col.tolist()] if len(col) else []
        return VarLenValues.from_rows(rows, kind[1])
    return col


def _kind_to_json(kind):
    return kind if kind is None else [kind[0], str(kind[1])]


def _kind_from_json(obj):
    if obj is None or obj == "records":  # "records": object arrays, in older states
        return None
    if obj[0] == "store":
        if obj[1] not in _STORED:
            raise ValueError(f"unknown stored column kind {obj[1]!r}")
        return ("store", obj[1])
    return (obj[0], np.dtype(obj[1]))


GAP_BYTES = 4 << 20  # frames closer than this are read in one request
RUN_BYTES = 64 << 20
TAIL_BYTES = 1 << 20  # read past the last frame's start, so one request usually covers it


def _check_frame(data, k: int, path: str, off: int, verify: bool) -> int:
    """The record length of the frame at ``data[k:]`` (checked, without copying)."""
    from tpudata.errors import CorruptRecordError, TruncatedRecordError
    from tpudata.tfrecord.framing import masked_crc32c

    if len(data) < k + 12:
        raise TruncatedRecordError(f"truncated record at {off}", path, off)
    (length,) = struct.unpack_from("<Q", data, k)
    mv = memoryview(data)
    if verify and masked_crc32c(mv[k : k + 8]) != struct.unpack_from("<I", data, k + 8)[0]:
        raise CorruptRecordError(f"corrupted record at {off}", path, off)
    if len(data) < k + 16 + length:
        raise TruncatedRecordError(f"truncated record at {off}", path, off)
    if verify and masked_crc32c(mv[k + 12 : k + 12 + length]) != struct.unpack_from(
            "<I", data, k + 12 + length)[0]:
        raise CorruptRecordError(f"corrupted record at {off + 12}", path, off + 12)
    return length


def read_frames(paths: list, pid: np.ndarray, offsets: np.ndarray,
                verify: bool = True, storage_options: list | None = None) -> RecordColumn:
    """The records whose TFRecord frames start at ``offsets`` in ``paths[pid]``, as a column
    over the read buffers (random access; no per-record copies). ``storage_options[p]`` (a
    dict, optional) opens ``paths[p]``.

    Offsets are deduplicated and sorted per file, and nearby frames are read in one request.
    """
    buffers: list = []
    sources: list = []
    n = len(offsets)
    buf_idx = np.zeros(n, np.int32)
    rec_off = np.zeros(n, np.int64)
    rec_len = np.zeros(n, np.int64)

    def one_file(p: int) -> list:
        where = np.flatnonzero(pid == p)
        uniq = np.unique(offsets[where])
        runs = []  # (data, start, {frame offset: record length})
        options = storage_options[p] if storage_options and storage_options[p] else {}
        with storage.open_read(paths[p], **options) as f:
            i = 0
            while i < len(uniq):
                j = i + 1
                while (j < len(uniq) and uniq[j] - uniq[j - 1] <= GAP_BYTES
                       and uniq[j] - uniq[i] <= RUN_BYTES):
                    j += 1
                start, last = int(uniq[i]), int(uniq[j - 1])
                f.seek(start)
                data = f.read(last + TAIL_BYTES - start)  # the last frame too, usually
                if len(data) >= last + 12 - start:
                    (n_last,) = struct.unpack_from("<Q", data, last - start)
                    missing = last + 16 + n_last - start - len(data)
                    if missing > 0:
                        data += f.read(missing)
                lengths = {off: _check_frame(data, off - start, paths[p], off, verify)
                           for off in uniq[i:j].tolist()}
                runs.append((data, start, lengths))
                i = j
        return runs

    used = np.unique(pid).tolist()
    if len(used) <= 1 or all(storage.is_local(paths[p]) for p in used):
        results = [one_file(p) for p in used]
    else:  # remote files: a few at once
        with cf.ThreadPoolExecutor(min(8, len(used)), thread_name_prefix="tpudata-shuffle") as ex:
            results = list(ex.map(one_file, used))
    for p, runs in zip(used, results):
        where = np.flatnonzero(pid == p)
        for data, start, lengths in runs:
            b = len(buffers)
            buffers.append(data)
            sources.append((paths[p], start))
            for i in where.tolist():
                off = int(offsets[i])
                if off in lengths:
                    buf_idx[i], rec_off[i], rec_len[i] = b, off - start + 12, lengths[off]
    return RecordColumn(buffers, sources, buf_idx if len(buffers) > 1 else None, rec_off, rec_len)


class _Named:
    """Buffered records in a state, by (file, frame offset); copied on write."""

    def __init__(self, kind: str, paths: list, arrays: list):
        self.kind, self.paths, self.arrays = kind, paths, arrays

    def freeze(self) -> None:
        self.arrays = [a.copy() for a in self.arrays]

    def __jsonable__(self) -> dict:
        return {"kind": self.kind, "paths": self.paths, "pid": self.arrays[0],
                "offsets": self.arrays[1]}


class _Carried:
    """Buffered elements in a state: JSON when checkpointed, or a file above ``spill_bytes``
    (:mod:`tpudata.dataset.io.spill`: written once per state, ``group`` lists the state's files)."""

    def __init__(self, saved: dict, leaves: list, spills: Spills, group: list):
        self.saved, self.leaves = saved, leaves
        self.spills, self.group = spills, group
        self.url: str | None = None

    def freeze(self) -> None:  # a stored column is a snapshot of its own already
        self.leaves = [c if isinstance(c, RecordColumn) else c.copy() for c in self.leaves]

    def __jsonable__(self) -> dict:
        self.leaves = [c.to_array() if isinstance(c, RecordColumn) else c for c in self.leaves]
        spills = self.spills
        if spills.url and sum(leaf_nbytes(c) for c in self.leaves) > spills.min_bytes:
            if self.url is None:
                self.url = spills.write(self.leaves, self.group)
            return {**self.saved, "spilled": self.url}
        return {**self.saved, "cols": self.leaves}


class _ShuffleIterator(BlockIterator):
    exact_want = True  # hands out exactly the elements asked for (no snapshot before a block)

    def __init__(self, ds: ShuffleDataset, ctx):
        self.ds = ds
        self.size = ds.buffer_size
        self.seed = ds.process_seed()
        self.path = ctx.path if ds.reshuffle_each_iteration else ()
        self.input_it = ds.input._make_iterator(ctx.with_origins())
        self.cursor = Cursor(self.input_it)
        self.spills = Spills(ds.spill_url, ds.spill_bytes, ds.spill_keep)
        self._reset()

    def _reset(self):
        self.rng = np.random.Generator(
            np.random.PCG64(np.random.SeedSequence(self.seed, spawn_key=self.path)))
        self.tree = None
        self.kinds: list = []
        self.nleaves = 0
        self.cols: list = []  # buffer columns (capacity self.size), then 2 origin columns
        self.fill = 0
        self.count_in = 0
        self.phase = "fill"
        self.drain_pos = 0
        self._live = weakref.WeakSet()  # state snapshots that are views of the buffer
        self._saved = None  # get_state() since the last step
        self.pending: list | None = None  # output of the last steady step not yet returned
        self.pending_pos = 0
        self.pending_n = 0
        self.track: bool | None = None  # whether buffered elements carry their origin
        self.origin_kind = None
        self.paths: list = []
        self.path_ids: dict = {}
        self._path_options: dict = {}  # path -> storage_options, for restores
        self.store = ByteStore()  # where buffered records / parsed bytes values sit

    # -- buffer helpers --------------------------------------------------------------------------
    def _to_buffer(self, col, kind, first: bool):
        """A leaf as a buffer column (a plain array that supports scatter assignment) and its
        kind; after the first block, in the kind the first block gave the leaf."""
        if first and isinstance(col, RecordColumn) and col.nbytes >= STORE_MIN * len(col):
            kind = ("store", "bytes" if isinstance(col, BytesColumn) else "records")
        cls = _stored_as(kind)
        if cls is not None:
            if not isinstance(col, RecordColumn):
                col = cls.from_bytes(np.asarray(col, dtype=object).ravel().tolist())
            return self.store.add(col), kind
        if isinstance(col, RecordColumn):
            return col.to_array(), kind
        if isinstance(col, VarLenValues):
            values = as_column(col.to_list()) if len(col) else np.empty(0, dtype=object)
            return values, ("varlen", col.values.dtype)
        return col, kind

    def _convert(self, block: Block):
        cols, kinds = [], []
        first = self.tree is None
        for k, leaf in enumerate(block.leaves):
            c, kind = self._to_buffer(leaf, None if first or k >= len(self.kinds) else self.kinds[k],
                                      first)
            cols.append(c)
            kinds.append(kind)
        if self.tree is None:
            self.tree, self.kinds, self.nleaves = block.tree, kinds, len(kinds)
        elif block.tree != self.tree:
            raise ValueError(f"elements change structure: {self.tree} then {block.tree}")
        origin = block.origin
        if self.track is None:  # named by record only where a restore can rebuild them
            self.track = origin is not None and (
                origin.kind == "records" or self.ds._rebuild not in (None, _as_records))
            self.origin_kind = None if origin is None else origin.kind
        if self.track and (origin is None or origin.kind != self.origin_kind):
            self.track = False  # mixed sources: the state carries elements from now on
            self.cols = self.cols[: self.nleaves]
        if self.track:
            remap = np.array([self._path_id(p) for p in origin.paths], dtype=np.int32)
            cols += [remap[origin.pid], origin.offsets]
        return cols

    def _path_id(self, path: str) -> int:
        k = self.path_ids.get(path)
        if k is None:
            k = self.path_ids[path] = len(self.paths)
            self.paths.append(path)
        return k

    def _ensure_capacity(self, cols):
        if not self.cols:
            self.cols = [np.empty((self.size,) + c.shape[1:], dtype=c.dtype) for c in cols]

    def _emit(self, cols, n: int) -> Block:
        leaves = []
        for c, kind in zip(cols, self.kinds):
            cls = _stored_as(kind)
            if cls is not None:  # views of the store's segments
                leaves.append(self.store.column(c, cls))
                self.store.release(c)
            else:
                leaves.append(_from_buffer(c, kind))
        return Block(self.tree, leaves, n)

    def _compact(self) -> None:
        """Move stored values out of mostly emitted segments (see shuffle_store)."""
        if not self.store.needs_compaction():  # (every step: the cheap check first)
            return
        stored = [k for k, kind in enumerate(self.kinds) if _stored_as(kind) is not None]
        lo = self.drain_pos if self.phase == "drain" else 0
        columns = [self.cols[k][lo : self.fill] for k in stored] if self.cols else []
        if self.pending is not None:
            columns += [self.pending[k][self.pending_pos : self.pending_n] for k in stored]
        self.store.compact(columns)  # (snapshots hold columns of their own, not entries)

    # -- iteration -------------------------------------------------------------------------------
    def next(self):
        self._saved = None  # the state changes
        want = max(1, self.want)
        self._compact()
        if self.pending is not None:  # hand out the last step's output as asked for
            lo = self.pending_pos
            hi = min(self.pending_n, lo + want)
            out = self._emit([c[lo:hi] for c in self.pending], hi - lo)
            self.pending_pos = hi
            if hi >= self.pending_n:
                self.pending = None
            return out
        while True:
            if self.phase == "fill":
                block = self.cursor.take(self.size - self.fill)
                if block is None:
                    self._start_drain()
                    continue
                cols = self._convert(block)
                self._ensure_capacity(cols)
                sl = slice(self.fill, self.fill + block.n)
                for buf, c in zip(self.cols, cols):
                    buf[sl] = c
                self.fill += block.n
                self.count_in += block.n
                if self.fill == self.size:
                    self.phase = "steady"
                continue
            if self.phase == "steady":
                block = self.cursor.next_block()
                if block is None:
                    self._start_drain()
                    continue
                self.pending, self.pending_pos, self.pending_n = self._steady(block), 0, block.n
                return self.next()
            if self.phase == "drain":
                if self.drain_pos >= self.fill:
                    self.phase = "done"
                    return None
                end = min(self.fill, self.drain_pos + want)
                out = self._emit([c[self.drain_pos : end] for c in self.cols], end - self.drain_pos)
                self.drain_pos = end
                return out
            return None

    def _freeze(self) -> None:
        """Copy the snapshots still referenced before the buffer changes in place."""
        for snap in list(self._live):
            snap.freeze()
        self._live = weakref.WeakSet()

    def _steady(self, block: Block) -> list:
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
        self._freeze()
        last = np.empty(k, dtype=bool)
        last[-1] = True
        last[:-1] = sp[1:] != sp[:-1]
        slots, times = sp[last], order[last]
        for buf, c in zip(self.cols, cols):
            buf[slots] = c[times]
        self.count_in += k
        return out_cols

    def _start_drain(self):
        perm = self.rng.permutation(self.fill)
        self.cols = [c[: self.fill][perm] for c in self.cols] if self.cols else []
        self.phase = "drain"
        self.drain_pos = 0

    # -- state -----------------------------------------------------------------------------------
    def _encode(self, cols: list, lo: int, hi: int, group: list) -> dict:
        """Elements ``lo:hi`` of ``cols``: named by origin, or carried."""
        if self.track:
            nl = self.nleaves
            snap = _Named(self.origin_kind, list(self.paths), [cols[nl][lo:hi], cols[nl + 1][lo:hi]])
            self._live.add(snap)
            return {"origin": snap}
        # views, not copies: a snapshot still referenced (e.g. by a prefetch queue) is copied
        # just before the buffer changes (_freeze); JSON (or a spill file) only at checkpoints
        leaves = [c[lo:hi] if cls is None else self.store.column(c[lo:hi], cls)
                  for c, cls in zip(cols[: self.nleaves], map(_stored_as, self.kinds))]
        saved = {"tree": tree_to_json(self.tree), "kinds": [_kind_to_json(k) for k in self.kinds]}
        snap = _Carried(saved, leaves, self.spills, group)
        self._live.add(snap)
        return {"elements": snap}

    def _decode(self, saved: dict, n: int) -> list:
        if "origin" in saved:
            origin = saved["origin"]
            if isinstance(origin, _Named):
                origin = origin.__jsonable__()
            return self._convert(self._reread(origin, n))
        elements = saved["elements"]
        if isinstance(elements, _Carried):
            saved = elements.saved
        else:
            saved = elements
        self.tree = state_tree(saved["tree"], self.ds.input)
        self.kinds = [_kind_from_json(k) for k in saved["kinds"]]
        self.nleaves = len(self.kinds)
        self.track = False
        if isinstance(elements, _Carried):  # an internal snapshot (same process)
            return self._stored([c if isinstance(c, RecordColumn) else c.copy()
                                 for c in elements.leaves])
        if "spilled" in elements:  # a file in this shuffle's spill_url, never a path of the state
            cols = self.spills.read(elements["spilled"])
        else:
            cols = [np.asarray(c) if not isinstance(c, np.ndarray) else c
                    for c in elements["cols"]]
        if not isinstance(cols, list) or len(cols) != self.tree.num_leaves or \
                len(cols) != self.nleaves or any(
                    not isinstance(c, np.ndarray) or c.ndim < 1 or len(c) != n for c in cols):
            from tpudata.errors import StateError

            raise StateError(f"the state's buffered elements do not fit it: {n} elements of "
                             f"{self.tree.num_leaves} leaves expected")
        return self._stored(cols)

    def _stored(self, cols: list) -> list:
        """Restored leaves in their buffer kinds (stored values go into the store)."""
        return [self._to_buffer(c, kind, False)[0] for c, kind in zip(cols, self.kinds)]

    def get_state(self):
        if self._saved is None:  # asked again and again between steps: computed once
            self._saved = self._state()
        return self._saved

    def _state(self):
        lo, hi = (self.drain_pos, self.fill) if self.phase == "drain" else (0, self.fill)
        state = {"seed": self.seed, "phase": self.phase, "rng": self.rng.bit_generator.state,
                 "count_in": self.count_in, "input": self.cursor.get_state(), "n": hi - lo}
        group: list = []  # this state's spill files
        if hi > lo:
            state["buffer"] = self._encode(self.cols, lo, hi, group)
        if self.pending is not None:
            state["pending"] = self._encode(self.pending, self.pending_pos, self.pending_n, group)
            state["pending_n"] = self.pending_n - self.pending_pos
        return state

    def set_state(self, state):
        self.seed = int(state["seed"])
        self._reset()
        self.cursor.set_state(state["input"])
        self.count_in = int(state["count_in"])
        self.phase = state["phase"]
        self.rng.bit_generator.state = state["rng"]
        if "pending" in state:
            self.pending_n = int(state["pending_n"])
            self.pending = self._decode(state["pending"], self.pending_n)
        n = int(state["n"])
        if not 0 <= n <= self.size or self.phase not in ("fill", "steady", "drain", "done"):
            from tpudata.errors import StateError

            raise StateError(f"the state holds {n} buffered elements in phase "
                             f"{str(self.phase)[:20]!r}; this shuffle's buffer_size is {self.size}")
        if "buffer" not in state:
            return
        cols = self._decode(state["buffer"], n)
        if self.phase == "drain":
            self.cols, self.fill, self.drain_pos = cols, n, 0
        else:
            self._ensure_capacity(cols)
            for buf, c in zip(self.cols, cols):
                buf[:n] = c
            self.fill = n

    def _reread(self, origin: dict, n: int) -> Block:
        """The buffered elements again, from their records (random access)."""
        pid = np.asarray(origin["pid"], dtype=np.int32)
        offsets = np.asarray(origin["offsets"], dtype=np.int64)
        paths = list(origin["paths"])
        options = [self._storage_options(path) for path in paths]
        records = read_frames(paths, pid, offsets, storage_options=options)
        where = Origin(origin["kind"], tuple(origin["paths"]), pid, offsets)
        block = Block(LEAF, [records], n)
        if self.ds._rebuild is not None:  # the records parsed again, or as they are
            block = self.ds._rebuild(block)
        elif origin["kind"] != "records":
            from tpudata.errors import StateError

            raise StateError(
                "this checkpoint names the shuffle buffer's parsed elements by record, but the "
                "graph passes that tell this shuffle how to parse them again did not run here "
                "(the shuffle is under an in-memory cache, or the pipeline is deeper than 200 "
                "ops): restore it into the pipeline that took it")
        block.origin = where
        return block

    def _storage_options(self, path: str) -> dict:
        """The storage_options of the source that reads ``path`` (they are never written into
        a state: they may hold credentials), found in the shuffle's input description."""
        if path not in self._path_options:
            found = None if storage.is_local(path) else self.ds.input._storage_options_for(path)
            self._path_options[path] = found or {}
        return self._path_options[path]

    def close(self):
        self.input_it.close()


def _as_records(block: Block) -> Block:
    """A shuffle's elements are the records a checkpoint names (no parse below it)."""
    return block


registry.provide(ShuffleDataset)
