"""A bounded pool of reader threads shared by the open sub-iterators of a parallel interleave.

Instead of a thread per file (a thread start and teardown per file, unbounded when files are
many and small), an interleave owns ``threads`` workers; each open sub-iterator is a
:class:`PooledReader` that asks the pool to read its next block whenever its buffer has room.
Readers for the next input elements can be created ahead (their files open in the pool while
the current ones are consumed). Blocks travel with the state after them, errors with their
traceback, as in :mod:`tpudata.dataset.parallel.prefetch`.

Many small files cost little: idle workers wait on a condition of their own (a new read wakes
one worker, not every thread), a reader holding less than ``READ_THROUGH_BYTES`` reads one more
block in the same task (so a small file is read to its end in one hand-off: at most
``max_blocks`` blocks, or one more while under 1 MiB), and its end is handed to the consumer
with its last block.
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading

from tpudata.dataset.core.iterator import DEFAULT_WANT, BlockIterator, IterContext, wait_for
from tpudata.tfrecord.whole import read_whole

logger = logging.getLogger(__name__)

END = object()  # the item a read-ahead reader queues at its end (reader_pool, procinterleave)
# a reader holding less than this reads one more block beyond ``max_blocks`` in the same task,
# so a small file's end (or its next small block) needs no second hand-off
READ_THROUGH_BYTES = 1 << 20
# whole small files are read in runs of at least this many per pool task (one native call each)
MIN_WHOLE_GROUP = 4
_pool_ids = itertools.count()


def hand_over(reader, item, after):
    """What a read-ahead reader's ``next()`` returns for an item it took: the block (its
    ``state`` becomes ``after``), None at the end (``END``), or the error raised; ``finished``
    is set at the end and on an error."""
    if isinstance(item, BaseException):
        reader.finished = True
        raise item
    reader.state = after
    if item is END:
        reader.finished = True
        return None
    return item


class ReaderPool:
    """``threads`` workers running :meth:`PooledReader._step` for readers that have room."""

    def __init__(self, threads: int, ctx: IterContext, name: str = "tpudata-interleave"):
        self.size = max(1, int(threads))
        self.ctx = ctx
        self.name = f"{name}-{next(_pool_ids)}"
        self.cond = threading.Condition()  # consumers wait here for blocks
        self.work = threading.Condition(self.cond._lock)  # idle workers wait here for reads
        self.tasks: collections.deque = collections.deque()
        self.workers: list[threading.Thread] = []
        self.idle = 0
        self.stopped = False
        self.unsent: list = []  # WholeFileReaders made, their reads not queued yet
        # whole-file reads: whole_ok once a run was mostly read, whole_off once mostly declined
        self.whole_ok = self.whole_off = False
        self.declined: list = []  # WholeFileReaders whose file was declined, not yet started

    def _submit(self, reader: "PooledReader") -> None:
        """Queue a read (caller holds ``cond``)."""
        self.tasks.append(reader)
        if self.idle == 0 and len(self.workers) < self.size:
            t = threading.Thread(target=self._run, name=f"{self.name}-{len(self.workers)}",
                                 daemon=True)
            self.workers.append(t)
            t.start()
        elif self.idle:
            self.work.notify()  # one worker, not every waiting thread

    def _run(self) -> None:
        while True:
            with self.cond:
                self.idle += 1
                try:
                    while not self.tasks and not self._stopping():
                        self.work.wait(0.1)
                finally:
                    self.idle -= 1
                if self._stopping():
                    return
                reader = self.tasks.popleft()
            reader._step()

    def _stopping(self) -> bool:
        return self.stopped or self.ctx.stop.is_set()

    # -- whole small files (tpudata.tfrecord.whole) ----------------------------------------------
    def add_whole(self, reader: "WholeFileReader") -> None:
        """Hold a whole-file read until :meth:`send_whole` queues the held ones together."""
        self.unsent.append(reader)

    def send_whole(self) -> None:
        """Queue the held whole-file reads: split among the workers in runs of consecutive
        files (at least ``MIN_WHOLE_GROUP`` each), each run one GIL-free native call."""
        if not self.unsent:
            return
        readers, self.unsent = self.unsent, []
        groups = max(1, min(self.size, len(readers) // MIN_WHOLE_GROUP))
        per = -(-len(readers) // groups)
        with self.cond:
            for i in range(0, len(readers), per):
                task = _WholeReadTask(readers[i : i + per])
                for r in task.readers:
                    r.task = task
                self._submit(task)

    def start_declined(self) -> None:
        """Start reading the declined files in blocks, all of them now (not each only when
        the consumer first asks it for a block: files opened together read together)."""
        with self.cond:
            readers, self.declined = self.declined, []
        for r in readers:
            r._fallback(sweep=False)

    def close(self) -> None:
        with self.cond:
            self.stopped = True
            self.unsent = []
            self.declined = []
            self.tasks.clear()
            self.cond.notify_all()
            self.work.notify_all()
        for t in self.workers:
            t.join(self.ctx.join_budget())  # closing: a shared deadline, not one per thread
        self.workers = []


class PooledReader(BlockIterator):
    """A sub-iterator read ahead by a :class:`ReaderPool`, at most ``max_blocks`` blocks."""

    def __init__(self, it: BlockIterator, pool: ReaderPool, max_blocks: int = 2,
                 max_bytes: int = 64 << 20):
        self.it = it
        self.pool = pool
        self.cond = pool.cond
        self.max_blocks = max_blocks
        self.max_bytes = max_bytes
        self.items: collections.deque = collections.deque()
        self.bytes = 0
        self.scheduled = False  # a read is queued or running
        self.producer_done = False
        self.closed = False
        self.finished = False
        self.end_state = None  # the state after the end, when it came with the last block
        self.state = it.get_state()  # consumer-side position

    # -- pool side -------------------------------------------------------------------------------
    def _schedule(self) -> None:
        """Queue a read if there is room (caller holds ``cond``)."""
        if (not self.scheduled and not self.producer_done and not self.closed
                and len(self.items) < self.max_blocks and self.bytes < self.max_bytes):
            self.scheduled = True
            self.pool._submit(self)

    def start(self) -> None:
        with self.cond:
            self._schedule()

    def _has_room(self) -> bool:
        if self.producer_done or self.closed:
            return False
        if len(self.items) < self.max_blocks and self.bytes < self.max_bytes:
            return True
        # a small file: read on to its end in the same task (one hand-off per file, not two)
        return self.bytes < READ_THROUGH_BYTES and len(self.items) <= self.max_blocks

    def _step(self) -> None:
        """Read blocks while there is room (one task per file for small files), then yield."""
        while True:
            try:
                self.it.want = DEFAULT_WANT  # a sub-dataset may run user code: modest blocks
                block = self.it.next()
                after = self.it.get_state()
                item = (END if block is None else block, after,
                        0 if block is None else block.nbytes)
            except BaseException as exc:  # surfaces in the consumer with this traceback
                item = (exc, None, 0)
            with self.cond:
                if self.closed:  # closed while reading: release the sub-iterator here
                    self.scheduled = False
                    self.cond.notify_all()
                    break
                self.items.append(item)
                self.bytes += item[2]
                if item[0] is END or isinstance(item[0], BaseException):
                    self.producer_done = True
                self.cond.notify_all()
                if self._has_room() and not self.pool._stopping():
                    continue  # keep this worker on this reader
                self.scheduled = False
                return
        self.it.close()

    # -- consumer side ---------------------------------------------------------------------------
    def ready(self) -> bool:
        """Whether a block (or the end, or an error) is waiting."""
        return bool(self.items) or self.finished

    def next(self):
        if self.finished:
            if self.end_state is not None:  # the end was taken with the last block
                self.state, self.end_state = self.end_state, None
            return None
        with self.cond:
            if not self.items:
                self._schedule()
                wait_for(self.cond, lambda: self.items, self.pool.ctx)
            item, after, nbytes = self.items.popleft()
            self.bytes -= nbytes
            if self.items and self.items[0][0] is END and item is not END:
                # a small file's end came with its last block: no second hand-off for it
                self.end_state = self.items.popleft()[1]
                self.finished = True
            else:
                self._schedule()
        return hand_over(self, item, after)

    def get_state(self):
        return self.state

    def set_state(self, state):
        with self.cond:
            wait_for(self.cond, lambda: not self.scheduled, self.pool.ctx)
            self.items.clear()
            self.bytes = 0
            self.producer_done = False
        self.finished = False
        self.end_state = None
        self.it.set_state(state)
        self.state = state

    def close(self):
        if self.producer_done and not self.scheduled and not self.closed:
            # read to its end and no read queued or running: no worker touches it again
            self.closed = True
            self.items.clear()
            self.it.close()
            return
        with self.cond:
            if self.closed:
                return
            self.closed = True
            if self.scheduled:
                try:
                    self.pool.tasks.remove(self)
                    self.scheduled = False
                except ValueError:  # a worker is reading it now
                    pass
            busy = self.scheduled  # a worker is reading: it closes the sub-iterator
            self.items.clear()
        if not busy:
            self.it.close()


class _WholeReadTask:
    """A pool task: read the whole files of several :class:`WholeFileReader` in one call."""

    def __init__(self, readers: list):
        self.readers = readers
        self.jobs = [r.job for r in readers]
        self.started = False
        self.pool = readers[0].pool

    def _step(self) -> None:
        cond = self.pool.cond
        with cond:
            self.started = True
            jobs = [job for r, job in zip(self.readers, self.jobs) if not r.cancelled]
        try:
            read_whole(jobs)
        except BaseException:  # e.g. MemoryError: each reader reads its file the general way
            logger.warning("whole-file read of %d files failed; reading them one by one",
                           len(jobs), exc_info=True)
            for job in jobs:
                job.declined = True
        with cond:
            declined = 0
            for r, job in zip(self.readers, self.jobs):
                job.done = True
                if job.declined and not r.cancelled:
                    declined += 1
                    self.pool.declined.append(r)  # the consumer starts their PooledReaders
            if declined * 2 > len(jobs):  # mostly larger files: read the next ones in blocks
                self.pool.whole_off = True
            elif jobs:
                self.pool.whole_ok = True
            self.readers = self.jobs = []  # no cycle through the readers keeps the buffers
            cond.notify_all()


class WholeFileReader(BlockIterator):
    """A sub-iterator of one small local TFRecord file that a pool task reads whole, with other
    files, in one call (:mod:`tpudata.tfrecord.whole`); its blocks come framed already, so
    :meth:`next` only wraps them (no thread hand-off per file). A file that turns out not to
    qualify (larger, not a regular file) is read by a :class:`PooledReader` instead."""

    def __init__(self, it: BlockIterator, job, pool: ReaderPool):
        self.it = it
        self.job = job
        self.pool = pool
        self.task = None  # the _WholeReadTask, once queued
        self.cancelled = False
        self.inner: PooledReader | None = None  # the fallback for a declined file
        self._max_blocks = 1
        pool.add_whole(self)

    @property
    def max_blocks(self) -> int:
        return self._max_blocks

    @max_blocks.setter
    def max_blocks(self, n: int) -> None:  # (set by the interleave, as a PooledReader's)
        self._max_blocks = n
        if self.inner is not None:
            self.inner.max_blocks = n

    @property
    def exact_want(self):
        return self.it.exact_want

    def _fallback(self, sweep: bool = True) -> PooledReader | None:
        """The PooledReader of a declined file (made and started the first time), else None;
        ``sweep``: start those of the other declined files too."""
        job = self.job
        if self.inner is None and job is not None and job.done and job.declined:
            self.job = self.task = None
            self.inner = PooledReader(self.it, self.pool, max_blocks=self._max_blocks,
                                      max_bytes=64 << 20)
            self.inner.start()
            if sweep:
                self.pool.start_declined()
        return self.inner

    @property
    def producer_done(self) -> bool:
        inner = self._fallback()
        if inner is not None:
            return inner.producer_done
        return self.job is None or self.job.done

    def start(self) -> None:
        inner = self._fallback()
        if inner is not None:
            inner.start()
        elif self.task is None and not self.cancelled and self.job is not None:
            self.pool.send_whole()

    def ready(self) -> bool:
        inner = self._fallback()
        if inner is not None:
            return inner.ready()
        return self.job is None or self.job.done

    def next(self):
        job = self.job
        if job is not None:
            if not job.done:
                self.start()
                with self.pool.cond:
                    wait_for(self.pool.cond, lambda: job.done, self.pool.ctx)
            if self._fallback() is None:
                self.job = self.task = None  # (the files iterator holds the result)
        if self.inner is not None:
            return self.inner.next()
        return self.it.next()

    def get_state(self):
        return self.inner.get_state() if self.inner is not None else self.it.get_state()

    def set_state(self, state):
        self._cancel()
        if self.inner is not None:
            self.inner.set_state(state)
        else:
            self.it.set_state(state)

    def _cancel(self) -> None:
        """Drop a whole-file read that was not taken (nothing stays open: it reads files in
        one call); a read under way is waited for, so no worker touches the iterator after."""
        with self.pool.cond:
            job, self.job = self.job, None
            if job is None:
                return
            self.cancelled = True
            if self.task is None:
                if self in self.pool.unsent:
                    self.pool.unsent.remove(self)
            elif self.task.started:
                wait_for(self.pool.cond, lambda: job.done, None)

    def close(self):
        self._cancel()
        if self.inner is not None:
            self.inner.close()
        else:
            self.it.close()


__all__ = ["END", "PooledReader", "ReaderPool", "WholeFileReader", "hand_over"]
