"""Batch parsing of tf.train.Example records into numpy arrays (``tf.io.parse_example``).

The whole batch is parsed in two passes over its buffer: *locate* finds each wanted feature's
Feature message in every record, then *decode* fills one output array per feature. Both passes
run in the C accelerator (without the GIL) when it is built, and in the pure Python twins of
:mod:`tpudata.example.wire` otherwise.

>>> from tpudata.example.codec import encode_example
>>> recs = [encode_example({"x": [1.0, 2.0], "y": 1}), encode_example({"x": [3.0, 4.0], "y": 0})]
>>> out = parse_examples(recs, {"x": FixedLenFeature([2], np.float32),
...                             "y": FixedLenFeature([], np.int64)})
>>> out["x"].shape, out["y"].tolist()
((2, 2), [1, 0])
"""

from __future__ import annotations

from typing import Iterator, Mapping, Sequence

import numpy as np

from tpudata import _accel
from tpudata.errors import InvalidExampleError, SpecError
from tpudata.example import wire
from tpudata.example.spec import (
    BYTES,
    KIND_BYTES,
    KIND_NAMES,
    FixedLenFeature,
    VarLenFeature,
    kind_of,
    normalize_spec,
)
from tpudata.tfrecord.batch import MultiBatch, RecordBatch
from tpudata.tfrecord.framing import split


class VarLenValues:
    """The values of a :class:`VarLenFeature` for a batch: ``values`` split by ``row_splits``.

    Row ``i`` is ``values[row_splits[i]:row_splits[i+1]]``. :attr:`indices` and
    :attr:`dense_shape` give TensorFlow's SparseTensor view of the same data.

    >>> v = VarLenValues(np.array([1, 2, 3]), np.array([0, 2, 2, 3]))
    >>> len(v), v[0].tolist(), v.indices.tolist(), v.dense_shape
    (3, [1, 2], [[0, 0], [0, 1], [2, 0]], (3, 2))
    >>> v.to_dense(-1).tolist()
    [[1, 2], [-1, -1], [3, -1]]
    """

    __slots__ = ("values", "row_splits")

    def __init__(self, values: np.ndarray, row_splits: np.ndarray):
        self.values = values
        self.row_splits = np.asarray(row_splits, dtype=np.int64)

    @classmethod
    def from_rows(cls, rows: Sequence, dtype) -> "VarLenValues":
        lengths = np.array([len(r) for r in rows], dtype=np.int64)
        splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        values = np.empty(int(splits[-1]), dtype=dtype)
        if len(values):
            values[:] = [v for r in rows for v in (r.tolist() if isinstance(r, np.ndarray) else r)]
        return cls(values, splits)

    def __len__(self) -> int:
        return len(self.row_splits) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.values[self.row_splits[i] : self.row_splits[i + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self)))

    def __eq__(self, other) -> bool:
        if not isinstance(other, VarLenValues):
            return NotImplemented
        return np.array_equal(self.row_splits, other.row_splits) and np.array_equal(
            self.values, other.values
        )

    def __repr__(self) -> str:
        return f"VarLenValues(values={self.values!r}, row_splits={self.row_splits!r})"

    @property
    def row_lengths(self) -> np.ndarray:
        return np.diff(self.row_splits)

    @property
    def indices(self) -> np.ndarray:
        """``[nnz, 2]`` (row, position) indices, as in a ``tf.SparseTensor``."""
        lengths = self.row_lengths
        rows = np.repeat(np.arange(len(self), dtype=np.int64), lengths)
        cols = np.arange(len(self.values), dtype=np.int64) - np.repeat(self.row_splits[:-1], lengths)
        return np.stack([rows, cols], axis=1)

    @property
    def dense_shape(self) -> tuple:
        lengths = self.row_lengths
        return (len(self), int(lengths.max()) if len(lengths) else 0)

    def to_list(self) -> list:
        return [self[i] for i in range(len(self))]

    def to_dense(self, default_value=None) -> np.ndarray:
        """A ``[rows, max_len]`` array padded with ``default_value`` (0 or b"" by default)."""
        if default_value is None:
            default_value = b"" if self.values.dtype == BYTES else 0
        out = np.full(self.dense_shape, default_value, dtype=self.values.dtype)
        idx = self.indices
        out[idx[:, 0], idx[:, 1]] = self.values
        return out


# -- dispatch to the accelerator or its pure twins ------------------------------------------------
def _buffers(batch) -> tuple:
    """(buffer, None) of a RecordBatch; (buffers, bidx) of a MultiBatch (one pass over all)."""
    if isinstance(batch, MultiBatch):
        return batch.buffers, batch.bidx
    return batch.buffer, None


def _locate(batch: RecordBatch | MultiBatch, keys: tuple) -> np.ndarray:
    offsets = np.ascontiguousarray(batch.offsets, dtype=np.int64)
    lengths = np.ascontiguousarray(batch.lengths, dtype=np.int64)
    locs = np.empty((len(offsets), len(keys), 2), dtype=np.int64)
    nat = _accel.native
    buf, bidx = _buffers(batch)
    if nat is not None:
        bad_rec, bad_pos = nat.locate(buf, offsets, lengths, keys, locs, bidx)
    else:
        bad_rec, bad_pos = wire.locate_pure(buf, offsets, lengths, keys, locs, bidx)
    if bad_rec >= 0:
        raise InvalidExampleError(
            f"record {bad_rec}{_where(batch, bad_rec)} is not a valid tf.train.Example "
            f"(malformed protocol buffer at byte {bad_pos} of the record)"
        )
    return locs


def _decode(batch, locs, fidx, kind, mode, n, out, aux):
    nat = _accel.native
    fn = nat.decode if nat is not None else wire.decode_pure
    buf, bidx = _buffers(batch)
    return fn(buf, locs, locs.shape[1], fidx, kind, mode, n, out, aux, bidx)


def _split(batch, offsets, lengths, rows, per_row) -> list:
    """Copies of the values at ``offsets``/``lengths``: ``per_row`` (a count, or one per row) of
    them from each of the records ``rows``, in their buffer."""
    if isinstance(batch, MultiBatch):
        return batch.split(offsets, lengths, np.repeat(batch.bidx[rows], per_row))
    return split(batch.buffer, offsets, lengths)


def _where(batch, r: int) -> str:
    if isinstance(batch, MultiBatch):
        batch, r = batch.record(r), 0
    if batch.path is None:
        return ""
    return f" ({batch.path} at offset {int(batch.record_offsets[r])})"


def _raise(err, rec, got_kind, got_count, bad_off, name, feat, batch, base_row):
    where = _where(batch, rec)
    row = base_row + rec
    if err == wire.E_KIND:
        raise SpecError(
            f"feature {name!r} in record {row}{where}: expected {_dtype_name(feat.dtype)} values "
            f"but the record has a {KIND_NAMES[got_kind]}"
        )
    if err == wire.E_COUNT:
        raise SpecError(
            f"feature {name!r} in record {row}{where}: expected {feat.num_elements} "
            f"{_dtype_name(feat.dtype)} value(s) for shape {feat.shape}, got {got_count}; "
            "use VarLenFeature for variable-length data"
        )
    if err == wire.E_MULTI:
        raise InvalidExampleError(
            f"feature {name!r} in record {row}{where} sets more than one of "
            "bytes_list/float_list/int64_list"
        )
    raise InvalidExampleError(
        f"feature {name!r} in record {row}{where} is not a valid tf.train.Feature "
        f"(malformed protocol buffer at byte {bad_off} of the batch buffer)"
    )


def _dtype_name(dtype) -> str:
    return "bytes" if dtype == BYTES else str(dtype)


def _parse_fixed(batch, locs, fidx, name, feat: FixedLenFeature, base_row: int, views: bool = False):
    count = len(batch)
    n = feat.num_elements
    kind = kind_of(feat.dtype)
    present = np.empty(count, dtype=np.uint8)
    if kind == KIND_BYTES:
        pairs = np.empty((count, n, 2), dtype=np.int64)
        res = _decode(batch, locs, fidx, kind, 0, n, pairs.reshape(-1), present)
    else:
        out = np.empty((count, n), dtype=feat.dtype)
        res = _decode(batch, locs, fidx, kind, 0, n, out.reshape(-1), present)
    if res[0] != wire.E_OK:
        _raise(*res, name, feat, batch, base_row)
    missing = present == 0
    any_missing = bool(missing.any())
    if any_missing and feat.default_value is None:
        r = int(np.argmax(missing))
        raise SpecError(
            f"feature {name!r} is required but missing from record {base_row + r}"
            f"{_where(batch, r)}; give FixedLenFeature a default_value to allow that"
        )
    if kind == KIND_BYTES and views and not any_missing and feat.shape == () and count:
        offsets, lengths = pairs[:, 0, 0], pairs[:, 0, 1]
        if 2 * int(lengths.sum()) >= int(np.asarray(batch.lengths).sum()):
            # the values are most of the records: leave them in the read buffer (zero-copy)
            if isinstance(batch, MultiBatch):
                return MultiBatch(batch.buffers, batch.bidx, offsets.copy(), lengths.copy(),
                                  [(None, None)] * len(batch.buffers))
            return RecordBatch(batch.buffer, offsets.copy(), lengths.copy(), framed=False)
    if kind == KIND_BYTES:
        out = np.empty((count, n), dtype=object)
        rows = np.flatnonzero(present) if any_missing else slice(None)
        sel = pairs[rows].reshape(-1, 2)
        values = _split(batch, sel[:, 0], sel[:, 1], rows, n)
        if n and any_missing:
            out[rows] = np.array(values + [None], dtype=object)[:-1].reshape(-1, n)
        elif n and values:
            out.reshape(-1)[:] = values
    if any_missing:
        out[missing] = feat.default_value.reshape(-1)
    return out.reshape((count,) + feat.shape)


def _parse_varlen(batch, locs, fidx, name, feat: VarLenFeature, base_row: int) -> VarLenValues:
    count = len(batch)
    kind = kind_of(feat.dtype)
    counts = np.empty(count, dtype=np.int64)
    res = _decode(batch, locs, fidx, kind, 1, 0, None, counts)
    if res[0] != wire.E_OK:
        _raise(*res, name, feat, batch, base_row)
    total = int(counts.sum())
    splits = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(counts, out=splits[1:])
    if kind == KIND_BYTES:
        pairs = np.empty((total, 2), dtype=np.int64)
        res = _decode(batch, locs, fidx, kind, 2, 0, pairs.reshape(-1), counts)
        values = np.empty(total, dtype=object)
        if total:
            values[:] = _split(batch, pairs[:, 0], pairs[:, 1], slice(None), counts)
    else:
        values = np.empty(total, dtype=feat.dtype)
        res = _decode(batch, locs, fidx, kind, 2, 0, values, counts)
    if res[0] != wire.E_OK:
        _raise(*res, name, feat, batch, base_row)
    return VarLenValues(values, splits)


def parse_examples(records, spec: Mapping, base_row: int = 0) -> dict:
    """Parse a batch of serialized ``tf.train.Example`` records with a feature spec.

    ``records`` is a :class:`RecordBatch` (zero-copy, from a reader) or any sequence of
    bytes-like records. Returns ``{name: array}`` with a leading dimension of ``len(records)``:
    ``FixedLenFeature`` gives an array of shape ``(n,) + shape`` (object dtype for bytes),
    ``VarLenFeature`` a :class:`VarLenValues`. A missing feature without default, a wrong type or
    a wrong number of values raises :class:`~tpudata.errors.SpecError` naming the feature and the
    record's position (``base_row`` + index in the batch, and file/offset when known).
    """
    batch = records if isinstance(records, RecordBatch) else RecordBatch.from_records(records)
    return parse_prepared(batch, prepare_spec(spec), base_row)


def parse_examples_views(records, spec: Mapping, base_row: int = 0, views: bool = True) -> dict:
    """:func:`parse_examples`, but a scalar bytes ``FixedLenFeature`` whose values are most of
    the records' bytes comes back as a :class:`RecordBatch` of views into the records' buffer
    (``views=True``; the dataset engine wraps it in a zero-copy column)."""
    batch = records if isinstance(records, RecordBatch) else RecordBatch.from_records(records)
    return parse_prepared(batch, prepare_spec(spec), base_row, views)


def prepare_spec(spec: Mapping) -> tuple:
    """A checked spec with its feature keys, for :func:`parse_prepared` (parsing many batches
    with one spec, e.g. one per read buffer, checks and encodes the spec once)."""
    from tpudata.example import structured  # builds on VarLenValues above

    spec = normalize_spec(spec)
    names = list(spec)
    for name, feat in spec.items():
        if not isinstance(feat, (FixedLenFeature, VarLenFeature)):
            names += [k for k, _ in structured.needed_keys(name, feat) if k not in names]
    fidx_of = {name: i for i, name in enumerate(names)}
    return spec, fidx_of, tuple(name.encode("utf-8") for name in names)


def parse_prepared(batch: RecordBatch | MultiBatch, prepared: tuple, base_row: int = 0,
                   views: bool = False) -> dict:
    """:func:`parse_examples` of a :class:`RecordBatch` (or a :class:`MultiBatch`, records from
    many read buffers, in the same one pass) with a spec from :func:`prepare_spec` (``views``: as
    in :func:`parse_examples_views`; a MultiBatch gives its values as a MultiBatch)."""
    from tpudata.example import structured

    spec, fidx_of, keys = prepared
    locs = _locate(batch, keys)
    cache: dict = {}

    def varlen(key: str, dtype) -> VarLenValues:
        if (key, dtype) not in cache:
            feat = VarLenFeature(dtype)
            cache[key, dtype] = _parse_varlen(batch, locs, fidx_of[key], key, feat, base_row)
        return cache[key, dtype]

    def where(r: int) -> str:
        return f"{base_row + r}{_where(batch, r)}"

    out = {}
    for name, feat in spec.items():
        if isinstance(feat, FixedLenFeature):
            out[name] = _parse_fixed(batch, locs, fidx_of[name], name, feat, base_row, views)
        elif isinstance(feat, VarLenFeature):
            out[name] = varlen(name, feat.dtype)
        else:
            out[name] = structured.assemble(name, feat, varlen, where)
    return out


def parse_single_example(record, spec: Mapping) -> dict:
    """Parse one record (``tf.io.parse_single_example``): every feature loses the batch dimension."""
    return {k: v[0] for k, v in parse_examples([record], spec).items()}
