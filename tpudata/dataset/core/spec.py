"""Static element specs (``Dataset.element_spec``): shapes and dtypes, as tf.TensorSpec.

>>> from tpudata.dataset import Dataset
>>> Dataset.range(10).batch(4, drop_remainder=True).element_spec
TensorSpec(shape=(4,), dtype=int64)
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.core.nest import flatten, leaf_paths, map_structure, unflatten
from tpudata.errors import SpecError
from tpudata.example.parse import VarLenValues
from tpudata.example.structured import RaggedValues, SparseValues

logger = logging.getLogger(__name__)

_LOCAL = threading.local()  # .declared_only: specs that need no user code (construction checks)


@contextlib.contextmanager
def declared_only():
    """Within: specs come from declarations only, never by calling a user's function (what an
    op's constructor may look at; a map's traced spec is None there)."""
    before = getattr(_LOCAL, "declared_only", False)
    _LOCAL.declared_only = True
    try:
        yield
    finally:
        _LOCAL.declared_only = before


@dataclass(frozen=True)
class TensorSpec:
    """Static shape (``None`` for an unknown dimension) and dtype (object for bytes)."""

    shape: tuple
    dtype: np.dtype

    def __repr__(self) -> str:
        dt = "bytes" if self.dtype == object else str(self.dtype)
        return f"{type(self).__name__}(shape={self.shape}, dtype={dt})"

    def is_compatible_with(self, value) -> bool:
        arr = np.asarray(value)
        if len(arr.shape) != len(self.shape):
            return False
        return all(s is None or s == d for s, d in zip(self.shape, arr.shape))


@dataclass(frozen=True, repr=False)
class VarLenSpec(TensorSpec):
    """A VarLenFeature: ragged values (``tf.SparseTensorSpec``); ``shape`` has None for rows."""


@dataclass(frozen=True, repr=False)
class SparseSpec(TensorSpec):
    """A SparseValues leaf (``tf.SparseTensorSpec``); ``shape`` is the dense shape."""


@dataclass(frozen=True, repr=False)
class RaggedSpec(TensorSpec):
    """A RaggedValues leaf (``tf.RaggedTensorSpec``) with ``ragged_rank`` ragged dimensions."""

    ragged_rank: int = 1


BYTES = np.dtype(object)


@dataclass(frozen=True)
class DatasetSpec:
    """An element that is itself a Dataset (``window``'s), with that dataset's element spec."""

    element_spec: object

    def __repr__(self) -> str:
        return f"DatasetSpec({self.element_spec!r})"


def _batched(spec, dim):
    if isinstance(spec, VarLenSpec):
        return VarLenSpec((dim,) + spec.shape, spec.dtype)
    return TensorSpec((dim,) + spec.shape, spec.dtype)


def _static(ds):
    """The element spec declared by the pipeline's ops, or None when an op cannot say."""
    return ds._spec()


def _from_value(value, batch_dims: int = 0):
    if isinstance(value, VarLenValues):
        return VarLenSpec((None, None), value.values.dtype)
    if isinstance(value, SparseValues):
        return SparseSpec((None,) * len(value.dense_shape), _dtype_of(value.values))
    if isinstance(value, RaggedValues):
        rank = value.ragged_rank
        return RaggedSpec((None,) * (rank + 1) + tuple(np.shape(value.flat_values)[1:]),
                          _dtype_of(value.flat_values), rank)
    if isinstance(value, (bytes, str)):
        return TensorSpec((), BYTES)
    arr = np.asarray(value)
    return TensorSpec(arr.shape, arr.dtype if arr.dtype.kind not in "SUO" else BYTES)


def _dtype_of(values) -> np.dtype:
    dtype = np.asarray(values).dtype
    return BYTES if dtype.kind in "SUO" else dtype


def element_spec_of(ds):
    """Declared by the ops (a map's ``output_signature``, or its function traced on dummy
    elements as tf.data traces it); never by running the pipeline. An op that cannot say raises
    :class:`~tpudata.errors.SpecError` naming it and what to declare."""
    spec = _static(ds)
    if spec is not None:
        return spec
    from tpudata.dataset.core.graph import walk

    unknown = [node for node in walk(ds) if node._spec() is None]
    where = type(unknown[-1]).__name__ if unknown else type(ds).__name__
    name = getattr(unknown[-1], "name", None) if unknown else None
    raise SpecError(
        f"the element spec is not declared: {where}{f' {name!r}' if name else ''} cannot say "
        f"(a function that does not run on dummy elements of its input, or values only the data "
        f"shows); give that map (or from_generator) an output_signature, e.g. "
        f"map(fn, output_signature={{'x': tpudata.TensorSpec((None,), np.float32)}}); "
        f"tpudata does not run the pipeline to find out")


def _dummy(spec, fill: int):
    """A value matching ``spec``: zeros (or ``fill``), unknown dimensions ``fill + 1`` long."""
    if isinstance(spec, DatasetSpec):  # a dataset of fill + 1 dummy elements
        TensorSlicesDataset = registry.lookup("TensorSlicesDataset")

        tree, leaves = flatten(spec.element_spec)
        cols = []
        for leaf in leaves:
            one = _dummy(leaf, fill)
            col = np.empty(fill + 1, dtype=object) if leaf.dtype == BYTES else None
            if col is not None:
                col[:] = [one] * (fill + 1)
            cols.append(col if col is not None else np.stack([np.asarray(one)] * (fill + 1)))
        return TensorSlicesDataset(unflatten(tree, cols))
    if isinstance(spec, VarLenSpec):
        return VarLenValues(np.full(fill, fill, dtype=spec.dtype), np.array([0, fill], np.int64))
    shape = tuple(fill + 1 if d is None else d for d in spec.shape)
    if spec.dtype == BYTES:
        out = np.empty(shape, dtype=object)
        out.fill(str(fill).encode())
        return out if shape else str(fill).encode()
    arr = np.full(shape, fill, dtype=spec.dtype)
    return arr if shape else arr[()]


def traced_spec(fn, input_ds, op: str, returns_dataset: bool = False):
    """The output spec of ``fn`` traced on two dummy elements of the input's spec.

    Dimensions that differ between the two traces are unknown (None). Returns None when the
    input's spec is unknown or ``fn`` fails on a dummy (e.g. it opens a file named by it).
    """
    if getattr(_LOCAL, "declared_only", False):
        return None
    inner = _static(input_ds)
    if inner is None:
        return None
    specs = []
    for fill in (0, 1):
        element = map_structure(lambda sp, f=fill: _dummy(sp, f), inner)
        try:
            if isinstance(element, tuple) and not hasattr(element, "_fields"):
                out = fn(*element)
            else:
                out = fn(element)
            if returns_dataset:
                out_spec = _static(out) if hasattr(out, "_make_iterator") else None
                if out_spec is None:
                    return None
                specs.append(out_spec)
                continue
        except Exception as exc:  # the function cannot run on a dummy: no traced spec
            logger.debug("%s: tracing on a dummy element failed (%s)", op, exc)
            return None
        tree, leaves = flatten(out)
        specs.append(unflatten(tree, [_from_value(v) for v in leaves]))
    t0, a = flatten(specs[0])
    t1, b = flatten(specs[1])
    if t0 != t1:
        return None
    merged = []
    for x, y in zip(a, b):
        if len(x.shape) != len(y.shape) or x.dtype != y.dtype:
            return None
        shape = tuple(d if d == e else None for d, e in zip(x.shape, y.shape))
        merged.append(type(x)(shape, x.dtype))
    return unflatten(t0, merged)


def leaf_dtype(value) -> np.dtype:
    """The dtype an element leaf carries (object for bytes and strings)."""
    if isinstance(value, (bytes, str, bytearray)):
        return BYTES
    if isinstance(value, VarLenValues):
        return value.values.dtype
    if isinstance(value, SparseValues):
        return _dtype_of(value.values)
    if isinstance(value, RaggedValues):
        return _dtype_of(value.flat_values)
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        dtype = np.asarray(value).dtype
    return BYTES if dtype.kind in "SUO" else dtype


class OutputChecker:
    """Checks that a user function's outputs keep one structure and dtype (and the declared
    shapes): a disagreement raises :class:`SpecError` naming the op and the element."""

    def __init__(self, op: str, signature=None):
        self.op = op
        self.tree = None
        self.dtypes: list | None = None
        self.shapes: list | None = None
        self._saved: list | None = None
        if signature is not None:
            self.tree, leaves = flatten(signature)
            if not all(isinstance(x, TensorSpec) for x in leaves):
                raise TypeError(f"{op}: output_signature must be a structure of TensorSpec")
            self.dtypes = [np.dtype(x.dtype) for x in leaves]
            self.shapes = [tuple(x.shape) for x in leaves]

    def check(self, tree, leaves: list, index: int) -> None:
        if self.dtypes is None:
            self.tree, self.dtypes = tree, [leaf_dtype(v) for v in leaves]
            return
        if self.tree is not None and tree != self.tree:
            raise SpecError(f"{self.op}: element {index} has the structure {tree}, but earlier "
                            f"elements (or output_signature) have {self.tree}; return one "
                            "structure for every element")
        self.tree = tree
        names = None
        for k, value in enumerate(leaves):
            got = leaf_dtype(value)
            if got != self.dtypes[k]:
                names = names or leaf_paths(tree)
                raise SpecError(
                    f"{self.op}: element {index} has dtype {got} at {names[k]!r}, but the "
                    f"declared (or first element's) dtype is {self.dtypes[k]}; values are never "
                    "cast silently: return one dtype (e.g. np.float64(x)) or give output_signature")
            if self.shapes is not None:
                shape = np.shape(value) if not isinstance(value, (bytes, str)) else ()
                want = self.shapes[k]
                if len(shape) != len(want) or any(w is not None and w != d
                                                  for w, d in zip(want, shape)):
                    names = names or leaf_paths(tree)
                    raise SpecError(f"{self.op}: element {index} has shape {tuple(shape)} at "
                                    f"{names[k]!r}, not the declared {want}")

    def get_state(self):
        if self.dtypes is None:
            return None
        if self._saved is None or len(self._saved) != len(self.dtypes):
            self._saved = [str(d) for d in self.dtypes]
        return self._saved

    def set_state(self, state) -> None:
        if state is not None and self.shapes is None:
            self.dtypes = [np.dtype(d) for d in state]
            self._saved = None
            self.tree = None  # learnt again from the next element
