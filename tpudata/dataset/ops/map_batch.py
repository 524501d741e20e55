"""map-and-batch fusion: ``map(fn).batch(n)`` as one op when ``fn`` calls a function that has a
batch form (tpudata.image's presets), as tf.data fuses map and batch.

The per-element form a port writes first::

    ds.map(lambda f: (resnet_preprocess(f["image/encoded"], True, seed=...), f["label"]))
      .batch(128)

calls the preset once per image. Fused, the map function still runs once per element, in order,
but each preset call only does its cheap part (checks, JPEG header, random crop and flip draws
from its own ``seed``) and returns a placeholder; the batch then decodes, resizes and writes all
its images in one GIL-free kernel call (one thread per core) straight into the batch array, on a
worker thread, while the next batch is read and mapped. The batch is identical to the unfused one.

What the fusion keeps (tested against the unfused pipeline):

- elements, their order and per-element randomness (each call draws as it does unfused);
- the iterator state: it is the unfused ``batch``-over-``map`` state, so a checkpoint restores
  into the pipeline with or without the fusion, mid-epoch;
- errors: a bad image raises what its own call raises unfused (the kernel's batch error is
  replaced by the element's); under ``ignore_errors()`` nothing is deferred (the map drops the
  failing elements one by one, as unfused).

The rewrite (:func:`fuse_map_and_batch`, registered with :mod:`tpudata.dataset.core.optimize`)
applies to a ``batch`` directly over a thread ``map`` (not ``use_processes``) whose function
refers to a function carrying ``__tpudata_batched__`` (the name of its batch form), directly, in
a ``functools.partial``, or through the globals, closure or module attributes its code names
(two levels of helper functions deep). Anything else stays unfused. A function that does more
with the preset's result than return it (``resnet_preprocess(...) * 2``) is found on its first
call, which then runs again unfused; the rest of the iteration runs unfused too, as it does from
the first call that makes no batched call (say, where the image kernel is not built).
"""

from __future__ import annotations

import functools
import inspect
import logging
import types
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import Dataset
from tpudata.dataset.core.block import Block, as_column
from tpudata.dataset.core.deferred import Deferred, recording, returned
from tpudata.dataset.core.optimize import rewrite
from tpudata.dataset.ops.batch import BatchDataset, _BatchIterator
from tpudata.dataset.ops.map import MapDataset, _MapIterator, call, function_name

logger = logging.getLogger(__name__)

MARK = "__tpudata_batched__"
_SCAN_DEPTH = 2  # helper functions followed from the map function


class Deferral:
    """One iteration's switch: the map function's calls are recorded (``on``) until one of them
    makes no placeholder (nothing to batch: e.g. the kernel is not built), uses one, or keeps one
    elsewhere than in its result; from then on the map runs unfused, with its threads."""

    def __init__(self, name: str):
        self.name = name
        self.on = True

    def call(self, fn, element) -> tuple[bool, object]:
        """``(True, fn(element))`` (with placeholders), or ``(False, None)``: call ``fn`` again, as
        the unfused map does."""
        with recording() as made:
            try:
                out = call(fn, element)
            except Exception:  # a placeholder used (or the function's own error: raised again unfused)
                made = None
        if made and returned(out, made):
            return True, out
        self.on = False
        if made == []:  # a result of its own: kept (no second call)
            logger.debug("%s made no batched call: it runs unfused from here on", self.name)
            return True, out
        logger.info("%s uses the results of its batched calls (or raised): it runs unfused from here on",
                    self.name)
        return False, None


def fill_deferred(block: Block) -> Block:
    """``block`` (a batch's map outputs) with every placeholder column computed: one batch-form
    call per column when its placeholders share one form and key (the result is the column),
    else one per (form, key), the rows then stacked as the unfused batch stacks them."""
    leaves = None
    for k, col in enumerate(block.leaves):
        if type(col) is not np.ndarray or col.dtype != object or col.ndim != 1:
            continue
        items = col.tolist()
        if not any(type(v) is Deferred for v in items):
            continue
        if leaves is None:
            leaves = list(block.leaves)
        leaves[k] = _computed(items)
    return block if leaves is None else Block(block.tree, leaves, block.n, block.origin)


def _computed(items: list):
    first = items[0]
    if type(first) is Deferred and all(type(v) is Deferred and v.form is first.form and v.key == first.key
                                       for v in items):
        return _run(first.form, first.key, [v.payload for v in items])
    groups: dict = {}
    for i, v in enumerate(items):
        if type(v) is Deferred:
            groups.setdefault((id(v.form), v.key), []).append(i)
    values = list(items)
    for rows in groups.values():
        form, key = items[rows[0]].form, items[rows[0]].key
        out = _run(form, key, [items[i].payload for i in rows])
        for j, i in enumerate(rows):
            values[i] = out[j]
    return as_column(values)


def _run(form, key, payloads: list):
    try:
        return form.run(key, payloads)
    except Exception as exc:
        index = getattr(exc, "index", None)
        if len(payloads) < 2 or not isinstance(index, int) or not 0 <= index < len(payloads):
            raise
        single = exc
    try:  # the failing element's own error, as its unfused call raises it
        form.run(key, [payloads[index]])
    except Exception as own:
        raise own from None
    raise single


class _FusedBatchIterator(_BatchIterator):
    """The unfused batch iterator over the deferring map, plus one batch of read-ahead: while a
    worker thread computes batch k's placeholders (a GIL-free kernel call), this thread reads batch
    k+1 and makes its map calls. The state is that of the batches delivered (a restore reads the
    read-ahead batch again); an error of the read-ahead batch is raised after batch k."""

    def __init__(self, ds: BatchDataset, input_it, ctx):
        super().__init__(ds, input_it)
        self.ctx = ctx
        self.pool: ThreadPoolExecutor | None = None
        self.ahead: tuple | None = None  # (cursor state before it, block or error, future or None)

    def _launch(self) -> tuple:
        before = self.cursor.get_state()
        try:
            block = self.cursor.take(self.ds.batch_size)
        except Exception as exc:  # raised when its turn comes (after the batch before it)
            return before, exc, None
        if block is None:
            return before, None, None
        if self.pool is None:
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="tpudata-map-and-batch")
            self.ctx.on_stop(self._shutdown)
        return before, block, self.pool.submit(fill_deferred, block)

    def next(self):
        ahead, self.ahead = self.ahead or self._launch(), None
        _, block, future = ahead
        if isinstance(block, Exception):
            raise block
        if future is not None:
            if block.n == self.ds.batch_size:
                self.ahead = self._launch()  # the next batch's reads and calls overlap this kernel call
            block = future.result()
        return self._complete(block)

    def get_state(self):
        state = super().get_state()
        if self.ahead is not None:
            state["cursor"] = self.ahead[0]
        return state

    def set_state(self, state):
        self.ahead = None  # a computation under way finishes on its own; its result is dropped
        super().set_state(state)

    def _shutdown(self):
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)

    def close(self):
        self.ahead = None
        self._shutdown()
        self.ctx.off_stop(self._shutdown)
        super().close()


class _Fused:
    """The map and batch a MapAndBatchDataset stands for, out of sight of graph walkers: to them
    the fused op is one op over ``input`` (as it is to ``distribute()``, which runs it on the
    workers)."""

    def __init__(self, map_ds: MapDataset, batch_ds: BatchDataset):
        self.map_ds, self.batch_ds = map_ds, batch_ds


class MapAndBatchDataset(Dataset):
    """``batch_ds`` over ``map_ds`` in one op over ``map_ds.input`` (built by the rewrite; see the
    module doc). Its iterators are the map's and the batch's, on ``input``."""

    def __init__(self, map_ds: MapDataset, batch_ds: BatchDataset):
        super().__init__()
        self.input = map_ds.input
        self.fused = _Fused(map_ds, batch_ds)
        self.name = f"map_and_batch({function_name(map_ds.fn)}, batch_size={batch_ds.batch_size})"

    def _make_iterator(self, ctx):
        map_ds, batch_ds = self.fused.map_ds, self.fused.batch_ds
        input_it = self.input._make_iterator(ctx)
        if ctx.ignore_errors:  # the map drops a failing element and takes the next: unfused
            return _BatchIterator(batch_ds, _MapIterator(map_ds, input_it, ctx))
        defer = Deferral(map_ds.name)
        return _FusedBatchIterator(batch_ds, _MapIterator(map_ds, input_it, ctx, defer=defer), ctx)

    def cardinality(self):
        return self.fused.batch_ds.batches_of(self.input.cardinality())  # a map keeps its input's count

    def _spec(self):
        return self.fused.batch_ds._spec()


@rewrite("map_and_batch_fusion")
def fuse_map_and_batch(node, options) -> Dataset | None:
    """``batch`` over a thread ``map`` whose function calls a batchable function -> one op."""
    if type(node) is not BatchDataset or type(node.input) is not MapDataset:
        return None
    m = node.input
    if m.use_processes or not calls_batch_form(m.fn):
        return None
    return MapAndBatchDataset(m, node)


def calls_batch_form(fn) -> bool:
    """Whether ``fn`` is, wraps or (by the names its code uses) calls a function marked with
    ``__tpudata_batched__``. A guess from the code: a wrong True only costs the check on the
    first call; a wrong False leaves the map unfused."""
    return _scan(fn, _SCAN_DEPTH, set())


def _marked(obj) -> bool:
    try:
        return getattr(obj, MARK, None) is not None
    except Exception:  # an object whose attribute lookup fails
        return False


def _scan(obj, depth: int, seen: set) -> bool:
    if id(obj) in seen:
        return False
    seen.add(id(obj))
    if _marked(obj):
        return True
    if isinstance(obj, functools.partial):
        return _scan(obj.func, depth, seen)
    if inspect.ismethod(obj):
        return _scan(obj.__func__, depth, seen)
    if not isinstance(obj, types.FunctionType):
        method = getattr(type(obj), "__call__", None)
        return isinstance(method, types.FunctionType) and _scan(method, depth, seen)
    names = {}  # what the code's names refer to: its globals, then its closure
    names.update(obj.__globals__)
    for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or ()):
        try:
            names[name] = cell.cell_contents
        except ValueError:  # an empty cell
            pass
    used = set()
    for code in _codes(obj.__code__):
        used.update(code.co_names)
        used.update(code.co_freevars)
    for name in used:
        value = names.get(name)
        if value is None:
            continue
        if isinstance(value, types.ModuleType):
            if _module_refers(value, used, 2):
                return True
        elif _marked(value) or (depth > 0 and callable(value) and _scan(value, depth - 1, seen)):
            return True
    return False


def _module_refers(module, used: set, depth: int) -> bool:
    """Whether ``module.name`` (or ``module.sub.name``) is marked for a name the code uses (read
    from the module's namespace: no module ``__getattr__``, deprecation warning or lazy import)."""
    namespace = vars(module)
    for name in used:
        value = namespace.get(name)
        if _marked(value):
            return True
        if depth > 0 and isinstance(value, types.ModuleType) and _module_refers(value, used, depth - 1):
            return True
    return False


def _codes(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


__all__ = ["Deferral", "MapAndBatchDataset", "calls_batch_form", "fill_deferred", "fuse_map_and_batch"]

registry.provide(MapAndBatchDataset)
