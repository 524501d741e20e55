"""map(fn, use_processes=True): the map iterator over worker processes, a chunk per task.

Pure-Python element functions run in :class:`~tpudata.dataset.parallel.processes.pool.ProcessMapper` workers.
Each task is a *chunk* of consecutive input elements, sent as a slice of the input's columns
(:func:`chunk_of`: a numeric column travels as one array, not as a pickle per element): the
worker applies ``fn`` to each element, flattens the outputs and stacks them into block columns
(:class:`ChunkApply`), so the parent handles one message and one block per chunk instead of per
element (the parent's CPU is what the workers share the cores with). The first chunks hold one
element; then a chunk holds about ``CHUNK_SECONDS`` of ``fn``'s work (measured in the workers),
at most ``CHUNK_MAX`` elements, about ``CHUNK_BYTES`` of outputs and a third of each worker's
share of the window (one chunk running and one queued per worker, with room for chunks done out
of order).

In-flight work is counted in elements: at most ``window`` input elements (default
``max(WINDOW, 32 * workers)``) are taken from the input and not yet delivered. State is
element-exact: the iterator keeps the input state before every chunk in flight; its state is
the one before the oldest chunk not yet delivered plus, with ``deterministic=False``, which later
elements were already delivered (skipped on restore).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import traceback
from typing import Callable

from tpudata.dataset.parallel.processes.worker import _dumps_exception
from tpudata._shm_pieces import Rows
import numpy as np

from tpudata.dataset.core.block import Block, as_column, leaf_items
from tpudata.dataset.core.iterator import BlockIterator, Cursor
from tpudata.dataset.ops.map import MapperIterator
from tpudata.dataset.core.nest import flatten, unflatten
from tpudata.dataset.core.spec import OutputChecker
from tpudata.errors import WorkerError

logger = logging.getLogger(__name__)

WINDOW = 192  # input elements in flight (at least), counted across chunks
CHUNK_MAX = 32  # elements per task at most
CHUNK_BYTES = 4 << 20  # a chunk's outputs hold about this many bytes at most
CHUNK_SECONDS = 0.01  # a chunk holds about this much of fn's work

__all__ = ["CHUNK_BYTES", "CHUNK_MAX", "CHUNK_SECONDS", "ChunkApply", "ProcessMapIterator", "WINDOW", "chunk_elements",
           "chunk_of"]


def chunk_of(block: Block) -> tuple:
    """What the parent sends for a chunk of consecutive elements: ``("cols", tree, columns)``,
    a numeric column as one array (one buffer in the pipe or shared memory, not a pickle per
    element), any other column as its user-facing values (what iterating the block gives)."""
    cols = [c if type(c) is np.ndarray and c.dtype != object else leaf_items(c)
            for c in block.leaves]
    return ("cols", block.tree, cols)


def chunk_elements(chunk) -> list:
    """The elements of a chunk: a list of elements, or what :func:`chunk_of` made."""
    if not isinstance(chunk, tuple):
        return chunk
    _, tree, cols = chunk
    items = [list(c) if type(c) is np.ndarray else c for c in cols]
    if tree.kind == "leaf":
        return items[0]
    return [unflatten(tree, row) for row in zip(*items)]


def _call(fn: Callable, element):
    if isinstance(element, tuple) and not hasattr(element, "_fields"):
        return fn(*element)
    return fn(element)


class ChunkApply:
    """Runs in a worker: ``fn`` over a chunk of elements, the outputs stacked into columns.

    Returns ``(outputs, failed, error, pid, seconds)``: ``outputs`` is ``("block", tree,
    columns, n)`` when every output has one structure, else ``("rows", [(tree, leaves), ...])``;
    ``failed`` lists ``(index, message)`` of elements dropped under ``ignore_errors``; ``error``
    is ``(index, pickled exception, traceback)`` of the first failing element (the outputs are
    those before it), or None.
    """

    def __init__(self, fn: Callable, skip_errors: bool = False):
        self.fn = fn
        self.skip_errors = skip_errors
        # what the process pool's messages call it: the user's function, over chunks
        name = getattr(fn, "__qualname__", None) or f"a {type(fn).__qualname__} object"
        self.__qualname__ = f"{name} (over chunks)"

    sent_by = "map(..., use_processes=True)"  # for the NotPicklableError

    @property
    def __wrapped__(self):  # the user's function (what errors name)
        return self.fn

    def __call__(self, chunk):
        start = time.perf_counter()
        trees, rows, failed, error = [], [], [], None
        for i, element in enumerate(chunk_elements(chunk)):
            try:
                out = _call(self.fn, element)
            except Exception as exc:
                if self.skip_errors:
                    failed.append((i, f"{type(exc).__name__}: {exc}"))
                    continue
                error = (i, _dumps_exception(exc), traceback.format_exc())
                break
            tree, leaves = flatten(out)
            trees.append(tree)
            rows.append(leaves)
        first = trees[0] if trees else None
        if rows and all(t is first or t == first for t in trees):
            cols = [_column([r[k] for r in rows]) for k in range(trees[0].num_leaves)]
            outputs = ("block", trees[0], cols, len(rows))
        else:
            outputs = ("rows", list(zip(trees, rows)))
        return outputs, failed, error, os.getpid(), time.perf_counter() - start


def _column(values: list):
    """A leaf's column: large arrays of one shape as :class:`~tpudata._shm_pieces.Rows` (the
    worker's sender writes each one straight into the message: no stacking copy), else stacked
    here (:func:`~tpudata.dataset.core.block.as_column`)."""
    return Rows.fit(values) or as_column(values)


class _Chunk:
    __slots__ = ("ps", "p_state", "state", "done")

    def __init__(self, ps: list, p_state: int, state):
        self.ps = ps  # input element numbers (since the restore point) in this chunk
        self.p_state = p_state  # the element number at ``state``
        self.state = state  # the input state before the chunk
        self.done = False


class ProcessMapIterator(MapperIterator):
    """The map iterator with ``use_processes=True`` (see the module docstring)."""

    def __init__(self, ds, input_it: BlockIterator, ctx, workers: int, deterministic: bool,
                 window: int | None = None):
        self.ds = ds
        self.ctx = ctx
        self.input_it = input_it
        self.cursor = Cursor(input_it)
        self.checker = OutputChecker(ds.name, ds.output_signature)
        self.workers = workers
        self.deterministic = deterministic
        self.window = int(window or max(WINDOW, 32 * workers))
        # a chunk running and one queued per worker, and room for the ones done out of order
        self.chunk_max = max(1, min(CHUNK_MAX, self.window // (3 * workers)))
        self.skip_errors = ctx.ignore_errors
        # deterministic=False: which chunk comes next depends on timing, so a restore cannot
        # replay "snapshot + n elements"; blocks then hold at most ``want`` elements and the
        # state after each block is exact on its own
        self.exact_want = not deterministic
        self.delivered = 0
        self.mapper = None
        self.seconds_per_element: float | None = None
        self.bytes_per_element = 0.0  # of the outputs (an average)
        self._start(skip=())

    def _start(self, skip) -> None:
        self.results = None
        self.lock = threading.RLock()
        self.book: dict[int, _Chunk] = {}  # chunk number -> its chunk
        self.fed = 0  # chunks sent
        self.low = 0  # the oldest chunk not yet delivered
        self.p = 0  # input elements read since the restore point
        self.out_p: set = set(int(s) for s in skip)  # element numbers delivered (or to skip)
        # outputs received and not yet returned: (block, their input numbers, chunk number or
        # None), or an error to raise at its turn
        self.pending: list = []

    # -- the parent's side of the chunks ---------------------------------------------------------
    def _chunk_size(self) -> int:
        if self.seconds_per_element is None:
            return 1
        by_time = CHUNK_SECONDS / max(self.seconds_per_element, 1e-7)
        by_bytes = CHUNK_BYTES / max(self.bytes_per_element, 1.0)
        return max(1, min(self.chunk_max, int(by_time), int(by_bytes)))

    def _chunks(self):
        """Chunks of input elements for the workers, recording where each one starts: a slice
        of the input's columns (:func:`chunk_of`), or a list of elements when some must be
        skipped (delivered before a restore with ``deterministic=False``)."""
        while True:
            size = self._chunk_size()
            with self.lock:
                state, p_state = self.cursor.get_state(), self.p
                if any(q >= p_state for q in self.out_p):
                    ps, chunk = self._elements(size)
                else:
                    block = self.cursor.take(size)
                    ps = range(p_state, p_state + (block.n if block is not None else 0))
                    self.p += len(ps)
                    chunk = chunk_of(block) if ps else None
                if not ps:
                    return
                self.book[self.fed] = _Chunk(list(ps), p_state, state)
                self.fed += 1
            yield chunk

    def _elements(self, size: int) -> tuple[list, list]:
        """Up to ``size`` input elements not to skip, and their numbers."""
        ps, elements = [], []
        while len(ps) < size:
            try:
                element = self.cursor.next_element()
            except StopIteration:
                break
            p = self.p
            self.p += 1
            if p in self.out_p:  # delivered before the checkpoint (deterministic=False)
                continue
            ps.append(p)
            elements.append(element)
        return ps, elements

    def _open(self):
        from tpudata.dataset.parallel.processes.pool import ProcessMapper

        in_flight = max(2, self.window // self.chunk_max)
        self.mapper = ProcessMapper(ChunkApply(self.ds.fn, self.skip_errors), self.workers,
                                    max_in_flight=in_flight, deterministic=self.deterministic)
        self.ctx.on_stop(self.mapper.close)
        self.results = self.mapper.imap(self._chunks())

    def next(self):
        if self.results is None:
            self._open()
        stop = self.ctx.stop
        while not self.pending:
            if stop.is_set():
                return None
            try:
                number, result = next(self.results)
            except StopIteration:
                return None
            except WorkerError as e:  # the worker died, or its results found no room
                raise self._in_elements(e) from e.__cause__
            self._take(number, result)
        return self._pop_pending()

    def _pop_pending(self) -> Block | None:
        """The next pending outputs: a whole chunk, or (``deterministic=False``, where the state
        after each block must be exact on its own) at most ``want`` elements of it."""
        item = self.pending[0]
        if isinstance(item, BaseException):
            self.pending.pop(0)
            raise item
        block, ps, number = item
        n = block.n if self.deterministic else min(block.n, max(1, int(self.want)))
        if n < block.n:
            self.pending[0] = (block.slice(n, block.n), ps[n:], number)
            block = block.slice(0, n)
        else:
            self.pending.pop(0)
        with self.lock:
            self.out_p.update(ps[:n])
        if number is not None and n == len(ps):
            self._delivered(number)
        return block

    def _take(self, number: int, result) -> None:
        """Queue chunk ``number``'s outputs (and its error) in ``pending``."""
        outputs, failed, error, pid, seconds = result
        chunk = self.book[number]
        n_in = len(chunk.ps) if error is None else error[0] + 1
        per = seconds / max(1, n_in)
        previous = self.seconds_per_element
        self.seconds_per_element = per if previous is None else 0.7 * previous + 0.3 * per
        dropped = {i for i, _ in failed}
        for i, message in failed:
            logger.warning("ignore_errors: %s raised on the element after output %d; dropped "
                           "it: %s", self.ds.name, self.delivered, message)
        with self.lock:
            self.out_p.update(chunk.ps[i] for i in dropped)
        block = self._block(outputs)
        if block is not None:
            per = block.nbytes / block.n
            self.bytes_per_element = max(per, 0.7 * self.bytes_per_element + 0.3 * per)
        kept = [p for i, p in enumerate(chunk.ps) if i not in dropped]
        if error is not None:  # (no element is dropped then: ignore_errors catches them all)
            kept = chunk.ps[:error[0]]
            if block is not None:
                self.pending.append((block, kept, None))
            index, exc_bytes, text = error
            self.pending.append(self._error(chunk.ps[index], pid, exc_bytes, text))
        elif block is not None:
            self.pending.append((block, kept, number))
        else:
            self._delivered(number)

    def _block(self, outputs) -> Block | None:
        if outputs[0] == "block":
            _, tree, cols, n = outputs
            self._check_columns(tree, cols, n)
            self.delivered += n
            return Block(tree, cols, n)
        rows = outputs[1]
        if not rows:
            return None
        leaves_rows = []
        for tree, leaves in rows:
            self.checker.check(tree, leaves, self.delivered)
            self.delivered += 1
            leaves_rows.append(leaves)
        return Block.from_elements(rows[0][0], leaves_rows)

    def _check_columns(self, tree, cols: list, n: int) -> None:
        """The checker over a chunk's columns: one row when every column is a plain array."""
        if self.checker.shapes is None and all(getattr(c, "dtype", None) is not None and
                                               c.dtype != object for c in cols):
            self.checker.check(tree, [c[0] for c in cols], self.delivered)
            return
        for j in range(n):
            self.checker.check(tree, [c[j] for c in cols], self.delivered + j)

    def _in_elements(self, e: WorkerError) -> WorkerError:
        """A failure of a whole task, named by this op and the input elements of its chunk
        (the process pool counts chunks, not elements)."""
        chunk = self.book.get(e.position) if e.position is not None else None
        if chunk is None or not chunk.ps:
            return e
        a, b = chunk.ps[0], chunk.ps[-1]
        span = f"input element {a}" if a == b else f"input elements {a}-{b}"
        return WorkerError(
            f"{self.ds.name} on worker processes, at {span} (counted from the start or the "
            f"restore point): {e.message}", pid=e.pid, position=a, exitcode=e.exitcode,
            worker_traceback=e.worker_traceback)

    def _error(self, p: int, pid: int, exc_bytes, text: str) -> WorkerError:
        import pickle

        summary = text.strip().splitlines()[-1] if text.strip() else "an error"
        error = WorkerError(
            f"{self.ds.name} failed on input element {p} (counted from the start or the restore "
            f"point) in worker process {pid} with {summary}; the worker's traceback:\n{text}",
            pid=pid, position=p, worker_traceback=text)
        try:
            error.__cause__ = pickle.loads(exc_bytes) if exc_bytes is not None else None
        except Exception:
            pass
        return error

    def _delivered(self, number: int) -> None:
        with self.lock:
            chunk = self.book[number]
            chunk.done = True
            low = self.low
            while low < self.fed and self.book[low].done:
                del self.book[low]
                low += 1
            self.low = low
            if self.out_p:
                p_low = self.book[low].p_state if low < self.fed else self.p
                self.out_p = {q for q in self.out_p if q >= p_low}

    # -- state -------------------------------------------------------------------------------------
    def get_state(self):
        with self.lock:
            if self.low < self.fed:
                chunk = self.book[self.low]
                p0, state = chunk.p_state, chunk.state
            else:
                p0, state = self.p, self.cursor.get_state()
            skip = sorted(p - p0 for p in self.out_p if p >= p0)
        return {"input": state, "skip": skip, "delivered": self.delivered,
                "checker": self.checker.get_state()}
