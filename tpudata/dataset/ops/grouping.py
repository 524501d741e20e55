"""group_by_window and bucket_by_sequence_length: tf.data's GroupByWindowDataset.

``key_func(element)`` (a scalar integer) sends each element to its group; when a group holds
``window_size`` (or ``window_size_func(key)``) elements, ``reduce_func(key, window)`` is called
with a Dataset of them and its elements are emitted. When the input ends, the remaining groups
are flushed in increasing key order (TF keeps its groups in a ``std::map``).

>>> from tpudata.dataset import Dataset
>>> ds = Dataset.range(10).group_by_window(lambda x: x % 2, lambda k, w: w.batch(3), 3)
>>> [b.tolist() for b in ds]
[[0, 2, 4], [1, 3, 5], [6, 8], [7, 9]]

State: the input's position, the elements waiting in each group (carried in the state, as
tf.data does), and, while a group is being emitted, that group and its reduced dataset's state.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import BlockIterator, Cursor, Dataset
from tpudata.dataset.core.block import as_column
from tpudata.dataset.core.common import _Unary, input_spec
from tpudata.dataset.ops.map import call, function_name
from tpudata.dataset.core.fingerprint import state_tree
from tpudata.dataset.core.nest import flatten, tree_to_json, unflatten


def _scalar_int(value, what: str) -> int:
    arr = np.asarray(value)
    if arr.shape != () or arr.dtype.kind not in "iu":
        raise TypeError(f"group_by_window: `{what}` must return a scalar integer, not "
                        f"{arr.dtype} of shape {arr.shape}")
    return int(arr)


class GroupByWindowDataset(_Unary):
    _functions = ("key_func", "reduce_func", "window_size_func")

    def __init__(self, input_ds, key_func: Callable, reduce_func: Callable,
                 window_size: int | None = None, window_size_func: Callable | None = None):
        super().__init__(input_ds)
        if (window_size is None) == (window_size_func is None):
            raise ValueError("group_by_window: give exactly one of window_size and "
                             "window_size_func")
        for name, fn in (("key_func", key_func), ("reduce_func", reduce_func)):
            if not callable(fn):
                raise TypeError(f"group_by_window: {name} must be callable")
        if window_size is not None:
            size = int(window_size)
            if size < 1:
                raise ValueError(f"group_by_window: window_size must be > 0, not {window_size}")
        self.key_func = key_func
        self.reduce_func = reduce_func
        self.window_size = None if window_size is None else int(window_size)
        self.window_size_func = window_size_func
        self.name = f"group_by_window({function_name(reduce_func)})"

    def _make_iterator(self, ctx):
        return _GroupIterator(self, ctx)

    def _spec(self):
        from tpudata.dataset.ops.scan import _StateSpec
        from tpudata.dataset.core.spec import DatasetSpec, TensorSpec, traced_spec

        inner = input_spec(self.input)
        if inner is None:
            return None
        stand_in = _StateSpec((TensorSpec((), np.dtype(np.int64)), DatasetSpec(inner)))
        return traced_spec(self.reduce_func, stand_in, self.name, returns_dataset=True)


def window_dataset(tree, cols: list) -> Dataset:
    """A Dataset of the elements whose leaves are ``cols`` (one column per leaf)."""
    from tpudata.dataset.sources.files import TensorSlicesDataset

    return TensorSlicesDataset(unflatten(tree, [as_column(c) for c in cols]))


class _GroupIterator(BlockIterator):
    exact_want = True  # never more elements than asked for

    def __init__(self, ds: GroupByWindowDataset, ctx):
        self.ds, self.ctx = ds, ctx
        self.input_it = ds.input._make_iterator(ctx)
        self.cursor = Cursor(self.input_it)
        self.tree = None
        self.groups: dict[int, list[list]] = {}  # key -> one list of values per leaf
        self.sizes: dict[int, int] = {}
        self.end_of_input = False
        self.flushes = 0  # groups flushed so far (names the reduced datasets' iterations)
        self.current = None  # (key, cols, iterator, cursor)

    def _size(self, key: int) -> int:
        if key not in self.sizes:
            if self.ds.window_size is not None:
                size = self.ds.window_size
            else:
                size = _scalar_int(self.ds.window_size_func(np.int64(key)), "window_size_func")
            if size <= 0:
                raise ValueError(f"group_by_window: window size must be greater than zero, but "
                                 f"got {size} for key {key}")
            self.sizes[key] = size
        return self.sizes[key]

    def _flush(self, key: int, restore=None) -> None:
        cols = self.groups.pop(key)
        out = self.ds.reduce_func(np.int64(key), window_dataset(self.tree, cols))
        if not isinstance(out, Dataset):
            raise TypeError(f"{self.ds.name}: reduce_func must return a Dataset, not "
                            f"{type(out).__name__}")
        it = out._make_iterator(self.ctx.child(self.flushes))
        cursor = Cursor(it)
        if restore is not None:
            cursor.set_state(restore)
        self.current = (key, cols, it, cursor)

    def next(self):
        while True:
            if self.current is not None:
                block = self.current[3].next_block(max(1, self.want))
                if block is not None:
                    return block
                self.current[2].close()
                self.current = None
                self.flushes += 1
            while not self.end_of_input:
                try:
                    element = self.cursor.next_element()
                except StopIteration:
                    self.end_of_input = True
                    break
                key = _scalar_int(call(self.ds.key_func, element), "key_func")
                size = self._size(key)
                tree, leaves = flatten(element)
                if self.tree is None:
                    self.tree = tree
                group = self.groups.setdefault(key, [[] for _ in leaves])
                for col, v in zip(group, leaves):
                    col.append(v)
                if len(group[0]) == size:
                    self._flush(key)
                    break
            if self.current is None:
                if not self.groups:
                    return None
                self._flush(min(self.groups))  # TF's std::map: the smallest key first

    def get_state(self):
        current = None
        if self.current is not None:
            key, cols, _, cursor = self.current
            current = {"key": key, "cols": [as_column(c) for c in cols],
                       "state": cursor.get_state()}
        return {"input": self.cursor.get_state(), "end_of_input": self.end_of_input,
                "tree": None if self.tree is None else tree_to_json(self.tree),
                "groups": [[k, [as_column(c) for c in cols]] for k, cols in self.groups.items()],
                "sizes": [[k, v] for k, v in self.sizes.items()], "flushes": self.flushes,
                "current": current}

    def set_state(self, state):
        from tpudata.dataset.core.state import from_jsonable

        self.close_current()
        self.cursor.set_state(state["input"])
        self.end_of_input = bool(state["end_of_input"])
        self.tree = None if state["tree"] is None else state_tree(state["tree"], self.ds.input)
        self.groups = {int(k): [list(from_jsonable(c)) for c in cols]
                       for k, cols in state["groups"]}
        self.sizes = {int(k): int(v) for k, v in state["sizes"]}
        self.flushes = int(state["flushes"])
        if state["current"] is not None:
            cur = state["current"]
            key = int(cur["key"])
            self.groups[key] = [list(from_jsonable(c)) for c in cur["cols"]]
            self._flush(key, restore=cur["state"])

    def close_current(self):
        if self.current is not None:
            self.current[2].close()
            self.current = None

    def close(self):
        self.close_current()
        self.input_it.close()


def bucket_by_sequence_length(ds: Dataset, element_length_func: Callable, bucket_boundaries,
                              bucket_batch_sizes, padded_shapes=None, padding_values=None,
                              pad_to_bucket_boundary: bool = False, no_padding: bool = False,
                              drop_remainder: bool = False) -> Dataset:
    """tf.data's ``bucket_by_sequence_length``: ``group_by_window`` keyed by the bucket of
    ``element_length_func(element)``, each bucket padded-batched with its own batch size."""
    boundaries = [int(b) for b in bucket_boundaries]
    sizes = [int(b) for b in bucket_batch_sizes]
    if len(sizes) != len(boundaries) + 1:
        raise ValueError(f"bucket_by_sequence_length: len(bucket_batch_sizes) must equal "
                         f"len(bucket_boundaries) + 1, got {len(sizes)} and {len(boundaries)}")
    if boundaries != sorted(boundaries):
        raise ValueError(f"bucket_by_sequence_length: bucket_boundaries must be sorted, not "
                         f"{boundaries}")
    lows = [np.iinfo(np.int32).min] + boundaries
    highs = boundaries + [np.iinfo(np.int32).max]
    if pad_to_bucket_boundary and not no_padding and padded_shapes is None:
        spec = input_spec(ds)
        if spec is None:
            raise ValueError("bucket_by_sequence_length(pad_to_bucket_boundary=True) needs the "
                             "elements' ranks: give padded_shapes or a map output_signature")
    return GroupByWindowDataset(
        ds, _BucketKey(element_length_func, lows, highs),
        _BucketBatch(boundaries, sizes, padded_shapes, padding_values, pad_to_bucket_boundary,
                     no_padding, drop_remainder, input_spec(ds)),
        window_size_func=_BucketSize(sizes))


class _BucketKey:
    def __init__(self, fn, lows, highs):
        self.fn, self.lows, self.highs = fn, lows, highs

    def __call__(self, *element):
        n = int(call(self.fn, element if len(element) > 1 else element[0]))
        return np.int64(next(k for k, (lo, hi) in enumerate(zip(self.lows, self.highs))
                             if lo <= n < hi))


class _BucketSize:
    def __init__(self, sizes):
        self.sizes = sizes

    def __call__(self, key):
        return np.int64(self.sizes[int(key)])


class _BucketBatch:
    def __init__(self, boundaries, sizes, padded_shapes, padding_values, to_boundary,
                 no_padding, drop_remainder, spec):
        self.boundaries, self.sizes = boundaries, sizes
        self.padded_shapes, self.padding_values = padded_shapes, padding_values
        self.to_boundary, self.no_padding = to_boundary, no_padding
        self.drop_remainder, self.spec = drop_remainder, spec

    def __call__(self, key, window):
        key = int(key)
        size = self.sizes[key]
        if self.no_padding:
            return window.batch(size, drop_remainder=self.drop_remainder)
        shapes = self.padded_shapes
        if self.to_boundary:
            if key >= len(self.boundaries):
                raise ValueError("bucket_by_sequence_length: when pad_to_bucket_boundary=True, "
                                 "elements must have length < max(bucket_boundaries)")
            fill = self.boundaries[key] - 1
            base = shapes if shapes is not None else _shapes_of(self.spec)
            tree, leaves = _flatten_shapes(base)
            shapes = unflatten(tree, [[fill if d is None or d == -1 else d for d in s]
                                      for s in leaves])
        return window.padded_batch(size, shapes, self.padding_values,
                                   drop_remainder=self.drop_remainder)


def _shapes_of(spec):
    tree, leaves = flatten(spec)
    return unflatten(tree, [list(s.shape) for s in leaves])


def _flatten_shapes(shapes):
    """Shapes are lists (leaves of flatten, with their own lists); one list per element leaf."""
    if isinstance(shapes, (list, np.ndarray)) or shapes is None:
        return flatten(0)[0], [list(shapes) if shapes is not None else []]
    return flatten(shapes)


__all__ = ["GroupByWindowDataset", "bucket_by_sequence_length", "window_dataset"]

registry.provide(GroupByWindowDataset, bucket_by_sequence_length)
