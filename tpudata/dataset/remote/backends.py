"""The executors ``ds.distribute(executor)`` runs chunks on: dask.distributed, any
``concurrent.futures.Executor``, or the consumer's own thread (``executor=None``).

A backend submits :class:`~tpudata.dataset.remote.worker.ChunkRequest` tasks and says how many
workers there are (for the default number of chunks in flight), whether the executor is still
there, and what a failed task means: ``"retry"`` (its worker died or the transfer broke: run it
again, elsewhere), ``"lost"`` (the executor itself is gone) or ``"error"`` (the split failed).

dask: a task may name a preferred worker (the one holding the split's open iterator) with
``allow_other_workers=True``, so it runs anywhere when that worker is busy or gone; priorities
run the chunks the consumer waits for first. The worker count and the scheduler's liveness are
read by a daemon thread every ``WATCH_SECONDS``, so the consumer never blocks on the scheduler.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
import uuid
from concurrent.futures import BrokenExecutor, Executor

from tpudata.dataset.remote.worker import ChunkRequest, forget, run_chunk
from tpudata.errors import RemoteSplitError
from tpudata.shards.executors import InlineExecutor

logger = logging.getLogger(__name__)

__all__ = ["Backend", "DaskBackend", "FuturesBackend", "TRANSIENT", "WATCH_SECONDS", "backend_of",
           "dask_client", "unwrap"]

WATCH_SECONDS = 1.0
# errors of a run lost with its worker or its data (dask, Ray): the chunk runs again
TRANSIENT = frozenset({"KilledWorker", "CommClosedError", "FutureCancelledError",
                       "WorkerCrashedError", "NodeDiedError", "ObjectLostError",
                       "OwnerDiedError", "TaskCancelledError", "ActorDiedError"})


def unwrap(exc: BaseException) -> BaseException:
    """The task's own exception inside an executor's wrapper (Ray's ``RayTaskError``)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) and type(exc).__name__.startswith(
        "RayTaskError") else exc


class Backend:
    """``concurrent.futures`` executors (a local process or thread pool) and ``None``."""

    def __init__(self, executor: Executor | None):
        self.executor = executor if executor is not None else InlineExecutor()
        self.name = type(self.executor).__name__
        # whether tasks run in other processes (then chunks may travel in shared memory)
        self.remote = isinstance(self.executor, concurrent.futures.ProcessPoolExecutor) or \
            bool(getattr(self.executor, "tpudata_remote", False))

    def workers(self) -> int:
        return max(1, int(getattr(self.executor, "_max_workers", 0) or 1))

    def addresses(self) -> list:
        return []

    def submit(self, req: ChunkRequest, priority: int, prefer: str | None = None,
               avoid: str | None = None):
        try:
            return self.executor.submit(run_chunk, req)
        except RuntimeError as exc:  # shut down (or broken) before this submit
            raise _lost(self.name, exc) from exc

    def result(self, future):
        """The task's result (raises its error)."""
        return future.result()

    def lost(self) -> str | None:
        """Why the executor is gone, or None while it works."""
        return None

    def lost_error(self, exc: BaseException):
        """The error for a task that failed because the executor is gone."""
        return _lost(self.name, exc)

    def gone(self, reason: str):
        """The error for an executor found gone (``reason``: how)."""
        from tpudata.errors import ExecutorLostError

        return ExecutorLostError(
            f"the {self.name} behind distribute() is gone: {reason}. Elements delivered so far "
            f"stay delivered: restore the iterator's state (it.get_state()) with a new executor "
            f"to go on from there")

    def classify(self, exc: BaseException) -> str:
        if isinstance(exc, RemoteSplitError):
            return "error"
        if isinstance(exc, BrokenExecutor):
            return "lost"
        if isinstance(exc, concurrent.futures.CancelledError) or type(exc).__name__ in TRANSIENT:
            return "retry"
        return "error"

    def forget(self, job: str) -> None:
        if isinstance(self.executor, InlineExecutor):
            forget(job)

    def close(self) -> None:
        pass


def _lost(name: str, exc: BaseException):
    from tpudata.errors import ExecutorLostError

    why = ("a concurrent.futures pool cannot replace a worker that died: use a dask.distributed "
           "cluster for that" if isinstance(exc, BrokenExecutor) else
           "it was shut down while the iterator still needed it")
    return ExecutorLostError(
        f"the {name} behind distribute() can no longer run tasks ({type(exc).__name__}: {exc}); "
        f"{why}. Elements delivered so far stay delivered: restore the iterator's state with a "
        f"new executor to go on")


class FuturesBackend(Backend):
    """Any ``concurrent.futures.Executor``: a task runs wherever the executor puts it."""


class DaskBackend(Backend):
    """A dask.distributed ``Client`` (or its ``get_executor()``)."""

    def __init__(self, client, lost_after: float):
        self.client = client
        self.executor = None
        self.remote = True
        self.name = f"dask scheduler at {getattr(client, 'scheduler', None) and client.scheduler.address}"
        self.lost_after = float(lost_after)
        self.direct = True
        self._workers: list = []
        self._seen = time.monotonic()  # when the scheduler last answered with workers
        self._answered = time.monotonic()
        self._stop = threading.Event()
        self._refresh()
        self._watch = threading.Thread(target=self._watching, name="tpudata-distribute-watch",
                                       daemon=True)
        self._watch.start()

    def _refresh(self) -> None:
        if self.client.status != "running":
            return
        try:
            info = self.client.scheduler_info(n_workers=-1)
        except Exception:  # the scheduler went away: lost() says so once it is long enough
            logger.debug("scheduler_info failed", exc_info=True)
            return
        now = time.monotonic()
        self._answered = now
        self._workers = sorted(info.get("workers", {}))
        if self._workers:
            self._seen = now

    def _watching(self) -> None:
        while not self._stop.wait(WATCH_SECONDS):
            self._refresh()

    def workers(self) -> int:
        return max(1, len(self._workers))

    def addresses(self) -> list:
        return list(self._workers)

    def submit(self, req: ChunkRequest, priority: int, prefer: str | None = None,
               avoid: str | None = None):
        workers = None
        if avoid is not None:
            workers = [w for w in self._workers if w != avoid] or None
        elif prefer is not None and prefer in self._workers:
            workers = [prefer]
        key = f"tpudata-chunk-{req.split}-{req.seq}-{uuid.uuid4().hex[:12]}"
        try:
            return self.client.submit(run_chunk, req, key=key, pure=False, priority=priority,
                                      workers=workers, allow_other_workers=workers is not None)
        except Exception as exc:  # the client closed
            reason = self.lost()
            if reason is not None or self.client.status != "running":
                raise self.gone(reason or f"client status {self.client.status!r}") from exc
            raise

    def result(self, future):
        """Straight from the worker that holds it (not relayed by the scheduler), unless the
        workers cannot be reached from here: then through the scheduler from then on."""
        if self.direct:
            try:
                return self.client.gather(future, direct=True)
            except OSError:  # (CommClosedError too) no route to the worker from here
                if self.client.status != "running" or future.status != "finished":
                    raise
                logger.info("cannot fetch results from the workers directly: through the "
                            "scheduler from now on", exc_info=True)
                self.direct = False
        return future.result()

    def lost(self) -> str | None:
        status = self.client.status
        if status in ("closing", "closed"):
            return f"the client is {status}"
        now = time.monotonic()
        if status != "running" and now - self._answered > self.lost_after:
            return f"no answer from the scheduler for {now - self._answered:.0f} s (client status {status!r})"
        if now - self._seen > self.lost_after:
            return f"no workers for {now - self._seen:.0f} s"
        return None

    def lost_error(self, exc: BaseException):
        return self.gone(f"{type(exc).__name__}: {str(exc).rstrip('.')}")

    def classify(self, exc: BaseException) -> str:
        if isinstance(exc, RemoteSplitError):
            return "error"
        if type(exc).__name__ in TRANSIENT \
                or isinstance(exc, (concurrent.futures.CancelledError, OSError, TimeoutError)):
            return "lost" if self.client.status in ("closing", "closed") else "retry"
        return "error"

    def forget(self, job: str) -> None:
        if self.client.status != "running":
            return

        def tell() -> None:
            try:
                self.client.run(forget, job, on_error="ignore")
            except Exception:  # the cluster is going away: its workers forget with it
                logger.debug("could not tell the workers to forget %s", job, exc_info=True)

        threading.Thread(target=tell, name="tpudata-distribute-forget", daemon=True).start()

    def close(self) -> None:
        self._stop.set()


def dask_client(executor):
    """The dask.distributed ``Client`` behind ``executor`` (itself, or a ``get_executor()``),
    or None (without importing dask)."""
    if any(c.__name__ == "ClientExecutor" for c in type(executor).__mro__):
        executor = getattr(executor, "_client", None)
    if any(c.__name__ == "Client" and c.__module__.startswith("distributed")
           for c in type(executor).__mro__):
        return executor
    return None


def backend_of(executor, lost_after: float) -> Backend:
    """The backend for what ``distribute()`` was given (a dask Client or ClientExecutor, a
    ``concurrent.futures.Executor``, or None: the consumer's thread)."""
    if executor is None or isinstance(executor, InlineExecutor):
        return Backend(None)
    client = dask_client(executor)
    if client is not None:
        return DaskBackend(client, lost_after)
    if isinstance(executor, Executor):
        return FuturesBackend(executor)
    raise TypeError(
        f"distribute() needs a dask.distributed Client (or client.get_executor()), a "
        f"concurrent.futures.Executor or None, not {type(executor).__name__}")
