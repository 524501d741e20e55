"""The device side of the TPU contract: supported dtypes and shapes fixed at the first step.

>>> sig = Signature.compile({"x": np.zeros((8, 4), np.float32)}, None)
>>> sig.check({"x": np.zeros((5, 4), np.float32)}, None)
Traceback (most recent call last):
...
tpudata.errors.StaticShapeError: features 'x' has shape (5, 4), but the TPU program was compiled for shape (8, 4) at the first step; TPUs need static shapes: use batch(..., drop_remainder=True), or pad the final batch (batch(..., pad_remainder=True))
"""

from __future__ import annotations

import numpy as np

from tpudata.dataset.core.nest import flatten, leaf_paths, map_structure, unflatten
from tpudata.errors import StaticShapeError, UnsupportedDtypeError
from tpudata.example.parse import VarLenValues

# TF's TPU infeed types (tensorflow/python/tpu/ops/tpu_ops.py, _SUPPORTED_INFEED_DTYPES): bfloat16
# (checked by name: ml_dtypes is optional), bool, complex64, float32, int32, int64, int8, uint32,
# uint8. TPUEstimator passes them through uncast, so they are accepted here as they are; float16
# is not one of them.
SUPPORTED = {np.dtype(t) for t in (np.bool_, np.complex64, np.float32, np.int32, np.int64, np.int8,
                                   np.uint32, np.uint8)}
_INT_TO_INT32 = {np.dtype(t) for t in (np.int64, np.uint64, np.int16, np.uint16)}
_INT32 = np.iinfo(np.int32)


def _leaves(structure, what: str) -> list[tuple[str, object]]:
    if structure is None:
        return []
    tree, leaves = flatten(structure)
    names = leaf_paths(tree)
    return [(f"{what} {name!r}" if tree.kind != "leaf" else what, leaf) for name, leaf in zip(names, leaves)]


def check_dtype(name: str, value) -> np.ndarray:
    if isinstance(value, VarLenValues):
        raise UnsupportedDtypeError(
            f"{name} is a VarLenFeature (ragged), which TPUs cannot take; use FixedLenFeature "
            "or padded_batch for a static shape")
    arr = np.asarray(value)
    dt = arr.dtype
    if dt in SUPPORTED or dt.name == "bfloat16":
        return arr
    if dt.kind in "OSU":
        hint = "decode strings to numbers in the input pipeline; TPUs do not take strings"
    elif dt in _INT_TO_INT32:
        hint = "cast it to int32 in the input pipeline (tpudata.tpu.make_tpu_ready does this)"
    elif dt == np.float64:
        hint = "cast it to float32 in the input pipeline (tpudata.tpu.make_tpu_ready does this)"
    elif dt == np.float16:
        hint = ("cast it to bfloat16 (ml_dtypes.bfloat16, the TPU's 16-bit float) or to float32 in "
                "the input pipeline (tpudata.tpu.make_tpu_ready casts it to float32)")
    else:
        hint = "use float32 or int32"
    raise UnsupportedDtypeError(f"{name} has dtype {dt}, which TPUs do not support; {hint}")


def int64_as_int32(features, labels):
    """``(features, labels)`` with int64 leaves as int32, for JAX without ``jax_enable_x64`` (which
    would wrap values silently): values outside int32's range are refused, naming the feature."""
    def narrow(structure, what):
        if structure is None:
            return None
        tree, leaves = flatten(structure)
        if not any(getattr(v, "dtype", None) == np.int64 for v in leaves):
            return structure
        out = []
        for name, leaf in zip(leaf_paths(tree), leaves):
            arr = np.asarray(leaf)
            if arr.dtype == np.int64:
                if arr.size and (arr.min() < _INT32.min or arr.max() > _INT32.max):
                    label = f"{what} {name!r}" if tree.kind != "leaf" else what
                    raise UnsupportedDtypeError(
                        f"{label} has int64 values outside int32's range ({arr.min()}..{arr.max()}), "
                        "which JAX holds as int32 unless jax_enable_x64 is set: set "
                        "jax.config.update('jax_enable_x64', True) before building the estimator, "
                        "or keep such values off the device")
                arr = arr.astype(np.int32)
            out.append(arr)
        return unflatten(tree, out)

    return narrow(features, "features"), narrow(labels, "labels")


class Signature:
    """Shapes and dtypes of one replica's features and labels, fixed at the first step."""

    def __init__(self, entries: dict):
        self.entries = entries

    @classmethod
    def compile(cls, features, labels) -> "Signature":
        entries = {}
        for name, value in _leaves(features, "features") + _leaves(labels, "labels"):
            arr = check_dtype(name, value)
            entries[name] = (arr.shape, arr.dtype)
        return cls(entries)

    def check(self, features, labels) -> None:
        seen = set()
        for name, value in _leaves(features, "features") + _leaves(labels, "labels"):
            arr = check_dtype(name, value)
            if name not in self.entries:
                raise StaticShapeError(f"{name} appeared after the first step; the inputs of a "
                                       "TPU program cannot change structure")
            shape, dtype = self.entries[name]
            if arr.shape != shape:
                raise StaticShapeError(
                    f"{name} has shape {arr.shape}, but the TPU program was compiled for shape "
                    f"{shape} at the first step; TPUs need static shapes: use batch(..., "
                    "drop_remainder=True), or pad the final batch (batch(..., pad_remainder=True))")
            if arr.dtype != dtype:
                raise StaticShapeError(f"{name} has dtype {arr.dtype}, compiled as {dtype}")
            seen.add(name)
        missing = set(self.entries) - seen
        if missing:
            raise StaticShapeError(f"{sorted(missing)[0]} is missing; inputs cannot change structure")


def make_tpu_ready(*element):
    """Cast a (batched) element for a TPU, as the guides advise: 64-bit and 16-bit integers to
    int32, float64 and float16 to float32; TPU infeed types (uint8 images, int8, bool, ...) stay. Use it in the input pipeline: ``ds.batch(B).map(make_tpu_ready)``.

    >>> make_tpu_ready({"label": np.array([1, 2]), "x": np.zeros(2)})["label"].dtype
    dtype('int32')
    """

    def cast(v):
        if isinstance(v, VarLenValues) or isinstance(v, (bytes, str)):
            return v
        arr = np.asarray(v)
        if arr.dtype in _INT_TO_INT32:
            if arr.size and (arr.min() < np.iinfo(np.int32).min or arr.max() > np.iinfo(np.int32).max):
                raise UnsupportedDtypeError(
                    f"{arr.dtype} values {arr.min()}..{arr.max()} do not fit in int32; keep them on "
                    "the host")
            return arr.astype(np.int32)
        if arr.dtype in (np.float64, np.float16):
            return arr.astype(np.float32)
        return arr

    if len(element) == 1:  # map() unpacks (features, labels) into two arguments
        element = element[0]
    if isinstance(element, tuple) and not hasattr(element, "_fields"):
        return tuple(map_structure(cast, e) for e in element)
    return map_structure(cast, element)


def split_batch(structure, pieces: int, what: str) -> list:
    """Split every leaf along axis 0 into ``pieces`` equal parts (one per replica)."""
    if structure is None:
        return [None] * pieces
    tree, leaves = flatten(structure)
    parts = []
    for leaf in leaves:
        arr = np.asarray(leaf)
        if arr.shape[0] % pieces:
            raise ValueError(f"{what} batch of {arr.shape[0]} rows cannot be split evenly across "
                             f"{pieces} replicas")
        parts.append(np.split(arr, pieces))
    return [unflatten(tree, [p[i] for p in parts]) for i in range(pieces)]
