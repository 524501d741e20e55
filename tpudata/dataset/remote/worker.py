"""What runs on a worker for ``ds.distribute(...)``: one chunk of one split per task.

:func:`run_chunk` gets a :class:`ChunkRequest` - the pipeline's per-split template (pickled once
per iteration), the split's part of the source, the iteration's seeds, and where to start: the
state a previous chunk ended at (``None``: the split's start) plus elements to skip. It runs the
split's pipeline up to ``max_bytes`` of output (at least one element) and returns
``(blocks, elements, end state, done, worker, seconds)``; the blocks go in shared memory when
the consumer is on this machine (:mod:`~tpudata.dataset.remote.transport`). A worker keeps the
open iterator of each split it served (at most ``MAX_OPEN``, least recently used closed first),
so the next chunk of the split continues without a restore when it lands on the same worker;
anywhere else the split is restored from the end state: the state alone says where a chunk
starts.

A failing split raises :class:`~tpudata.errors.RemoteSplitError` naming the split, the file and
byte offset being read, the worker, and the worker's traceback.
"""

from __future__ import annotations

import collections
import os
import pickle
import socket
import sys
import threading
import time
import traceback

from tpudata.dataset.core.block import Block
from tpudata.dataset.core.iterator import Cursor, IterContext
from tpudata.dataset.core.seeds import random_nodes
from tpudata.dataset.core.state import from_jsonable, jsonable
from tpudata.dataset.parallel.processes.interleave import _options_from
from tpudata.dataset.remote.splits import instantiate
from tpudata.dataset.remote.transport import encode
from tpudata.errors import DataLossError, RemoteSplitError

__all__ = ["ChunkRequest", "MAX_OPEN", "forget", "run_chunk", "worker_name"]

MAX_OPEN = 16  # open split iterators a worker process keeps for the chunks that follow
MAX_TEMPLATES = 4
MAX_WANT = 8192  # elements asked of the pipeline at once

_LOCK = threading.Lock()
_TEMPLATES: collections.OrderedDict = collections.OrderedDict()  # job -> template Dataset
_OPEN: collections.OrderedDict = collections.OrderedDict()  # (job, split) -> _Open


class ChunkRequest:
    """One chunk of one split: everything a worker needs (small, except ``template``)."""

    __slots__ = ("job", "template", "seeds", "split", "part", "path", "flags", "seq", "state",
                 "skip", "max_bytes", "where", "files", "shm", "slot")

    def __init__(self, **fields):
        for name in self.__slots__:
            setattr(self, name, fields[name])

    def __getstate__(self):
        return {name: getattr(self, name) for name in self.__slots__}

    def __setstate__(self, state):
        for name, value in state.items():
            setattr(self, name, value)


class _Open:
    __slots__ = ("cursor", "ctx", "seq")

    def __init__(self, cursor: Cursor, ctx: IterContext, seq: int):
        self.cursor, self.ctx, self.seq = cursor, ctx, seq

    def close(self) -> None:
        self.ctx.request_stop()
        try:
            self.cursor.it.close()
        except Exception:  # closing must not fail a task
            pass


def worker_name() -> str:
    """The dask worker's address, else ``pid N on host``."""
    if "distributed" in sys.modules:
        try:
            from distributed import get_worker

            return get_worker().address
        except (ImportError, ValueError):
            pass
    return f"pid {os.getpid()} on {socket.gethostname()}"


def _template(req: ChunkRequest):
    with _LOCK:
        template = _TEMPLATES.get(req.job)
        if template is not None:
            _TEMPLATES.move_to_end(req.job)
            return template
    template = pickle.loads(req.template)
    for node, seed in zip(random_nodes(template), req.seeds):
        node._set_drawn_seed(int(seed))  # the consumer's seeds, not this process's own
    with _LOCK:
        _TEMPLATES[req.job] = template
        while len(_TEMPLATES) > MAX_TEMPLATES:
            _TEMPLATES.popitem(last=False)
    return template


def _take(req: ChunkRequest) -> _Open | None:
    """The split's open iterator, if this process holds it exactly where ``req`` starts."""
    with _LOCK:
        entry = _OPEN.pop((req.job, req.split), None)
    if entry is not None and (entry.seq != req.seq or req.skip):
        entry.close()
        return None
    return entry


def _keep(req: ChunkRequest, entry: _Open) -> None:
    with _LOCK:
        _OPEN[(req.job, req.split)] = entry
        old = [_OPEN.popitem(last=False)[1] for _ in range(len(_OPEN) - MAX_OPEN)]
    for e in old:
        e.close()


def _open(req: ChunkRequest) -> _Open:
    ds = instantiate(_template(req), req.part)
    ignore_errors, options = req.flags
    ctx = IterContext(req.path, ignore_errors=ignore_errors, options=_options_from(options))
    cursor = Cursor(ds._make_iterator(ctx))
    if req.state is not None or req.skip:
        state = from_jsonable(req.state) if req.state is not None else {
            "before": cursor.before, "pos": 0}
        cursor.set_state({"before": state["before"], "pos": int(state["pos"]) + int(req.skip),
                          "done": False})
    return _Open(cursor, ctx, req.seq)


def _read(cursor: Cursor, max_bytes: int) -> tuple[list, int, bool]:
    """Blocks up to ``max_bytes`` (at least one element); True at the split's end. The first
    block asks for one element, the next ones for what the bytes so far say fits.

    When the split's input is all read, the next block is what its ops still hold: it is
    computed now (:func:`_input_read`), so the split's end is known without another chunk (a
    block found stays in the cursor for the next chunk, which usually comes to this worker)."""
    blocks, n, nbytes, want = [], 0, 0, 1
    while nbytes < max_bytes:
        block = cursor.next_block(want)
        if block is None:
            return blocks, n, True
        blocks.append(Block(block.tree, block.leaves, block.n))  # origins stay here
        n += block.n
        nbytes += block.nbytes
        want = int(min(MAX_WANT, max(1, (max_bytes - nbytes) * n // max(nbytes, 1))))
    return blocks, n, _input_read(cursor.it) and not _peek(cursor)


def _peek(cursor: Cursor) -> bool:
    """Whether the split has more elements (fetching its next block into ``cursor``)."""
    if cursor.block is not None and cursor.pos < cursor.block.n:
        return True
    before = cursor.it.get_state() if cursor.it.exact_want else None
    if not cursor.available():
        return False
    if cursor.before is None:  # the cursor keeps no snapshot for such stages: it needs one now
        cursor.before, cursor.base = before, 0
    return True


def _input_read(it) -> bool:
    """Whether every source inside the iterator ``it`` has read all its input (a heuristic:
    False where it cannot tell; it only decides whether to look one block ahead)."""
    from tpudata.dataset.ops.take import _TakeIterator
    from tpudata.dataset.sources.files import _ArrayIterator, _FilesIterator

    leaves, todo, seen = [], [(it, 0)], set()
    while todo and len(seen) < 400:
        obj, depth = todo.pop()
        if id(obj) in seen or depth > 12:
            continue
        seen.add(id(obj))
        if isinstance(obj, (_ArrayIterator, _FilesIterator)) or (
                isinstance(obj, _TakeIterator) and obj.remaining == 0):
            leaves.append(obj)
            continue
        if isinstance(obj, (list, tuple, collections.deque)):
            todo += [(v, depth + 1) for v in obj]
        elif type(obj).__module__.startswith("tpudata.") and hasattr(obj, "__dict__"):
            todo += [(v, depth + 1) for v in vars(obj).values()
                     if hasattr(v, "__dict__") or isinstance(v, (list, tuple))]
        elif type(obj).__module__.startswith("tpudata.") and hasattr(type(obj), "__slots__"):
            todo += [(getattr(obj, k, None), depth + 1) for k in type(obj).__slots__]
    return bool(leaves) and all(_leaf_done(x) for x in leaves)


def _leaf_done(leaf) -> bool:
    from tpudata import storage
    from tpudata.dataset.sources.files import _ArrayIterator

    if isinstance(leaf, _ArrayIterator):
        return leaf.pos >= leaf.n
    if getattr(leaf, "remaining", None) == 0:
        return True
    files = leaf.files
    if leaf.file >= len(files):
        return True
    if leaf.file < len(files) - 1 or not storage.is_local(files[-1]):
        return False
    try:
        return leaf.offset >= os.path.getsize(storage.local_path(files[-1]))
    except OSError:
        return False


def _joined(blocks: list) -> list:
    if len(blocks) < 2:
        return blocks
    try:
        return [Block.concat(blocks)]  # one message part instead of many small ones
    except (ValueError, TypeError):
        return blocks


def run_chunk(req: ChunkRequest) -> tuple:
    """Run one chunk (see the module doc); the task every executor runs."""
    t0 = time.perf_counter()
    entry = None
    try:
        entry = _take(req) or _open(req)
        blocks, n, done = _read(entry.cursor, req.max_bytes)
        end = None if done else jsonable(entry.cursor.get_state())
    except BaseException as exc:
        if entry is not None:
            entry.close()
        raise split_error(req, exc, entry) from None
    if done:
        entry.close()
    else:
        entry.seq = req.seq + 1
        _keep(req, entry)
    return encode(_joined(blocks), req.shm, req.slot), n, end, done, worker_name(), time.perf_counter() - t0


def forget(job: str) -> int:
    """Close what this process holds for iteration ``job`` (the consumer is done with it)."""
    with _LOCK:
        keys = [k for k in _OPEN if k[0] == job]
        entries = [_OPEN.pop(k) for k in keys]
        _TEMPLATES.pop(job, None)
    for e in entries:
        e.close()
    return len(entries)


def _find_position(state, depth: int = 0):
    """``(file index, byte offset)`` of the file reader inside a pipeline state, if any."""
    if depth > 40:
        return None
    if isinstance(state, dict):
        if isinstance(state.get("file"), int) and isinstance(state.get("offset"), int):
            return state["file"], state["offset"]
        values = state.values()
    elif isinstance(state, (list, tuple)):
        values = state
    else:
        return None
    for value in values:
        found = _find_position(value, depth + 1)
        if found is not None:
            return found
    return None


def _position(req: ChunkRequest, exc: BaseException, entry: _Open | None):
    if isinstance(exc, DataLossError) and exc.path:
        return exc.path, exc.offset
    found = None
    if entry is not None:
        try:
            found = _find_position(entry.cursor.it.get_state())
        except Exception:  # the pipeline's state after a failure: best effort only
            found = None
    if found is None:
        return (req.files[0] if len(req.files) == 1 else None), None
    index, offset = found
    path = req.files[index] if 0 <= index < len(req.files) else (
        req.files[0] if len(req.files) == 1 else None)
    return path, offset


def split_error(req: ChunkRequest, exc: BaseException, entry: _Open | None) -> RemoteSplitError:
    """The error a failing chunk raises: the split, file and offset, worker and traceback."""
    if isinstance(exc, RemoteSplitError):
        return exc
    where = worker_name()
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    path, offset = _position(req, exc, entry)
    at = f" reading {path}" + (f" near byte offset {offset}" if offset is not None else "") \
        if path else ""
    if isinstance(exc, ModuleNotFoundError):
        hint = (f"; worker {where} lacks the module {exc.name!r} that the pipeline needs: "
                f"install it on every worker (the workers need tpudata and the packages the "
                f"pipeline's functions import)")
    else:
        hint = ""
    return RemoteSplitError(
        f"{req.where} failed on worker {where}{at}: {type(exc).__name__}: {exc}{hint}\n"
        f"the worker's traceback:\n{text}", split=req.split, path=path, offset=offset,
        worker=where, worker_traceback=text)
