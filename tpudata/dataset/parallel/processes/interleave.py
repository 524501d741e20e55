"""interleave(map_func, use_processes=True): each file's dataset runs in a worker process.

For per-file work in Python that holds the GIL (a generator that decodes a custom format, a
``map`` of pure-Python parsing inside the per-file dataset), the interleave's function and the
dataset it returns run in :class:`~tpudata.dataset.parallel.processes.pool.ProcessMapper` workers
(forkserver/spawn), not in this process. Each open file is served by one worker
(:class:`SubDatasetServer` keeps its iterator there) and read ahead by blocks: the worker sends
each block with the sub-iterator's state after it, so the interleave's state stays element-exact
(a restore reopens the file's dataset in a worker from that state and skips the elements taken
since). The interleave's order, ``cycle_length``, ``block_length`` and ``deterministic`` are those
of the threaded interleave.

``map_func`` must pickle (a module-level function, or anything with cloudpickle installed). It
is called in the worker with the input element (a file name: bytes). Errors raised by it or by
its dataset reach the consumer as :class:`~tpudata.errors.WorkerError` with the worker's
traceback; a worker that dies gives a clear WorkerError; ``close()`` stops the workers.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Callable

from tpudata.dataset.core.iterator import DEFAULT_WANT, BlockIterator, Cancelled, IterContext
from tpudata.dataset.parallel.reader_pool import END, hand_over
from tpudata.dataset.core.state import from_jsonable, jsonable

logger = logging.getLogger(__name__)

__all__ = ["ProcessReader", "ProcessReaderPool", "SubDatasetServer"]



def _options_args(options) -> tuple:
    return (options.deterministic, options.autotune.cpu_budget,
            options.threading.private_threadpool_size)


def _options_from(args: tuple):
    from tpudata.dataset.core.options import Options

    options = Options()
    options.deterministic = args[0]
    if args[1] is not None:
        options.autotune.cpu_budget = args[1]
    if args[2] is not None:
        options.threading.private_threadpool_size = args[2]
    return options


class SubDatasetServer:
    """Runs in a worker: the open sub-datasets of the files this worker serves.

    Requests: ``("open", sid, element, path, flags, state)`` calls ``fn(element)`` and starts
    its dataset's iterator (restored to ``state`` unless None); ``("read", sid)`` returns
    ``(block or None at the end, state after it)``; ``("close", sid)``.
    """

    sent_by = "interleave(..., use_processes=True)"  # for the NotPicklableError

    def __init__(self, fn: Callable):
        self.fn = fn
        self.open: dict = {}

    @property
    def __wrapped__(self):  # the user's function (what errors name)
        return self.fn

    def __call__(self, request: tuple):
        kind, sid = request[0], request[1]
        if kind == "open":
            return self._open(*request[1:])
        if kind == "read":
            it = self.open[sid]
            it.want = DEFAULT_WANT
            block = it.next()
            after = jsonable(it.get_state())
            if block is None:
                self.open.pop(sid).close()
            return block, after
        it = self.open.pop(sid, None)
        if it is not None:
            it.close()
        return None

    def _open(self, sid, element, path, flags, state):
        from tpudata.dataset.core.base import Dataset

        old = self.open.pop(sid, None)
        if old is not None:
            old.close()
        args = element if isinstance(element, tuple) and not hasattr(element, "_fields") else (element,)
        sub = self.fn(*args)
        if not isinstance(sub, Dataset):
            raise TypeError(f"interleave's function must return a Dataset, not {type(sub).__name__}")
        origins, ignore_errors, options = flags
        ctx = IterContext(path, in_background=True, origins=origins, ignore_errors=ignore_errors,
                          options=_options_from(options))
        it = sub._make_iterator(ctx)
        if state is not None:
            it.set_state(from_jsonable(state))
        self.open[sid] = it
        return None


class ProcessReaderPool:
    """The worker processes of one interleave iteration, and the routing of their answers."""

    def __init__(self, fn: Callable, workers: int, ctx: IterContext):
        self.fn = fn
        self.size = max(1, int(workers))
        self.ctx = ctx
        self.mapper = None
        self.loads = [0] * self.size  # open readers per worker
        self.requests: dict = {}  # number -> (reader, generation, kind)
        self.sids = 0
        self.closed = False
        self.cond = threading.Condition()  # (the threaded pool's attribute; unused here)
        self.flags = (ctx.origins, ctx.ignore_errors, _options_args(ctx.options))

    def _mapper(self):
        if self.mapper is None:
            if self.closed or self.ctx.stop.is_set():
                raise Cancelled("the interleave was closed")
            from tpudata.dataset.parallel.processes.pool import ProcessMapper

            self.mapper = ProcessMapper(SubDatasetServer(self.fn), self.size)
            self.ctx.on_stop(self.close)
        return self.mapper

    def assign(self) -> tuple[int, int]:
        """(a new reader id, the least loaded worker)."""
        self.sids += 1
        worker = min(range(self.size), key=self.loads.__getitem__)
        self.loads[worker] += 1
        return self.sids, worker

    def release(self, worker: int) -> None:
        self.loads[worker] -= 1

    def request(self, reader: "ProcessReader", message: tuple, kind: str) -> None:
        number = self._mapper().submit(message, reader.worker)
        self.requests[number] = (reader, reader.generation, kind)

    def pump(self, timeout: float | None) -> None:
        """Route the answers that came (waiting up to ``timeout``) to their readers."""
        if self.closed or self.ctx.stop.is_set():
            raise Cancelled("the interleave was closed")
        if self.mapper is None:
            return
        answers = self.mapper.collect(timeout)
        if not answers and timeout is None:  # closed meanwhile
            raise Cancelled("the interleave was closed")
        for number, error, value in answers:
            reader, generation, kind = self.requests.pop(number)
            if reader.closed or generation != reader.generation:
                continue  # an answer for a reader closed or restored since
            reader._answer(kind, error, value)

    def wait_until(self, ready: Callable[[], bool]) -> None:
        """Handle answers until ``ready()`` (deterministic=False: some slot has a block)."""
        while not ready():
            self.pump(None)

    def close(self) -> None:
        self.closed = True
        if self.mapper is not None:
            self.mapper.close()
            self.ctx.off_stop(self.close)


class ProcessReader(BlockIterator):
    """One file's dataset, running in a worker, read ahead ``max_blocks`` blocks."""

    def __init__(self, pool: ProcessReaderPool, element, path: tuple):
        self.pool = pool
        self.element = element
        self.path = tuple(path)
        self.sid, self.worker = pool.assign()
        self.max_blocks = 2
        self.items: collections.deque = collections.deque()  # (block | END | error, state)
        self.outstanding = 0  # reads sent and not answered (this generation)
        self.generation = 0
        self.opened = False
        self.producer_done = False
        self.finished = False
        self.closed = False
        self.state = {"from_start": True}  # (the worker's iterator states come later)

    def _open(self, state) -> None:
        self.generation += 1
        self.items.clear()
        self.outstanding = 0
        self.producer_done = self.finished = False
        if isinstance(state, dict) and state.get("from_start"):
            state = None
        self.pool.request(self, ("open", self.sid, self.element, self.path, self.pool.flags,
                                 state), "open")
        self.opened = True

    def _schedule(self) -> None:
        if self.closed:
            return
        if not self.opened:
            self._open(None)
        while not self.producer_done and len(self.items) + self.outstanding < self.max_blocks:
            self.pool.request(self, ("read", self.sid), "read")
            self.outstanding += 1

    def _answer(self, kind: str, error, value) -> None:
        if kind == "close":
            return
        if kind == "read":
            self.outstanding -= 1
        if error is not None:
            if not self.producer_done:
                self.items.append((error, None))
            self.producer_done = True
            return
        if kind == "read":
            block, after = value
            self.items.append((END if block is None else block, after))
            if block is None:
                self.producer_done = True

    def start(self) -> None:
        self._schedule()

    def ready(self) -> bool:
        """Whether a block (or the end, or an error) is waiting."""
        if not self.items and not self.finished:
            self.pool.pump(0)
        return bool(self.items) or self.finished

    def next(self):
        if self.finished:
            return None
        self._schedule()
        while not self.items:
            self.pool.pump(None)
        item, after = self.items.popleft()
        block = hand_over(self, item, after)
        if block is not None:
            self._schedule()
        return block

    def get_state(self):
        return self.state

    def set_state(self, state):
        self.state = state
        if not self.closed:
            self._open(state)

    def close(self):
        if self.closed:
            return
        self.closed = True
        self.items.clear()
        self.pool.release(self.worker)
        if self.opened and not self.finished and not self.pool.closed and self.pool.mapper is not None:
            try:
                self.pool.request(self, ("close", self.sid), "close")
            except Exception:  # the pool closed (or a worker died) meanwhile
                pass
