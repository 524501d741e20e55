"""Byte values in a shuffle buffer without a Python object each, in memory tpudata owns.

A shuffle over records or a parsed image feature holds thousands of ~100 KB values (values of
``STORE_MIN`` bytes or more on average; small ones stay ``bytes`` objects, which CPython keeps in
its own pools). As ``bytes``
objects each would be a glibc allocation made in the thread that runs the shuffle (a prefetch
thread) and freed by the consumer: glibc hands such memory back and faults it in again, which
cost bench_pipeline's workload A more than half its speed untuned (1.2-2.4 GB/s against 3.1-3.3
with ``tune_malloc()``). A :class:`ByteStore` keeps the values where they already are - the
read buffers the records came in - and the buffer's column holds only ``(segment, offset,
length)`` entries (:data:`ENTRY`), which the shuffle scatters and gathers like any column. What
leaves the shuffle is a :class:`RecordColumn` / :class:`BytesColumn` over those buffers (no
copy); a buffer returns to its pool when nothing made from it is left.

A read buffer stays held while any of its values is buffered, so after a while most held
buffers are mostly emitted. When the store holds more than ``HOLD`` times the bytes of its live
values (and ``SLACK`` more), :meth:`compact` copies the values of the sparsest segments into
fresh ``CHUNK``-sized segments from :mod:`tpudata._outpool` (reused, already mapped memory),
until it holds less than ``AFTER`` times: the sparse segments cost little to move, and memory
stays within ``HOLD`` times what the buffer holds (plus ``SLACK``).

>>> store = ByteStore()
>>> e = store.add(RecordColumn.from_bytes([b"ab", b"cde", b"f"]))
>>> store.column(e[[2, 0]], BytesColumn).tolist(), store.live_bytes
([b'f', b'ab'], 6)
>>> store.release(e)
>>> store.live_bytes, store.held_bytes
(0, 0)
"""

from __future__ import annotations

import numpy as np

from tpudata import _outpool
from tpudata.dataset.core.columns import BytesColumn, RecordColumn  # noqa: F401 (the doctest)

__all__ = ["AFTER", "ByteStore", "CHUNK", "ENTRY", "HOLD", "SLACK", "STORE_MIN"]

#: one buffered value: the store's segment, the value's offset in it and its length
ENTRY = np.dtype([("seg", np.int32), ("off", np.int64), ("len", np.int64)])
HOLD = 1.5  # compact when the held segments exceed this many times the live values' bytes ...
SLACK = 32 << 20  # ... plus this much
AFTER = 1.2  # ... until they are at most this many times
CHUNK = 8 << 20  # the segments values are compacted into (a read buffer's size: one pool serves both)
SMALL = 16  # entries counted one by one (per-element consumers take one value at a time)
STORE_MIN = 2048  # mean bytes per value from which a shuffle stores a column (smaller: bytes objects)


def _nbytes(buffer) -> int:
    return memoryview(buffer).nbytes


class ByteStore:
    """The segments a shuffle's byte values sit in, with a count of buffered values per segment.

    :meth:`add` takes a column's values in (their buffers become segments), :meth:`column` makes
    a column of given entries, :meth:`release` drops entries that left the shuffle; a segment is
    let go when no entry refers to it.
    """

    def __init__(self):
        self.buffers: list = []  # segment -> buffer (None: free id)
        self.sources: list = []  # segment -> (path, base offset) of its records, for errors
        self.sizes = np.zeros(0, dtype=np.int64)
        self.count = np.zeros(0, dtype=np.int64)  # live entries per segment
        self.bytes = np.zeros(0, dtype=np.int64)  # live entries' bytes per segment
        self.by_id: dict = {}  # id(buffer) -> segment
        self.free: list = []
        self.live_bytes = 0
        self.held_bytes = 0
        self.open: int | None = None  # the segment compaction appends to ...
        self.open_pos = 0  # ... from this offset (a full one is let go by release, as any)

    def _segment(self, buffer, source) -> int:
        seg = self.by_id.get(id(buffer))
        if seg is not None:
            return seg
        if self.free:
            seg = self.free.pop()
            self.buffers[seg], self.sources[seg] = buffer, source
        else:
            seg = len(self.buffers)
            self.buffers.append(buffer)
            self.sources.append(source)
            if seg >= len(self.sizes):
                grow = max(64, 2 * len(self.sizes))
                self.sizes, self.count, self.bytes = (
                    np.concatenate([a, np.zeros(grow, dtype=np.int64)])
                    for a in (self.sizes, self.count, self.bytes))
        self.by_id[id(buffer)] = seg
        self.sizes[seg] = size = _nbytes(buffer)
        self.held_bytes += size
        return seg

    def _drop(self, segs: np.ndarray) -> None:
        for seg in segs.tolist():
            if seg == self.open:  # emptied: the next compaction opens another
                self.open = None
            buffer = self.buffers[seg]
            del self.by_id[id(buffer)]
            self.buffers[seg] = self.sources[seg] = None
            self.held_bytes -= int(self.sizes[seg])
            self.sizes[seg] = 0
            self.free.append(seg)

    def _count(self, entries: np.ndarray, sign: int) -> None:
        n = len(self.sizes)
        segs = entries["seg"]
        if len(segs) <= SMALL:  # a few values (a per-element consumer): no pass over every segment
            total = 0
            for seg, length in zip(segs.tolist(), entries["len"].tolist()):
                self.count[seg] += sign
                self.bytes[seg] += sign * length
                total += length
            self.live_bytes += sign * total
            return
        self.count += sign * np.bincount(segs, minlength=n)[:n]
        lengths = np.bincount(segs, weights=entries["len"], minlength=n)[:n].astype(np.int64)
        self.bytes += sign * lengths
        self.live_bytes += sign * int(lengths.sum())

    def add(self, col: RecordColumn) -> np.ndarray:
        """The entries of ``col``'s values, which stay in ``col``'s buffers."""
        entries = np.empty(len(col), dtype=ENTRY)
        if col.buf_idx is None:
            entries["seg"] = self._segment(col.buffers[0], col.sources[0]) if len(col) else 0
        else:  # only the buffers some value is in (a slice keeps its column's list)
            idx = np.asarray(col.buf_idx)
            remap = np.zeros(len(col.buffers), dtype=np.int32)
            for k in np.unique(idx).tolist():
                remap[k] = self._segment(col.buffers[k], col.sources[k])
            entries["seg"] = remap[idx]
        entries["off"] = col.offsets
        entries["len"] = col.lengths
        self._count(entries, 1)
        return entries

    def column(self, entries: np.ndarray, cls=RecordColumn) -> RecordColumn:
        """A ``cls`` column of the values ``entries`` name (views of the segments)."""
        seg = entries["seg"]
        if len(seg) and not (seg != seg[0]).any():  # one segment (no sort)
            k = int(seg[0])
            return cls([self.buffers[k]], [self.sources[k]], None, entries["off"].copy(),
                       entries["len"].copy())
        segs, where = np.unique(seg, return_inverse=True)
        buffers = [self.buffers[s] for s in segs.tolist()]
        sources = [self.sources[s] for s in segs.tolist()]
        idx = None if len(segs) == 1 else where.astype(np.int32).reshape(-1)
        return cls(buffers, sources, idx, entries["off"].copy(), entries["len"].copy())

    def release(self, entries: np.ndarray) -> None:
        """``entries`` left the shuffle: segments no entry refers to any more are let go."""
        if not len(entries):
            return
        self._count(entries, -1)
        if len(entries) <= SMALL:
            empty = [seg for seg in set(entries["seg"].tolist()) if self.count[seg] == 0]
            if empty:
                self._drop(np.array(empty))
            return
        segs = np.unique(entries["seg"])
        empty = segs[self.count[segs] == 0]
        if len(empty):
            self._drop(empty)

    def needs_compaction(self) -> bool:
        return self.held_bytes > HOLD * self.live_bytes + SLACK

    def compact(self, columns: list) -> None:
        """Move the values of the sparsest segments into fresh ones, rewriting the entries in
        ``columns`` (every live entry of those segments must be in them) in place."""
        target = AFTER * self.live_bytes + SLACK / 2
        held = np.flatnonzero(self.sizes)
        if self.open is not None:
            held = held[held != self.open]  # the segment values are moved into
        fraction = self.bytes[held] / np.maximum(self.sizes[held], 1)
        moving, gain = [], 0
        for seg in held[np.argsort(fraction, kind="stable")].tolist():
            if self.held_bytes - gain <= target:
                break
            moving.append(seg)
            gain += int(self.sizes[seg]) - int(self.bytes[seg])
        if not moving:
            return
        moving_arr = np.array(moving, dtype=np.int32)
        picked = [(c, np.flatnonzero(np.isin(c["seg"], moving_arr))) for c in columns]
        entries = np.concatenate([c[i] for c, i in picked]) if picked else np.empty(0, ENTRY)
        if int(self.count[moving_arr].sum()) != len(entries):  # pragma: no cover - a bug
            raise RuntimeError("shuffle store: a compacted segment has entries outside the buffer")
        placed = self._copy(entries)
        k = 0
        for c, i in picked:
            c[i] = placed[k : k + len(i)]
            k += len(i)
        self._count(entries, -1)
        self._count(placed, 1)
        self._drop(moving_arr)

    def _copy(self, entries: np.ndarray) -> np.ndarray:
        """Copies of the values ``entries`` name, appended to the open ``CHUNK`` segment (a
        new one when it is full; a value over ``CHUNK`` gets a segment of its own)."""
        placed = np.empty(len(entries), dtype=ENTRY)
        views: dict = {}
        for k, (src_seg, off, length) in enumerate(entries.tolist()):
            if length > CHUNK:
                seg, pos = self._segment(_outpool.empty((length,), np.uint8), (None, None)), 0
            else:
                if self.open is None or self.open_pos + length > CHUNK:
                    self.open = self._segment(_outpool.empty((CHUNK,), np.uint8), (None, None))
                    self.open_pos = 0
                seg, pos = self.open, self.open_pos
                self.open_pos += length
            src = views.get(src_seg)
            if src is None:
                src = views[src_seg] = np.frombuffer(self.buffers[src_seg], dtype=np.uint8)
            dst = np.frombuffer(self.buffers[seg], dtype=np.uint8)
            dst[pos : pos + length] = src[off : off + length]
            placed[k] = (seg, pos, length)
        return placed
