"""Batches out of DataLoader workers through reused shared memory, not through a pipe.

A DataLoader worker pickles what the dataset yields into a pipe to the main process: torch gives
every tensor a fresh shared-memory segment (one file descriptor each) and byte strings go through
the pipe (pickle, kernel copies in 64 KB pieces, unpickle). With ~110 KB records that is most of
the cost, and much of it is page faults: touching fresh 4 KB pages costs about 1 ms per MB on a
VM, several times what copying costs. :func:`pack` (in the worker) writes a numpy batch once
into a slot of the worker's :class:`tpudata._shm_transport.Sender`, the transport the process
map uses too; what crosses DataLoader's queue is the slot's name and layout. Unpickling in the
main process copies the batch out (into numpy memory, which Linux backs with huge pages, or into
``bytes``) and sets the slot's free flag (the queue goes one way only), and the worker writes a
later batch into the same slot: warm pages on both sides. What arrives is exactly what
:func:`to_torch` gives in process (tensors, lists of ``bytes``, :class:`ByteStrings`), owned by
the main process: keeping it pins nothing.

Shared memory held: up to ``SLOTS`` slots per worker (``MAX_SLOTS`` while the main process holds
them all; a batch and a quarter each), of which the main process keeps up to ``KEEP_MAPPED``
(``KEEP_MAPPED_BYTES``) mapped. A worker unlinks its slots when it exits; the main process
removes those of workers that were killed whenever it maps a new one. When /dev/shm cannot hold
a slot (a container's 64 MB) the batch is pickled the ordinary way, with a warning.

>>> import pickle
>>> b = {"n": np.arange(3), "s": np.array([b"ab", b"", b"c"], dtype=object)}
>>> out = pickle.loads(pickle.dumps(pack(b, "list", threshold=0)))
>>> out["n"].tolist(), out["s"]
([0, 1, 2], [b'ab', b'', b'c'])
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
from multiprocessing import util

import numpy as np
import torch

from tpudata._shm import OUT_OF_BAND_MIN
from tpudata._shm_transport import Receiver, Rows, Sender, StringValues, Strings
from tpudata.dataset.core.columns import BytesColumn
from tpudata.errors import SharedMemoryFullError
from tpudata.torch.tensors import ByteStrings, to_torch

logger = logging.getLogger(__name__)

PREFIX = "tpd_t"  # a worker's slots are tpd_t<pid>_<token>_<n>
# lists of bytes below this many bytes in all are cheaper in the pickle than in shared memory
BYTES_THRESHOLD = 64 << 10
SLOTS = 4  # per worker: prefetch_factor (2) batches in flight + the one being copied + 1
MAX_SLOTS = 8  # per worker, while the main process holds the first ones; then batches go inline
KEEP_MAPPED = 8  # slots the main process keeps mapped (all workers together) ...
KEEP_MAPPED_BYTES = 256 << 20  # ... and at most this many bytes of them


class PackedBatch:
    """A batch written into a worker's shared-memory slot by :func:`pack`; pickles as the
    transport's payload and unpickles as the batch (:meth:`unpack` gives it in the same
    process)."""

    __slots__ = ("payload", "bytes_as")

    def __init__(self, payload: tuple, bytes_as: str):
        self.payload, self.bytes_as = payload, bytes_as

    def unpack(self):
        return _unpack(self.payload, self.bytes_as)

    def __reduce__(self):
        return (_unpack, (self.payload, self.bytes_as))

    def __repr__(self) -> str:
        where = "inline" if self.payload[0] == "i" else f"in {self.payload[2]}"
        return f"PackedBatch({where})"


def _prepare(value, bytes_as: str, threshold: int):
    """The batch as the transport should carry it: large numeric arrays and byte strings as
    pieces (copied once into the slot), small ones and everything else as they are (or as
    :func:`to_torch` would give them, where the main process could not make them)."""
    if isinstance(value, dict):
        return {k: _prepare(v, bytes_as, threshold) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_prepare(v, bytes_as, threshold) for v in value)
    if isinstance(value, BytesColumn):  # parsed bytes still in the read buffers
        if bytes_as == "list" and value.nbytes < threshold:
            return _Final(value.tolist())
        return Strings.of(value, as_values=bytes_as == "tensor")
    if not isinstance(value, np.ndarray):
        return value
    if value.dtype == object or value.dtype.kind == "S":
        strings = Strings.of(value, as_values=bytes_as == "tensor")
        if strings is None:  # not all bytes: as in process (a list, or TypeError for tensors)
            return _Final(to_torch(value, bytes_as, False))
        if bytes_as == "list" and strings.total < threshold:
            return _Final(value.tolist())
        return strings
    if value.dtype.kind in "UV":
        return _Final(value.tolist())
    torch.from_numpy(np.empty(0, dtype=value.dtype))  # raises for what torch cannot hold, as to_torch does
    return Rows.of(value) if value.nbytes >= OUT_OF_BAND_MIN else value


class _Final:
    """A value already as the main process must get it (the main process unwraps it)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __reduce__(self):
        return (_Final, (self.value,))


_sender: Sender | None = None


def _own_sender() -> Sender | None:
    """This process's sender, if it made one (a forked child's parent's is not its own)."""
    own = _sender is not None and _sender.prefix.startswith(f"{PREFIX}{os.getpid()}_")
    return _sender if own else None


def _worker_sender() -> Sender:
    """This process's sender (a forked child makes its own), unlinked when the process exits."""
    global _sender
    if _own_sender() is None:
        prefix = f"{PREFIX}{os.getpid()}_{secrets.token_hex(4)}_"  # unique, whatever came before
        _sender = Sender(prefix, slots=SLOTS, flag=True, max_slots=MAX_SLOTS)
        util.Finalize(None, _sender.close, exitpriority=0)  # at a DataLoader worker's exit
    return _sender


def pack(batch, bytes_as: str = "list", threshold: int = BYTES_THRESHOLD) -> PackedBatch | None:
    """Write a numpy ``batch`` (dicts/lists/tuples of arrays) into a shared-memory slot (None
    when there is no shared memory to be had: the caller sends the batch the ordinary way).

    Numeric arrays of 4 KB or more, and arrays of byte strings when ``bytes_as="tensor"`` or
    when they hold at least ``threshold`` bytes, go into the slot; everything else stays in the
    pickle.
    """
    prepared = _prepare(batch, bytes_as, threshold)
    try:
        payload, _ = _worker_sender().encode(prepared)
    except (SharedMemoryFullError, OSError, ImportError) as exc:  # /dev/shm full (a container's
        # 64 MB), or no POSIX shared memory on this platform
        logger.warning("cannot pack a batch into shared memory (%s); pickling it instead", exc)
        return None
    return PackedBatch(payload, bytes_as)


# the main process's side: one receiver for all workers' slots, kept mapped
_receiver: Receiver | None = None
_receiver_lock = threading.Lock()


def _unpack(payload: tuple, bytes_as: str):
    global _receiver
    with _receiver_lock:
        if _receiver is None:
            _receiver = Receiver(keep=KEEP_MAPPED, keep_bytes=KEEP_MAPPED_BYTES, sweep_prefix=PREFIX)
        batch = _receiver.decode(payload)
    return _to_torch(batch)


def held_bytes() -> int:
    """Shared memory this process holds for DataLoader batches: its worker slots (in a worker)
    and the slots it keeps mapped (in the main process); for :func:`tpudata.info`."""
    sender = _own_sender()
    own = sender.slot_bytes() if sender is not None else 0
    with _receiver_lock:
        return own + (_receiver.mapped_bytes() if _receiver is not None else 0)


def _to_torch(value):
    """What the transport gives (numpy arrays, lists of bytes, StringValues) as tensors."""
    if isinstance(value, dict):
        return {k: _to_torch(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(map(_to_torch, value))
    if type(value) is _Final:
        return value.value
    if isinstance(value, StringValues):
        return ByteStrings(torch.from_numpy(value.values), torch.from_numpy(value.offsets))
    if isinstance(value, np.ndarray):  # numeric: what _prepare left
        return to_torch(value)
    return value


def in_worker() -> bool:
    from torch.utils.data import get_worker_info  # noqa: PLC0415

    return get_worker_info() is not None


__all__ = ["BYTES_THRESHOLD", "PackedBatch", "held_bytes", "in_worker", "pack"]
