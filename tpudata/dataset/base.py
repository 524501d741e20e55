"""Dataset and iterator protocol.

A :class:`Dataset` is an immutable description of a pipeline (tf.data's model). Iterating it
builds a chain of :class:`BlockIterator` objects that pass :class:`Block` runs of elements
downstream. Every block iterator can report its position with ``get_state()`` and return to it
with ``set_state()``; :class:`Cursor` turns "state before the current block + offset in it" into a
position at any element. :class:`Iterator` is what users get: it yields elements and exposes
JSON-serialisable ``get_state()`` / ``set_state()``.
"""

from __future__ import annotations

import base64
import logging
import threading
from typing import Any, Callable

import numpy as np

from tpudata.dataset.block import Block

logger = logging.getLogger(__name__)

INFINITE = -1
UNKNOWN = -2


class IterContext:
    """Identifies one iteration of a (sub)pipeline: seeds are derived from ``path``.

    The top-level iteration number, repeat epochs and interleave slots each add a component, so
    ``shuffle(reshuffle_each_iteration=True)`` reshuffles for every epoch deterministically.
    """

    __slots__ = ("path", "in_background")

    def __init__(self, path: tuple = (), in_background: bool = False):
        self.path = tuple(int(p) for p in path)
        # True when a caller already runs this (sub)pipeline in its own thread, so sources
        # need not start read-ahead threads of their own
        self.in_background = in_background

    def child(self, k: int, in_background: bool | None = None) -> "IterContext":
        flag = self.in_background if in_background is None else in_background
        return IterContext(self.path + (int(k),), flag)


class BlockIterator:
    """One stage of a running pipeline. ``next()`` returns a Block, or None at the end."""

    def next(self) -> Block | None:
        raise NotImplementedError

    def get_state(self) -> dict:
        raise NotImplementedError

    def set_state(self, state: dict) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Stop background work and release resources (children included)."""


class Cursor:
    """Element-granular reading from a BlockIterator, with a restorable position."""

    def __init__(self, it: BlockIterator):
        self.it = it
        self.block: Block | None = None
        self.pos = 0
        self.before = it.get_state()
        self.done = False

    def _fill(self) -> bool:
        while self.block is None or self.pos >= self.block.n:
            if self.done:
                return False
            self.before = self.it.get_state()
            self.block = self.it.next()
            self.pos = 0
            if self.block is None:
                self.done = True
                return False
        return True

    def next_block(self, limit: int | None = None) -> Block | None:
        """The rest of the current block (at most ``limit`` elements), or None at the end."""
        if not self._fill():
            return None
        end = self.block.n if limit is None else min(self.block.n, self.pos + limit)
        out = self.block.slice(self.pos, end)
        self.pos = end
        return out

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

    def available(self) -> int:
        """Elements left in the current block (fetching one if needed); 0 at the end."""
        if not self._fill():
            return 0
        return self.block.n - self.pos

    def get_state(self) -> dict:
        return {"before": self.before, "pos": self.pos, "done": self.done and self.block is None}

    def set_state(self, state: dict) -> None:
        self.it.set_state(state["before"])
        self.before = state["before"]
        self.block = None
        self.done = False
        self.pos = 0
        skip = int(state["pos"])
        if skip:
            self.block = self.it.next()
            if self.block is None or self.block.n < skip:
                raise ValueError("checkpoint does not match the data: a block is shorter than saved")
            self.pos = skip


def jsonable(obj: Any) -> Any:
    """State with numpy values and bytes turned into JSON types."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return {"__array__": obj.tolist(), "dtype": str(obj.dtype)}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, bytes):
        return {"__bytes__": base64.b64encode(obj).decode("ascii")}
    return obj


def from_jsonable(obj: Any) -> Any:
    """Inverse of :func:`jsonable`."""
    if isinstance(obj, dict):
        if "__array__" in obj:
            return np.array(obj["__array__"], dtype=obj["dtype"])
        if "__bytes__" in obj:
            return base64.b64decode(obj["__bytes__"])
        return {k: from_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [from_jsonable(v) for v in obj]
    return obj


class Iterator:
    """Iterates a Dataset element by element (elements are numpy values / bytes / structures).

    Checkpoint with ``state = it.get_state()`` (JSON-serialisable) and resume with
    ``ds.iterator(state)`` or ``it.set_state(state)``. ``close()`` (or leaving a ``with`` block, or
    garbage collection) stops and joins every background thread of the pipeline.
    """

    def __init__(self, dataset: "Dataset", iteration: int, state: dict | None = None):
        self._dataset = dataset
        self._iteration = iteration
        self._it = dataset._make_iterator(IterContext((iteration,)))
        self._cursor = Cursor(self._it)
        self._items: list | None = None
        self._item_pos = 0
        self._closed = False
        if state is not None:
            self.set_state(state)

    def __iter__(self) -> "Iterator":
        return self

    def __next__(self):
        if self._items is not None and self._item_pos < len(self._items):
            item = self._items[self._item_pos]
            self._item_pos += 1
            self._cursor.pos += 1
            return item
        try:
            block = self._peek_block()
        except StopIteration:
            raise
        except BaseException:
            self.close()  # an iterator that raised is finished: stop its threads now
            raise
        if block is None:
            raise StopIteration
        self._items = list(block.elements())
        self._item_pos = 1
        self._cursor.pos += 1
        return self._items[0]

    def _peek_block(self) -> Block | None:
        """The unconsumed rest of the current block, without advancing the cursor."""
        if self._closed:
            raise StopIteration
        if not self._cursor._fill():
            return None
        c = self._cursor
        return c.block.slice(c.pos, c.block.n)

    def next_block(self) -> Block | None:
        """The rest of the current block (batch-level consumers); None at the end."""
        self._items = None
        if self._closed:
            return None
        try:
            return self._cursor.next_block()
        except BaseException:
            self.close()
            raise

    def get_state(self) -> dict:
        return jsonable({"iteration": self._iteration, "cursor": self._cursor.get_state()})

    def set_state(self, state: dict) -> None:
        state = from_jsonable(state)
        if int(state["iteration"]) != self._iteration:
            self._it.close()
            self._iteration = int(state["iteration"])
            self._it = self._dataset._make_iterator(IterContext((self._iteration,)))
            self._cursor = Cursor(self._it)
        self._items = None
        self._cursor.set_state(state["cursor"])

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._it.close()

    def __enter__(self) -> "Iterator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


class Dataset:
    """A tf.data-style input pipeline. Build with the sources below, chain transformations.

    >>> ds = Dataset.range(10).shuffle(4, seed=1).batch(3, drop_remainder=True)
    >>> [b.shape for b in ds]
    [(3,), (3,), (3,)]
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._iterations = 0

    # -- running ---------------------------------------------------------------------------------
    def _make_iterator(self, ctx: IterContext) -> BlockIterator:
        raise NotImplementedError

    def _next_iteration(self) -> int:
        with self._lock:
            k = self._iterations
            self._iterations += 1
        return k

    def __iter__(self) -> Iterator:
        return Iterator(self, self._next_iteration())

    def iterator(self, state: dict | None = None) -> Iterator:
        """A new iterator, positioned at ``state`` (from ``Iterator.get_state()``) if given."""
        return Iterator(self, self._next_iteration(), state)

    def as_numpy_iterator(self) -> Iterator:
        """Elements as numpy values (they already are; for tf.data compatibility)."""
        return iter(self)

    def cardinality(self) -> int:
        """Number of elements; ``INFINITE`` (-1) or ``UNKNOWN`` (-2) as in tf.data."""
        return UNKNOWN

    @property
    def element_spec(self):
        """Structure of :class:`TensorSpec` (static shapes and dtypes) of the elements."""
        from tpudata.dataset.spec import element_spec_of

        return element_spec_of(self)

    # -- sources ---------------------------------------------------------------------------------
    @staticmethod
    def from_tensor_slices(tensors) -> "Dataset":
        """Elements are the slices of ``tensors`` (arrays, tuples/dicts of arrays) along axis 0."""
        from tpudata.dataset.sources import TensorSlicesDataset

        return TensorSlicesDataset(tensors)

    @staticmethod
    def from_tensors(tensors) -> "Dataset":
        """A dataset of exactly one element, ``tensors``."""
        from tpudata.dataset.sources import TensorSlicesDataset

        return TensorSlicesDataset(tensors, single=True)

    @staticmethod
    def range(*args, dtype=np.int64) -> "Dataset":
        """``Dataset.range(stop)`` / ``(start, stop[, step])`` like Python's range."""
        from tpudata.dataset.sources import RangeDataset

        return RangeDataset(*args, dtype=dtype)

    @staticmethod
    def list_files(pattern, shuffle: bool = False, seed: int | None = None, **storage_options):
        """Files matching ``pattern`` (a glob or list of globs), sorted like TF's MatchingFiles."""
        from tpudata.dataset.sources import list_files

        return list_files(pattern, shuffle, seed, **storage_options)

    @staticmethod
    def zip(datasets) -> "Dataset":
        """Elements are tuples (or dicts) of the datasets' elements, until the shortest ends."""
        from tpudata.dataset.transforms import ZipDataset

        return ZipDataset(datasets)

    # -- transformations -------------------------------------------------------------------------
    def shard(self, num_shards: int, index: int) -> "Dataset":
        """Keep elements ``i`` with ``i % num_shards == index`` (shard files by host first)."""
        from tpudata.dataset.transforms import ShardDataset

        return ShardDataset(self, num_shards, index)

    def take(self, count: int) -> "Dataset":
        from tpudata.dataset.transforms import TakeDataset

        return TakeDataset(self, count)

    def skip(self, count: int) -> "Dataset":
        from tpudata.dataset.transforms import SkipDataset

        return SkipDataset(self, count)

    def repeat(self, count: int | None = None) -> "Dataset":
        """Repeat the dataset ``count`` times (forever when None); each epoch reshuffles."""
        from tpudata.dataset.transforms import RepeatDataset

        return RepeatDataset(self, count)

    def shuffle(self, buffer_size: int, seed: int | None = None,
                reshuffle_each_iteration: bool = True) -> "Dataset":
        """tf.data's buffered shuffle: fill ``buffer_size`` elements, emit one at random, refill."""
        from tpudata.dataset.shuffle import ShuffleDataset

        return ShuffleDataset(self, buffer_size, seed, reshuffle_each_iteration)

    def interleave(self, map_func: Callable, cycle_length: int | None = None, block_length: int = 1,
                   num_parallel_calls: int | None = None, deterministic: bool | None = None):
        """tf.data's interleave: ``cycle_length`` datasets in turn, ``block_length`` at a time."""
        from tpudata.dataset.interleave import InterleaveDataset

        return InterleaveDataset(self, map_func, cycle_length, block_length, num_parallel_calls,
                                 deterministic)

    def map(self, map_func: Callable, num_parallel_calls: int | None = None,
            deterministic: bool | None = None) -> "Dataset":
        """Apply ``map_func`` to every element (tuples are unpacked into arguments, as in TF)."""
        from tpudata.dataset.transforms import MapDataset

        return MapDataset(self, map_func, num_parallel_calls)

    def filter(self, predicate: Callable) -> "Dataset":
        from tpudata.dataset.transforms import FilterDataset

        return FilterDataset(self, predicate)

    def parse(self, features, num_parallel_calls: int | None = None) -> "Dataset":
        """Parse serialized tf.train.Examples with a feature spec, batch-level wherever it sits.

        Before ``batch`` each element becomes ``{name: value}``; after ``batch`` each batch is
        parsed whole (``tf.io.parse_example``). Either way the parser sees whole blocks.
        """
        from tpudata.dataset.transforms import parse_dataset

        return parse_dataset(self, features, num_parallel_calls)

    def batch(self, batch_size: int, drop_remainder: bool = False, pad_remainder: bool = False,
              mask_key: str = "weight", num_batches: int | None = None) -> "Dataset":
        """Combine consecutive elements into batches.

        ``drop_remainder=True`` drops a final short batch (static batch dimension).
        ``pad_remainder=True`` (exact-epoch evaluation) pads the final batch with zeros / empty
        values to full size and adds a float32 ``mask_key`` entry to each (dict) element: 1.0 for
        real rows, 0.0 for padding. ``num_batches`` additionally pads with all-zero-weight batches
        up to that many (so every host runs the same number of steps).
        """
        from tpudata.dataset.batch import BatchDataset

        return BatchDataset(self, batch_size, drop_remainder, pad_remainder, mask_key, num_batches)

    def padded_batch(self, batch_size: int, padded_shapes=None, padding_values=None,
                     drop_remainder: bool = False) -> "Dataset":
        """Batch elements of different shapes, padding each component to a common shape."""
        from tpudata.dataset.batch import PaddedBatchDataset

        return PaddedBatchDataset(self, batch_size, padded_shapes, padding_values, drop_remainder)

    def unbatch(self) -> "Dataset":
        from tpudata.dataset.batch import UnbatchDataset

        return UnbatchDataset(self)

    def cache(self, url: str | None = None) -> "Dataset":
        """Keep the elements of the first complete pass (in memory, or in files at ``url``)."""
        from tpudata.dataset.cache import CacheDataset

        return CacheDataset(self, url)

    def prefetch(self, buffer_size: int = 2, max_bytes: int = 256 << 20) -> "Dataset":
        """Produce elements in a background thread, up to ``buffer_size`` elements ahead."""
        from tpudata.dataset.prefetch import PrefetchDataset

        return PrefetchDataset(self, buffer_size, max_bytes)

    def apply(self, fn: Callable[["Dataset"], "Dataset"]) -> "Dataset":
        return fn(self)

