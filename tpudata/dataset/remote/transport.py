"""Chunks between co-located workers and the consumer through shared memory.

A worker on the consumer's machine (it sees the consumer's marker segment in ``/dev/shm``)
writes a chunk's blocks into shared memory - pickle protocol 5, the numpy buffers whole beside
the pickle - and returns only where they are, so the executor's transport moves a few hundred
bytes instead of the arrays. The consumer's arrays are views of the segment (no copy).

Segments are the consumer's **slots**, reused: fresh pages cost more than the copy itself (a
page fault each), so the consumer hands each request a free slot (:meth:`Transport.take`), and a
slot is free again once every array lent from it is gone. A worker keeps the slots it wrote
mapped (up to ``MAX_MAPPED`` and ``MAX_MAPPED_BYTES``: all of a consumer's; least recently used
dropped first, and those their consumer unlinked at the next new one), since mapping a slot
again costs its page tables, more than the copy. A chunk that does not fit its slot (or a
request sent with none: every slot still lent) goes in a one-off segment that the consumer
unlinks when it maps it; the slots grow to fit for the next requests. A slot whose request was
dropped (a speculative copy, a restore) may still be written by a task running somewhere: it
is never reused (:meth:`Transport.retire`). Workers elsewhere, or a ``/dev/shm`` too small,
return the blocks themselves.

Segment names start with ``tpd_x<consumer pid>_<iteration>_``: the consumer removes its own when
it closes, and those of consumers that died when it starts.

>>> import numpy as np
>>> t = Transport(1 << 20)
>>> slot = t.take()
>>> payload = encode([np.arange(100_000)], t.marker, slot)
>>> payload[0], int(t.decode(payload)[0].sum())
('r', 4999950000)
>>> t.close()
"""

from __future__ import annotations

import collections
import mmap
import os
import pickle
import threading
import uuid
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory

import numpy as np

from tpudata._shm import (MADV_POPULATE_WRITE, SHM_DIR, aligned, attach, close_mapping, create,
                          evict, lend, mapping, out_of_band, place, sweep, sweep_dead, unlink,
                          write)
from tpudata.errors import SharedMemoryFullError

__all__ = ["INLINE_BYTES", "MAX_MAPPED", "MAX_MAPPED_BYTES", "PREFIX", "Parked", "Transport", "encode"]

PREFIX = "tpd_x"
MAX_MAPPED = 64  # slots a worker process keeps mapped (a consumer has at most MAX_SLOTS = 64) ...
MAX_MAPPED_BYTES = 2 << 30  # ... and at most this many bytes of them
INLINE_BYTES = 64 << 10  # chunks smaller than this travel in the executor's own messages
_LOCK = threading.Lock()
_MAPPED: collections.OrderedDict = collections.OrderedDict()  # (worker side) name -> mmap


class Transport:
    """The consumer's side: a marker co-located workers can see, the slots, and the sweeps."""

    def __init__(self, slot_bytes: int, max_slots: int = 8):
        self.prefix = f"{PREFIX}{os.getpid()}_{uuid.uuid4().hex[:8]}_"
        self.marker = None
        self.size = aligned(int(slot_bytes * 1.25) + (1 << 20))
        self.max_slots = max_slots
        self._slots: dict = {}  # name -> (mmap, size)
        self._free: collections.deque = collections.deque()  # appended from any thread (GC)
        self._count = 0
        if not os.path.isdir(SHM_DIR):
            return  # no /dev/shm to share (macOS): every chunk goes through the executor
        sweep_dead(PREFIX)
        try:
            SharedMemory(name=self.prefix + "m", create=True, size=1).close()
        except OSError:
            return
        self.marker = self.prefix

    def take(self) -> tuple | None:
        """A free slot ``(name, size)`` for a request (None: write a one-off segment)."""
        if self.marker is None:
            return None
        while self._free:
            name = self._free.popleft()
            if name in self._slots and self._slots[name][1] >= self.size:
                return name, self._slots[name][1]
            self._drop(name)  # too small for the chunks seen since: a bigger one instead
        if len(self._slots) >= self.max_slots:
            return None
        self._count += 1
        name = f"{self.prefix}s{self._count}"
        try:
            seg = create(name, self.size)
        except SharedMemoryFullError:
            return None
        m = mapping(seg, self.size)
        self._slots[name] = (m, self.size)
        return name, self.size

    def give_back(self, slot: tuple | None) -> None:
        """A slot whose request finished without writing it (an error, a one-off segment)."""
        if slot is not None and slot[0] in self._slots:
            self._free.append(slot[0])

    def retire(self, slot: tuple | None) -> None:
        """A slot that a dropped request may still write: never lent again."""
        if slot is not None:
            self._drop(slot[0])

    def decode(self, payload):
        """The blocks of what :func:`encode` returned (views of shared memory: no copy)."""
        if isinstance(payload, list):
            return payload
        if payload[0] == "r":
            _, name, data_len, layout, size = payload
            if size > self.size:
                self.size = aligned(int(size * 1.25))
            m = self._slots[name][0]
            data, buffers = lend(m, data_len, layout, lambda: self._free.append(name))
            return pickle.loads(data, buffers=buffers)
        _, name, data_len, layout, need = payload
        seg = SharedMemory(name=name)
        try:
            m = mapping(seg)
        finally:
            seg.unlink()  # the name goes now; the memory when the arrays do
        if need > self.size:  # the next slots fit chunks like this one
            self.size = aligned(int(need * 1.25))
        base = np.frombuffer(m, np.uint8)
        return pickle.loads(base[:data_len].tobytes(),
                            buffers=[base[start:start + n] for start, n in layout])

    def _drop(self, name: str) -> None:
        entry = self._slots.pop(name, None)
        if entry is not None:
            unlink(name)
            close_mapping(entry[0])  # arrays lent from it keep it mapped until they go

    def sweep(self) -> None:
        """Remove the one-off segments of this consumer that nobody will read."""
        if self.marker is not None:
            sweep(self.prefix + "c")

    def close(self) -> None:
        if self.marker is not None:
            for name in list(self._slots):
                self._drop(name)
            self.sweep()
            unlink(self.prefix + "m")
            self.marker = None


class Parked:
    """The slots a finished iteration leaves for the dataset's next one.

    Every epoch is a new iteration; with new slots each time, every chunk of an epoch that has
    as many chunks in flight as it has chunks would land in fresh pages (a fault and a zeroed
    page each: as much CPU on the worker as the copy itself, and the more workers, the more
    chunks in flight). A ``distribute()``d Dataset keeps one finished iteration's
    :class:`Transport` here for the next; its segments go when the Dataset does (or at exit).
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._items: list = []
        self._closed = False

    def take(self) -> "Transport | None":
        with self._lock:
            while self._items:
                t = self._items.pop()
                if t.marker is not None and os.path.exists(os.path.join(SHM_DIR, t.marker + "m")):
                    return t
                t.close()
        return None

    def put(self, t: "Transport") -> None:
        t.sweep()
        with self._lock:
            if not self._closed and t.marker is not None and not self._items:
                self._items.append(t)
                return
        t.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            items, self._items = self._items, []
        for t in items:
            t.close()


def _mapped(name: str, size: int) -> mmap.mmap:
    """(worker side) the consumer's slot ``name``, mapped once: a worker keeps every slot it
    wrote mapped (up to ``MAX_MAPPED`` of ``MAX_MAPPED_BYTES``), since mapping one again costs
    more than writing the chunk; the slots their consumer has dropped go at the next new one."""
    with _LOCK:
        m = _MAPPED.get(name)
        if m is not None:
            _MAPPED.move_to_end(name)
            return m
    # the consumer's segment (it unlinks it); page tables in one call: faults would cost twice
    # the copy
    m = attach(name, size, MADV_POPULATE_WRITE)
    with _LOCK:
        gone = [n for n in _MAPPED if not os.path.exists(os.path.join(SHM_DIR, n))]
        old = [_MAPPED.pop(n) for n in gone]  # unlinked: held here, their memory would stay
        _MAPPED[name] = m
        old += evict(_MAPPED, MAX_MAPPED, MAX_MAPPED_BYTES)
    for o in old:
        o.close()
    return m


def encode(blocks: list, marker: str | None, slot: tuple | None = None):
    """``blocks`` in shared memory when the consumer is here (its ``marker`` segment exists):
    in ``slot`` when they fit, else in a one-off segment; small ones, or where the consumer is
    elsewhere, the blocks themselves."""
    if marker is None or not os.path.exists(os.path.join(SHM_DIR, marker + "m")):
        return blocks
    buffers: list = []
    data = pickle.dumps(blocks, protocol=5, buffer_callback=out_of_band(buffers))
    layout, end = place(len(data), buffers)
    if end < INLINE_BYTES:
        return blocks  # a few pages: the executor's message is cheaper than a segment
    if slot is not None and end <= slot[1]:
        try:
            write(_mapped(*slot), data, layout, buffers)
            return ("r", slot[0], len(data), layout, end)
        except FileNotFoundError:  # retired meanwhile: nobody would read it
            pass
    name = f"{marker}c{uuid.uuid4().hex[:12]}"
    try:
        seg = create(name, end)
    except SharedMemoryFullError:
        return blocks  # /dev/shm is too small for this chunk: the executor moves it
    resource_tracker.unregister(seg._name, "shared_memory")  # noqa: SLF001 - the consumer's
    try:
        write(seg.buf, data, layout, buffers)
    finally:
        seg.close()
    return ("s", name, len(data), layout, end)
