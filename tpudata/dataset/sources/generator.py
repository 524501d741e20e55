"""from_generator: elements from a Python generator, converted to a declared signature.

``generator`` is a callable returning an iterable (called once per iteration, with ``args``).
As in tf.data each value is converted with ``np.asarray(value, dtype)`` to the declared dtype
(strings to bytes) and must match the declared structure and shapes, else :class:`SpecError`.

>>> import numpy as np
>>> from tpudata.dataset import Dataset, TensorSpec
>>> sig = (TensorSpec((), np.int64), TensorSpec((None,), np.float32))
>>> ds = Dataset.from_generator(lambda: ((i, [0.5] * i) for i in range(1, 3)), output_signature=sig)
>>> [(int(i), x.tolist()) for i, x in ds]
[(1, [0.5]), (2, [0.5, 0.5])]

Checkpoints replay by count (tf.data cannot checkpoint a generator at all): the state is the
number of elements taken; a restore calls ``generator`` again and skips that many. This is exact
only for a generator that yields the same sequence on every call - one that reads a file or a
seeded RNG, not one that consumes a shared iterator or depends on the clock.
"""

from __future__ import annotations

import logging
from typing import Callable

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import UNKNOWN, BlockIterator, Dataset
from tpudata.dataset.core.block import Block
from tpudata.dataset.ops.map import function_name
from tpudata.dataset.core.nest import Tree, flatten, leaf_paths, map_structure
from tpudata.dataset.core.spec import BYTES, TensorSpec, VarLenSpec
from tpudata.errors import SpecError

logger = logging.getLogger(__name__)


def as_spec(spec) -> TensorSpec:
    """A tpudata TensorSpec from ours or from anything with ``shape`` and ``dtype`` (tf's)."""
    if isinstance(spec, VarLenSpec):
        raise TypeError("from_generator: VarLenSpec outputs are not supported")
    shape, dtype = getattr(spec, "shape", None), getattr(spec, "dtype", None)
    if dtype is None:
        raise TypeError(f"output_signature must be a structure of TensorSpec, found {spec!r}")
    if hasattr(shape, "as_list"):  # tf.TensorShape
        shape = None if shape.rank is None else shape.as_list()
    if shape is None:
        raise ValueError(f"{spec!r}: a spec of unknown rank is not supported; give its rank")
    dtype = getattr(dtype, "as_numpy_dtype", dtype)
    dtype = BYTES if dtype in (bytes, str, object) or np.dtype(dtype).kind in "SUO" else dtype
    return TensorSpec(tuple(None if d is None else int(d) for d in shape), np.dtype(dtype))


def _signature(output_signature, output_types, output_shapes):
    if output_signature is not None:
        if output_types is not None or output_shapes is not None:
            raise TypeError("from_generator: give output_signature, or the deprecated "
                            "output_types (and output_shapes), not both")
        return map_structure(as_spec, output_signature)
    if output_types is None:
        raise TypeError("from_generator needs output_signature (a structure of TensorSpec)")
    t_tree, types = flatten(output_types)
    if output_shapes is None:
        shapes = [None] * len(types)
    else:
        s_tree, shapes = _flatten_shapes(output_shapes, t_tree)
    specs = [as_spec(TensorSpec(() if s is None else tuple(s), np.dtype(
        BYTES if t in (bytes, str) else getattr(t, "as_numpy_dtype", t)))) for t, s in zip(types, shapes)]
    if any(s is None for s in shapes):
        raise ValueError("from_generator: output_types without output_shapes is not supported "
                         "(the rank would be unknown); use output_signature")
    from tpudata.dataset.core.nest import unflatten

    return unflatten(t_tree, specs)


def _flatten_shapes(shapes, tree: Tree):
    """Shapes are lists, which flatten() takes as leaves; walk them along the types' tree."""
    out: list = []

    def go(t, s):
        if t.kind == "leaf":
            out.append(None if s is None else (s.as_list() if hasattr(s, "as_list") else list(s)))
        elif t.kind == "dict":
            for k, c in zip(t.keys, t.children):
                go(c, s[k])
        else:
            for c, v in zip(t.children, s):
                go(c, v)

    go(tree, shapes)
    return tree, out


def _convert(value, spec: TensorSpec, where: str):
    if spec.dtype == BYTES:
        if isinstance(value, str):
            value = value.encode("utf-8")
        if isinstance(value, bytes):
            arr = None
            result = value
            shape = ()
        else:
            arr = np.asarray(value)
            if arr.dtype.kind not in "SUO":
                raise SpecError(f"{where}: expected strings/bytes, the generator yielded "
                                f"dtype {arr.dtype}")
            out = np.empty(arr.shape, dtype=object)
            out.ravel()[:] = [v.encode("utf-8") if isinstance(v, str) else bytes(v)
                              for v in arr.ravel().tolist()]
            result = out if out.ndim else out[()]
            shape = out.shape
    else:
        try:
            arr = np.asarray(value, dtype=spec.dtype)
        except (TypeError, ValueError) as exc:
            raise SpecError(f"{where}: the generator yielded {type(value).__name__} that does "
                            f"not convert to {spec.dtype} ({exc})") from None
        shape = arr.shape
        result = arr[()] if arr.ndim == 0 else arr
    if len(shape) != len(spec.shape) or any(w is not None and w != d
                                            for w, d in zip(spec.shape, shape)):
        raise SpecError(f"{where}: the generator yielded an element of shape {tuple(shape)} "
                        f"where the signature has {spec.shape}")
    return result


class GeneratorDataset(Dataset):
    _functions = ("generator",)

    def __init__(self, generator: Callable, output_types=None, output_shapes=None, args=None,
                 output_signature=None):
        super().__init__()
        if not callable(generator):
            raise TypeError("from_generator needs a callable that returns an iterable (pass "
                            "the generator function, not a generator object)")
        self.generator = generator
        self.args = tuple(args) if args is not None else ()
        self.signature = _signature(output_signature, output_types, output_shapes)
        self.tree, self.specs = flatten(self.signature)
        self.name = f"from_generator({function_name(generator)})"

    def _make_iterator(self, ctx):
        return _GeneratorIterator(self)

    def _spec(self):
        return self.signature

    def cardinality(self):
        return UNKNOWN


class _GeneratorIterator(BlockIterator):
    exact_want = True

    def __init__(self, ds: GeneratorDataset):
        self.ds = ds
        self.source = None
        self.count = 0  # elements taken from the generator (the state)
        self.done = False
        self.names = leaf_paths(ds.tree)

    def _open(self):
        source = self.ds.generator(*self.ds.args)
        try:
            return iter(source)
        except TypeError:
            raise TypeError(f"{self.ds.name}: the callable must return an iterable, not "
                            f"{type(source).__name__}") from None

    def _row(self, value):
        ds = self.ds
        tree, leaves = flatten(value) if ds.tree.kind != "leaf" else (ds.tree, [value])
        if tree != ds.tree:
            raise SpecError(f"{ds.name}: element {self.count} has the structure {tree}, but "
                            f"output_signature has {ds.tree}")
        return [_convert(v, s, f"{ds.name}: element {self.count} at {self.names[k]!r}")
                for k, (v, s) in enumerate(zip(leaves, ds.specs))]

    def next(self):
        if self.done:
            return None
        if self.source is None:
            self.source = self._open()
        rows = []
        for _ in range(max(1, self.want)):
            try:
                value = next(self.source)
            except StopIteration:
                self.done = True
                break
            rows.append(self._row(value))
            self.count += 1
        return Block.from_elements(self.ds.tree, rows) if rows else None

    def get_state(self):
        return {"count": self.count, "done": self.done}

    def set_state(self, state):
        self.close()
        self.count, self.done = 0, bool(state["done"])
        if self.done:
            self.count = int(state["count"])
            return
        self.source = self._open()
        want = int(state["count"])
        while self.count < want:  # replay: the generator must yield the same sequence again
            try:
                next(self.source)
            except StopIteration:
                raise ValueError(f"{self.ds.name}: checkpoint does not match the generator: it "
                                 f"ended after {self.count} elements, the state is at {want} "
                                 "(a restore calls the generator again and skips by count; it "
                                 "must yield the same sequence on every call)") from None
            self.count += 1

    def close(self):
        source, self.source = self.source, None
        if source is not None and hasattr(source, "close"):
            try:
                source.close()
            except Exception:  # a generator that fails on close
                logger.debug("closing %s's generator failed", self.ds.name, exc_info=True)


__all__ = ["GeneratorDataset", "as_spec"]

registry.provide(GeneratorDataset)
