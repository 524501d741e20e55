"""Waiting on behalf of a request without outliving its client.

Latency sleeps, injected stalls, throttle pauses and the in-flight queue wait in slices of
``SLICE_S`` and check the client's socket between them: a client that closed or reset the
connection ends the wait with :class:`ClientGone`, so its server thread is freed at once
instead of sleeping out a 30 s stall.
"""

from __future__ import annotations

import logging
import math
import select
import socket
import threading
import time

logger = logging.getLogger(__name__)

SLICE_S = 0.05  # longest wait between two checks of the client's socket
_HAS_POLL = hasattr(select, "poll")


class ClientGone(ConnectionAbortedError):
    """The client closed or reset its connection while the server was waiting to answer it."""


def _readable(sock: socket.socket, timeout: float) -> bool:
    """Whether ``sock`` has data, EOF or an error pending, waiting up to ``timeout`` seconds."""
    fd = sock.fileno()
    if fd < 0:
        return True
    if _HAS_POLL:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(max(0, math.ceil(timeout * 1000))))
    return bool(select.select([fd], [], [], timeout)[0])


def client_gone(sock: socket.socket) -> bool:
    """True when the peer closed or reset ``sock`` (EOF or an error is pending); never blocks.

    Data waiting to be read (a pipelined request) means the client is still there.
    """
    try:
        if not _readable(sock, 0):
            return False
        return sock.recv(1, socket.MSG_PEEK | getattr(socket, "MSG_DONTWAIT", 0)) == b""
    except (BlockingIOError, InterruptedError, socket.timeout):
        return False
    except (OSError, ValueError):
        return True


def pause(sock: socket.socket, seconds: float, stopping: threading.Event, what: str = "request") -> None:
    """Wait ``seconds`` (less when the server stops); :class:`ClientGone` if the client leaves."""
    deadline = time.monotonic() + seconds
    while not stopping.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        step = min(left, SLICE_S)
        try:
            pending = _readable(sock, step)
        except (OSError, ValueError):
            pending = True
        if pending:
            if client_gone(sock):
                raise ClientGone(f"the client of {what} disconnected while it waited")
            stopping.wait(step)  # a pipelined request is waiting: keep pausing, without spinning


def acquire(slots: threading.Semaphore, sock: socket.socket, stopping: threading.Event, what: str) -> None:
    """Take an in-flight slot, queueing as long as needed; :class:`ClientGone` if the client leaves."""
    while not slots.acquire(timeout=SLICE_S):
        if stopping.is_set():
            raise ClientGone(f"{what} was still queued for an in-flight slot when the server stopped")
        if client_gone(sock):
            raise ClientGone(f"the client of {what} disconnected while it was queued")
