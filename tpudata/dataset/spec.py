"""Static element specs (``Dataset.element_spec``): shapes and dtypes, as tf.TensorSpec.

>>> from tpudata.dataset import Dataset
>>> Dataset.range(10).batch(4, drop_remainder=True).element_spec
TensorSpec(shape=(4,), dtype=int64)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpudata.dataset.nest import flatten, map_structure, unflatten
from tpudata.example.parse import VarLenValues
from tpudata.example.spec import FixedLenFeature


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


BYTES = np.dtype(object)


def _batched(spec, dim):
    if isinstance(spec, VarLenSpec):
        return VarLenSpec((dim,) + spec.shape, spec.dtype)
    return TensorSpec((dim,) + spec.shape, spec.dtype)


def _static(ds):
    """The element spec from the pipeline's structure, or None when it needs running."""
    from tpudata.dataset import batch as b
    from tpudata.dataset import cache, interleave, prefetch, shuffle, sources, transforms as t

    if isinstance(ds, sources.TensorSlicesDataset):
        return unflatten(ds.tree, [TensorSpec(c.shape[1:], c.dtype) for c in ds.cols])
    if isinstance(ds, sources.RangeDataset):
        return TensorSpec((), ds.dtype)
    if isinstance(ds, sources._RecordFilesDataset):
        return TensorSpec((), BYTES)
    if isinstance(ds, (t.ShardDataset, t.TakeDataset, t.SkipDataset, t.RepeatDataset,
                       t.FilterDataset, shuffle.ShuffleDataset, prefetch.PrefetchDataset,
                       cache.CacheDataset)):
        return _static(ds.input)
    if isinstance(ds, t.ParseDataset):
        inner = _static(ds.input)
        if inner is None:
            return None
        lead = inner.shape if isinstance(inner, TensorSpec) else ()
        out = {}
        for name, feat in ds.spec.items():
            if isinstance(feat, FixedLenFeature):
                out[name] = TensorSpec(tuple(lead) + feat.shape, feat.dtype)
            else:
                out[name] = VarLenSpec(tuple(lead) + (None,), feat.dtype)
        return out
    if isinstance(ds, b.BatchDataset):
        inner = _static(ds.input)
        if inner is None:
            return None
        dim = ds.batch_size if (ds.drop_remainder or ds.pad_remainder) else None
        out = map_structure(lambda s: _batched(s, dim), inner)
        if ds.pad_remainder:
            target = out[0] if isinstance(out, tuple) else out
            if isinstance(target, dict):
                target[ds.mask_key] = TensorSpec((dim,), np.dtype(np.float32))
        return out
    if isinstance(ds, t.ZipDataset):
        parts = [_static(d) for d in ds.datasets]
        return None if any(p is None for p in parts) else unflatten(ds.tree, parts)
    if isinstance(ds, interleave.InterleaveDataset):
        return None
    return None


def _from_value(value, batch_dims: int = 0):
    if isinstance(value, VarLenValues):
        return VarLenSpec((None, None), value.values.dtype)
    if isinstance(value, (bytes, str)):
        return TensorSpec((), BYTES)
    arr = np.asarray(value)
    return TensorSpec(arr.shape, arr.dtype if arr.dtype.kind not in "SUO" else BYTES)


def element_spec_of(ds):
    spec = _static(ds)
    if spec is not None:
        return spec
    it = iter(ds)
    try:
        element = next(it)
    except StopIteration:
        raise ValueError("element_spec of an empty dataset with no static spec is unknown") from None
    finally:
        it.close()
    tree, leaves = flatten(element)
    return unflatten(tree, [_from_value(v) for v in leaves])
