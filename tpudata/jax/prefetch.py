"""Prefetch to device, with the host pipeline's checkpoint state kept in step.

:class:`DeviceIterator` keeps ``depth`` batches already on their way to the devices (JAX
transfers are asynchronous). Each queued batch carries the host iterator's state *after* it, so
``get_state()`` describes exactly the batches handed out, not those still in the queue; restoring
it re-reads the queued ones.
"""

from __future__ import annotations

import collections
from typing import Callable, Iterator

from tpudata.jax.arrays import global_batch


class DeviceIterator:
    """Iterate ``host`` (an iterator with ``get_state``/``set_state``, e.g. ``ds.iterator()``),
    yielding ``to_device(batch)`` (default: :func:`global_batch` on ``mesh``) ``depth`` ahead.
    """

    def __init__(self, host, mesh=None, *, depth: int = 2, axis=None,
                 to_device: Callable | None = None):
        if depth < 1:
            raise ValueError(f"depth must be >= 1, not {depth}")
        if to_device is None and mesh is None:
            raise ValueError("give a mesh (or a to_device function)")
        self.host = host
        self.depth = int(depth)
        self.to_device = to_device or (lambda b: global_batch(b, mesh, axis))
        self._queue: collections.deque = collections.deque()
        self._state = host.get_state()
        self._done = False

    def _fill(self) -> None:
        while not self._done and len(self._queue) < self.depth:
            try:
                batch = next(self.host)
            except StopIteration:
                self._done = True
                return
            self._queue.append((self.to_device(batch), self.host.get_state()))

    def __iter__(self) -> Iterator:
        return self

    def __next__(self):
        self._fill()
        if not self._queue:
            raise StopIteration
        arrays, self._state = self._queue.popleft()
        self._fill()
        return arrays

    def get_state(self):
        """The host state after the last batch this iterator returned."""
        return self._state

    def set_state(self, state) -> None:
        self._queue.clear()
        self._done = False
        self.host.set_state(state)
        self._state = self.host.get_state()

    def close(self) -> None:
        self._queue.clear()
        close = getattr(self.host, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> "DeviceIterator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["DeviceIterator"]
