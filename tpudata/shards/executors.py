"""Executors for sharded builds: in-process, a local process pool, or any ``Executor`` you pass.

Shard tasks are plain picklable objects run by :func:`tpudata.shards.writing.run_shard_task`,
so any :class:`concurrent.futures.Executor` can run them: the default process pool, a thread
pool, or a dask.distributed cluster through ``Client(...).get_executor()``.

>>> ex = InlineExecutor()
>>> ex.submit(pow, 2, 10).result()
1024
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import Executor, Future, ProcessPoolExecutor

logger = logging.getLogger(__name__)

PARENT_POLL_SECONDS = 0.25


def _watch_parent(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(1)  # the builder died (even by SIGKILL): its workers must not live on
        time.sleep(PARENT_POLL_SECONDS)


def die_with_parent(parent: int) -> None:
    """Pool-worker initializer: exit within ``PARENT_POLL_SECONDS`` of process ``parent`` dying.

    A daemon thread polls ``os.getppid()``, which changes when the parent dies however it dies.
    Not ``PR_SET_PDEATHSIG``: Linux sends that signal when the *thread* that spawned the worker
    ends, which would kill the workers of a pool still in use by the rest of the process.
    """
    if os.getppid() != parent:  # died before this worker started
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), name="tpudata-parent-watch",
                     daemon=True).start()


class InlineExecutor(Executor):
    """Runs each task in the calling thread when it is submitted (a one-worker build)."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        future.set_running_or_notify_cancel()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:
            future.set_exception(exc)
        return future


def default_workers() -> int:
    """The number of cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def make_executor(workers: int | None, tasks: int) -> tuple[Executor, int]:
    """``(executor, max tasks in flight)`` for ``workers`` processes (default: one per core).

    One worker (or one task) runs in-process. More use a process pool started with ``spawn``
    (no fork of a process that may hold gcsfs's event-loop thread or a progress-bar thread)
    whose workers exit when this process dies, however it dies (:func:`die_with_parent`).
    """
    workers = default_workers() if workers is None else int(workers)
    if workers < 1:
        raise ValueError(f"workers must be >= 1, not {workers}")
    workers = min(workers, max(tasks, 1))
    if workers == 1:
        return InlineExecutor(), 1
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=die_with_parent, initargs=(os.getpid(),))
    logger.debug("started a pool of %d worker processes", workers)
    return pool, 2 * workers


__all__ = ["InlineExecutor", "default_workers", "die_with_parent", "make_executor"]
