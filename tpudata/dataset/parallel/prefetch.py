"""prefetch: produce elements in a background thread.

The producer thread puts ``(block, state_after, error)`` on a bounded buffer (bounded in
elements and in bytes), so checkpoint state and errors travel with the data and surface in the
consumer's thread, with the producer's traceback. ``prefetch(n)`` holds at most ``n`` elements:
larger input blocks are cut to fit. ``close()`` stops and joins the thread.
"""

from __future__ import annotations

import collections
import logging
import threading

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import BlockIterator, Dataset
from tpudata.dataset.core.iterator import BLOCK_WANT, Cursor, wait_for

logger = logging.getLogger(__name__)

_END = object()


class PrefetchDataset(Dataset):
    def __init__(self, input_ds: Dataset, buffer_size: int = 2, max_bytes: int = 256 << 20):
        super().__init__()
        if buffer_size is None or buffer_size < 0:  # AUTOTUNE (-1)
            buffer_size = 2
        self.input = input_ds
        self.buffer_size = max(1, int(buffer_size))
        self.max_bytes = int(max_bytes)

    def _make_iterator(self, ctx):
        return PrefetchIterator(self.input._make_iterator(ctx), self.buffer_size, self.max_bytes,
                                ctx=ctx, split=True)

    def _spec(self):
        from tpudata.dataset.core.spec import _static

        return _static(self.input)

    def cardinality(self):
        return self.input.cardinality()


class PrefetchIterator(BlockIterator):
    """Runs ``input_it`` in a thread, at most ``max_elements`` / ``max_bytes`` ahead."""

    def __init__(self, input_it: BlockIterator, max_elements: int = 2, max_bytes: int = 256 << 20,
                 name: str = "tpudata-prefetch", min_blocks: int = 1, ctx=None,
                 split: bool = False):
        self.input_it = input_it
        self.ctx = ctx
        # split: read through a Cursor so that at most max_elements elements are held
        self.cursor = Cursor(input_it) if split else None
        self.min_blocks = max(1, min_blocks)  # blocks allowed ahead even past max_elements
        self.max_elements = max(1, max_elements)
        self.max_bytes = max_bytes
        self.name = name
        self.cond = threading.Condition()
        self.items: collections.deque = collections.deque()
        self.elements = 0
        self.bytes = 0
        self.stop = False
        self.thread: threading.Thread | None = None
        self.state = self.cursor.get_state() if split else input_it.get_state()  # consumer side
        self.finished = False
        self._running = False  # a producer thread is inside _run
        self._close_input_on_exit = False  # close() left the input to a producer still running

    # -- producer --------------------------------------------------------------------------------
    def _run(self):
        try:
            self._produce()
        finally:
            with self.cond:
                self._running = False
                close_input = self._close_input_on_exit
            if close_input:  # close() returned while this thread was still in the input
                self.input_it.close()

    def _produce(self):
        try:
            while True:
                with self.cond:
                    while not self._stopping() and len(self.items) >= self.min_blocks and (
                        self.elements >= self.max_elements or self.bytes >= self.max_bytes
                    ):
                        self.cond.wait(0.1)
                    if self._stopping():
                        return
                    room = max(1, self.max_elements - self.elements)
                if self.cursor is not None:
                    block = self.cursor.next_block(room)
                    after = self.cursor.get_state()
                else:
                    self.input_it.want = BLOCK_WANT
                    block = self.input_it.next()
                    after = self.input_it.get_state()
                with self.cond:
                    if self.stop:
                        return
                    if block is None:
                        self.items.append((_END, after, None))
                        self.cond.notify_all()
                        return
                    nbytes = block.nbytes
                    self.items.append((block, after, nbytes))
                    self.elements += block.n
                    self.bytes += nbytes
                    self.cond.notify_all()
        except BaseException as exc:  # surfaces in the consumer with this traceback
            with self.cond:
                self.items.append((exc, None, None))
                self.cond.notify_all()

    def _stopping(self) -> bool:
        return self.stop or (self.ctx is not None and self.ctx.stop.is_set())

    def _start(self):
        self.stop = False
        self._running = True
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self.thread.start()

    def start(self) -> None:
        """Begin producing in the background now (otherwise the first next() starts it)."""
        if self.thread is None and not self.finished:
            self._start()

    def ready(self) -> bool:
        """Whether a block (or the end, or an error) is waiting."""
        with self.cond:
            return bool(self.items)

    # -- consumer --------------------------------------------------------------------------------
    def next(self):
        if self.finished:
            return None
        if self.thread is None:
            self._start()
        with self.cond:
            wait_for(self.cond, lambda: self.items, self.ctx)
            item, after, nbytes = self.items.popleft()
            if isinstance(item, BaseException):
                self.finished = True
                raise item
            if item is _END:
                self.finished = True
                self.state = after
                return None
            self.elements -= item.n
            self.bytes -= nbytes
            self.state = after
            self.cond.notify_all()
            return item

    def get_state(self):
        return self.state

    def set_state(self, state):
        self._shutdown()
        if self.cursor is not None:
            self.cursor.set_state(state)
        else:
            self.input_it.set_state(state)
        self.state = state
        self.finished = False

    def _shutdown(self):
        if self.thread is not None:
            with self.cond:
                self.stop = True
                self.cond.notify_all()
            budget = None if self.ctx is None else self.ctx.join_budget()
            # closing: a producer inside a long user function ends on its own, soon after
            self.thread.join(budget)
            self.thread = None
        with self.cond:
            self.items.clear()
            self.elements = self.bytes = 0

    def close(self):
        self._shutdown()
        with self.cond:
            if self._running:  # the producer is still inside the input: it closes it on its way out
                self._close_input_on_exit = True
                return
        self.input_it.close()

registry.provide(PrefetchDataset)
