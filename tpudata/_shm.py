"""Shared-memory segments and what goes in them: the one home of the mechanism under tpudata's
two transports (:mod:`tpudata._shm_transport`, the sender's slots, for process maps and the torch
bridge's DataLoader workers; :mod:`tpudata.dataset.remote.transport`, a distributed consumer's
slots). Each transport keeps only its own protocol (who frees what, and how it tells the other
side).

- **Segments**: :func:`create` reserves a new segment's pages at once, so that a full
  ``/dev/shm`` raises :class:`~tpudata.errors.SharedMemoryFullError` (:func:`full_error`) instead
  of SIGBUS killing the process at its first write; with ``track=False`` it is a
  :class:`Segment` that multiprocessing's resource tracker does not know. :func:`mapping` gives
  a mapping of one's own that arrays lent from it keep alive; :func:`attach` maps a segment by
  name without the tracker; :func:`populate` fills a mapping's page tables at once; :func:`evict`
  keeps a cache of mappings bounded. :func:`unlink`, :func:`sweep` (every segment of a name prefix: what
  killed processes left) and :func:`sweep_dead` (those whose owner's pid, in the name, is gone).
- **Layout**: pieces at ``ALIGN``-aligned offsets (:class:`Layout`, :func:`place`).
- **Pickle protocol 5**: numpy buffers of ``OUT_OF_BAND_MIN`` bytes or more out of band
  (:func:`out_of_band`), written beside the pickle (:func:`write`) and read back as views lent
  from the segment (:func:`lend`).

>>> import numpy as np
>>> buffers = []
>>> data = pickle.dumps(np.arange(1000), protocol=5, buffer_callback=out_of_band(buffers))
>>> layout, end = place(len(data), buffers)
>>> [at % ALIGN for at, _ in layout], end % ALIGN
([0], 0)
>>> shm = create("tpd_doc_shm", end)
>>> write(shm.buf, data, layout, buffers)
>>> m = mapping(shm)
>>> back_data, back = lend(m, len(data), layout, on_free=lambda: None)
>>> int(pickle.loads(back_data, buffers=back).sum())
499500
>>> del back; close_mapping(m); sweep("tpd_doc_shm")
['tpd_doc_shm']
"""

from __future__ import annotations

import errno
import mmap
import os
import pickle
import weakref
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory

import numpy as np

from tpudata._processes import pid_alive
from tpudata.errors import SharedMemoryFullError

__all__ = ["ALIGN", "Layout", "OUT_OF_BAND_MIN", "SHM_DIR", "Segment", "aligned", "attach",
           "close_mapping", "create", "evict", "full_error", "lend", "mapping", "out_of_band",
           "place", "populate", "sweep", "sweep_dead", "unlink", "unlink_segment", "write"]

ALIGN = 64  # every piece of a segment starts at a multiple of this
OUT_OF_BAND_MIN = 4096  # numpy buffers from this size travel beside the pickle, not inside
SHM_DIR = "/dev/shm"
MADV_POPULATE_READ, MADV_POPULATE_WRITE = 22, 23



def aligned(n: int, align: int = ALIGN) -> int:
    return -(-n // align) * align


class Layout:
    """Places in a segment: each piece at the next multiple of its alignment after the last;
    ``size`` is where the last one ends."""

    __slots__ = ("size",)

    def __init__(self, start: int = 0):
        self.size = start

    def take(self, nbytes: int, align: int = ALIGN) -> int:
        at = aligned(self.size, align)
        self.size = at + nbytes
        return at


def place(data_len: int, buffers: list, data_at: int = 0) -> tuple[list, int]:
    """``([(offset, size), ...], end)``: the buffers after a ``data_len``-byte pickle at
    ``data_at``, each aligned; ``end`` (aligned) is the segment size they need."""
    layout = Layout(data_at + data_len)
    spans = [(layout.take(b.nbytes), b.nbytes) for b in buffers]
    return spans, aligned(layout.size)


def out_of_band(buffers: list):
    """A pickle ``buffer_callback`` that appends the raw buffers of ``OUT_OF_BAND_MIN`` bytes or
    more to ``buffers`` (they travel out of band) and leaves smaller ones in the pickle."""

    def callback(buffer: pickle.PickleBuffer) -> bool:
        raw = buffer.raw()
        if raw.nbytes < OUT_OF_BAND_MIN:
            return True  # small: cheaper inside the pickle
        buffers.append(raw)
        return False

    return callback


def write(buf, data: bytes, layout: list, buffers: list, data_at: int = 0) -> None:
    """The pickle at offset ``data_at`` of ``buf`` and each buffer at its place; a buffer with a
    ``write_to(view)`` method (the transport's Rows and Strings) writes itself there."""
    buf[data_at : data_at + len(data)] = data
    for (start, size), b in zip(layout, buffers):
        if hasattr(b, "write_to"):
            b.write_to(buf[start : start + size])
        else:
            buf[start : start + size] = b


def lend(m: mmap.mmap, data_len: int, layout: list, on_free) -> tuple[bytes, list]:
    """The pickle and views of the buffers in mapping ``m``; ``on_free`` runs once no array made
    from them is left."""
    end = max([data_len] + [start + size for start, size in layout])  # no buffers: the pickle alone
    base = np.frombuffer(m, np.uint8, count=end)
    weakref.finalize(base, on_free).atexit = False
    return base[:data_len].tobytes(), [base[start : start + size] for start, size in layout]


class Segment:
    """A segment this process made and will unlink itself, kept out of multiprocessing's
    resource tracker (which a process without one would start for it: a DataLoader worker
    forked from a main process that has none). Has what :func:`mapping`, :func:`unlink_segment`
    and the transports use of a ``SharedMemory``: ``name``, ``size``, ``buf``, ``close``,
    ``unlink``."""

    def __init__(self, name: str, size: int):
        import _posixshmem  # noqa: PLC0415 - POSIX only, as the transports that make these

        self._name = name
        self.buf = self._mmap = None
        self._fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
        try:
            if size:
                os.ftruncate(self._fd, size)
            self.size = size
            self._mmap = mmap.mmap(self._fd, size) if size else None
        except OSError:
            self.close()
            self.unlink()
            raise
        self.buf = memoryview(self._mmap) if size else memoryview(b"")

    @property
    def name(self) -> str:
        return self._name

    def close(self) -> None:
        if self.buf is not None:
            self.buf.release()
            self.buf = None
        if self._mmap is not None:
            close_mapping(self._mmap)
            self._mmap = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def unlink(self) -> None:
        import _posixshmem  # noqa: PLC0415

        _posixshmem.shm_unlink("/" + self._name)


def populate(m: mmap.mmap, advice: int = MADV_POPULATE_WRITE) -> None:
    """Fill the page tables of mapping ``m`` in one call (``MADV_POPULATE_WRITE`` for a mapping
    about to be written whole, ``MADV_POPULATE_READ`` read whole; Linux >= 5.14): a fault per
    4 KB page costs more than the copying itself. Elsewhere the pages come in as they are used."""
    try:
        m.madvise(advice)
    except (OSError, ValueError, AttributeError):
        pass


def attach(name: str, size: int | None = None, advice: int | None = MADV_POPULATE_READ) -> mmap.mmap:
    """A read-write mapping of ``size`` bytes (default all) of the existing segment ``name``
    (FileNotFoundError if it is gone), not registered with multiprocessing's resource tracker:
    the segment's maker unlinks it. ``advice``: how its page tables are filled at once
    (:func:`populate`; None: as pages are used)."""
    import _posixshmem  # noqa: PLC0415

    fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
    try:
        m = mmap.mmap(fd, os.fstat(fd).st_size if size is None else size)
    finally:
        os.close(fd)
    if advice is not None:
        populate(m, advice)
    return m


def evict(mapped: dict, keep: int, keep_bytes: int) -> list[mmap.mmap]:
    """Pop the least recently used mappings of ``mapped`` (an OrderedDict, oldest first) while
    it holds more than ``keep`` of them or ``keep_bytes`` together (the newest always stays);
    return them for the caller to close."""
    out = []
    total = sum(len(m) for m in mapped.values())
    while len(mapped) > 1 and (len(mapped) > keep or total > keep_bytes):
        old = mapped.popitem(last=False)[1]
        total -= len(old)
        out.append(old)
    return out


def create(name: str, size: int, track: bool = True) -> SharedMemory | Segment:
    """A new segment with its pages reserved now (``posix_fallocate``): where shared memory
    cannot hold it, :class:`~tpudata.errors.SharedMemoryFullError` says so, instead of SIGBUS
    killing the process at the first write to a page that finds no room. ``track=False``: a
    :class:`Segment`, which multiprocessing's resource tracker does not know (its maker must
    unlink it; :func:`sweep_dead` finds those of makers that died)."""
    shm = SharedMemory(name=name, create=True, size=size) if track else Segment(name, size)
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is None or not size:
        return shm
    try:
        fallocate(shm._fd, 0, size)  # noqa: SLF001 - SharedMemory keeps no public fd
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
            return shm  # a file system that cannot reserve: pages come on first write, as before
        shm.close()
        unlink_segment(shm)
        raise full_error(size) from None
    return shm


def full_error(size: int) -> SharedMemoryFullError:
    """The error for a ``size``-byte segment that shared memory cannot hold (its free space said)."""
    free = total = None
    try:
        st = os.statvfs(SHM_DIR)
        free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    except OSError:
        pass
    have = f" ({free / 1e6:.1f} MB free of {total / 1e6:.0f} MB)" if free is not None else ""
    return SharedMemoryFullError(
        f"shared memory {SHM_DIR}{have} cannot hold a {size / 1e6:.1f} MB segment of elements "
        "moving between processes; give it more room (docker run --shm-size=2g; on Kubernetes "
        "an emptyDir with medium: Memory mounted at /dev/shm), or use fewer workers or smaller "
        "elements", size=size, free=free)


def mapping(shm: SharedMemory, size: int | None = None) -> mmap.mmap:
    """A mapping of its own of the open segment ``shm`` (``size`` bytes, default all), which
    arrays lent from it keep alive; ``shm`` itself is closed."""
    try:
        return mmap.mmap(shm._fd, shm.size if size is None else size)  # noqa: SLF001 - no public fd
    finally:
        shm.close()


def close_mapping(m: mmap.mmap) -> None:
    try:
        m.close()
    except BufferError:  # arrays lent from it still live: it is unmapped when they are gone
        pass


def unlink_segment(shm: SharedMemory | Segment) -> bool:
    """Unlink ``shm``; return whether it still existed (multiprocessing's resource tracker is
    kept in step either way)."""
    try:
        shm.unlink()  # also unregisters it from multiprocessing's resource tracker
    except FileNotFoundError:
        if isinstance(shm, Segment):
            return False
        resource_tracker.unregister(shm._name, "shared_memory")  # noqa: SLF001 - keep the tracker in step
        return False
    return True


def unlink(name: str) -> bool:
    """Remove the segment ``name`` if it still exists; return whether it did."""
    try:
        shm = SharedMemory(name=name)
    except FileNotFoundError:
        return False
    shm.close()
    return unlink_segment(shm)


def sweep(prefix: str) -> list[str]:
    """Unlink every segment whose name starts with ``prefix`` (where the platform lists them).

    Returns the names removed. Used after worker processes ended, to free segments a killed
    process created but never handed over.
    """
    try:
        names = [n for n in os.listdir(SHM_DIR) if n.startswith(prefix)]
    except OSError:  # no /dev/shm (macOS): the owner relies on what it tracked
        return []
    return sorted(n for n in names if unlink(n))


def sweep_dead(prefix: str) -> None:
    """Unlink the segments named ``<prefix><pid>_...`` whose process ``pid`` is gone."""
    try:
        names = [n for n in os.listdir(SHM_DIR) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        pid = name[len(prefix):].split("_", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            unlink(name)
