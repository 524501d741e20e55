"""The processes tpudata starts (process maps, shard builders): the start method, the
multiprocessing contexts that change no multiprocessing global, tpudata's own fork server, the
list of the live processes started through them, how a worker ends when its parent dies
(:func:`exit_with_parent`) and how workers are stopped (:func:`stop_processes`).

The standard contexts change two globals of the process that uses them: the first process
started fixes the default start method (a later ``multiprocessing.set_start_method()`` raises
"context has already been set"), and a fast fork server needs ``set_forkserver_preload``, which
is process-wide. The contexts here start processes with the standard library's own launch code
(its functions, run with a few of their module's names replaced), but name their start method
themselves, and ``"forkserver"`` forks from tpudata's own fork server: it imports the worker's
modules once (~0.3-1 s), so that each worker forked from it starts in milliseconds, and it exits
with this process. Where this Python's multiprocessing is laid out differently, :func:`context`
gives the standard context. :func:`live_processes` lists the processes started through these
contexts that still run (``tpudata.info()`` reports them).
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
import types
import weakref

logger = logging.getLogger(__name__)

__all__ = ["PARENT_POLL_SECONDS", "context", "exit_with_parent", "fork_server_pid",
           "live_processes", "pid_alive", "signal_name", "start_method", "stop_processes"]

PARENT_POLL_SECONDS = 0.25  # a worker notices its parent's death within this
_STOP_GRACE_S = 0.2  # stop_processes: time for idle workers to exit before they are terminated
_JOIN_S = 0.5  # stop_processes: time for a terminated worker to exit before it is killed


def start_method(start_method: str | None) -> str:
    """``start_method`` checked (None: forkserver where it exists, else spawn; never fork)."""
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


def exit_with_parent(parent: int) -> None:
    """In a worker (its first call, or a pool initializer): exit within
    ``PARENT_POLL_SECONDS`` of process ``parent`` dying, however it dies.

    A daemon thread polls: the worker's own parent changing (``os.getppid()``: a spawned
    worker's parent, or the fork server a forked one comes from) or ``parent`` gone. Not
    ``PR_SET_PDEATHSIG``: Linux sends that signal when the *thread* that started the worker
    ends, which kills the workers of a pool that a short-lived thread started.
    """
    ppid = os.getppid()
    if not pid_alive(parent):  # died before this worker started
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(PARENT_POLL_SECONDS)
            if os.getppid() != ppid or not pid_alive(parent):
                os._exit(1)  # the parent died (even by SIGKILL): its workers must not live on

    threading.Thread(target=watch, name="tpudata-parent-watch", daemon=True).start()


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
    """``SIGKILL`` for 9 (the number itself where it names no signal)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)

# what the fork server imports once, for the workers forked from it (names: no import edge)
_PRELOAD = ("tpudata.dataset.parallel.processes.worker", "tpudata.dataset.parallel.processes.map")


def context(method: str):
    """The context tpudata's worker processes start from for ``method`` (``"forkserver"`` or
    ``"spawn"``), leaving every multiprocessing global of this process as it was (see the
    module's text)."""
    own = _CONTEXTS.get(method)
    return own if own is not None else multiprocessing.get_context(method)


def fork_server_pid() -> int | None:
    """The pid of tpudata's own fork server while it runs (it exits with this process)."""
    server = _server
    return None if server is None else server._forkserver_pid


def live_processes() -> list[tuple[str, int]]:
    """``(name, pid)`` of each process started through :func:`context` that still runs, and of
    tpudata's own fork server."""
    out = []
    with _started_lock:
        started = list(_started)
    for process in started:
        try:
            if process.is_alive():
                out.append((process.name, process.pid))
        except (AssertionError, ValueError):  # closed, or a forked child's copy of the parent's
            continue
    pid = fork_server_pid()
    if pid is not None:
        out.append(("tpudata-fork-server", pid))
    return sorted(out, key=lambda entry: entry[1])


class _Started:
    """Processes that remember being started, for :func:`live_processes`."""

    def start(self):
        super().start()
        with _started_lock:
            _started.add(self)


class _Through:
    """A module seen through, with some of its names replaced."""

    def __init__(self, module, **replaced):
        self._module = module
        self.__dict__.update(replaced)

    def __getattr__(self, name):
        return getattr(self._module, name)


def _rebound(fn, **names):
    """The standard library's function ``fn`` running with some of its module's names replaced."""
    out = types.FunctionType(fn.__code__, {**fn.__globals__, **names}, fn.__name__,
                             fn.__defaults__, fn.__closure__)
    out.__kwdefaults__ = fn.__kwdefaults__
    return out


def _own_connect(fds):
    """Connect to tpudata's own fork server (started on first use) for a new process."""
    global _server
    with _server_lock:
        if _server is None:
            _server = _ForkServer()
            _server.set_forkserver_preload(["__main__", *_PRELOAD])
        server = _server
    return server.connect_to_new_process(fds)


def _forget_server_in_child() -> None:
    """A forked child starts its own fork server when it needs one (the parent's is not its
    child), and lets go of the parent's; the parent's processes are not its own."""
    global _server, _server_lock, _started, _started_lock
    _started, _started_lock = weakref.WeakSet(), threading.Lock()
    server, _server, _server_lock = _server, None, threading.Lock()
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


_server = None
_server_lock = threading.Lock()
_started: weakref.WeakSet = weakref.WeakSet()
_started_lock = threading.Lock()
_CONTEXTS: dict = {}
try:
    from multiprocessing import context as _mpcontext, forkserver as _forkserver
    from multiprocessing import popen_forkserver as _popen_forkserver
    from multiprocessing import popen_spawn_posix as _popen_spawn, spawn as _spawn

    def _through_spawn(method: str) -> _Through:  # preparation data naming ``method`` itself
        prepare = _rebound(_spawn.get_preparation_data, get_start_method=lambda: method)
        return _Through(_spawn, get_preparation_data=prepare)

    class _ForkServer(_forkserver.ForkServer):
        ensure_running = _rebound(_forkserver.ForkServer.ensure_running,
                                  spawn=_through_spawn("forkserver"))

    class _ForkServerPopen(_popen_forkserver.Popen):
        _launch = _rebound(_popen_forkserver.Popen._launch, spawn=_through_spawn("forkserver"),
                           forkserver=_Through(_forkserver, connect_to_new_process=_own_connect))

    class _SpawnPopen(_popen_spawn.Popen):
        _launch = _rebound(_popen_spawn.Popen._launch, spawn=_through_spawn("spawn"))

    class _ForkServerProcess(_Started, _mpcontext.ForkServerProcess):
        _Popen = staticmethod(_ForkServerPopen)

    class _SpawnProcess(_Started, _mpcontext.SpawnProcess):
        _Popen = staticmethod(_SpawnPopen)

    class _ForkServerContext(_mpcontext.ForkServerContext):
        Process = _ForkServerProcess

    class _SpawnContext(_mpcontext.SpawnContext):
        Process = _SpawnProcess

    _CONTEXTS = {"forkserver": _ForkServerContext(), "spawn": _SpawnContext()}
except (AttributeError, ImportError, TypeError):  # pragma: no cover - another multiprocessing
    logger.debug("tpudata's own process contexts are unavailable; using the standard ones",
                 exc_info=True)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_server_in_child)
