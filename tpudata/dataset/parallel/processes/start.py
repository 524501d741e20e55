"""Starting and stopping the worker processes of :class:`~tpudata.dataset.parallel.processes.pool.ProcessMapper`:
the start method (forkserver or spawn, never fork), the fork server's preloaded modules, pickling
the function for the workers, and stopping them (told, then terminated, then killed)."""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import pickle
import signal
import time
from collections.abc import Callable

from tpudata.errors import NotPicklableError

logger = logging.getLogger("tpudata.dataset.parallel.processes.pool")

__all__ = ["dumps_fn", "preload_forkserver", "signal_name", "start_method", "stop_processes"]

_STOP_GRACE_S = 0.2  # close(): time for idle workers to exit before they are terminated
_JOIN_S = 0.5  # close(): time for a terminated worker to exit before it is killed


def start_method(start_method: str | None) -> str:
    available = multiprocessing.get_all_start_methods()
    if start_method is None:
        return "forkserver" if "forkserver" in available else "spawn"
    if start_method == "fork":
        raise ValueError("start_method='fork' is refused: forking a process that runs threads or "
                         "has JAX/torch initialised can deadlock; use 'forkserver' or 'spawn'")
    if start_method not in ("forkserver", "spawn") or start_method not in available:
        usable = [m for m in ("forkserver", "spawn") if m in available]
        raise ValueError(f"start_method must be one of {usable} or None, got {start_method!r}")
    return start_method


_PRELOAD = ("tpudata.dataset.parallel.processes.worker", "tpudata.dataset.parallel.processes.map")


def preload_forkserver(ctx) -> None:
    """Have the fork server (when it is not running yet) import the worker's modules once, so
    that each worker forked from it starts in milliseconds instead of importing numpy and
    tpudata again (~0.3-1 s; the server's own ``__main__`` preload does not take effect on
    Python < 3.13). Adds to the modules already asked for; a running server is left as is."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    if server is None or getattr(server, "_forkserver_pid", None) is not None:
        return
    modules = list(getattr(server, "_preload_modules", None) or ["__main__"])
    missing = [m for m in _PRELOAD if m not in modules]
    if missing:
        ctx.set_forkserver_preload(modules + missing)


def dumps_fn(fn: Callable) -> bytes:
    try:
        import cloudpickle
    except ImportError:
        cloudpickle = None
    try:
        if cloudpickle is not None:
            return cloudpickle.dumps(fn)
        return pickle.dumps(fn, protocol=5)
    except Exception as e:
        hint = ("cloudpickle could not pickle it either (does it hold a lock, a file or a "
                "generator?)") if cloudpickle is not None else (
                "use a function defined with `def` at the top level of a module, not a lambda or "
                "a nested function (or install cloudpickle, which ProcessMapper then uses)")
        raise NotPicklableError(
            f"ProcessMapper sends fn to worker processes, so it must pickle, but {fn!r} does not "
            f"({type(e).__name__}: {e}); {hint}") from e


def stop_processes(processes: list) -> None:
    """Wait briefly for processes told to stop, then terminate and finally kill the rest."""
    alive = [p for p in processes if p.is_alive()]
    deadline = time.monotonic() + _STOP_GRACE_S
    while alive and time.monotonic() < deadline:
        multiprocessing.connection.wait([p.sentinel for p in alive], deadline - time.monotonic())
        alive = [p for p in alive if p.is_alive()]
    for p in alive:
        p.terminate()
    deadline = time.monotonic() + _JOIN_S
    for p in alive:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in alive:
        if p.is_alive():
            logger.warning("worker process %d ignored SIGTERM; killing it", p.pid)
            p.kill()
            p.join()
    for p in processes:
        p.join()


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
