"""Parallel element executors: run a function over elements, a bounded number at a time.

An executor has the shape of :class:`tpudata.dataset.parallel.processes.pool.ProcessMapper` (processes, for
Python that holds the GIL) and :class:`ThreadMapper` (threads, for work that releases it)::

    mapper = Executor(fn, num_workers, max_in_flight=..., deterministic=...)
    for position, result in mapper.imap(elements):  # pulls ``elements`` lazily
        ...
    mapper.close()

``imap`` yields ``(position of the input element, fn(element))``, in input order when
``deterministic`` else in completion order, with at most ``max_in_flight`` elements pulled but
not yet yielded (ThreadMapper: plus what the consumer says it needs, see its ``imap``); an error
raised by ``fn`` is re-raised in the consumer with its traceback.
``map`` uses a ThreadMapper (and, with ``use_processes=True``, ProcessMapper through
:mod:`tpudata.dataset.parallel.processes.map`); the map iterator keeps the input state of every in-flight
element, so its checkpoints are element-exact with either executor.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import itertools
import logging
import threading
from typing import Any, Callable, Iterable, Iterator

from tpudata.dataset.core.iterator import POLL_SECONDS, Cancelled

logger = logging.getLogger(__name__)

_pool_ids = itertools.count()


class ThreadMapper:
    """Runs ``fn`` over elements on ``num_workers`` threads (named ``tpudata-map-...``).

    ``stop`` (an Event) ends a blocked ``imap`` with :class:`Cancelled`; ``close()`` returns at
    once: a thread still inside ``fn`` finishes that call and exits (no thread is left behind
    once the calls return).
    """

    def __init__(self, fn: Callable, num_workers: int, *, max_in_flight: int | None = None,
                 deterministic: bool = True, stop: threading.Event | None = None):
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, not {num_workers}")
        self.fn = fn
        self.num_workers = int(num_workers)
        self.max_in_flight = max(1, int(max_in_flight or num_workers))
        self.deterministic = bool(deterministic)
        self.stop = stop if stop is not None else threading.Event()
        self._closed = threading.Event()
        self._pool = cf.ThreadPoolExecutor(
            self.num_workers, thread_name_prefix=f"tpudata-map-{next(_pool_ids)}")
        self._pending: set = set()

    def _stopped(self) -> bool:
        return self.stop.is_set() or self._closed.is_set()

    def imap(self, elements: Iterable, need: Callable[[], int] | None = None) -> Iterator[tuple[int, Any]]:
        """``need()`` (optional): how many results the consumer still wants now. The elements go
        to the threads in chunks of up to ``ceil(need / num_workers)``, one task each, so a
        cheap function is not outweighed by a task per element; at most ``need +
        max_in_flight - 1`` elements are pulled and not yet yielded (with ``need`` 1, one
        element per task, ``max_in_flight`` tasks)."""
        source = iter(elements)
        queue: collections.deque = collections.deque()  # (first position, elements, future)
        ready: collections.deque = collections.deque()  # (position, result) of a finished task
        position = 0
        queued = 0  # elements in the queued tasks
        exhausted = False
        while True:
            want = max(1, int(need())) if need is not None else 1
            size = -(-want // self.num_workers)
            limit = want + self.max_in_flight - 1
            while not exhausted and len(queue) < self.max_in_flight and queued + len(ready) < limit:
                items = []
                for _ in range(min(size, limit - queued - len(ready))):
                    try:
                        items.append(next(source))
                    except StopIteration:
                        exhausted = True
                        break
                if not items:
                    break
                if self._stopped():
                    raise Cancelled("the executor was closed")
                fut = self._pool.submit(self._run, items)
                queue.append((position, len(items), fut))
                position += len(items)
                queued += len(items)
            if ready:
                yield ready.popleft()
                continue
            if not queue:
                return
            if self.deterministic:
                first, n, fut = queue[0]
                self._wait([fut])
                queue.popleft()
            else:
                done = self._wait([f for _, _, f in queue])
                k = next(i for i, (_, _, f) in enumerate(queue) if f in done)
                first, n, fut = queue[k]
                del queue[k]
            queued -= n
            results, error = fut.result()
            ready.extend((first + i, r) for i, r in enumerate(results))
            if error is not None:  # the results before the failing element, then its error
                while ready:
                    yield ready.popleft()
                raise error  # fn's error, with the worker's traceback

    def _run(self, items: list) -> tuple[list, BaseException | None]:
        """One task: ``fn`` over ``items`` in order, up to the first error (returned with the
        results before it) or until the executor is closed."""
        out = []
        for item in items:
            if out and self._stopped():
                return out, Cancelled("the executor was closed")
            try:
                out.append(self.fn(item))
            except BaseException as exc:  # re-raised in the consumer, as a future would
                return out, exc
        return out, None

    def _wait(self, futures: list) -> set:
        while True:
            if self._stopped():
                raise Cancelled("the executor was closed")
            done, _ = cf.wait(futures, timeout=POLL_SECONDS, return_when=cf.FIRST_COMPLETED)
            if done:
                return done

    def close(self) -> None:
        """Prompt and idempotent: queued calls are cancelled, running ones finish on their own."""
        if not self._closed.is_set():
            self._closed.set()
            self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> "ThreadMapper":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


__all__ = ["ThreadMapper"]
