"""The parent's side of one :meth:`ProcessMapper.imap` (or of submit/collect): a reorder buffer
(or, with ``deterministic=False``, a completion queue) of results, each an :class:`Entry` of a
payload held in the worker's shared-memory segment until its turn comes
(:class:`~tpudata._shm_transport.Held`).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from tpudata._shm_transport import Held
from tpudata.errors import WorkerError

__all__ = ["Entry", "Session"]


class Entry:
    """Result ``index`` of a payload held in a worker's segment (``pid``: that worker)."""

    __slots__ = ("held", "index", "pid")

    def __init__(self, held: Held, index: int, pid: int):
        self.held = held
        self.index = index
        self.pid = pid


class Session:
    """One imap(): its reorder buffer (or completion queue) and counters."""

    def __init__(self, deterministic: bool):
        self.deterministic = deterministic
        self.pulled = 0  # elements taken from the input
        self.outstanding = 0  # taken and not yet yielded
        self.next_position = 0  # deterministic: the position to yield next
        self.ready: dict[int, tuple] = {}
        self.done: deque = deque()
        self.fatal: WorkerError | None = None
        self.direct = False  # submit()/collect() rather than imap()
        self.input_error: Exception | None = None  # what the input iterator raised

    def put(self, position: int, error: WorkerError | None, value: Any) -> None:
        if self.deterministic:
            self.ready[position] = (position, error, value)
        else:
            self.done.append((position, error, value))

    def drop_held(self) -> None:
        """Free the segments of results that will not be read."""
        for _, _, value in list(self.ready.values()) + list(self.done):
            if type(value) is Entry:
                value.held.drop()

    def pop_ready(self) -> tuple | None:
        if self.deterministic:
            item = self.ready.pop(self.next_position, None)
            if item is None:
                return None
            self.next_position += 1
        elif self.done:
            item = self.done.popleft()
        else:
            return None
        self.outstanding -= 1
        return item
