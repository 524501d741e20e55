"""Starting and stopping the worker processes of :class:`~tpudata.dataset.parallel.processes.pool.ProcessMapper`:
the start method (forkserver or spawn, never fork; :mod:`~tpudata.dataset.parallel.processes.contexts`
starts them), and stopping them (told, then terminated,
then killed)."""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import signal
import time

logger = logging.getLogger("tpudata.dataset.parallel.processes.pool")

__all__ = ["signal_name", "start_method", "stop_processes"]

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
