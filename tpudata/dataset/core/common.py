"""Shared pieces of the ops: unary datasets, cursor-based iterators, ordered block workers."""

from __future__ import annotations

import collections
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from tpudata.dataset.core.base import BlockIterator, Cursor, Dataset
from tpudata.dataset.core.iterator import BLOCK_WANT

class _Unary(Dataset):
    def __init__(self, input_ds: Dataset):
        super().__init__()
        if not isinstance(input_ds, Dataset):
            raise TypeError(f"expected a Dataset, got {type(input_ds).__name__}")
        self.input = input_ds


class _CursorIterator(BlockIterator):
    """Base for iterators that read their input through a Cursor plus a few counters."""

    counters: tuple = ()

    def __init__(self, input_it: BlockIterator):
        self.input_it = input_it
        self.cursor = Cursor(input_it)

    def get_state(self):
        return {"cursor": self.cursor.get_state(), **{k: getattr(self, k) for k in self.counters}}

    def set_state(self, state):
        self.cursor.set_state(state["cursor"])
        for k in self.counters:
            setattr(self, k, type(getattr(self, k))(state[k]))

    def close(self):
        self.input_it.close()


class PartialBlock(Exception):
    """Raised by a block function: deliver ``block`` (the good elements), then raise ``error``."""

    def __init__(self, block, error: BaseException):
        super().__init__(str(error))
        self.block, self.error = block, error


class _BlockMapIterator(BlockIterator):
    """Applies ``fn(block) -> Block | None`` to each input block, optionally on a thread pool,
    keeping the input order. State is the input's position after the last block returned."""

    def __init__(self, input_it: BlockIterator, fn: Callable, threads: int):
        self.input_it = input_it
        self.fn = fn
        self.threads = threads
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="tpudata-map") if threads else None
        self.pending: collections.deque = collections.deque()
        self.input_done = False
        self.error: BaseException | None = None  # raised after the good part of a block

    def _submit(self) -> bool:
        if self.input_done:
            return False
        before = self.input_it.get_state()
        self.input_it.want = BLOCK_WANT  # block-level work: whole blocks
        block = self.input_it.next()
        if block is None:
            self.input_done = True
            return False
        fut = self.pool.submit(self.fn, block) if self.pool else None
        self.pending.append((before, fut, block))
        return True

    def next(self):
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        while True:
            try:
                if self.pool is None:
                    if not self._submit():
                        return None
                    _, _, block = self.pending.popleft()
                    out = self.fn(block)
                else:
                    while len(self.pending) < self.threads + 1 and self._submit():
                        pass
                    if not self.pending:
                        return None
                    _, fut, _ = self.pending.popleft()
                    out = fut.result()
            except PartialBlock as partial:
                if partial.block is None or not partial.block.n:
                    raise partial.error from None
                self.error = partial.error
                return partial.block
            if out is not None and out.n:
                return out

    def get_state(self):
        if self.pending:
            return self.pending[0][0]
        return self.input_it.get_state()

    def set_state(self, state):
        self._drain()
        self.input_done = False
        self.input_it.set_state(state)

    def _drain(self):
        for _, fut, _ in self.pending:
            if fut is not None:
                fut.cancel()
        for _, fut, _ in self.pending:
            if fut is not None and not fut.cancelled():
                try:
                    fut.result()
                except Exception:  # discarded work
                    pass
        self.pending.clear()

    def close(self):
        self._drain()
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
        self.input_it.close()


def input_spec(ds):
    """The declared element spec of ``ds`` (None when unknown)."""
    from tpudata.dataset.core.spec import _static

    return _static(ds)


__all__ = ["input_spec"]
