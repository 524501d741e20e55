"""The shared-memory transport between a process that makes elements and one that uses them:
pickle protocol 5, numpy buffers through reused shared memory. Its users: the process map
(worker and parent, over pipes: :mod:`tpudata.dataset.parallel.processes`) and the torch bridge
(DataLoader worker to main process, over DataLoader's queue: :mod:`tpudata.torch.shared`).

An element (nested dicts/tuples/lists of numpy arrays, scalars, bytes) is pickled with protocol
5 so that numpy arrays (of 4 KB or more) come out as out-of-band buffers instead of being copied
into the pickle; *pieces* (:mod:`tpudata._shm_pieces`: :class:`Rows` of same-shape arrays,
:class:`Strings` of byte strings) are written into place by the sender itself. A small payload
(under ``INLINE_LIMIT`` bytes, pickle and buffers together) travels inline in the message. A
large one is written once into shared memory and the message carries only the segment's name
and layout: a :class:`Sender` keeps a few reusable segments ("slots", mapped once and grown when
needed). The :class:`Receiver` copies each buffer out into its own memory (its arrays are
ordinary, writable and independent of the segment) and keeps slots mapped; or, for up to
``lend`` slots at a time, *lends* the slot: its arrays are views of the slot (no copy), which
goes back to the sender once they are all gone. Messages therefore stay small, whatever the
elements weigh.

A slot goes back to its sender one of two ways, the sender's choice:

- **by message** (the process map, whose pipes go both ways): :meth:`Receiver.take_freed` lists
  the slots read or given back since the last call, the owner sends them over, and
  :meth:`Sender.release` frees them. When every slot is busy the sender writes a one-off segment
  that the receiver unlinks.
- **by flag** (``Sender(prefix, flag=True)``; the torch bridge, whose queue goes one way only):
  byte 0 of a slot is its flag, which the receiver sets to FREE once it has copied the payload
  out, and the sender reuses a slot whose flag says so. When every slot is busy the sender adds
  one (up to ``max_slots``), then sends inline. These slots are :class:`~tpudata._shm.Segment`
  objects that multiprocessing's resource tracker does not know; the sender unlinks them when
  it closes, and a receiver given ``sweep_prefix`` removes those of senders that died
  (:func:`~tpudata._shm.sweep_dead`) whenever it maps a new one. The receiver keeps at most
  ``keep`` of them mapped (``keep_bytes`` in all).

A payload need not be read when it arrives: :meth:`Receiver.hold` leaves it in its slot until
its :class:`Held` is read (lent then if the receiver may lend, which it usually may: what was
lent before has gone by then). ``take_freed(need)`` keeps the sender able to write ``need``
more payloads into slots: it copies the oldest held payloads out first where the slots held
would leave fewer free (so the sender rarely needs a one-off segment).

Segment names start with the sender's prefix, so the owner can sweep away segments that a killed
process left behind (:func:`sweep`). The segments themselves (creation with pages reserved,
unlinking, sweeping), the layout and the out-of-band pickling are :mod:`tpudata._shm`'s, shared
with the distributed transport; this module is the slots' protocol.

>>> import numpy as np
>>> sender, receiver = Sender("tpd_doc_"), Receiver()
>>> element = {"image": np.arange(30_000, dtype=np.uint8), "label": 3}
>>> payload, slot = sender.encode(element)
>>> slot, payload[2]
(0, 'tpd_doc_0')
>>> back = receiver.decode(payload)
>>> bool((back["image"] == element["image"]).all()), back["label"], back["image"].flags.writeable
(True, 3, True)
>>> receiver.take_freed()
[0]
>>> sender.release(slot)
>>> receiver.close(); sender.close()
>>> sweep("tpd_doc_")
[]
"""

from __future__ import annotations

import collections
import io
import itertools
import logging
import mmap
import pickle
from collections import deque
from functools import partial
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from tpudata._shm import (ALIGN, aligned, attach, close_mapping, create, evict, mapping, out_of_band,
                          place, populate, sweep, sweep_dead, unlink, unlink_segment, write)
from tpudata._shm import lend as lend_views  # decode's argument is named lend
from tpudata._shm_pieces import Pickler, Rows, StringValues, Strings, Unpickler, written

logger = logging.getLogger(__name__)

INLINE_LIMIT = 16 * 1024  # bytes of pickle + buffers from which a payload goes through shared memory
_SLOT_GRANULE = 64 * 1024
HEADER = ALIGN  # a flag slot: byte 0 is the flag, the pickle starts here
FREE, BUSY = 1, 2

# ("i", pickle_bytes, [bytearray, ...], n)                  inline
# ("s", name, pickle_len, [(offset, size), ...], n)          one-off segment: the receiver unlinks it
# ("r", slot, name, pickle_len, [(offset, size), ...], n)    the sender's slot, freed by message
# ("f", slot, name, pickle_len, [(offset, size), ...], n)    the sender's slot, freed by its flag
# n: None, or how many of the buffers are pickle's out-of-band buffers; the others hold pieces
Payload = tuple

__all__ = ["FREE", "Held", "INLINE_LIMIT", "Receiver", "Rows", "Sender", "StringValues", "Strings",
           "discard", "sweep", "unlink"]


class Sender:
    """Encodes payloads for a receiver, reusing ``slots`` shared-memory segments.

    ``flag``: slots are freed by their flag byte (see the module's notes), up to ``max_slots``
    of them (default ``2 * slots``); else by :meth:`release`.
    """

    def __init__(self, prefix: str, slots: int = 2, flag: bool = False,
                 max_slots: int | None = None):
        self.prefix = prefix
        self.flag = flag
        self.max_slots = max(slots, 2 * slots if max_slots is None else max_slots)
        self._names = (f"{prefix}{i}" for i in itertools.count())
        self._slots: list = [None] * slots
        self._busy = [False] * slots

    def encode(self, obj: Any) -> tuple[Payload, int | None]:
        """Return ``(payload, slot)``; ``slot`` (or ``None``) is busy until :meth:`release` (or,
        for a flag sender, until the receiver has read it).

        Raises whatever ``pickle`` raises for an object that does not pickle, and
        :class:`~tpudata.errors.SharedMemoryFullError` when shared memory cannot hold it.
        """
        buffers: list[memoryview] = []
        pieces: list = []
        f = io.BytesIO()
        Pickler(f, out_of_band(buffers), pieces).dump(obj)
        data = f.getvalue()
        n_plain = len(buffers) if pieces else None
        raws = buffers + pieces
        if len(data) + sum(r.nbytes for r in raws) < INLINE_LIMIT:
            return _inline(data, raws, n_plain), None
        if self.flag:
            return self._encode_flag(data, raws, n_plain)
        layout, end = place(len(data), raws)
        slot = next((i for i, busy in enumerate(self._busy) if not busy), None)
        if slot is None:  # every slot in use: a one-off segment that the receiver unlinks
            shm = create(next(self._names), end)
            try:
                write(shm.buf, data, layout, raws)
            except BaseException:
                unlink_segment(shm)
                raise
            finally:
                shm.close()
            return ("s", shm.name, len(data), layout, n_plain), None
        shm = self._grown(slot, end)
        write(shm.buf, data, layout, raws)
        self._busy[slot] = True
        return ("r", slot, shm.name, len(data), layout, n_plain), slot

    def _encode_flag(self, data: bytes, raws: list, n_plain) -> tuple[Payload, int | None]:
        layout, end = place(len(data), raws, HEADER)
        free = [i for i, shm in enumerate(self._slots) if shm is None or shm.buf[0] == FREE]
        slot = next((i for i in free if self._slots[i] is not None and self._slots[i].size >= end),
                    free[0] if free else None)
        if slot is None and len(self._slots) < self.max_slots:
            self._slots.append(None)
            self._busy.append(False)
            slot = len(self._slots) - 1
        if slot is None:  # the receiver holds every slot: this one goes inline
            logger.debug("all %d shared-memory slots are in use; sending a payload inline",
                         len(self._slots))
            return _inline(data, raws, n_plain), None
        shm = self._grown(slot, end, end + end // 4)
        write(shm.buf, data, layout, raws, HEADER)
        shm.buf[0] = BUSY
        return ("f", slot, shm.name, len(data), layout, n_plain), slot

    def _grown(self, slot: int, end: int, new: int = 0):
        """Slot ``slot``, made (or remade larger) to hold ``end`` bytes (a new one at least
        ``new``)."""
        shm = self._slots[slot]
        if shm is not None and shm.size >= end:
            return shm
        size = max(end, new, 2 * shm.size if shm is not None else 0)
        self._drop(slot)
        shm = create(next(self._names), aligned(size, _SLOT_GRANULE), track=not self.flag)
        if self.flag:
            populate(shm._mmap)  # noqa: SLF001 - the Segment's own mapping, about to be written
            shm.buf[0] = FREE  # until a payload is written whole
        self._slots[slot] = shm
        return shm

    def slot_bytes(self) -> int:
        """Bytes of shared memory in this sender's slots."""
        return sum(shm.size for shm in self._slots if shm is not None)

    def release(self, slot: int | None) -> None:
        """The receiver has read the payload in ``slot``: it may be reused."""
        if slot is not None:
            self._busy[slot] = False

    def close(self) -> None:
        """Unlink the slots (payloads in flight in them are lost)."""
        for slot in range(len(self._slots)):
            self._drop(slot)

    def _drop(self, slot: int) -> None:
        shm = self._slots[slot]
        if shm is not None:
            self._slots[slot] = None
            shm.close()
            unlink_segment(shm)


class Held:
    """A payload left where it arrived (its slot) until :meth:`value` reads it, once."""

    __slots__ = ("receiver", "payload", "done", "result")

    def __init__(self, receiver: Receiver, payload: Payload):
        self.receiver = receiver
        self.payload = payload
        self.done = False
        self.result = None

    def value(self) -> Any:
        """The decoded payload: views of the slot where the receiver may lend, else a copy."""
        if not self.done:
            self.result = self.receiver.decode(self._take())
            self.done = True
        return self.result

    def copy_out(self) -> None:
        """Read the payload now into memory of this process, which frees its slot."""
        if not self.done:
            self.result = self.receiver.decode(self._take(), lend=False)
            self.done = True

    def drop(self) -> None:
        """The payload will not be read: its slot (or segment) is free."""
        if not self.done and self.payload is not None:
            self.receiver.drop(self._take())
        self.done = True

    def _take(self) -> Payload:
        payload, self.payload = self.payload, None
        if payload is None:
            raise ValueError("the payload's receiver is closed")
        if payload[0] == "r":
            self.receiver._held.remove(self)  # noqa: SLF001 - the receiver's own bookkeeping
        return payload


class Receiver:
    """Decodes the payloads of a :class:`Sender` (of several, for flag senders); keeps slots
    mapped.

    ``lend``: how many slots at once may be *lent* (slots freed by message only): the decoded
    arrays are then views of the slot itself instead of copies (no copy on this side), and the
    slot returns to the sender only once every one of those arrays is gone. Other payloads are
    copied out and their slot is free at once. ``slots``: how many the sender has (for
    ``take_freed(need)``). :meth:`take_freed` gives the slots to report to the sender. Flag
    slots: at most ``keep`` mapped (``keep_bytes`` together); ``sweep_prefix``: see the module.
    """

    def __init__(self, lend: int = 0, slots: int = 0, keep: int = 64, keep_bytes: int = 2 << 30,
                 sweep_prefix: str | None = None):
        self.lend = lend
        self.slots = slots
        self.keep, self.keep_bytes, self.sweep_prefix = keep, keep_bytes, sweep_prefix
        self._mapped: dict[int, tuple[str, mmap.mmap]] = {}
        self._named: collections.OrderedDict = collections.OrderedDict()  # flag slots: name -> mmap
        self._lent: set[int] = set()
        self._held: list[Held] = []  # payloads held in their slot, oldest first
        self._returned: deque = deque()  # slots free again; appended from any thread (GC)

    def hold(self, payload: Payload) -> Held:
        """Keep ``payload`` unread (in its slot) until its :class:`Held` is read or dropped."""
        held = Held(self, payload)
        if payload[0] == "r":
            self._held.append(held)
        return held

    def decode(self, payload: Payload, lend: bool = True) -> Any:
        kind = payload[0]
        if kind == "i":
            data, buffers, n_plain = payload[1:]
            return _load(data, buffers, n_plain, copy=False)
        if kind == "s":
            _, name, data_len, layout, n_plain = payload
            m = mapping(SharedMemory(name=name))
            try:
                return _copied(m, 0, data_len, layout, n_plain)
            finally:
                close_mapping(m)
                unlink(name)
        if kind == "f":
            _, slot, name, data_len, layout, n_plain = payload
            m = self._attached(name)
            try:
                return _copied(m, HEADER, data_len, layout, n_plain)
            finally:
                m[0] = FREE  # everything is copied out (or failed): the sender may reuse it
        _, slot, name, data_len, layout, n_plain = payload
        m = self._mapping(slot, name)
        if not (lend and layout and len(self._lent) < self.lend):
            try:
                return _copied(m, 0, data_len, layout, n_plain)
            finally:
                self._returned.append(slot)
        self._lent.add(slot)
        data, buffers = lend_views(m, data_len, layout, partial(self._given_back, slot))
        return _load(data, buffers, n_plain, copy=False)

    def drop(self, payload: Payload) -> None:
        """A payload that will not be read: free its segment or slot."""
        if payload[0] == "s":
            unlink(payload[1])
        elif payload[0] == "r":
            self._returned.append(payload[1])
        elif payload[0] == "f":
            self._attached(payload[2])[0] = FREE

    def take_freed(self, need: int = 0) -> list[int]:
        """The slots the sender may reuse (read, or lent and given back) since the last call.

        ``need``: payloads the sender is about to write (its tasks in flight); held payloads are
        copied out, oldest first, while the slots lent and held would leave fewer free.
        """
        out = self._take_returned()
        while self._held and self.slots - len(self._lent) - len(self._held) < need:
            self._held[0].copy_out()
        return out + self._take_returned()

    def _take_returned(self) -> list[int]:
        out = []
        while self._returned:
            out.append(self._returned.popleft())
        return out

    def _given_back(self, slot: int) -> None:
        """(from any thread: the one that drops the last array lent from ``slot``)"""
        self._lent.discard(slot)
        self._returned.append(slot)

    def settle(self) -> None:
        """Copy out every held payload (the sender's slots are about to go away)."""
        while self._held:
            self._held[0].copy_out()

    def _mapping(self, slot: int, name: str) -> mmap.mmap:
        mapped = self._mapped.get(slot)
        if mapped is not None and mapped[0] == name:
            return mapped[1]
        if mapped is not None:  # the sender grew the slot
            close_mapping(mapped[1])
        m = mapping(SharedMemory(name=name))  # of our own, which arrays lent from it keep alive
        self._mapped[slot] = (name, m)
        return m

    def _attached(self, name: str) -> mmap.mmap:
        """A flag slot's mapping; the least recently used beyond ``keep``/``keep_bytes`` are
        unmapped."""
        m = self._named.get(name)
        if m is not None:
            self._named.move_to_end(name)
            return m
        if self.sweep_prefix is not None:
            sweep_dead(self.sweep_prefix)
        m = self._named[name] = attach(name)
        for old in evict(self._named, self.keep, self.keep_bytes):
            close_mapping(old)
        return m

    def mapped_bytes(self) -> int:
        """Bytes of the sender's slots that this receiver keeps mapped."""
        return sum(len(m) for _, m in self._mapped.values()) + sum(map(len, self._named.values()))

    def close(self) -> None:
        """Unmap the slots (arrays lent from them stay valid); held payloads are lost."""
        for held in self._held:
            held.payload = None
        self._held.clear()
        for _, m in self._mapped.values():
            close_mapping(m)
        self._mapped.clear()
        while self._named:
            close_mapping(self._named.popitem()[1])


def discard(payload: Payload) -> None:
    """Free an unread payload's one-off segment or flag slot (a slot freed by message is
    released through its Sender)."""
    if payload[0] == "s":
        unlink(payload[1])
    elif payload[0] == "f":
        try:
            m = attach(payload[2], advice=None)
        except FileNotFoundError:
            return
        m[0] = FREE
        close_mapping(m)


def _inline(data: bytes, raws: list, n_plain) -> Payload:
    """An inline payload: the pickle and copies of its buffers and pieces."""
    return ("i", data, [written(r) if hasattr(r, "write_to") else bytearray(r) for r in raws],
            n_plain)


def _copied(m: mmap.mmap, data_at: int, data_len: int, layout: list, n_plain) -> Any:
    """The payload at ``data_at`` of mapping ``m``, read into memory of this process: the
    pickle's buffers copied out (numpy memory), pieces rebuilt as copies; nothing refers to
    ``m`` afterwards."""
    end = max([data_at + data_len] + [start + size for start, size in layout])
    base = np.frombuffer(m, np.uint8, count=end)
    pieces: list = []
    try:
        data = base[data_at : data_at + data_len].tobytes()
        n = len(layout) if n_plain is None else n_plain
        buffers = [np.array(base[start : start + size]) for start, size in layout[:n]]
        pieces = [base[start : start + size] for start, size in layout[n:]]
        return _load(data, buffers + pieces, n_plain, copy=True)
    finally:
        del base, pieces


def _load(data: bytes, buffers: list, n_plain, copy: bool) -> Any:
    if n_plain is None:
        return pickle.loads(data, buffers=buffers)
    return Unpickler(io.BytesIO(data), buffers[:n_plain], buffers[n_plain:], copy).load()
