"""Executors for sharded builds: in-process, a local process pool, or any ``Executor`` you pass.

Shard tasks are plain picklable objects run by :func:`tpudata.shards.writing.run_shard_task`,
so any :class:`concurrent.futures.Executor` can run them: the default process pool, a thread
pool, or a dask.distributed cluster through ``Client(...).get_executor()``.

>>> ex = InlineExecutor()
>>> ex.submit(pow, 2, 10).result()
1024
"""

from __future__ import annotations

import ast
import logging
import os
import sys
from concurrent.futures import Executor, Future, ProcessPoolExecutor

from tpudata import _processes
from tpudata.errors import MainGuardError

logger = logging.getLogger(__name__)

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


def _is_main_test(node: ast.expr) -> bool:
    """Whether ``node`` is ``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1
            and isinstance(node.ops[0], ast.Eq)):
        return False
    sides = [node.left, node.comparators[0]]
    return (any(isinstance(n, ast.Name) and n.id == "__name__" for n in sides)
            and any(isinstance(n, ast.Constant) and n.value == "__main__" for n in sides))


def _guarded(path: str, line: int) -> bool:
    """Whether module-level ``line`` of the script at ``path`` is inside an
    ``if __name__ == "__main__":`` block (True when the source cannot be read: no false alarms)."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return True
    for node in tree.body:
        if node.lineno <= line <= (node.end_lineno or node.lineno):
            return (isinstance(node, ast.If) and _is_main_test(node.test) and bool(node.body)
                    and node.body[0].lineno <= line <= (node.body[-1].end_lineno or line))
    return True


def _module_level_call(module_name: str) -> tuple[str, int] | None:
    """``(file, line)`` of the top-level statement of module ``module_name`` being run on this
    thread's stack, if any."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == module_name:
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None


def _guard_error(where: tuple[str, int]) -> MainGuardError:
    script, line = where
    return MainGuardError(
        f"{script}, line {line}: worker processes were asked for from the script's top level "
        f"without an `if __name__ == \"__main__\":` guard. They are started with spawn, which "
        f"imports the script again in every worker, so this call would run again in each of "
        f"them (and the pool would break with BrokenProcessPool). Put the call under "
        f"`if __name__ == \"__main__\":` (or pass workers=1).", script=script, line=line)


def check_main_guard() -> None:
    """Raise :class:`~tpudata.errors.MainGuardError` when called (through the library) from the
    unguarded top level of the script being run.

    Spawned workers import the main script again; a pool started from its unguarded top level
    would otherwise die with a bare ``BrokenProcessPool``.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path:  # interactive, python -c, notebooks: spawn does not import anything again
        return
    where = _module_level_call("__main__")
    if where is not None and os.path.abspath(where[0]) == os.path.abspath(path):
        if not _guarded(path, where[1]):
            raise _guard_error(where)


def pool_size(workers: int | None, tasks: int) -> int:
    """The processes :func:`make_executor` uses for ``workers`` and ``tasks`` (1: in-process)."""
    workers = default_workers() if workers is None else int(workers)
    if workers < 1:
        raise ValueError(f"workers must be >= 1, not {workers}")
    return min(workers, max(tasks, 1))


def sends_to_processes(executor: Executor | None, workers: int | None, tasks: int) -> bool:
    """Whether a build's tasks (and so its encoder) are pickled for other processes: our own
    pool of more than one worker, or a ``ProcessPoolExecutor`` passed in. (Other executors
    pickle, or not, their own way: dask and Ray with cloudpickle, threads not at all.)"""
    if executor is None:
        return pool_size(workers, tasks) > 1
    return isinstance(executor, ProcessPoolExecutor)


def make_executor(workers: int | None, tasks: int) -> tuple[Executor, int]:
    """``(executor, max tasks in flight)`` for ``workers`` processes (default: one per core).

    One worker (or one task) runs in-process. More use a process pool started with ``spawn``
    (no fork of a process that may hold gcsfs's event-loop thread or a progress-bar thread)
    whose workers exit when this process dies, however it dies
    (:func:`tpudata._processes.exit_with_parent`).
    """
    workers = pool_size(workers, tasks)
    if workers == 1:
        return InlineExecutor(), 1
    check_main_guard()
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=_processes.context("spawn"),
                               initializer=_processes.exit_with_parent, initargs=(os.getpid(),))
    logger.debug("started a pool of %d worker processes", workers)
    return pool, 2 * workers


__all__ = ["InlineExecutor", "check_main_guard", "default_workers", "make_executor", "pool_size",
           "sends_to_processes"]
