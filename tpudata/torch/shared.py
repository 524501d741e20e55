"""Batches out of DataLoader workers through reused shared memory, not through a pipe.

A DataLoader worker pickles what the dataset yields into a pipe to the main process: torch gives
every tensor a fresh shared-memory segment (one file descriptor each) and byte strings go through
the pipe (pickle, kernel copies in 64 KB pieces, unpickle). With ~110 KB records that is most of
the cost, and much of it is page faults: touching fresh 4 KB pages costs about 1 ms per MB on a
VM, several times what copying costs. :func:`pack` (in the worker) copies a numpy batch once
into a block of shared memory from the worker's pool; unpickling in the main process copies it
out (into numpy memory, which Linux backs with huge pages, or into ``bytes``) and sets the
block's free flag, and the worker writes a later batch into the same block: warm pages on both
sides, one file descriptor per batch, and torch maps a block the main process already holds only
once. What arrives is exactly what :func:`to_torch` gives in process (tensors, lists of
``bytes``, :class:`ByteStrings`), owned by the main process: keeping it pins nothing. Shared
memory held: up to ``POOL_BLOCKS`` blocks per worker (a batch and a quarter each), of which the
main process keeps up to ``KEEP_MAPPED`` (``KEEP_MAPPED_BYTES``) mapped; when /dev/shm cannot
hold a block (a container's 64 MB) the batch is pickled the ordinary way, with a warning.

The blocks are torch's shared storages (no names: torch hands their file descriptors over, and
nothing is left to sweep when DataLoader kills a worker); their layout, the reservation of their
pages and the copies in and out are :mod:`tpudata._shm`'s, shared with the process map's
transport. This module keeps what is DataLoader's: the flag byte that frees a block (its queue
goes one way only), the worker's pool and the blocks the main process keeps mapped.

>>> import pickle
>>> b = {"n": np.arange(3), "s": np.array([b"ab", b"", b"c"], dtype=object)}
>>> out = pickle.loads(pickle.dumps(pack(b, "list", threshold=0)))
>>> out["n"].tolist(), out["s"]
([0, 1, 2], [b'ab', b'', b'c'])
"""

from __future__ import annotations

import collections
import logging
import os
import threading

import numpy as np
import torch

from tpudata._shm import (ALIGN, MADV_POPULATE_READ, MADV_POPULATE_WRITE, Layout, copy_out,
                          populate, put)
from tpudata.dataset.core.columns import BytesColumn
from tpudata.torch.tensors import ByteStrings, to_torch

logger = logging.getLogger(__name__)

HEADER = ALIGN  # byte 0 of a block is its flag
FREE, BUSY = 1, 2
# lists of bytes below this many bytes in all are cheaper in the pickle than in shared memory
BYTES_THRESHOLD = 64 << 10
POOL_BLOCKS = 4  # per worker: prefetch_factor (2) batches in flight + the one being copied + 1
KEEP_MAPPED = 8  # blocks the main process keeps mapped (all workers together) ...
KEEP_MAPPED_BYTES = 256 << 20  # ... and at most this many bytes of them


class _Ref:
    """A packed array in the skeleton: ``kind`` "t" (array), "l" (list of bytes) or "s"
    (ByteStrings); where its numbers (or the strings' offsets) and the strings' bytes are in
    the block; its numpy dtype and shape."""

    __slots__ = ("kind", "num_at", "num_len", "bytes_at", "bytes_len", "dtype", "shape")

    def __init__(self, kind, num_at, num_len, bytes_at, bytes_len, dtype, shape):
        self.kind, self.num_at, self.num_len = kind, num_at, num_len
        self.bytes_at, self.bytes_len, self.dtype, self.shape = bytes_at, bytes_len, dtype, shape

    def __reduce__(self):
        return (_Ref, (self.kind, self.num_at, self.num_len, self.bytes_at, self.bytes_len,
                       self.dtype, self.shape))


class PackedBatch:
    """A batch packed into a shared-memory block by :func:`pack`; pickles as the block + a
    skeleton and unpickles as the batch (:meth:`unpack` gives it in the same process)."""

    __slots__ = ("block", "skeleton", "bytes_as")

    def __init__(self, block, skeleton, bytes_as: str):
        self.block, self.skeleton, self.bytes_as = block, skeleton, bytes_as

    def unpack(self):
        return _unpack(self.block, self.skeleton, self.bytes_as)

    def __reduce__(self):
        return (_unpack, (self.block, self.skeleton, self.bytes_as))

    def __repr__(self) -> str:
        size = 0 if self.block is None else self.block.numel()
        return f"PackedBatch(block of {size} bytes)"


class _Planner:
    """First pass: the skeleton and each array's place in the block; :func:`pack` copies."""

    def __init__(self, bytes_as: str, threshold: int):
        self.bytes_as, self.threshold = bytes_as, threshold
        self.layout = Layout(HEADER)
        self.copies: list = []  # (ref, array or (items, lengths))

    def walk(self, value):
        if isinstance(value, dict):
            return {k: self.walk(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.walk(v) for v in value)
        if isinstance(value, BytesColumn):  # parsed bytes still in the read buffers
            return self._column(value)
        if not isinstance(value, np.ndarray):
            return value
        if value.dtype == object or value.dtype.kind == "S":
            return self._strings(value)
        if value.dtype.kind in "UV":
            return value.tolist()
        torch.from_numpy(np.empty(0, dtype=value.dtype))  # raises for what torch cannot hold, as to_torch does
        ref = _Ref("t", self.layout.take(value.nbytes), value.nbytes, 0, 0, value.dtype,
                   tuple(value.shape))
        self.copies.append((ref, value))
        return ref

    def _column(self, col: BytesColumn):
        return self._place(col, np.asarray(col.lengths, dtype=np.int64), (len(col),), col.tolist)

    def _strings(self, arr: np.ndarray):
        items = (arr.astype(object) if arr.dtype.kind == "S" else arr).ravel().tolist()
        if not all(type(x) is bytes for x in items):
            return to_torch(arr, self.bytes_as, False)
        lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
        return self._place(items, lengths, tuple(arr.shape), arr.tolist)

    def _place(self, items, lengths: np.ndarray, shape: tuple, as_list):
        """Byte strings (a list of bytes, or a BytesColumn) and their lengths: a list when small
        and ``bytes_as="list"``, else their place in the block (offsets, then the bytes)."""
        total = int(lengths.sum())
        if self.bytes_as == "list" and total < self.threshold:
            return as_list()
        num_len = 8 * (len(lengths) + 1)
        ref = _Ref("s" if self.bytes_as == "tensor" else "l", self.layout.take(num_len), num_len,
                   self.layout.take(total, 1), total, None, shape)
        self.copies.append((ref, (items, lengths)))
        return ref


def _populate(block: torch.Tensor, advice: int = MADV_POPULATE_WRITE) -> None:
    """Fault a block's pages in at once (:func:`tpudata._shm.populate`); for a new block, raises
    MemoryError when /dev/shm cannot hold it (writing to it would kill the worker with SIGBUS)."""
    populate(block.data_ptr(), block.numel(), advice)


class _Pool:
    """This worker's blocks; the main process sets a block's flag to FREE once it copied out."""

    def __init__(self):
        self.pid = os.getpid()
        self.blocks: list = []  # (tensor, numpy view)

    def take(self, nbytes: int) -> tuple:
        for i, (block, view) in enumerate(self.blocks):
            if view[0] == FREE and len(view) >= nbytes:
                view[0] = BUSY
                self.blocks.append(self.blocks.pop(i))
                return block, view
        size = max(1 << 20, -(-(nbytes + nbytes // 4) // (1 << 20)) * (1 << 20))
        block = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(size))
        _populate(block)
        view = block.numpy()
        view[0] = BUSY
        if len(self.blocks) >= POOL_BLOCKS:  # drop the oldest (still in use, or too small)
            self.blocks.pop(0)
        self.blocks.append((block, view))
        return block, view


_pool: _Pool | None = None


def _worker_pool() -> _Pool:
    global _pool
    if _pool is None or _pool.pid != os.getpid():  # a forked child starts its own
        _pool = _Pool()
    return _pool


def pack(batch, bytes_as: str = "list", threshold: int = BYTES_THRESHOLD) -> PackedBatch | None:
    """Copy a numpy ``batch`` (dicts/lists/tuples of arrays) into a shared-memory block (None
    when there is no shared memory to be had: the caller sends the batch the ordinary way).

    Numeric arrays, and arrays of byte strings when ``bytes_as="tensor"`` or when they hold at
    least ``threshold`` bytes, go into the block; everything else stays in the skeleton.
    """
    plan = _Planner(bytes_as, threshold)
    skeleton = plan.walk(batch)
    if plan.layout.size == HEADER:
        return PackedBatch(None, skeleton, bytes_as)
    try:
        block, view = _worker_pool().take(plan.layout.size)
    except (MemoryError, RuntimeError) as exc:  # /dev/shm full (e.g. a container's 64 MB)
        logger.warning("cannot pack a batch into shared memory (%s); pickling it instead", exc)
        return None
    for ref, value in plan.copies:
        if ref.kind == "t":
            put(view, ref.num_at, value)
            continue
        items, lengths = value
        offsets = view[ref.num_at : ref.num_at + ref.num_len].view(np.int64)
        offsets[0] = 0
        np.cumsum(lengths, out=offsets[1:])
        base = ref.bytes_at
        if isinstance(items, BytesColumn):  # straight from the read buffers
            items.copy_to(view[base : base + ref.bytes_len], offsets)
        elif ref.bytes_len and ref.bytes_len < 64 * len(items):  # many small strings: one join
            view[base : base + ref.bytes_len] = np.frombuffer(b"".join(items), dtype=np.uint8)
        else:
            for o, n, item in zip(offsets[:-1].tolist(), lengths.tolist(), items):
                if n:
                    view[base + o : base + o + n] = np.frombuffer(item, dtype=np.uint8)
    return PackedBatch(block, skeleton, bytes_as)


# the main process keeps recent blocks mapped, so that torch maps a reused block only once
_mapped: collections.OrderedDict = collections.OrderedDict()
_mapped_lock = threading.Lock()


def _keep_mapped(block: torch.Tensor) -> None:
    with _mapped_lock:
        key = block.data_ptr()
        _mapped[key] = block
        _mapped.move_to_end(key)
        while len(_mapped) > KEEP_MAPPED or (
                len(_mapped) > 1 and sum(b.numel() for b in _mapped.values()) > KEEP_MAPPED_BYTES):
            _mapped.popitem(last=False)


def _unpack(block, skeleton, bytes_as: str):
    if block is None:
        return skeleton
    with _mapped_lock:
        known = block.data_ptr() in _mapped
    if not known:  # newly mapped here: map its pages in one go
        _populate(block, MADV_POPULATE_READ)
    view = block.numpy()
    mv = memoryview(view)

    def build(node):
        if isinstance(node, dict):
            return {k: build(v) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return type(node)(build(v) for v in node)
        if not isinstance(node, _Ref):
            return node
        if node.kind == "t":
            return torch.from_numpy(copy_out(view, node.num_at, node.num_len, node.dtype, node.shape))
        offsets = view[node.num_at : node.num_at + node.num_len].view(np.int64)
        if node.kind == "s":
            values = copy_out(view, node.bytes_at, node.bytes_len, np.uint8, (node.bytes_len,))
            return ByteStrings(torch.from_numpy(values), torch.from_numpy(offsets.copy()))
        bounds = (offsets + node.bytes_at).tolist()
        items = [bytes(mv[a:b]) for a, b in zip(bounds, bounds[1:])]
        if len(node.shape) == 1:
            return items
        out = np.empty(len(items), dtype=object)
        out[:] = items
        return out.reshape(node.shape).tolist()

    try:
        return build(skeleton)
    finally:
        mv.release()
        view[0] = FREE  # everything is copied out: the worker may reuse the block
        _keep_mapped(block)


def in_worker() -> bool:
    from torch.utils.data import get_worker_info  # noqa: PLC0415

    return get_worker_info() is not None


__all__ = ["BYTES_THRESHOLD", "PackedBatch", "in_worker", "pack"]
