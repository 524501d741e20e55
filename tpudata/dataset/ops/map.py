"""map: apply a user function to every element, element by element, on demand.

The function is called only for elements the consumer asks for: sequentially in the consumer's
thread, or with ``num_parallel_calls=N`` on N threads, each task a chunk of what the consumer
still wants split N ways (under ``batch(128)``, two tasks of 64 elements on 2 threads; one
element each when iterating element by element), with at most N - 1 elements beyond that in
flight. ``range(100_000).map(f).take(3)`` calls ``f`` 3 times; with ``num_parallel_calls=N``, at
most ``3 + N - 1`` times. ``use_processes=True`` runs it in N worker processes, chunks of elements
per task, with at most ``max(192, 32 * N)`` elements in flight (:mod:`tpudata.dataset.parallel.processes.map`).

>>> [int(x) for x in Dataset.range(5).map(lambda x: x * 10, num_parallel_calls=2)]
[0, 10, 20, 30, 40]

State is element-exact with any executor: the iterator keeps the input position of every
in-flight element; its state is the position of the oldest element not yet delivered plus,
with ``deterministic=False``, which later elements were already delivered (skipped on restore).

The arrays a function returns are passed on as they are when an element travels alone (an
output array of 1 MB or more, such as a batch from a batch-level function, is never copied
into a block): return a new array per call, not one buffer refilled in place.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import Dataset
from tpudata.dataset.core.block import Block
from tpudata.dataset.parallel.executor import ThreadMapper
from tpudata.dataset.core.iterator import BlockIterator, Cursor
from tpudata.dataset.core.nest import flatten
from tpudata.dataset.core.options import AUTOTUNE, is_autotune, worker_count
from tpudata.dataset.core.spec import OutputChecker, traced_spec

logger = logging.getLogger(__name__)


def call(fn: Callable, element):
    """``fn(*element)`` for a tuple element (as tf.data does), else ``fn(element)``."""
    if isinstance(element, tuple) and not hasattr(element, "_fields"):
        return fn(*element)
    return fn(element)


def function_name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


LARGE_OUTPUT = 1 << 20  # an output array this big goes on in a block of its own, uncopied


def _large(leaves: list) -> bool:
    return any(type(v) is np.ndarray and v.nbytes >= LARGE_OUTPUT for v in leaves)


class _Failed:
    """What ``_Apply(skip_errors=True)`` returns for an element whose function raised."""

    def __init__(self, error: str):
        self.error = error


class _Apply:
    """The picklable callable an executor runs: ``(p, element) -> fn(element)``.

    ``defer`` (a fused ``map(fn).batch(n)``'s :class:`~tpudata.dataset.ops.map_batch.Deferral`):
    while ``defer.on``, ``defer.call(fn, element)`` runs the call, returning ``(True, result)``
    with placeholders for the batch to fill, or ``(False, None)``: call ``fn`` as usual."""

    def __init__(self, fn: Callable, skip_errors: bool = False, defer=None):
        self.fn = fn
        self.skip_errors = skip_errors
        self.defer = defer

    def __call__(self, item):
        if self.defer is not None and self.defer.on:
            done, out = self.defer.call(self.fn, item[1])
            if done:
                return out
        if not self.skip_errors:
            return call(self.fn, item[1])
        try:
            return call(self.fn, item[1])
        except Exception as exc:  # ignore_errors(): the element is dropped (and logged)
            return _Failed(f"{type(exc).__name__}: {exc}")


class MapDataset(Dataset):
    _functions = ("fn",)

    def __init__(self, input_ds: Dataset, fn: Callable, num_parallel_calls: int | None = None,
                 deterministic: bool | None = None, output_signature=None,
                 use_processes: bool = False):
        super().__init__()
        if not isinstance(input_ds, Dataset):
            raise TypeError(f"expected a Dataset, got {type(input_ds).__name__}")
        if not callable(fn):
            raise TypeError(f"map() needs a callable, not {type(fn).__name__}")
        self.input = input_ds
        self.fn = fn
        # use_processes without num_parallel_calls: one worker process per core
        self.workers = worker_count(num_parallel_calls, default=AUTOTUNE if use_processes else 0)
        self.use_processes = bool(use_processes)
        self.deterministic = True if deterministic is None else bool(deterministic)
        self.deterministic_arg = deterministic  # None: Options.deterministic decides
        self.autotune = is_autotune(num_parallel_calls)
        self.output_signature = output_signature
        self.name = f"map({function_name(fn)})"

    def _make_iterator(self, ctx):
        if self.use_processes:  # chunks of elements in worker processes (procmap)
            from tpudata.dataset.parallel.processes.map import ProcessMapIterator

            workers, deterministic = _parallelism(self, ctx.options)
            return ProcessMapIterator(self, self.input._make_iterator(ctx), ctx,
                                      max(1, workers), deterministic)
        return _MapIterator(self, self.input._make_iterator(ctx), ctx)

    def cardinality(self):
        return self.input.cardinality()

    def _spec(self):
        if self.output_signature is not None:
            return self.output_signature
        return traced_spec(self.fn, self.input, self.name)


def _parallelism(ds: MapDataset, options) -> tuple[int, bool]:
    """(workers, deterministic) of a map under the pipeline's Options."""
    workers = options.threads(ds.workers, ds.autotune)
    deterministic = ds.deterministic if (ds.deterministic_arg is not None or
                                         options.deterministic is None) else options.deterministic
    return workers, deterministic


class MapperIterator(BlockIterator):
    """What the thread (below) and process (procmap.py) map iterators share: a restore restarts
    the mapper from the saved input state, skipping the elements already delivered; closing
    stops the mapper, then the input."""

    def set_state(self, state):
        self._close_mapper()
        self.cursor.set_state(state["input"])
        self.delivered = int(state["delivered"])
        self.checker.set_state(state["checker"])
        self._start(skip=state["skip"])

    def _close_mapper(self):
        if self.results is not None and hasattr(self.results, "close"):
            try:
                self.results.close()
            except Exception:  # a generator stopped mid-way
                pass
        if self.mapper is not None:
            self.mapper.close()
            self.ctx.off_stop(self.mapper.close)
            self.mapper = None
        self.results = None

    def close(self):
        self._close_mapper()
        self.input_it.close()


class _MapIterator(MapperIterator):
    def __init__(self, ds: MapDataset, input_it: BlockIterator, ctx, defer=None):
        self.ds = ds
        self.ctx = ctx
        self.defer = defer  # a fused map-and-batch's Deferral (see _Apply)
        self.input_it = input_it
        self.cursor = Cursor(input_it)
        self.checker = OutputChecker(ds.name, ds.output_signature)
        self.delivered = 0  # elements returned so far (for error messages)
        self.skip_errors = ctx.ignore_errors
        self.workers, self.deterministic = _parallelism(ds, ctx.options)
        self._start(skip=())

    def _start(self, skip) -> None:
        self.mapper = None
        self.results = None
        self.lock = threading.RLock()
        self.book: dict = {}  # fed position -> (input element number p, input state before it)
        self.fed = 0
        self.p = 0  # input elements read since the restore point
        self.low = 0  # lowest fed position not yet delivered
        self.out_p: set = set(int(s) for s in skip)  # input numbers delivered (or to skip)
        # elements this next() still needs: what the feed asks its input for at a time when every
        # element fed is also consumed by this next() (sequential, or fused and deferring), so
        # the input hands over whole blocks, not one element each (1 under threads, whose
        # executor takes it as the size of its chunks)
        self.ask = 1

    def _feed(self):
        """Input elements as ``(p, element)``, recording where each one starts.

        Runs wherever the executor pulls its input (the consumer's thread for ThreadMapper, maybe
        a feeder thread for a process pool): the lock keeps get_state() consistent with it.
        """
        while True:
            with self.lock:
                state = self.cursor.get_state()
                try:
                    element = self.cursor.next_element(1 if self.mapper is not None else self.ask)
                except StopIteration:
                    return
                p = self.p
                self.p += 1
                if p in self.out_p:  # delivered before the checkpoint (deterministic=False)
                    continue
                self.book[self.fed] = (p, state)
                self.fed += 1
            yield p, element

    def _results(self):
        if self.defer is not None and self.defer.on:
            return self._deferred_results()
        return self._results_of(self._feed(), 0)

    def _results_of(self, feed, first: int):
        """``(position, fn(element))`` of the elements of ``feed`` (position ``first`` onwards)."""
        apply = _Apply(self.ds.fn, self.skip_errors)
        if not self.workers:
            return ((first + pos, apply(item)) for pos, item in enumerate(feed))
        self.mapper = ThreadMapper(apply, self.workers, deterministic=self.deterministic, stop=self.ctx.stop)
        self.ctx.on_stop(self.mapper.close)
        results = self.mapper.imap(feed, need=lambda: self.ask)  # chunks of what the consumer wants
        return results if not first else ((first + pos, out) for pos, out in results)

    def _deferred_results(self):
        """Fused with a batch: the calls (cheap: their work is left to the batch) run in this thread,
        in order; once the function turns out to use what it gets (the Deferral goes off), the rest
        runs as an unfused map, with its threads."""
        apply = _Apply(self.ds.fn, self.skip_errors, self.defer)
        feed = self._feed()
        pos = 0
        for item in feed:
            yield pos, apply(item)
            pos += 1
            if not self.defer.on:
                yield from self._results_of(feed, pos)
                return

    def next(self):
        if self.results is None:
            self.results = self._results()
        rows = []
        tree = None
        stop = self.ctx.stop
        calls = 0
        while len(rows) < max(1, self.want):
            if calls and stop.is_set():  # closing: no more user calls than the one running
                break
            calls += 1
            self.ask = max(1, self.want) - len(rows)
            try:
                pos, out = next(self.results)
            except StopIteration:
                break
            if isinstance(out, _Failed):
                logger.warning("ignore_errors: %s raised on the element after output %d; "
                               "dropped it: %s", self.ds.name, self.delivered, out.error)
                self._delivered(pos)
                continue
            t, leaves = flatten(out)
            self.checker.check(t, leaves, self.delivered)
            tree = t
            self.delivered += 1
            rows.append(leaves)
            self._delivered(pos)
            if len(rows) == 1 and _large(leaves):
                break  # e.g. a batch from a batch-level function: a block of its own, not copied
        return Block.from_elements(tree, rows, copy=False) if rows else None

    def _delivered(self, pos: int) -> None:
        with self.lock:
            p, _ = self.book[pos]
            self.out_p.add(p)
            if pos == self.low:
                low = pos
                while low < self.fed and self.book[low][0] in self.out_p:
                    low += 1
                for k in range(self.low, low):
                    del self.book[k]
                self.low = low
                p_low = self.book[low][0] if low < self.fed else self.p
                if len(self.out_p) > 1 or (self.out_p and min(self.out_p) < p_low):
                    self.out_p = {q for q in self.out_p if q >= p_low}

    def get_state(self):
        with self.lock:
            if self.low < self.fed:
                p0, state = self.book[self.low]
            else:
                p0, state = self.p, self.cursor.get_state()
            skip = sorted(p - p0 for p in self.out_p if p > p0)
        return {"input": state, "skip": skip, "delivered": self.delivered,
                "checker": self.checker.get_state()}



__all__ = ["MapDataset", "MapperIterator", "call", "function_name"]

registry.provide(MapDataset)
