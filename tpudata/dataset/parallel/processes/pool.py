"""Worker processes for user functions that hold the GIL (pure-Python ``map`` work).

:class:`ProcessMapper` applies ``fn`` to a stream of dataset elements in ``num_workers`` worker
processes and hands back ``(position, fn(element))`` pairs, pulling its input lazily with a bounded
number of elements in flight. Workers are started with ``forkserver`` (or ``spawn``), never
``fork``, so a parent that runs threads or has JAX/torch initialised is safe. numpy arrays (results,
and large inputs) travel through shared memory (:mod:`tpudata._shm_transport`), not through the pipe.
A result stays unread in the worker's segment until its turn to be yielded comes; then its
arrays are views of the segment (no copy: ordinary writable arrays, which the worker does not
touch again until they are all gone) where fewer than ``LEND_SLOTS`` segments of that worker are
still held by results handed out, else copies. Results waiting their turn are copied out only
where they would leave a worker no free segment for the tasks it holds.

The parent starts no thread: the consumer's own ``next()`` sends work and collects results, and
waits on the workers' pipes, their exit sentinels and a wake-up pipe that :meth:`close` writes to.

>>> import operator
>>> with ProcessMapper(operator.neg, num_workers=2) as mapper:
...     list(mapper.imap([1, 2, 3]))
[(0, -1), (1, -2), (2, -3)]
"""

from __future__ import annotations

import itertools
import logging
import os
import pickle
import secrets
import selectors
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tpudata._pickling import dumps_function
from tpudata._processes import context as _context
from tpudata._processes import signal_name as _signal_name
from tpudata._processes import start_method as _start_method
from tpudata._processes import stop_processes as _stop_processes
from tpudata import _shm_transport as _shm
from tpudata.dataset.parallel.processes import worker as _procworker
from tpudata.dataset.parallel.processes.session import Entry as _Entry, Session as _Session
from tpudata.errors import NotPicklableError, WorkerError

logger = logging.getLogger(__name__)

__all__ = ["ProcessMapper"]

_WORKER_DEPTH = 2  # chunks a worker holds at once: one running, one waiting in its pipe
_CHUNK_TARGET_S = 0.01  # a chunk of quick elements holds about this much work of fn
_STOP_GRACE_S = 0.2  # close(): time for idle workers to exit before they are terminated
_JOIN_S = 0.5  # close(): time for a terminated worker to exit before it is killed


class ProcessMapper:
    """Apply ``fn`` to elements in worker processes; yields ``(position, fn(element))``.

    ``fn`` must pickle: cloudpickle is used when it is installed (then lambdas, nested functions
    and functions of ``__main__`` work too); otherwise the standard pickle, which needs a function
    defined with ``def`` at the top level of an importable module. A function that does not pickle
    raises :class:`~tpudata.errors.NotPicklableError` here. Workers start with ``start_method``
    (``"forkserver"`` where available, else ``"spawn"``; ``"fork"`` is refused) when the mapper
    is made; the first results come once they have imported ``fn``'s module (~0.3 s).

    :meth:`imap` pulls ``elements`` lazily: at most ``max_in_flight`` (default ``2 * num_workers``)
    elements are taken and not yet yielded. With ``deterministic=True`` results come in input
    order, otherwise in completion order. A worker holds at most two messages; when ``fn`` is quick
    (under ~10 ms) and ``max_in_flight`` leaves room, a message carries a chunk of up to
    ``max_in_flight // (3 * num_workers)`` elements, so per-message costs (~50 us) are shared:
    give quick functions a ``max_in_flight`` of 32 or more.

    Errors reach the consumer as :class:`~tpudata.errors.WorkerError` (``pid``, ``position``,
    ``exitcode``, ``worker_traceback``): when ``fn`` raises (at that element's turn, after the
    results before it; the message holds the worker's traceback and ``__cause__`` is the original
    exception when it unpickles), when a worker dies (e.g. SIGKILL: the message names the pid, the
    signal and the element; the mapper is unusable afterwards) and when ``fn`` cannot be loaded in
    a worker. An exception from the input iterator itself is raised unchanged, after the results
    of the elements before it. Workers exit when the parent process dies.

    :meth:`close` (also ``with`` and garbage collection) stops the workers within about a second
    even while ``fn`` runs long, and frees every shared-memory segment. It may be called from any
    thread: a consumer blocked in ``next()`` on another thread wakes up and its iterator ends
    (``StopIteration``). Calling :meth:`imap` on a closed mapper raises ``ValueError``. One
    :meth:`imap` runs at a time; start the next one after the previous ended or was closed (its
    results still in flight are dropped).
    """

    def __init__(self, fn: Callable[[Any], Any], num_workers: int, *, max_in_flight: int | None = None,
                 deterministic: bool = True, start_method: str | None = None):
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be a positive int, got {num_workers!r}")
        if max_in_flight is None:
            max_in_flight = 2 * num_workers
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(f"max_in_flight must be a positive int or None, got {max_in_flight!r}")
        self._closed = True  # until everything below exists, so that __del__ is safe
        self._fn_name = getattr(fn, "__qualname__", None) or f"a {type(fn).__qualname__} object"
        self._num_workers = num_workers
        self._max_in_flight = max_in_flight
        # per worker: a chunk running, one queued, and the results of one being consumed
        self._chunk_max = max(1, max_in_flight // ((_WORKER_DEPTH + 1) * num_workers))
        self._seconds_per_element: float | None = None  # fn's cost, measured by the workers
        self._deterministic = bool(deterministic)
        self._start_method = _start_method(start_method)
        fn_bytes = dumps_function(fn, getattr(fn, "sent_by", "ProcessMapper"))  # NotPicklableError names fn
        self._lock = threading.Lock()
        self._closing_done = threading.Event()
        self._prefix = f"tpd{os.getpid()}{secrets.token_hex(3)}_"
        self._task_ids = itertools.count()
        self._tasks: dict[int, _Task] = {}
        self._session: _Session | None = None
        self._broken: WorkerError | None = None
        self._waiting = False  # a consumer is blocked in select() without the lock
        self._selector_deferred = False  # close() left the selector to that consumer
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._workers: list[_Worker] = []
        self._closed = False
        ctx = _context(self._start_method)  # changes no multiprocessing global
        try:
            for index in range(num_workers):
                conn, child_conn = ctx.Pipe(duplex=True)
                process = ctx.Process(
                    target=_procworker.main, name=f"tpudata-map-{index}", daemon=True,
                    args=(child_conn, fn_bytes, f"{self._prefix}w{index}_", os.getpid()))
                process.start()
                child_conn.close()
                worker = _Worker(index, process, conn, _shm.Sender(f"{self._prefix}p{index}_"))
                self._workers.append(worker)
                self._selector.register(conn.fileno(), selectors.EVENT_READ, ("msg", worker))
                self._selector.register(process.sentinel, selectors.EVENT_READ, ("exit", worker))
        except BaseException:
            self.close()
            raise
        logger.debug("started %d %s workers for %s", num_workers, self._start_method, self._fn_name)

    # -- public API ---------------------------------------------------------------------------

    def imap(self, elements: Iterable) -> Iterator[tuple[int, Any]]:
        """Yield ``(position in elements, fn(element))`` for each element, in input order if
        ``deterministic`` else in completion order, with at most ``max_in_flight`` elements taken
        and not yet yielded."""
        if self._closed:
            raise ValueError("ProcessMapper is closed")
        return self._iterate(iter(elements))

    def submit(self, element: Any, worker: int) -> int:
        """Send ``element`` to worker number ``worker`` now (after what it was sent before: a
        worker serves its elements in order, so ``fn`` may keep state between them); returns
        the element's number, which :meth:`collect` gives back with its result. The caller
        bounds how many are in flight. Not while an :meth:`imap` runs."""
        with self._lock:
            if self._closed:
                raise ValueError("ProcessMapper is closed")
            if self._broken is not None:
                raise self._broken_again()
            if self._session is None:
                self._session = _Session(False)
                self._session.direct = True
            elif not self._session.direct:
                raise ValueError("an imap() of this ProcessMapper is running")
            session = self._session
        number = session.pulled
        if not self._send(session, self._workers[worker], [element]):
            raise ValueError("ProcessMapper is closed")
        return number

    def collect(self, timeout: float | None = None) -> list[tuple[int, WorkerError | None, Any]]:
        """``(number, error, result)`` of submitted elements that came back, in completion order;
        when none has, waits up to ``timeout`` seconds (None: until one does). ``[]`` once
        closed; raises the :class:`~tpudata.errors.WorkerError` of a worker that died."""
        session = self._session
        if session is None or not session.direct:
            return []
        waited = False
        while True:
            if session.fatal is not None:
                raise session.fatal
            out = []
            item = session.pop_ready()
            while item is not None:
                item = self._resolve(item)
                if item is None:
                    return []
                out.append(item)
                item = session.pop_ready()
            if out or (waited and timeout is not None):
                return out
            if not self._wait(timeout):
                return []
            waited = True

    def close(self) -> None:
        """Stop the workers (within ~1 s) and free shared memory; idempotent, any thread."""
        with self._lock:
            if self._closed:
                closing = self._closing_done
            else:
                closing = None
                self._closed = True
                _write_quietly(self._wake_w)
                workers = list(self._workers)
                for w in workers:
                    try:
                        w.conn.send_bytes(_procworker.STOP)
                    except (OSError, ValueError):
                        pass
        if closing is not None:  # closed already, or being closed by another thread
            closing.wait(_STOP_GRACE_S + 2 * _JOIN_S + 1.0)
            return
        try:
            _stop_processes([w.process for w in workers])
            for w in workers:
                self._drain_after_exit(w)
                w.conn.close()
                w.process.close()
                w.results.close()
                w.inputs.close()
            self._tasks.clear()
            left = _shm.sweep(self._prefix)
            if left:
                logger.debug("removed %d shared-memory segments left by stopped workers", len(left))
            with self._lock:
                if self._waiting:
                    self._selector_deferred = True
                else:
                    self._close_selector()
        finally:
            self._closing_done.set()
        logger.debug("closed the workers of %s", self._fn_name)

    def __enter__(self) -> ProcessMapper:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self):
        if not getattr(self, "_closed", True):
            try:
                self.close()
            except Exception:  # interpreter shutdown: the daemon workers end with the process
                pass

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._workers)} {self._start_method} workers"
        return f"<ProcessMapper {self._fn_name} ({state})>"

    # -- the consumer's loop ------------------------------------------------------------------

    def _iterate(self, it: Iterator) -> Iterator[tuple[int, Any]]:
        session = _Session(self._deterministic)
        with self._lock:
            if self._closed:
                return
            if self._broken is not None:
                raise self._broken_again()
            if self._session is not None:
                raise ValueError("another imap() of this ProcessMapper is still running; "
                                 "exhaust or close it first")
            self._session = session
        try:
            exhausted = False
            while True:
                if session.fatal is not None:
                    raise session.fatal
                while not exhausted and session.outstanding < self._max_in_flight:
                    worker = self._free_worker()
                    if worker is None:
                        break
                    size = self._chunk_size()
                    room = self._max_in_flight - session.outstanding
                    if room < size and worker.tasks:
                        break  # wait for room for a whole chunk; an idle worker takes less
                    size = min(size, room)
                    chunk = []
                    try:
                        for _ in range(size):
                            chunk.append(next(it))
                    except StopIteration:
                        exhausted = True
                    except Exception as e:  # raised after the results of the earlier elements
                        exhausted, session.input_error = True, e
                    if chunk and not self._send(session, worker, chunk):
                        return
                item = session.pop_ready()
                if item is not None:
                    item = self._resolve(item)
                    if item is None:  # closed
                        return
                    position, error, value = item
                    if error is not None:
                        raise error
                    yield position, value
                    continue
                if exhausted and session.outstanding == 0:
                    if session.input_error is not None:
                        raise session.input_error
                    return
                if not self._wait():
                    return
        finally:
            with self._lock:
                if self._session is session:
                    self._session = None
                if not self._closed:  # results never read: their segments go back
                    session.drop_held()

    def _free_worker(self) -> _Worker | None:
        best = None
        for w in self._workers:
            if len(w.tasks) < _WORKER_DEPTH and (best is None or len(w.tasks) < len(best.tasks)):
                best = w
        return best

    def _chunk_size(self) -> int:
        """Elements per message: 1 unless fn is quick and max_in_flight leaves room for more."""
        if self._chunk_max == 1 or self._seconds_per_element is None:
            return 1
        return max(1, min(self._chunk_max, int(_CHUNK_TARGET_S / max(self._seconds_per_element, 1e-7))))

    def _send(self, session: _Session, worker: _Worker, chunk: list) -> bool:
        first = session.pulled
        session.pulled += len(chunk)
        with self._lock:  # close() may free the worker's segments from another thread
            if self._closed:
                return False
            try:
                payload, slot = worker.inputs.encode(chunk)
            except Exception as e:
                raise _not_picklable(chunk, first, self._fn_name) from e
            task_id = next(self._task_ids)
            self._tasks[task_id] = _Task(session, first, len(chunk), worker, slot)
            worker.tasks.add(task_id)
            session.outstanding += len(chunk)
            freed = worker.results.take_freed(need=len(worker.tasks))
            message = _procworker.dumps((task_id, payload, freed))
            try:
                worker.conn.send_bytes(message)
            except OSError:
                pass  # the worker died; its exit sentinel reports it
        return True

    def _wait(self, timeout: float | None = None) -> bool:
        """Block until a worker reports (or ``timeout``); handle what came. False when the
        mapper was closed."""
        with self._lock:
            if self._closed:
                return False
            self._waiting = True
        try:
            events = self._selector.select(timeout)
        finally:
            with self._lock:
                self._waiting = False
                closed = self._closed
                if closed and self._selector_deferred:
                    self._close_selector()
        if closed:
            return False
        with self._lock:
            if self._closed:
                return False
            for key, _ in sorted(events, key=lambda e: e[0].data is not None and e[0].data[0] == "exit"):
                if key.data is None:
                    continue
                kind, worker = key.data
                if kind == "msg":
                    self._receive(worker)
                elif worker.process.exitcode is None and worker.process.is_alive():
                    continue  # spurious wake-up
                else:
                    self._worker_died(worker)
        return True

    def _receive(self, worker: _Worker) -> None:
        try:
            message = pickle.loads(worker.conn.recv_bytes())
        except (EOFError, OSError):
            self._selector.unregister(worker.conn.fileno())  # the exit sentinel follows
            return
        self._handle(worker, message)

    def _handle(self, worker: _Worker, message: tuple) -> None:
        kind, task_id = message[0], message[1]
        if kind == "fatal":
            self._break(WorkerError(
                f"worker process {worker.process.pid} of {self._fn_name} could not start:\n"
                f"{message[2]}", pid=worker.process.pid, worker_traceback=message[2]))
            return
        task = self._tasks.pop(task_id)
        worker.tasks.discard(task_id)
        worker.inputs.release(task.input_slot)
        session = task.session
        _, _, payload, seconds = message
        if session is not self._session:
            worker.results.drop(payload)
            return
        held = worker.results.hold(payload)  # read at its turn (_resolve)
        per_element = seconds / task.count
        previous = self._seconds_per_element
        self._seconds_per_element = per_element if previous is None else 0.8 * previous + 0.2 * per_element
        for k in range(task.count):
            session.put(task.position + k, None, _Entry(held, k, worker.process.pid))

    def _resolve(self, item: tuple) -> tuple | None:
        """``(position, error, value)`` of a popped item, its result read now (None: closed)."""
        position, error, value = item
        if type(value) is not _Entry:
            return item
        with self._lock:  # close() may unmap the worker's segments from another thread
            if self._closed:
                return None
            entry = value.held.value()[value.index]
        if entry[0]:
            return position, None, entry[1]
        _, exc_bytes, text = entry
        summary = text.strip().splitlines()[-1] if text.strip() else "an error"
        error = WorkerError(
            f"{self._fn_name} failed on element {position} in worker process "
            f"{value.pid} with {summary}; the worker's traceback:\n{text}",
            pid=value.pid, position=position, worker_traceback=text)
        error.__cause__ = _loads_exception(exc_bytes)
        return position, error, None

    def _worker_died(self, worker: _Worker) -> None:
        process = worker.process
        self._drain_after_exit(worker)
        process.join(1.0)
        code = process.exitcode
        pending = sorted((self._tasks[t].position, self._tasks[t].count) for t in worker.tasks
                         if self._tasks[t].session is self._session)
        if code is not None and code < 0:
            how = f"was killed by signal {_signal_name(-code)} (exit code {code})"
            if -code == getattr(signal, "SIGBUS", None):
                how += " (SIGBUS: often shared memory, /dev/shm, running full)"
        else:
            how = f"exited unexpectedly with exit code {code}"
        if not pending:
            what = "while idle"
        elif pending[0][1] == 1:
            what = f"while mapping element {pending[0][0]}"
        else:
            what = f"while mapping one of elements {pending[0][0]}-{sum(pending[0]) - 1}"
        self._break(WorkerError(
            f"worker process {process.pid} of {self._fn_name} {how} {what}; the ProcessMapper is "
            "unusable now (if the system ran out of memory, use fewer workers or smaller elements)",
            pid=process.pid, position=pending[0][0] if pending else None, exitcode=code))
        for fd in (process.sentinel, worker.conn.fileno()):
            try:
                self._selector.unregister(fd)
            except (KeyError, ValueError):
                pass
        worker.results.settle()  # results that came before it died: out of its segments
        worker.results.close()
        _shm.sweep(f"{self._prefix}w{worker.index}_")

    def _drain_after_exit(self, worker: _Worker) -> None:
        """Read what a worker sent before it ended; free the segments of unwanted results."""
        conn = worker.conn
        while True:
            try:
                if conn.closed or not conn.poll(0):
                    return
                message = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):
                return
            if self._closed:
                if message[0] == "r":
                    _shm.discard(message[2])
            else:
                self._handle(worker, message)

    def _break(self, error: WorkerError) -> None:
        if self._broken is None:
            self._broken = error
        if self._session is not None:
            self._session.fatal = self._broken

    def _broken_again(self) -> WorkerError:
        e = self._broken
        return WorkerError(f"the ProcessMapper is unusable: {e.message}", pid=e.pid,
                           position=e.position, exitcode=e.exitcode,
                           worker_traceback=e.worker_traceback)

    def _close_selector(self) -> None:
        self._selector.close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._selector_deferred = False


class _Worker:
    """The parent's view of a worker: its process, pipe, chunks in flight and segments."""

    __slots__ = ("index", "process", "conn", "tasks", "inputs", "results")

    def __init__(self, index: int, process, conn, inputs: _shm.Sender):
        self.index = index
        self.process = process
        self.conn = conn
        self.tasks: set[int] = set()
        self.inputs = inputs  # large inputs go through these segments
        # the worker's result segments, mapped here; results in up to LEND_SLOTS of them are
        # handed out as views (no copy here) and each slot goes back once they are all gone
        self.results = _shm.Receiver(lend=_procworker.LEND_SLOTS, slots=_procworker.RESULT_SLOTS)


class _Task:
    """A chunk of ``count`` consecutive input elements from ``position`` sent to one worker."""

    __slots__ = ("session", "position", "count", "worker", "input_slot")

    def __init__(self, session: _Session, position: int, count: int, worker: _Worker,
                 input_slot: int | None):
        self.session = session
        self.position = position
        self.count = count
        self.worker = worker
        self.input_slot = input_slot


# -- helpers of the parent ----------------------------------------------------------------------

def _not_picklable(chunk: list, first: int, fn_name: str) -> NotPicklableError:
    position, reason = first, "?"
    for position, element in enumerate(chunk, first):
        try:
            pickle.dumps(element, protocol=5, buffer_callback=lambda b: None)
        except Exception as e:
            reason = f"{type(e).__name__}: {e}"
            break
    return NotPicklableError(
        f"element {position} cannot be sent to a worker process of {fn_name} ({reason}); "
        "elements are nests (dict/tuple/list) of numpy arrays, scalars, str and bytes")


def _loads_exception(exc_bytes: bytes | None) -> BaseException | None:
    if exc_bytes is None:
        return None
    try:
        return pickle.loads(exc_bytes)
    except Exception:
        return None


def _write_quietly(fd: int) -> None:
    try:
        os.write(fd, b"x")
    except OSError:  # full (already woken) or closed
        pass
