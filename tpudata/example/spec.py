"""Feature specs: what ``parse_examples`` extracts from each tf.train.Example.

>>> spec = {"image": FixedLenFeature([], bytes), "label": FixedLenFeature([], np.int64, -1),
...         "boxes": VarLenFeature(np.float32)}
>>> spec["label"].default_value, spec["label"].num_elements
(array(-1), 1)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any, Union

import numpy as np

from tpudata.errors import SpecError

# Feature.kind field numbers in tf.train.Feature (bytes_list=1, float_list=2, int64_list=3)
KIND_NONE, KIND_BYTES, KIND_FLOAT, KIND_INT64 = 0, 1, 2, 3
KIND_NAMES = {KIND_NONE: "no", KIND_BYTES: "bytes_list", KIND_FLOAT: "float_list", KIND_INT64: "int64_list"}

FLOAT32 = np.dtype(np.float32)
INT64 = np.dtype(np.int64)
BYTES = np.dtype(object)

_ALIASES = {
    "float32": FLOAT32, "float": FLOAT32, "int64": INT64, "int": INT64,
    "string": BYTES, "bytes": BYTES, "str": BYTES, "object": BYTES,
}


def normalize_dtype(dtype: Any) -> np.dtype:
    """``np.float32``, ``np.int64`` or ``bytes`` (object) - the three types an Example stores."""
    if isinstance(dtype, str):
        key = dtype.lower().replace("tf.", "")
        if key in _ALIASES:
            return _ALIASES[key]
    if dtype in (bytes, str, object, np.bytes_, np.str_, np.object_):
        return BYTES
    if dtype is float:
        return FLOAT32
    if dtype is int:
        return INT64
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt in (FLOAT32, INT64, BYTES):
        return dt
    raise SpecError(
        f"unsupported feature dtype {dtype!r}: tf.train.Example stores only np.float32, np.int64 "
        "and bytes; parse as one of those and cast afterwards"
    )


def kind_of(dtype: np.dtype) -> int:
    return {FLOAT32: KIND_FLOAT, INT64: KIND_INT64, BYTES: KIND_BYTES}[dtype]


def _normalize_shape(shape) -> tuple:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        shape = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise SpecError(f"FixedLenFeature shape must be a sequence of ints, not {shape!r}") from None
    if any(d < 0 for d in shape):
        raise SpecError(f"FixedLenFeature shape must be fully defined, got {shape}")
    return shape


@dataclass(frozen=True)
class FixedLenFeature:
    """A feature with exactly ``prod(shape)`` values in every record (or a default when missing).

    ``default_value`` (optional) must have the feature's shape or be a scalar, which is
    broadcast. Parsed values have shape ``(batch,) + shape``.
    """

    shape: tuple = ()
    dtype: Any = FLOAT32
    default_value: Any = None
    num_elements: int = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        shape = _normalize_shape(self.shape)
        dtype = normalize_dtype(self.dtype)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "num_elements", int(np.prod(shape, dtype=np.int64)))
        if self.default_value is not None:
            object.__setattr__(self, "default_value", self._normalize_default(self.default_value))

    def _normalize_default(self, value) -> np.ndarray:
        if self.dtype == BYTES:
            arr = np.array(value, dtype=object)
            flat = [v.encode() if isinstance(v, str) else v for v in arr.ravel().tolist()]
            if not all(isinstance(v, bytes) for v in flat):
                raise SpecError(f"default_value {value!r} for a bytes feature must hold bytes/str")
            arr = np.array(flat + [None], dtype=object)[:-1].reshape(arr.shape)
        else:
            try:
                arr = np.asarray(value)
                cast = arr.astype(self.dtype)
            except (TypeError, ValueError):
                raise SpecError(f"default_value {value!r} is not {self.dtype}") from None
            if arr.dtype.kind == "f" and self.dtype == INT64 and not np.array_equal(cast, arr):
                raise SpecError(f"default_value {value!r} is not an integer")
            arr = cast
        if arr.shape == self.shape:
            return arr
        if arr.size == 1 and self.shape != ():
            return np.full(self.shape, arr.reshape(()).item(), dtype=self.dtype)
        if arr.size == self.num_elements:
            return arr.reshape(self.shape)
        raise SpecError(
            f"default_value with shape {arr.shape} does not fit the feature shape {self.shape}"
        )


@dataclass(frozen=True)
class VarLenFeature:
    """A feature with any number of values per record; parsed into :class:`VarLenValues`."""

    dtype: Any = FLOAT32

    def __post_init__(self):
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))


Feature = Union[FixedLenFeature, VarLenFeature]


def normalize_spec(spec: Mapping[str, Feature]) -> dict:
    """Check a ``{name: feature spec}`` mapping; returns it as a dict."""
    if not isinstance(spec, Mapping) or not spec:  # collections.abc: a C-level check
        raise SpecError("a feature spec is a non-empty mapping of name -> FixedLenFeature/VarLenFeature")
    from tpudata.example.features import STRUCTURED  # features builds on this module

    out = {}
    for name, feat in spec.items():
        if not isinstance(name, str):
            raise SpecError(f"feature names must be str, not {name!r}")
        if not isinstance(feat, (FixedLenFeature, VarLenFeature) + STRUCTURED):
            raise SpecError(
                f"feature {name!r}: expected FixedLenFeature, VarLenFeature, "
                f"FixedLenSequenceFeature, SparseFeature or RaggedFeature, not {type(feat).__name__}"
            )
        out[name] = feat
    return out
