"""Recycled memory for large arrays: TFRecord read buffers, image preprocessing outputs,
batches stacked or concatenated by the dataset ops.

A batch of 128 ResNet images is a 77 MB float32 array. Fresh, its pages are faulted in and
zeroed by the kernel on first write: ~0.1 CPU ms per image, a tenth of the eval preprocessing.
:func:`empty` hands out arrays over anonymous mappings instead, and a mapping comes back here for
the next batch once no array or view made from it is left (``weakref.finalize`` on the array all
views refer to), so steady-state batches reuse memory that is already mapped. At most
``KEEP`` free mappings per size and ``MAX_FREE_BYTES`` in all are kept;
:func:`release_batch_memory` drops them. :func:`concatenate` and :func:`stack` are numpy's, with
results of ``MIN_BYTES`` or more in such memory.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
import weakref

import numpy as np

__all__ = ["KEEP", "MAX_FREE_BYTES", "MIN_BYTES", "concatenate", "empty", "free_bytes", "release_batch_memory",
           "stack"]

logger = logging.getLogger(__name__)

KEEP = 64  # free mappings kept per size (a shuffle's store lets go of many read buffers at once)
MAX_FREE_BYTES = 512 << 20  # free mappings kept in all, at most
MIN_BYTES = 4 << 20  # smaller outputs come from np.empty (malloc keeps such blocks mapped)

_lock = threading.RLock()  # reentrant: a finalizer may run inside (an allocation can trigger gc)
_free: dict[int, list[mmap.mmap]] = {}
_free_bytes = 0


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker, say) starts with an unlocked lock and an empty free
    list: the parent's lock may have been held by a thread that does not exist in the child, and
    the inherited free mappings are the parent's memory."""
    global _lock, _free, _free_bytes
    _lock, _free, _free_bytes = threading.RLock(), {}, 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def empty(shape: tuple, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array, its memory reused from a dropped earlier one when
    one of the same size is free.

    >>> a = empty((4, 1024, 1024), np.float32); pointer = a.ctypes.data
    >>> del a  # no view of it is left: its memory is free for the next batch
    >>> empty((4, 1024, 1024), np.float32).ctypes.data == pointer
    True
    """
    global _free_bytes
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < MIN_BYTES:
        return np.empty(shape, dtype)
    with _lock:
        kept = _free.get(nbytes)
        mapping = kept.pop() if kept else None
        if mapping is not None:
            _free_bytes -= nbytes
    if mapping is None:
        mapping = mmap.mmap(-1, nbytes)
        if hasattr(mmap, "MADV_HUGEPAGE"):
            try:
                mapping.madvise(mmap.MADV_HUGEPAGE)
            except OSError:
                pass
    # every view of the result refers to `owner` (numpy stops collapsing bases at an array whose
    # base is not an array), so it lives exactly as long as anything made from this memory
    owner = np.frombuffer(mapping, np.uint8)
    weakref.finalize(owner, _give_back, mapping, nbytes).atexit = False
    return owner.view(dtype).reshape(shape)


def _pooled(arrays: list, n: int, rest: tuple):
    """The dtype of a pooled result of ``n`` rows shaped ``rest``, or None where numpy's own
    result is as good (small, objects, or dtypes that do not combine: numpy raises)."""
    try:
        dtype = np.result_type(*arrays)
    except (TypeError, ValueError):
        return None
    if dtype == object or n * int(np.prod(rest, dtype=np.int64)) * dtype.itemsize < MIN_BYTES:
        return None
    return dtype


def concatenate(arrays: list) -> np.ndarray:
    """``np.concatenate(arrays)`` (axis 0), a large result in recycled memory."""
    first = arrays[0]
    rest = first.shape[1:]
    if first.ndim == 0 or any(a.ndim != first.ndim or a.shape[1:] != rest for a in arrays):
        return np.concatenate(arrays)  # raises as numpy does
    n = sum(a.shape[0] for a in arrays)
    dtype = _pooled(arrays, n, rest)
    if dtype is None:
        return np.concatenate(arrays)
    return np.concatenate(arrays, out=empty((n,) + rest, dtype))


def stack(arrays: list) -> np.ndarray:
    """``np.stack(arrays)`` (axis 0), a large result in recycled memory."""
    first = arrays[0]
    if any(a.shape != first.shape for a in arrays):
        return np.stack(arrays)  # raises as numpy does
    dtype = _pooled(arrays, len(arrays), first.shape)
    if dtype is None:
        return np.stack(arrays)
    return np.stack(arrays, out=empty((len(arrays),) + first.shape, dtype))


def _give_back(mapping: mmap.mmap, nbytes: int) -> None:
    global _free_bytes
    with _lock:
        kept = _free.setdefault(nbytes, [])
        if len(kept) < KEEP and _free_bytes + nbytes <= MAX_FREE_BYTES:
            kept.append(mapping)
            _free_bytes += nbytes
    # else dropped: unmapped once the dying array's buffer export lets go of it (right after
    # this callback, which runs while the export still exists, so close() would refuse)


def free_bytes() -> int:
    """Bytes of free mappings kept for the next batches."""
    return _free_bytes


def release_batch_memory() -> int:
    """Unmap the free mappings kept for reuse; returns the bytes released. Arrays still in use
    are not affected (their memory comes back, and is kept, once they are dropped)."""
    global _free_bytes
    with _lock:
        mappings = [m for kept in _free.values() for m in kept]
        _free.clear()
        released, _free_bytes = _free_bytes, 0
    for m in mappings:
        try:
            m.close()
        except BufferError:  # still exported by an array being freed: unmapped with it
            pass
    logger.debug("released %d bytes of batch output memory", released)
    return released
