"""Moving dataset elements between processes: pickle protocol 5, numpy buffers through shared memory.

An element (nested dicts/tuples/lists of numpy arrays, scalars, bytes) is pickled with protocol 5 so
that numpy arrays (of 4 KB or more) come out as out-of-band buffers instead of being copied into
the pickle. A small
payload (under ``INLINE_LIMIT`` bytes, pickle and buffers together) travels inline in the pipe
message. A large one is written once into shared memory and the message carries only the segment's
name and layout: a :class:`Sender` keeps a few reusable segments ("slots", mapped once and grown
when needed) and falls back to a one-off segment when all are busy. The :class:`Receiver` copies
each buffer out into its own memory (its arrays are ordinary, writable and independent of the
segment), unlinks one-off segments and keeps slots mapped; or, for up to ``lend`` slots at a time,
*lends* the slot: its arrays are views of the slot (no copy), which goes back to the sender once
they are all gone. The receiver's side tells the sender which slots are free again
(:meth:`Receiver.take_freed`, then :meth:`Sender.release`). Pipe messages therefore stay small,
whatever the elements weigh.

A payload need not be read when it arrives: :meth:`Receiver.hold` leaves it in its slot until
its :class:`Held` is read (lent then if the receiver may lend, which it usually may: what was
lent before has gone by then). ``take_freed(need)`` keeps the sender able to write ``need``
more payloads into slots: it copies the oldest held payloads out first where the slots held
would leave fewer free (so the sender rarely needs a one-off segment).

:class:`Rows` (same-shape arrays, e.g. the outputs of a chunk of elements) travel as one stacked
array: the sender writes each row straight into the payload, so the rows are copied once instead
of being stacked first and then copied.

Segment names start with the sender's prefix, so the owner can sweep away segments that a killed
process left behind (:func:`sweep`). The segments themselves (creation with pages reserved,
unlinking, sweeping), the layout and the out-of-band pickling are :mod:`tpudata._shm`'s, shared
with the other transports; this module is the slots' protocol.

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

import io
import itertools
import mmap
import pickle
from collections import deque
from functools import partial
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from tpudata._shm import (OUT_OF_BAND_MIN, close_mapping, create, mapping, out_of_band, place, read,
                          sweep, unlink, unlink_segment, write)
from tpudata._shm import lend as lend_views  # decode's argument is named lend

INLINE_LIMIT = 16 * 1024  # bytes of pickle + buffers from which a payload goes through shared memory
_SLOT_GRANULE = 64 * 1024

# ("i", pickle_bytes, [bytearray, ...], n)                  inline
# ("s", name, pickle_len, [(offset, size), ...], n)          one-off segment: the receiver unlinks it
# ("r", slot, name, pickle_len, [(offset, size), ...], n)    the sender's slot: released, not unlinked
# n: None, or how many of the buffers are pickle's out-of-band buffers; the others hold Rows
Payload = tuple

__all__ = ["Held", "INLINE_LIMIT", "Receiver", "Rows", "Sender", "discard", "sweep", "unlink"]


class Rows:
    """Arrays of one shape and dtype that travel as one stacked array (``len(rows)`` first).

    A :class:`Sender` writes the rows one after the other into the payload; the receiver gets
    the stacked array. Pickled any other way, a Rows becomes that array too.
    """

    __slots__ = ("rows", "shape", "dtype", "nbytes")

    def __init__(self, rows: list):
        first = rows[0]
        self.rows = rows
        self.shape = (len(rows),) + first.shape
        self.dtype = first.dtype
        self.nbytes = first.nbytes * len(rows)

    def __reduce__(self):
        return (np.stack, (self.rows,))

    @staticmethod
    def fit(values: list) -> Rows | None:
        """A Rows of ``values`` when they are numeric arrays (not scalars) of one shape and
        dtype, together at least ``OUT_OF_BAND_MIN`` bytes; else None."""
        first = values[0]
        if type(first) is not np.ndarray or first.ndim == 0 or first.dtype == object:
            return None
        shape, dtype = first.shape, first.dtype
        for v in values:
            if type(v) is not np.ndarray or v.shape != shape or v.dtype != dtype:
                return None
        if first.nbytes * len(values) < OUT_OF_BAND_MIN:
            return None
        return Rows(values)

    def write_to(self, view: memoryview) -> None:
        """Each row into its place in ``view`` (one copy, no stacking first)."""
        out = np.frombuffer(view, dtype=self.dtype).reshape(self.shape)
        for k, row in enumerate(self.rows):
            out[k] = row
        del out
        view.release()


class _Pickler(pickle.Pickler):
    """Protocol 5 with out-of-band buffers; :class:`Rows` become persistent ids."""

    def __init__(self, file, buffer_callback, rows: list):
        super().__init__(file, protocol=5, buffer_callback=buffer_callback)
        self.rows = rows

    def persistent_id(self, obj):
        if type(obj) is Rows:
            self.rows.append(obj)
            return (len(self.rows) - 1, obj.shape, obj.dtype.str)
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, buffers: list, rows: list):
        super().__init__(file, buffers=buffers)
        self.rows = rows

    def persistent_load(self, pid):
        index, shape, dtype = pid
        return np.frombuffer(self.rows[index], dtype=np.dtype(dtype)).reshape(shape)


class Sender:
    """Encodes payloads for one receiver, reusing ``slots`` shared-memory segments."""

    def __init__(self, prefix: str, slots: int = 2):
        self.prefix = prefix
        self._names = (f"{prefix}{i}" for i in itertools.count())
        self._slots: list[SharedMemory | None] = [None] * slots
        self._busy = [False] * slots

    def encode(self, obj: Any) -> tuple[Payload, int | None]:
        """Return ``(payload, slot)``; ``slot`` (or ``None``) is busy until :meth:`release`.

        Raises whatever ``pickle`` raises for an object that does not pickle.
        """
        buffers: list[memoryview] = []
        rows: list[Rows] = []
        f = io.BytesIO()
        _Pickler(f, out_of_band(buffers), rows).dump(obj)
        data = f.getvalue()
        n_plain = len(buffers) if rows else None
        raws = buffers + rows
        if len(data) + sum(r.nbytes for r in raws) < INLINE_LIMIT:
            return ("i", data, [_bytes_of(r) for r in raws], n_plain), None
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
        shm = self._slots[slot]
        if shm is None or shm.size < end:
            size = max(end, 2 * shm.size if shm is not None else 0)
            self._drop(slot)
            shm = self._slots[slot] = create(
                next(self._names), -(-size // _SLOT_GRANULE) * _SLOT_GRANULE)
        write(shm.buf, data, layout, raws)
        self._busy[slot] = True
        return ("r", slot, shm.name, len(data), layout, n_plain), slot

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
    """Decodes the payloads of one :class:`Sender`; keeps its slots mapped.

    ``lend``: how many slots at once may be *lent*: the decoded arrays are then views of the
    slot itself instead of copies (no copy on this side), and the slot returns to the sender
    only once every one of those arrays is gone. Other payloads are copied out and their slot is
    free at once. ``slots``: how many the sender has (for ``take_freed(need)``).
    :meth:`take_freed` gives the slots to report to the sender.
    """

    def __init__(self, lend: int = 0, slots: int = 0):
        self.lend = lend
        self.slots = slots
        self._mapped: dict[int, tuple[str, mmap.mmap]] = {}
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
        elif kind == "s":
            _, name, data_len, layout, n_plain = payload
            shm = SharedMemory(name=name)
            try:
                with shm.buf[:] as view:
                    data, buffers = read(view, data_len, layout)
            finally:
                shm.close()
                unlink_segment(shm)
        else:
            _, slot, name, data_len, layout, n_plain = payload
            m = self._mapping(slot, name)
            if lend and layout and len(self._lent) < self.lend:
                data, buffers = lend_views(m, data_len, layout, partial(self._given_back, slot))
                self._lent.add(slot)
            else:
                with memoryview(m) as view:
                    data, buffers = read(view, data_len, layout)
                self._returned.append(slot)
        if n_plain is None:
            return pickle.loads(data, buffers=buffers)
        return _Unpickler(io.BytesIO(data), buffers[:n_plain], buffers[n_plain:]).load()

    def drop(self, payload: Payload) -> None:
        """A payload that will not be read: free its segment or slot."""
        if payload[0] == "s":
            unlink(payload[1])
        elif payload[0] == "r":
            self._returned.append(payload[1])

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

    def close(self) -> None:
        """Unmap the slots (arrays lent from them stay valid); held payloads are lost."""
        for held in self._held:
            held.payload = None
        self._held.clear()
        for _, m in self._mapped.values():
            close_mapping(m)
        self._mapped.clear()


def discard(payload: Payload) -> None:
    """Free an unread payload's one-off segment (a slot is released through its Sender)."""
    if payload[0] == "s":
        unlink(payload[1])


def _bytes_of(r) -> bytearray:
    """An inline payload's copy of an out-of-band buffer or of :class:`Rows`."""
    if type(r) is not Rows:
        return bytearray(r)
    out = bytearray(r.nbytes)
    r.write_to(memoryview(out))
    return out
