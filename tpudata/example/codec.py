"""tf.train.Example and SequenceExample encoding and decoding, without TensorFlow or protobuf.

Python values map to Feature lists as TensorFlow's helpers do: bytes/str -> ``bytes_list``,
ints and bools -> ``int64_list``, floats -> ``float_list``; scalars, lists and numpy arrays
(flattened row-major) are accepted. Decoding gives numpy arrays: int64, float32, or object
arrays of bytes.

>>> record = encode_example({"label": 3, "x": [0.5, 1.5], "name": "cat"})
>>> d = decode_example(record)
>>> d["label"], d["x"], d["name"]
(array([3]), array([0.5, 1.5], dtype=float32), array([b'cat'], dtype=object))
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from tpudata.errors import InvalidExampleError, SpecError
from tpudata.example import wire
from tpudata.example.spec import KIND_BYTES, KIND_FLOAT, KIND_INT64, KIND_NONE  # noqa: F401

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


# Messages are built as lists of parts plus their total size and joined once at the end, so
# a large bytes value (an encoded image) is copied a single time.
_TAG = {f: wire.tag(f, wire.WT_LEN) for f in (1, 2, 3)}


def _wrap(field: int, parts: list, size: int) -> tuple[list, int]:
    head = _TAG[field] + wire.encode_varint(size)
    return [head, *parts], size + len(head)


def _bytes_list(values: Sequence, name: str) -> tuple[list, int]:
    parts, size = [], 0
    for v in values:
        if isinstance(v, str):
            v = v.encode("utf-8")
        elif isinstance(v, (bytearray, memoryview, np.bytes_)):
            v = bytes(v)
        elif not isinstance(v, bytes):
            raise SpecError(f"feature {name!r}: cannot mix {type(v).__name__} into a bytes list")
        head = _TAG[1] + wire.encode_varint(len(v))
        parts += (head, v)
        size += len(head) + len(v)
    return _wrap(KIND_BYTES, parts, size)


def _packed(kind: int, data: bytes) -> tuple[list, int]:
    if not data:
        return _wrap(kind, [], 0)
    inner, n = _wrap(1, [data], len(data))
    return _wrap(kind, inner, n)


def _float_list(values: np.ndarray) -> tuple[list, int]:
    return _packed(KIND_FLOAT, np.ascontiguousarray(values, dtype="<f4").tobytes())


def _int64_list(values) -> tuple[list, int]:
    if isinstance(values, int):
        return _packed(KIND_INT64, wire.encode_varint(values))
    return _packed(KIND_INT64, wire.encode_varints(values))


def _ints(values, name: str) -> np.ndarray:
    try:
        arr = np.asarray(values)
        if arr.dtype.kind == "u" and arr.size and arr.max() > _INT64_MAX:
            raise OverflowError
        if arr.dtype.kind == "O":
            if any(not _INT64_MIN <= int(v) <= _INT64_MAX for v in arr.ravel().tolist()):
                raise OverflowError
        return arr.astype(np.int64)
    except (OverflowError, ValueError):
        raise SpecError(f"feature {name!r}: value out of int64 range") from None


def _scalar_int(value, name: str) -> int:
    v = int(value)
    if not _INT64_MIN <= v <= _INT64_MAX:
        raise SpecError(f"feature {name!r}: value out of int64 range")
    return v


def _feature_parts(value: Any, name: str) -> tuple[list, int]:
    if value is None:
        return [], 0
    if isinstance(value, (bytes, bytearray, memoryview, str, np.bytes_, np.str_)):
        return _bytes_list([value], name)
    if isinstance(value, (bool, np.bool_, int, np.integer)):
        return _int64_list(_scalar_int(value, name))
    if isinstance(value, (float, np.floating)):
        return _float_list(np.array([value], dtype=np.float32))
    if isinstance(value, np.ndarray):
        kind = value.dtype.kind
        flat = value.ravel()
        if kind == "f":
            return _float_list(flat)
        if kind in "iub":
            return _int64_list(_ints(flat, name))
        if kind in "SUO":
            return _bytes_list(flat.tolist(), name)
        raise SpecError(f"feature {name!r}: cannot store numpy dtype {value.dtype} in an Example")
    if isinstance(value, (list, tuple)):
        if not value:
            raise SpecError(
                f"feature {name!r}: cannot tell the type of an empty list; pass an empty numpy "
                "array with a dtype (e.g. np.array([], np.float32))"
            )
        if all(isinstance(v, (bytes, bytearray, memoryview, str, np.bytes_)) for v in value):
            return _bytes_list(value, name)
        if all(isinstance(v, (bool, np.bool_, int, np.integer)) for v in value):
            return _int64_list(_ints([int(v) for v in value], name))
        if all(isinstance(v, (bool, int, float, np.integer, np.floating)) for v in value):
            return _float_list(np.array(value, dtype=np.float32))
        raise SpecError(f"feature {name!r}: a list must hold only bytes/str, only ints, or numbers")
    raise SpecError(f"feature {name!r}: cannot store a {type(value).__name__} in an Example")


def encode_feature(value: Any, name: str = "?") -> bytes:
    """The serialized ``tf.train.Feature`` for a Python/numpy value (see module doc).

    ``None`` gives a Feature with no list set.
    """
    return b"".join(_feature_parts(value, name)[0])


def _features_parts(features: Mapping[str, Any]) -> tuple[list, int]:
    parts, size = [], 0
    for name, value in features.items():
        if not isinstance(name, str):
            raise SpecError(f"feature names must be str, not {name!r}")
        key = name.encode("utf-8")
        key_parts, key_size = _wrap(1, [key], len(key))
        val_parts, val_size = _wrap(2, *_feature_parts(value, name))
        entry, entry_size = _wrap(1, key_parts + val_parts, key_size + val_size)
        parts += entry
        size += entry_size
    return parts, size


def encode_features(features: Mapping[str, Any]) -> bytes:
    """The serialized ``tf.train.Features`` body (map entries) for a mapping of values."""
    return b"".join(_features_parts(features)[0])


def encode_example(features: Mapping[str, Any]) -> bytes:
    """Serialize a mapping of feature name -> value as a ``tf.train.Example``."""
    if not features:
        return b""
    return b"".join(_wrap(1, *_features_parts(features))[0])


def _invalid(what: str, exc: wire.Malformed) -> InvalidExampleError:
    if isinstance(exc, wire.MultipleLists):
        reason = "a Feature sets more than one of bytes_list/float_list/int64_list"
    else:
        reason = "malformed protocol buffer"
    return InvalidExampleError(f"not a valid {what}: {reason} at byte {exc.pos}")


def _decode_feature(b: bytes, s: int, e: int) -> np.ndarray:
    kind, ls, le = wire.feature_list(b, s, e)
    if kind == KIND_NONE:
        return np.empty(0, dtype=np.float32)
    values = wire.list_values(b, ls, le, kind)
    if kind == KIND_BYTES:
        arr = np.empty(len(values), dtype=object)
        arr[:] = [b[o : o + n] for o, n in values]
        return arr
    if kind == KIND_FLOAT:
        return np.array(values, dtype=np.uint32).view(np.float32)
    return np.array(values, dtype=np.int64)


def _decode_entries(b: bytes, entries) -> dict:
    out = {}
    for ks, ke, vs, ve in entries:
        try:
            key = b[ks:ke].decode("utf-8")
        except UnicodeDecodeError:
            raise wire.Malformed(ks) from None
        out[key] = _decode_feature(b, vs, ve)
    return out


def decode_example(record) -> dict:
    """Decode a serialized ``tf.train.Example`` into ``{name: numpy array}``.

    Values are int64, float32 or object (bytes) arrays; a Feature with no list set decodes as an
    empty float32 array. Malformed input raises :class:`~tpudata.errors.InvalidExampleError`.
    """
    b = bytes(record)
    try:
        return _decode_entries(b, wire.example_entries(b, 0, len(b)))
    except wire.Malformed as exc:
        raise _invalid("tf.train.Example", exc) from None


def encode_sequence_example(
    context: Mapping[str, Any] | None = None,
    feature_lists: Mapping[str, Sequence[Any]] | None = None,
) -> bytes:
    """Serialize a ``tf.train.SequenceExample``: context features plus named lists of features."""
    parts = []
    if context:
        parts.append(wire.len_field(1, encode_features(context)))
    if feature_lists:
        entries = []
        for name, steps in feature_lists.items():
            feats = b"".join(wire.len_field(1, encode_feature(v, name)) for v in steps)
            entry = wire.len_field(1, name.encode("utf-8")) + wire.len_field(2, feats)
            entries.append(wire.len_field(1, entry))
        parts.append(wire.len_field(2, b"".join(entries)))
    return b"".join(parts)


def decode_sequence_example(record) -> tuple[dict, dict]:
    """Decode a ``tf.train.SequenceExample`` into ``(context, feature_lists)``.

    ``context`` is ``{name: array}`` as :func:`decode_example` gives; ``feature_lists`` is
    ``{name: [array per step]}``.

    >>> rec = encode_sequence_example({"id": b"s1"}, {"tokens": [[1, 2], [3]]})
    >>> ctx, fl = decode_sequence_example(rec)
    >>> ctx["id"], [a.tolist() for a in fl["tokens"]]
    (array([b's1'], dtype=object), [[1, 2], [3]])
    """
    b = bytes(record)
    context: dict = {}
    lists: dict = {}
    try:
        for field, wt, s, t, _ in wire.iter_fields(b, 0, len(b)):
            if wt != wire.WT_LEN:
                continue
            if field == 1:
                context.update(_decode_entries(b, wire.features_entries(b, s, t)))
            elif field == 2:
                for f2, wt2, s2, t2, _ in wire.iter_fields(b, s, t):
                    if f2 != 1 or wt2 != wire.WT_LEN:
                        continue
                    ks, ke, vs, ve = wire.map_entry(b, s2, t2)
                    try:
                        key = b[ks:ke].decode("utf-8")
                    except UnicodeDecodeError:
                        raise wire.Malformed(ks) from None
                    lists[key] = [
                        _decode_feature(b, fs, fe)
                        for f3, wt3, fs, fe, _ in wire.iter_fields(b, vs, ve)
                        if f3 == 1 and wt3 == wire.WT_LEN
                    ]
    except wire.Malformed as exc:
        raise _invalid("tf.train.SequenceExample", exc) from None
    return context, lists


__all__ = [
    "decode_example",
    "decode_sequence_example",
    "encode_example",
    "encode_feature",
    "encode_sequence_example",
]

