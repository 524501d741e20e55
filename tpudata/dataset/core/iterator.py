"""The iterator protocol of a running pipeline, and the user-facing :class:`Iterator`.

Iterating a :class:`~tpudata.dataset.core.base.Dataset` builds a chain of :class:`BlockIterator`
objects that pass :class:`~tpudata.dataset.core.block.Block` runs of elements downstream. A block is
an optimisation, never a contract: every position is addressed by element. :class:`Cursor`
reads a BlockIterator element by element and reports its position as "a snapshot of the input
plus the number of elements consumed since"; a restore fast-forwards over however many blocks
the input happens to produce on the way back.

Shutdown: every iteration shares one :class:`IterContext` whose ``stop`` event is set by
``Iterator.close()`` (from any thread). Every blocking wait in the engine polls it, so a
consumer blocked in ``next()`` on another thread wakes up and gets ``StopIteration``.
"""

from __future__ import annotations

import logging
import numbers
import os
import threading
import time

from tpudata.dataset.core.block import Block
from tpudata.dataset.core.state import from_jsonable, jsonable

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.05  # how often blocked waits look at the stop event
CLOSE_WAIT_SECONDS = 1.0  # how long close() from another thread waits for the consumer


class Cancelled(Exception):
    """Raised inside the engine when the iteration was closed; the user sees StopIteration."""


class IterContext:
    """Identifies one iteration of a (sub)pipeline: seeds are derived from ``path``.

    The top-level iteration number, repeat epochs and interleave slots each add a component, so
    ``shuffle(reshuffle_each_iteration=True)`` reshuffles for every epoch deterministically.
    ``stop`` is shared by the whole iteration: set by ``Iterator.close()``.
    """

    __slots__ = ("path", "in_background", "stop", "_on_stop", "origins", "ignore_errors",
                 "options")

    def __init__(self, path: tuple = (), in_background: bool = False,
                 stop: threading.Event | None = None, on_stop: list | None = None,
                 origins: bool = False, ignore_errors: bool = False, options=None):
        self.path = tuple(int(p) for p in path)
        # True when a caller already runs this (sub)pipeline in its own thread, so sources
        # need not start read-ahead threads of their own
        self.in_background = in_background
        self.stop = stop if stop is not None else threading.Event()
        self._on_stop = on_stop if on_stop is not None else []
        # True under a shuffle: sources record where each element came from (Block.origin)
        self.origins = origins
        # True under ignore_errors(): map drops elements whose function raises, TFRecord
        # readers skip the rest of a damaged file (both log what they skip)
        self.ignore_errors = ignore_errors
        if options is None:
            from tpudata.dataset.core.options import DEFAULT as options
        self.options = options  # the pipeline's merged Options (with_options)

    def join_budget(self) -> float | None:
        """Seconds a closing thread may still wait for others (None: not closing)."""
        if not self.stop.is_set():
            return None
        for item in self._on_stop:
            if isinstance(item, float):
                return max(0.0, item - time.monotonic())
        return 0.0

    def child(self, k: int, in_background: bool | None = None) -> "IterContext":
        flag = self.in_background if in_background is None else in_background
        return IterContext(self.path + (int(k),), flag, self.stop, self._on_stop, self.origins,
                           self.ignore_errors, self.options)

    def with_origins(self) -> "IterContext":
        """The same iteration, with sources recording element origins (for a shuffle)."""
        return IterContext(self.path, self.in_background, self.stop, self._on_stop, True,
                           self.ignore_errors, self.options)

    def with_ignore_errors(self) -> "IterContext":
        """The same iteration, with the ops upstream dropping elements that fail."""
        return IterContext(self.path, self.in_background, self.stop, self._on_stop,
                           self.origins, True, self.options)

    def on_stop(self, callback) -> None:
        """Call ``callback()`` (thread-safe and prompt, e.g. an executor's close) on stop."""
        self._on_stop.append(callback)
        if self.stop.is_set():
            callback()

    def off_stop(self, callback) -> None:
        """Forget a callback given to :meth:`on_stop` (its owner closed on its own)."""
        try:
            self._on_stop.remove(callback)
        except ValueError:
            pass

    def request_stop(self) -> None:
        """Set ``stop`` and run the registered callbacks (from any thread)."""
        self._on_stop.insert(0, time.monotonic() + CLOSE_WAIT_SECONDS)  # shared join deadline
        self.stop.set()
        for callback in list(self._on_stop):
            if isinstance(callback, float):
                continue
            try:
                callback()
            except Exception:  # a failing close must not keep the others from running
                logger.exception("stopping %r failed", callback)

    def check(self) -> None:
        if self.stop.is_set():
            raise Cancelled("the iterator was closed")


def wait_for(cond: threading.Condition, ready, ctx: IterContext | None, local_stop=None) -> None:
    """``cond.wait`` until ``ready()``; raises :class:`Cancelled` once the iteration stops.

    The caller holds ``cond``. ``local_stop()`` (optional) ends the wait the same way.
    """
    while not ready():
        if (ctx is not None and ctx.stop.is_set()) or (local_stop is not None and local_stop()):
            raise Cancelled("the iterator was closed")
        cond.wait(POLL_SECONDS)


DEFAULT_WANT = 64  # elements asked for when a consumer takes "the rest of a block"
BLOCK_WANT = 8192  # what block-level stages (parse, unbatch, read-ahead) ask of their input


class BlockIterator:
    """One stage of a running pipeline. ``next()`` returns a Block, or None at the end.

    ``want`` is a hint set by the consumer before ``next()``: how many elements it needs now.
    Stages that run user functions (map, filter) produce about that many and no more, so user
    code runs on demand; stages that read or parse whole buffers ignore it.
    """

    want = 1
    # True for stages that never return more than ``want`` elements: a Cursor over one then
    # consumes every block whole and needs no snapshot before it (snapshots can be costly)
    exact_want = False

    def next(self) -> Block | None:
        raise NotImplementedError

    def get_state(self) -> dict:
        raise NotImplementedError

    def set_state(self, state: dict) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Stop background work and release resources (children included)."""


class Cursor:
    """Element-granular reading from a BlockIterator, with a restorable position.

    The position is ``{"before": input state, "pos": elements consumed since}``. Restoring
    skips ``pos`` elements over whatever blocks the input produces, so it does not depend on
    the input splitting its elements into the same blocks again.
    """

    def __init__(self, it: BlockIterator):
        self.it = it
        self.block: Block | None = None
        self.pos = 0  # position in self.block
        self.base = 0  # elements consumed since self.before in earlier blocks
        self.before = it.get_state()
        self.done = False
        self._items: list | None = None  # self.block's elements, once asked for one by one

    def _fill(self, want: int = 1, one_by_one: bool = False) -> bool:
        while self.block is None or self.pos >= self.block.n:
            if self.done:
                return False
            # an exact input's block is consumed whole, unless several elements are asked for and
            # maybe taken in parts (next_element, available): a position inside it needs the snapshot
            exact = self.it.exact_want and not (one_by_one and want > 1)
            self.before = None if exact else self.it.get_state()
            self.base = 0
            self.it.want = want
            self.block = self.it.next()
            self._items = None
            self.pos = 0
            if self.block is None:
                self.done = True
                return False
        return True

    def next_block(self, limit: int | None = None) -> Block | None:
        """The rest of the current block (at most ``limit`` elements), or None at the end."""
        if not self._fill(DEFAULT_WANT if limit is None else limit):
            return None
        end = self.block.n if limit is None else min(self.block.n, self.pos + limit)
        out = self.block.slice(self.pos, end)
        self.pos = end
        return out

    def next_element(self, want: int = 1):
        """One element (user-facing value); raises StopIteration at the end. ``want``: how many
        elements the caller will take one by one now (a block of up to that many is fetched)."""
        if not self._fill(want, True):
            raise StopIteration
        if self._items is None:
            self._items = list(self.block.elements())
        item = self._items[self.pos]
        self.pos += 1
        return item

    def take(self, n: int) -> Block | None:
        """Up to ``n`` elements, across blocks; None when nothing is left."""
        parts = []
        need = n
        while need > 0:
            b = self.next_block(need)
            if b is None:
                break
            parts.append(b)
            need -= b.n
        if not parts:
            return None
        return Block.concat(parts)

    def available(self, want: int = 1) -> int:
        """Elements left in the current block (fetching one of up to ``want`` if needed); 0 at
        the end. The caller may take fewer than the block holds."""
        if not self._fill(want, True):
            return 0
        return self.block.n - self.pos

    def get_state(self) -> dict:
        if (self.block is not None and self.pos >= self.block.n) or self.before is None:
            # the block is used up: the input's own position is exact, with nothing to replay
            # (this keeps states exact over inputs that are not deterministic)
            if self.block is not None and self.pos < self.block.n:
                raise RuntimeError(f"{type(self.it).__name__} returned more elements than asked")
            return {"before": self.it.get_state(), "pos": 0, "done": False}
        return {"before": self.before, "pos": self.base + self.pos,
                "done": self.done and self.block is None}

    def set_state(self, state: dict) -> None:
        self.it.set_state(state["before"])
        self.before = state["before"]
        self.block = None
        self._items = None
        self.done = False
        self.pos = 0
        self.base = 0
        skip = int(state["pos"])
        while skip:  # fast-forward, however the blocks split this time
            self.it.want = skip
            block = self.it.next()
            if block is None:
                raise ValueError(
                    f"checkpoint does not match the data: the input ended {skip} element(s) "
                    "before the saved position (did the files change?)")
            if block.n > skip:
                self.block, self.pos = block, skip
                break
            self.base += block.n
            skip -= block.n


_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _raised_by_user_code(exc: BaseException) -> bool:
    """Whether ``exc`` was raised in code outside tpudata and numpy (a user's function)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    path = os.path.abspath(tb.tb_frame.f_code.co_filename)
    return not path.startswith(_PACKAGE + os.sep) and f"{os.sep}numpy{os.sep}" not in path


class Iterator:
    """Iterates a Dataset element by element (elements are numpy values / bytes / structures).

    Checkpoint with ``state = it.get_state()`` (JSON-serialisable) and resume with
    ``ds.iterator(state)`` or ``it.set_state(state)``. ``close()`` (or leaving a ``with`` block, or
    garbage collection) stops every background thread of the pipeline. ``close()`` may be called
    from any thread: it returns within about a second even while user functions run, and a
    consumer blocked in ``next()`` on another thread wakes up with ``StopIteration``.
    """

    def __init__(self, dataset, iteration: int, state: dict | None = None):
        self._dataset = dataset
        self._iteration = iteration
        self._lock = threading.RLock()  # held by the consumer inside next()/set_state()
        self._closed = False
        self._chain_closed = False
        self._record: dict | None = None  # what a state records of the pipeline
        self._build(iteration)
        if state is not None:
            try:
                self.set_state(state)
            except BaseException:
                self.close()  # a state that cannot be restored leaves no threads running
                raise

    def _build(self, iteration: int) -> None:
        from tpudata.dataset.core.optimize import optimize
        from tpudata.dataset.core.options import options_of
        from tpudata.dataset.core.seeds import random_nodes

        options = options_of(self._dataset)
        self._ctx = IterContext((iteration,), options=options)
        self._random = random_nodes(self._dataset)  # unseeded ops: their seeds go in the state
        # the graph rewrites (map-and-batch fusion, ...) for this iteration: same elements and states
        self._it = optimize(self._dataset, options)._make_iterator(self._ctx)
        self._cursor = Cursor(self._it)

    def __iter__(self) -> "Iterator":
        return self

    def __next__(self):
        if self._closed:
            raise StopIteration
        with self._lock:
            try:
                return self._cursor.next_element()
            except StopIteration:
                raise
            except Cancelled:
                raise StopIteration from None
            except BaseException:
                if self._closed:
                    raise StopIteration from None
                self.close()  # an iterator that raised is finished: stop its threads now
                raise
            finally:
                if self._closed:
                    self._close_chain()

    def _next_block(self) -> Block | None:
        """The rest of the current block (the engine's batch-level consumers: save); None at the
        end. Blocks are the engine's: users get elements."""
        if self._closed:
            return None
        with self._lock:
            try:
                return self._cursor.next_block()
            except Cancelled:
                return None
            except BaseException:
                if self._closed:
                    return None
                self.close()
                raise
            finally:
                if self._closed:
                    self._close_chain()

    def get_state(self) -> dict:
        with self._lock:
            state = {"iteration": self._iteration, "cursor": self._cursor.get_state(),
                     "pipeline": self._pipeline()}
            if self._random:  # unseeded random ops go on with the saving run's seeds
                state["seeds"] = [int(node._drawn_seed()) for node in self._random]
            return jsonable(state)

    def _pipeline(self) -> dict:
        """``{"fingerprint", "ops"}`` of this iterator's pipeline (computed once)."""
        if self._record is None:
            from tpudata.dataset.core.fingerprint import pipeline_record

            self._record = pipeline_record(self._dataset)
        return self._record

    def set_state(self, state: dict) -> None:
        """Restore ``state`` (from :meth:`get_state`). A state taken from another pipeline, or
        one that does not fit this one, raises :class:`~tpudata.errors.StateError` saying so."""
        from tpudata.dataset.core.seeds import restore_seeds
        from tpudata.errors import TpuDataError

        self._check_pipeline(state)
        try:
            state = from_jsonable(state)
            with self._lock:
                reseeded = restore_seeds(self._random, state.get("seeds") or [])
                iteration = int(state["iteration"])
                if reseeded or iteration != self._iteration:  # rebuilt with those seeds / epoch
                    self._it.close()
                    self._iteration = iteration
                    self._build(iteration)
                self._cursor.set_state(state["cursor"])
        except (TpuDataError, OSError):
            raise  # says what is wrong (a file missing or damaged, a type not allowed, ...)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            from tpudata.errors import StateError

            if _raised_by_user_code(exc):
                raise  # a user function failed while the restore ran the pipeline

            taken = "" if "pipeline" in state else (
                " (the state records no pipeline: it was taken by an older tpudata; restore it "
                "into the pipeline that took it)")
            raise StateError(
                f"cannot restore the state into {self._pipeline()['ops']}: it does not fit this "
                f"pipeline{taken} ({type(exc).__name__}: {exc})") from exc

    def _check_pipeline(self, state) -> None:
        from tpudata.errors import StateError

        if not isinstance(state, dict) or not isinstance(state.get("cursor"), dict) or \
                not isinstance(state.get("iteration"), numbers.Integral):
            keys = sorted(state)[:8] if isinstance(state, dict) else type(state).__name__
            raise StateError(f"not an iterator state (from Iterator.get_state()): {keys}")
        saved = state.get("pipeline")
        if saved is None:
            return  # taken by an older tpudata: restored as before
        ours = self._pipeline()
        if not isinstance(saved, dict) or saved.get("fingerprint") != ours["fingerprint"]:
            theirs = saved.get("ops") if isinstance(saved, dict) else saved
            raise StateError(
                "this state belongs to another pipeline: it was taken from\n"
                f"    {str(theirs)[:4000]}\nbut it is being restored into\n    {ours['ops']}\n"
                "(restore it into the pipeline that took it: same ops, sizes and counts)")

    def _close_chain(self) -> None:
        if not self._chain_closed:
            self._chain_closed = True
            self._it.close()

    def close(self) -> None:
        """Stop the pipeline; safe from any thread, idempotent, returns promptly."""
        if self._closed and self._chain_closed:
            return
        self._closed = True
        self._ctx.request_stop()
        if self._lock.acquire(timeout=CLOSE_WAIT_SECONDS):
            try:
                self._close_chain()
            finally:
                self._lock.release()
        else:  # the consumer is inside a long user function: it closes the chain on its way out
            logger.debug("close(): the consumer thread will finish closing the pipeline")

    def __enter__(self) -> "Iterator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


__all__ = ["BlockIterator", "Cancelled", "Cursor", "IterContext", "Iterator", "wait_for"]
