"""scan: a running state through the elements; ``scan_func(state, element) -> (state, output)``.

tf.data's ``Dataset.scan`` (``tf.data.experimental.scan``): the function gets the state and the
element (a tuple element is passed as one argument, as TF does) and returns the new state and
the output element. The state is a structure of numpy values: Python numbers in
``initial_state`` become numpy scalars (int64 / float64, numpy's defaults where TF would pick
int32 / float32), and every new state must keep the initial state's structure and dtypes
(shapes may change, as TF allows).

>>> import numpy as np
>>> from tpudata.dataset import Dataset
>>> [int(x) for x in Dataset.range(5).scan(np.int64(0), lambda s, x: (s + x, s + x))]
[0, 1, 3, 6, 10]

The function runs in the consumer's thread, element by element, only for elements asked for.
State is the input's position plus the running state (numpy values, saved with their dtypes).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.core.block import Block
from tpudata.dataset.core.common import _Unary, input_spec
from tpudata.dataset.core.iterator import BlockIterator, Cursor
from tpudata.dataset.ops.map import function_name
from tpudata.dataset.core.nest import flatten, unflatten
from tpudata.dataset.core.spec import OutputChecker, leaf_dtype
from tpudata.errors import SpecError


def _leaf(value):
    """A state leaf as numpy: bytes stay bytes, numbers become numpy scalars or arrays."""
    if isinstance(value, (bytes, str)):
        return value.encode("utf-8") if isinstance(value, str) else value
    arr = np.asarray(value)
    if arr.dtype.kind in "SU":
        out = np.empty(arr.shape, dtype=object)
        out.ravel()[:] = [v.encode("utf-8") if isinstance(v, str) else v
                          for v in arr.ravel().tolist()]
        return out
    return arr[()] if arr.ndim == 0 else arr


class _StateSpec:
    """A stand-in dataset whose spec is ``(state spec, element spec)`` (for tracing)."""

    def __init__(self, spec):
        self.spec = spec

    def _spec(self):
        return self.spec


class ScanDataset(_Unary):
    _functions = ("fn",)

    def __init__(self, input_ds, initial_state, scan_func: Callable):
        super().__init__(input_ds)
        if not callable(scan_func):
            raise TypeError(f"scan() needs a callable, not {type(scan_func).__name__}")
        self.fn = scan_func
        self.state_tree, leaves = flatten(initial_state)
        self.initial = [_leaf(v) for v in leaves]
        self.name = f"scan({function_name(scan_func)})"

    def _make_iterator(self, ctx):
        return _ScanIterator(self, self.input._make_iterator(ctx))

    def cardinality(self):
        return self.input.cardinality()

    def _spec(self):
        from tpudata.dataset.core.spec import _from_value, traced_spec

        inner = input_spec(self.input)
        if inner is None:
            return None
        state_spec = unflatten(self.state_tree, [_from_value(v) for v in self.initial])
        return traced_spec(lambda s, e: self.fn(s, e)[1], _StateSpec((state_spec, inner)),
                           self.name)


class _ScanIterator(BlockIterator):
    exact_want = True  # never more elements than asked for

    def __init__(self, ds: ScanDataset, input_it: BlockIterator):
        self.ds = ds
        self.input_it = input_it
        self.cursor = Cursor(input_it)
        self.state = list(ds.initial)
        self.dtypes = [leaf_dtype(v) for v in ds.initial]
        self.checker = OutputChecker(ds.name)
        self.delivered = 0

    def _step(self, element):
        ds = self.ds
        out = ds.fn(unflatten(ds.state_tree, self.state), element)
        if not isinstance(out, tuple) or len(out) != 2:
            raise SpecError(f"{ds.name}: the function must return (new_state, output_element), "
                            f"not {type(out).__name__} (element {self.delivered})")
        tree, leaves = flatten(out[0])
        if tree != ds.state_tree:
            raise SpecError(f"{ds.name}: element {self.delivered} returned a state with the "
                            f"structure {tree}, but the initial state has {ds.state_tree}")
        leaves = [_leaf(v) for v in leaves]
        for k, v in enumerate(leaves):
            if leaf_dtype(v) != self.dtypes[k]:
                raise SpecError(
                    f"{ds.name}: element {self.delivered} returned a state of dtype "
                    f"{leaf_dtype(v)}, but the initial state's is {self.dtypes[k]}; give the "
                    "initial state the dtype the function produces (e.g. np.int64(0))")
        self.state = leaves
        return out[1]

    def next(self):
        rows, tree = [], None
        for _ in range(max(1, self.want)):
            try:
                element = self.cursor.next_element()
            except StopIteration:
                break
            t, leaves = flatten(self._step(element))
            self.checker.check(t, leaves, self.delivered)
            tree = t
            self.delivered += 1
            rows.append(leaves)
        return Block.from_elements(tree, rows) if rows else None

    def get_state(self):
        return {"input": self.cursor.get_state(), "state": [np.asarray(v) if not isinstance(
            v, bytes) else v for v in self.state], "delivered": self.delivered,
            "checker": self.checker.get_state()}

    def set_state(self, state):
        from tpudata.dataset.core.state import from_jsonable

        self.cursor.set_state(state["input"])
        self.state = [_leaf(from_jsonable(v)) for v in state["state"]]
        self.delivered = int(state["delivered"])
        self.checker.set_state(state["checker"])

    def close(self):
        self.input_it.close()


def reduce_dataset(input_ds, initial_state, reduce_func: Callable):
    """``Dataset.reduce``: the final state of a scan whose output is its state (the initial
    state, as numpy values, for an empty dataset)."""
    if not callable(reduce_func):
        raise TypeError(f"reduce() needs a callable, not {type(reduce_func).__name__}")

    def step(state, element):
        new = reduce_func(state, element)
        return new, new

    step.__qualname__ = function_name(reduce_func)
    final = None
    with ScanDataset(input_ds, initial_state, step).iterator() as it:
        for final in it:
            pass
    if final is None:
        tree, leaves = flatten(initial_state)
        return unflatten(tree, [_leaf(v) for v in leaves])
    return final


__all__ = ["ScanDataset", "reduce_dataset"]

registry.provide(ScanDataset, reduce_dataset)
