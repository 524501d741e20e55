"""The consumer of ``ds.distribute(...)``: chunks in flight, exactly once, in order, and the state.

Each split is read as a sequence of chunks. A chunk request names where it starts - the state
the split's previous chunk ended at (``None``: the split's start) plus elements to skip - so any
worker can run it, and running it twice gives the same elements. One request per split is in
flight at a time (plus a speculative copy, see below); its answer is accepted only while it is
the split's current request (``seq``): a late copy, a retry that raced its original, or an
answer for a restored-over iteration is dropped. So every element is delivered exactly once,
however often a chunk runs.

Order: ``deterministic=True`` delivers split after split in the split order (the chunks of later
splits wait in the buffer); ``False`` delivers whichever split has a chunk first (lower splits
first when several have), each split's own elements in order.

In flight: at most ``window`` chunks are requested and not yet delivered (default ``4 x
workers + 2``, at most ``MAX_WINDOW``, counted again as workers come and go: with
``deterministic=True`` the chunks of the splits after the one being delivered wait here), plus
the request of the split being delivered and one speculative copy. The consumer therefore holds
at most ``window + 2`` chunks of at most ``chunk_bytes`` plus one element each; workers start no
chunk beyond the window, so a slow trainer slows the workers down (back-pressure).

Speculation: when the chunk the consumer waits for has run longer than ``speculate_after``
seconds (default: 4 x the median chunk time, at least 2 s) and a worker is free (fewer requests
out than workers), a copy goes to another worker; the first answer wins.

State: ``{"head", "splits", "finished", "num_splits"}`` - the splits before ``head`` (in this
consumer's order) are delivered; ``splits`` lists ``[split, state, skip]`` for the splits
partly delivered (a chunk's start state and the elements delivered since), ``finished`` the
whole splits delivered beyond ``head`` (``deterministic=False`` only). Nothing else: the
number of workers, which worker held what and the chunks in flight are not part of it.
"""

from __future__ import annotations

import collections
import logging
import queue
import statistics
import threading
import time
import uuid

from tpudata import _pickling
from tpudata.dataset.core.iterator import POLL_SECONDS, BlockIterator
from tpudata.dataset.core.seeds import random_nodes
from tpudata.dataset.parallel.processes.interleave import _options_args
from tpudata.dataset.remote.backends import unwrap
from tpudata.dataset.remote.splits import Plan
from tpudata.dataset.remote.transport import Transport
from tpudata.dataset.remote.worker import ChunkRequest
from tpudata.errors import RemoteSplitError, StateError

logger = logging.getLogger(__name__)

__all__ = ["DistributedIterator", "MAX_RETRIES", "MAX_SLOTS", "MAX_WINDOW", "MIN_SPECULATE_SECONDS"]

MAX_WINDOW = 64  # the default max_in_flight: 4 x workers + 2, at most this
MAX_SLOTS = 64  # shared-memory slots of one iteration (requests in flight, arrays still lent)
MAX_RETRIES = 4  # runs of one chunk lost to dead workers before the split fails
MIN_SPECULATE_SECONDS = 2.0
CHECK_SECONDS = 0.25  # how often a waiting consumer looks at the executor and the stragglers


class _Request:
    __slots__ = ("future", "sent", "speculative", "cancelled", "slot")

    def __init__(self, sent: float, speculative: bool, slot):
        self.future, self.sent, self.speculative, self.cancelled = None, sent, speculative, False
        self.slot = slot  # the shared-memory slot its answer goes in (None: none)

    def cancel(self, transport) -> None:
        """Drop the request; its slot is never reused (the task may still write it)."""
        self.cancelled = True
        if transport is not None:
            transport.retire(self.slot)
        future, self.future = self.future, None  # a dask future released: its result dropped
        if future is not None:
            try:
                future.cancel()
            except Exception:  # the executor is gone already: nothing runs for it any more
                logger.debug("cancelling a chunk failed", exc_info=True)


class _Chunk:
    __slots__ = ("state", "skip", "blocks", "taken")

    def __init__(self, state, skip: int, blocks: list):
        self.state, self.skip, self.blocks, self.taken = state, skip, collections.deque(blocks), 0


class _Split:
    __slots__ = ("k", "order", "state", "skip", "seq", "chunks", "requests", "received_all",
                 "worker", "retries", "error")

    def __init__(self, k: int, order: int, state=None, skip: int = 0):
        self.k, self.order = k, order
        self.state, self.skip = state, skip  # where the next request starts
        self.seq = 0
        self.chunks: collections.deque = collections.deque()
        self.requests: list = []
        self.received_all = False
        self.worker = None
        self.retries = 0
        self.error = None

    def position(self) -> tuple:
        """``(state, skip)`` of the first element not yet delivered."""
        if self.chunks:
            c = self.chunks[0]
            return c.state, c.skip + c.taken
        return self.state, self.skip

    def finished(self) -> bool:
        return self.received_all and not self.chunks and self.error is None


class DistributedIterator(BlockIterator):
    """Runs a :class:`~tpudata.dataset.remote.dataset.DistributeDataset` iteration."""

    def __init__(self, ds, ctx, backend, template_bytes: bytes, seeds: list, plan: Plan):
        self.ds, self.ctx, self.backend, self.plan = ds, ctx, backend, plan
        self.transport = self._transport()
        self.template, self.seeds = template_bytes, seeds
        opts = ctx.options
        self.deterministic = (ds.deterministic if ds.deterministic is not None else
                              opts.deterministic if opts.deterministic is not None else True)
        # the order is not the state's to replay when not deterministic: never more than asked,
        # so a Cursor above takes its position from this iterator's own exact state
        self.exact_want = not self.deterministic
        self.flags = (ctx.ignore_errors, _options_args(opts))
        self.mine = list(range(ds.consumer_index, plan.num_splits, ds.num_consumers))
        self.ready: queue.Queue = queue.Queue()
        self.times: collections.deque = collections.deque(maxlen=32)
        self.duplicates = 0  # answers dropped (speculative copies, retries that raced)
        self.closed = False
        self._fetch_q: queue.Queue = queue.Queue()
        self._fetcher = None
        self._checked = 0.0
        self._done = False
        self._reset()

    # -- bookkeeping ---------------------------------------------------------------------------
    def _transport(self) -> Transport | None:
        if not (self.backend.remote and self.ds._shared_memory):
            return None
        return self.ds._parked.take() or Transport(self.ds._chunk_bytes, max_slots=MAX_SLOTS)

    def _reset(self, head: int = 0, splits: dict | None = None, finished=()) -> None:
        self.job = uuid.uuid4().hex
        self.head = head
        self.splits: dict = splits or {}
        self.finished = set(finished)

    def _window(self) -> int:
        if self.ds._max_in_flight is not None:
            return int(self.ds._max_in_flight)
        return min(MAX_WINDOW, 4 * self.backend.workers() + 2)

    def _held(self) -> int:
        return sum(len(s.chunks) + (1 if s.requests else 0) for s in self.splits.values())

    def _split(self, i: int) -> _Split:
        k = self.mine[i]
        s = self.splits.get(k)
        if s is None:
            s = self.splits[k] = _Split(k, i)
        return s

    # -- requests ------------------------------------------------------------------------------
    def _submit(self, s: _Split, speculative: bool = False) -> None:
        slot = self.transport.take() if self.transport is not None else None
        req = ChunkRequest(
            job=self.job, template=self.template, seeds=self.seeds, split=s.k,
            part=self.plan.part(s.k), path=self.ctx.path + (s.k,), flags=self.flags, seq=s.seq,
            state=s.state, skip=s.skip, max_bytes=self.ds._chunk_bytes,
            where=self.plan.where(s.k), files=self.plan.files(s.k),
            shm=self.transport.marker if self.transport is not None else None, slot=slot)
        r = _Request(time.monotonic(), speculative, slot)
        avoid = s.worker if speculative else None
        r.future = self.backend.submit(req, priority=-s.order, prefer=None if speculative else
                                       s.worker, avoid=avoid)
        s.requests.append(r)
        self._start_fetcher()
        job, k, seq = self.job, s.k, s.seq
        r.future.add_done_callback(lambda f: self._fetch_q.put((job, k, seq, r, f)))

    def _fill(self) -> None:
        budget = self._window() - self._held()
        i, first = self.head, True
        while i < len(self.mine):
            k = self.mine[i]
            if k in self.finished:
                i += 1
                continue
            s = self.splits.get(k)
            if s is None and budget <= 0:
                break
            s = s or self._split(i)
            if not s.requests and not s.received_all and s.error is None:
                if budget <= 0 and not first:
                    break
                self._submit(s)
                budget -= 1
            first = False
            i += 1

    # -- answers -------------------------------------------------------------------------------
    def _start_fetcher(self) -> None:
        if self._fetcher is None:
            self._fetcher = threading.Thread(target=self._fetching, name="tpudata-distribute-fetch",
                                             daemon=True)
            self._fetcher.start()

    def _fetching(self) -> None:
        """Moves finished tasks' results here (a dask result is transferred by ``result()``),
        so transfers overlap the consumer's own work."""
        while not self.closed and not self.ctx.stop.is_set():
            try:
                entry = self._fetch_q.get(timeout=POLL_SECONDS)
            except queue.Empty:
                continue
            if entry is None:  # closed
                return
            self._fetch(*entry)
            del entry  # held here, a dask future would keep its result alive

    def _fetch(self, job, k, seq, r, future) -> None:
        if r.cancelled or job != self.job:
            return  # a copy nobody waits for: never transferred
        transport = self.transport
        try:
            value = self.backend.result(future)
            payload = value[0]
            if transport is not None:
                if not (isinstance(payload, tuple) and payload[0] == "r"):
                    transport.give_back(r.slot)  # the task is done and did not write it
                payload = transport.decode(payload)
            self.ready.put((job, k, seq, r, (payload,) + tuple(value[1:]), None))
        except BaseException as exc:
            if transport is not None:
                transport.retire(r.slot)
            self.ready.put((job, k, seq, r, None, exc))

    def _receive(self, job, k, seq, r, value, exc) -> None:
        s = self.splits.get(k)
        if job != self.job or s is None or seq != s.seq or r not in s.requests:
            self.duplicates += 1
            return
        s.requests.remove(r)
        r.future = None
        if exc is not None:
            exc = unwrap(exc)
            kind = self.backend.classify(exc)
            if kind == "lost":
                raise self.backend.lost_error(exc) from exc
            if kind == "retry" and s.retries < MAX_RETRIES:
                s.retries += 1
                logger.info("%s: a run was lost (%s: %s); running it again", self.plan.where(k),
                            type(exc).__name__, exc)
                return  # no request left: _fill sends it again (unless a copy is still out)
            for other in s.requests:
                other.cancel(self.transport)
            s.requests.clear()
            s.error = exc if isinstance(exc, RemoteSplitError) else self._wrap(k, exc)
            return
        blocks, n, end, done, worker, seconds = value
        for other in s.requests:
            other.cancel(self.transport)
        s.requests.clear()
        self.times.append(time.monotonic() - r.sent)
        if blocks:
            s.chunks.append(_Chunk(s.state, s.skip, blocks))
        s.state, s.skip, s.seq = end, 0, s.seq + 1
        s.received_all, s.worker = bool(done), worker

    def _wrap(self, k: int, exc: BaseException) -> RemoteSplitError:
        hint = ""
        if isinstance(exc, ImportError):
            hint = (f"; the workers cannot import {getattr(exc, 'name', None) or 'a module'!r}: "
                    f"install tpudata and the packages the pipeline imports on every worker")
        return RemoteSplitError(f"{self.plan.where(k)} failed on the {self.backend.name}: "
                                f"{type(exc).__name__}: {exc}{hint}", split=k)

    def _wait(self) -> None:
        """Handle the answers that came (waiting up to a poll interval for one), then check on
        the executor and the straggler the consumer waits for."""
        try:
            item = self.ready.get(timeout=POLL_SECONDS)
        except queue.Empty:
            item = None
        while item is not None:
            self._receive(*item)
            try:
                item = self.ready.get_nowait()
            except queue.Empty:
                item = None
        self.ctx.check()
        now = time.monotonic()
        if now - self._checked >= CHECK_SECONDS:
            self._checked = now
            reason = self.backend.lost()
            if reason is not None:
                raise self.backend.gone(reason)
            self._speculate(now)

    def _speculate(self, now: float) -> None:
        workers = self.backend.workers()
        if self.ds._speculate_after == 0 or workers < 2:
            return
        if sum(len(s.requests) for s in self.splits.values()) >= workers:
            return  # no worker is free for a copy: it would only queue behind the others
        limit = self.ds._speculate_after
        if limit is None:
            median = statistics.median(self.times) if self.times else 0.0
            limit = max(MIN_SPECULATE_SECONDS, 4 * median)
        waiting = [self.splits.get(self.mine[self.head])] if self.deterministic else sorted(
            self.splits.values(), key=lambda s: s.order)[:1]
        for s in waiting:
            if s is not None and len(s.requests) == 1 and now - s.requests[0].sent > limit:
                logger.info("%s: its chunk runs for %.1f s: sending a copy to another worker",
                            self.plan.where(s.k), now - s.requests[0].sent)
                self._submit(s, speculative=True)

    # -- delivery ------------------------------------------------------------------------------
    def _advance(self) -> None:
        while self.head < len(self.mine):
            k = self.mine[self.head]
            s = self.splits.get(k)
            if k in self.finished or (s is not None and s.finished()):
                self.splits.pop(k, None)
                self.finished.discard(k)
                self.head += 1
            else:
                break
        if not self.deterministic:
            for k in [k for k, s in self.splits.items() if s.finished()]:
                del self.splits[k]
                self.finished.add(k)

    def _deliverable(self):
        if self.deterministic:
            s = self.splits.get(self.mine[self.head]) if self.head < len(self.mine) else None
            candidates = [s] if s is not None else []
        else:
            candidates = sorted((s for s in self.splits.values() if s.chunks or s.error),
                                key=lambda s: s.order)
        for s in candidates:
            if s.chunks:
                c = s.chunks[0]
                block = c.blocks.popleft()
                if self.exact_want and block.n > max(1, self.want):
                    c.blocks.appendleft(block.slice(max(1, self.want), block.n))
                    block = block.slice(0, max(1, self.want))
                c.taken += block.n
                if not c.blocks:
                    s.chunks.popleft()
                self._advance()
                return block
            if s.error is not None:
                raise s.error
        return None

    def next(self):
        if self.closed:
            return None
        while True:
            self._advance()
            if self.head >= len(self.mine):
                self._finish()
                return None
            self._fill()
            block = self._deliverable()
            if block is not None:
                return block
            self._wait()

    # -- state ---------------------------------------------------------------------------------
    def get_state(self) -> dict:
        partial = []
        for k, s in sorted(self.splits.items()):
            state, skip = s.position()
            if (state is not None or skip) and not s.finished():
                partial.append([k, state, skip])
        return {"head": self.head, "splits": partial, "finished": sorted(self.finished),
                "num_splits": self.plan.num_splits}

    def set_state(self, state: dict) -> None:
        if int(state["num_splits"]) != self.plan.num_splits:
            raise StateError(
                f"the state was taken over {state['num_splits']} splits, but distribute() cuts "
                f"this pipeline into {self.plan.num_splits} (another split_size, or the data "
                f"changed)")
        self._cancel_all()
        if self._done and self.transport is None:
            self.transport = self._transport()
        self._done = False
        order = {k: i for i, k in enumerate(self.mine)}
        splits = {}
        for k, s_state, skip in state["splits"]:
            splits[int(k)] = _Split(int(k), order[int(k)], s_state, int(skip))
        self._reset(int(state["head"]), splits, [int(k) for k in state["finished"]])

    # -- closing -------------------------------------------------------------------------------
    def _cancel_all(self) -> None:
        for s in self.splits.values():
            for r in s.requests:
                r.cancel(self.transport)
            s.requests.clear()
        self.backend.forget(self.job)
        if self.transport is not None:
            self.transport.sweep()

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            self._cancel_all()
            self.splits.clear()
            if self.transport is not None:  # (a restore takes one again)
                self.ds._parked.put(self.transport)
                self.transport = None

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._fetch_q.put(None)  # the fetcher stops now, not at its next poll
        fetcher = self._fetcher
        if fetcher is not None and fetcher is not threading.current_thread():
            fetcher.join(timeout=POLL_SECONDS)
        try:
            self._cancel_all()
        finally:
            self.backend.close()
            if self.transport is not None:
                self.ds._parked.put(self.transport)
                self.transport = None


def template_bytes(template) -> tuple[bytes, list]:
    """The per-split template pickled for the workers (functions of ``__main__`` by value),
    and the seeds of its unseeded random ops (the workers use these, not their own)."""
    seeds = [int(node._drawn_seed()) for node in random_nodes(template)]
    return _pickling.dumps(template), seeds
