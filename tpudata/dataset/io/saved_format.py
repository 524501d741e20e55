"""The on-disk format of ``Dataset.save`` / ``Dataset.load``: element records and metadata.

A saved dataset is a directory (any fsspec URL) holding TFRecord shards and one metadata file,
``dataset_spec.tpudata.json``, written last and atomically: it names the shards, their record
counts, the compression and the element spec, so a directory without it (an interrupted save)
is never loaded. Each element is one TFRecord record (byte-exact TensorFlow framing, optionally
GZIP or ZLIB): its leaves, in ``tpudata.dataset.core.nest.flatten`` order, one after the other.

A leaf is one of four kinds (``tensor``, ``varlen``, ``sparse``, ``ragged``), made of arrays;
an array is ``ndim`` (u8), its dimensions (``ndim`` little-endian int64), then for numbers the
little-endian values in C order, for bytes the int64 lengths and then the bytes.

This is tpudata's own format, not TensorFlow's snapshot format: TF cannot load it, and tpudata
cannot load TF's ``save`` output.

>>> spec = [Leaf("tensor", np.dtype(np.int64), (None,))]
>>> decode_element(spec, encode_element(spec, [np.arange(3)]))[0].tolist()
[0, 1, 2]
"""

from __future__ import annotations

import struct

import numpy as np

from tpudata.errors import SpecError
from tpudata.example.parse import VarLenValues
from tpudata.example.structured import RaggedValues, SparseValues

FORMAT = "tpudata.save"
VERSION = 1
METADATA = "dataset_spec.tpudata.json"
BYTES = np.dtype(object)
_I64 = np.dtype("<i8")


class Leaf:
    """One leaf of the saved element spec: ``kind``, value dtype, static shape (None: unknown).

    For ``sparse`` the shape is the dense shape; for ``varlen`` and ``ragged`` the shape has
    None for the ragged dimensions (``ragged_rank`` of them after the leading ones)."""

    __slots__ = ("kind", "dtype", "shape", "ragged_rank")

    def __init__(self, kind: str, dtype, shape: tuple, ragged_rank: int = 0):
        self.kind, self.dtype, self.shape = kind, np.dtype(dtype), tuple(shape)
        self.ragged_rank = int(ragged_rank)

    def to_json(self) -> dict:
        out = {"kind": self.kind, "dtype": dtype_name(self.dtype), "shape": list(self.shape)}
        if self.kind == "ragged":
            out["ragged_rank"] = self.ragged_rank
        return out

    @classmethod
    def from_json(cls, obj: dict) -> "Leaf":
        kind = obj["kind"]
        if kind not in ("tensor", "varlen", "sparse", "ragged"):
            raise ValueError(f"unknown leaf kind {kind!r}")
        shape = tuple(None if d is None else int(d) for d in obj["shape"])
        return cls(kind, dtype_from_name(obj["dtype"]), shape, obj.get("ragged_rank", 0))

    def __eq__(self, other) -> bool:
        return isinstance(other, Leaf) and self.to_json() == other.to_json()

    def __repr__(self) -> str:
        return f"Leaf({self.kind}, {dtype_name(self.dtype)}, {self.shape})"


def dtype_name(dtype: np.dtype) -> str:
    return "bytes" if dtype == BYTES else np.dtype(dtype).name


def dtype_from_name(name: str) -> np.dtype:
    if name == "bytes":
        return BYTES
    try:
        return np.dtype(name)
    except TypeError:
        from tpudata._extras import ml_dtypes  # bfloat16 and friends: registered on import

        module = ml_dtypes(f"a saved {name} tensor")
        found = getattr(module, name, None) if isinstance(name, str) and name.isidentifier() \
            and not name.startswith("_") else None
        # only a numpy scalar type that ml_dtypes defines: a name in a file selects, never calls
        if not (isinstance(found, type) and issubclass(found, np.generic)):
            raise TypeError(f"unknown dtype {str(name)[:40]!r} in a saved dataset's element "
                            "spec") from None
        return np.dtype(found)


def leaf_of(value, declared=None) -> Leaf:
    """The Leaf that describes ``value``; ``declared`` (a TensorSpec/VarLenSpec) gives the static
    shape where the engine declares one."""
    from tpudata.dataset.core.spec import TensorSpec, VarLenSpec

    if isinstance(value, SparseValues):
        return Leaf("sparse", _value_dtype(value.values), (None,) * len(value.dense_shape))
    if isinstance(value, RaggedValues):
        rank = value.ragged_rank
        return Leaf("ragged", _value_dtype(value.flat_values),
                    (None,) * (rank + 1) + tuple(np.shape(value.flat_values)[1:]), rank)
    if isinstance(value, VarLenValues):
        shape = declared.shape if isinstance(declared, VarLenSpec) else (None, None)
        return Leaf("varlen", _value_dtype(value.values), shape)
    dtype = BYTES if isinstance(value, (bytes, str)) else _value_dtype(np.asarray(value))
    shape = declared.shape if isinstance(declared, TensorSpec) else np.shape(value)
    if isinstance(value, (bytes, str)):
        shape = ()
    return Leaf("tensor", dtype, shape)


def _value_dtype(arr) -> np.dtype:
    arr = np.asarray(arr)
    return BYTES if arr.dtype.kind in "SUO" else arr.dtype


# -- arrays ----------------------------------------------------------------------------------------
def _put_array(parts: list, arr: np.ndarray, dtype: np.dtype) -> None:
    parts.append(struct.pack("<B", arr.ndim))
    parts.append(np.asarray(arr.shape, _I64).tobytes())
    if dtype == BYTES:
        items = [x.encode("utf-8") if isinstance(x, str) else bytes(x) for x in arr.ravel().tolist()]
        parts.append(np.asarray([len(x) for x in items], _I64).tobytes())
        parts.extend(items)
    else:
        parts.append(np.ascontiguousarray(arr, dtype=dtype.newbyteorder("<")).tobytes())


def _get_array(buf: memoryview, pos: int, dtype: np.dtype) -> tuple[np.ndarray, int]:
    ndim = buf[pos]
    pos += 1
    shape = tuple(np.frombuffer(buf, _I64, ndim, pos).tolist())
    pos += 8 * ndim
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if dtype == BYTES:
        lengths = np.frombuffer(buf, _I64, count, pos)
        pos += 8 * count
        out = np.empty(count, dtype=object)
        for k, n in enumerate(lengths.tolist()):
            out[k] = bytes(buf[pos:pos + n])
            pos += n
        return out.reshape(shape), pos
    little = dtype.newbyteorder("<")
    arr = np.frombuffer(buf, little, count, pos).astype(dtype, copy=True).reshape(shape)
    return arr, pos + count * dtype.itemsize


# -- elements --------------------------------------------------------------------------------------
def _fits(leaf: Leaf, value) -> bool:
    """The common case, checked cheaply: a numpy tensor (or bytes) of the leaf's dtype/shape."""
    if leaf.kind != "tensor":
        return False
    if isinstance(value, bytes):
        return leaf.dtype == BYTES and not leaf.shape
    if not isinstance(value, (np.ndarray, np.generic)):
        return False
    dtype, shape = value.dtype, value.shape
    if dtype != leaf.dtype and not (leaf.dtype == BYTES and dtype.kind in "SUO"):
        return False
    return len(shape) == len(leaf.shape) and all(w is None or w == d
                                                 for w, d in zip(leaf.shape, shape))


def check_leaf(leaf: Leaf, value, name: str, index: int) -> None:
    """Raise SpecError (naming the feature and element) when ``value`` does not fit ``leaf``."""
    if _fits(leaf, value):
        return
    got = leaf_of(value)
    if got.kind != leaf.kind or got.dtype != leaf.dtype:
        raise SpecError(
            f"save(): element {index} has a {got.kind} of {dtype_name(got.dtype)} at {name!r}, "
            f"but the dataset's element spec says {leaf.kind} of {dtype_name(leaf.dtype)}; every "
            "element must keep the spec (cast in a map() before save)")
    if leaf.kind == "tensor":
        shape = np.shape(value) if not isinstance(value, (bytes, str)) else ()
        if len(shape) != len(leaf.shape) or any(w is not None and w != d
                                                for w, d in zip(leaf.shape, shape)):
            raise SpecError(f"save(): element {index} has shape {tuple(shape)} at {name!r}, not "
                            f"the element spec's {leaf.shape}")


def encode_element(leaves: list, values: list) -> bytes:
    """One record: the element's leaves (already checked against ``leaves``)."""
    parts: list = []
    for leaf, value in zip(leaves, values):
        if leaf.kind == "tensor":
            arr = value if isinstance(value, np.ndarray) else np.asarray(
                value, dtype=object if leaf.dtype == BYTES else None)
            _put_array(parts, arr, leaf.dtype)
        elif leaf.kind == "varlen":
            _put_array(parts, np.asarray(value.values), leaf.dtype)
            _put_array(parts, value.row_splits, _I64)
        elif leaf.kind == "sparse":
            _put_array(parts, value.indices, _I64)
            _put_array(parts, np.asarray(value.values), leaf.dtype)
            _put_array(parts, np.asarray(value.dense_shape, np.int64), _I64)
        else:  # ragged
            _put_array(parts, np.asarray(value.flat_values), leaf.dtype)
            for splits in value.nested_row_splits:
                _put_array(parts, np.asarray(splits, np.int64), _I64)
    return b"".join(parts)


def decode_element(leaves: list, record) -> list:
    """The leaves of one record, as the engine's element values (numpy scalars for 0-d
    numbers, ``bytes`` for scalar strings)."""
    buf = memoryview(record).cast("B")
    pos, out = 0, []
    for leaf in leaves:
        if leaf.kind == "tensor":
            arr, pos = _get_array(buf, pos, leaf.dtype)
            out.append(arr if arr.ndim else arr[()])
        elif leaf.kind == "varlen":
            values, pos = _get_array(buf, pos, leaf.dtype)
            splits, pos = _get_array(buf, pos, _I64)
            out.append(VarLenValues(values, splits))
        elif leaf.kind == "sparse":
            indices, pos = _get_array(buf, pos, _I64)
            values, pos = _get_array(buf, pos, leaf.dtype)
            shape, pos = _get_array(buf, pos, _I64)
            out.append(SparseValues(indices, values, tuple(shape.tolist())))
        else:
            values, pos = _get_array(buf, pos, leaf.dtype)
            splits = []
            for _ in range(leaf.ragged_rank):
                s, pos = _get_array(buf, pos, _I64)
                splits.append(s)
            out.append(RaggedValues(values, splits))
    if pos != len(buf):
        raise ValueError(f"{len(buf) - pos} bytes left over after the element's leaves")
    return out


# -- whole blocks (the fast paths; encode_element / decode_element are the reference) ------------
def _header(shape: tuple) -> bytes:
    return struct.pack("<B", len(shape)) + np.asarray(shape, _I64).tobytes()


def _numeric_column(leaf: Leaf, col) -> bool:
    """A numpy column of the leaf's dtype whose rows fit the leaf's static shape."""
    return (leaf.kind == "tensor" and isinstance(col, np.ndarray) and leaf.dtype != BYTES
            and col.dtype == leaf.dtype and col.ndim == 1 + len(leaf.shape)
            and all(w is None or w == d for w, d in zip(leaf.shape, col.shape[1:])))


def _bytes_column(leaf: Leaf, col) -> bool:
    return (leaf.kind == "tensor" and leaf.dtype == BYTES and not leaf.shape
            and isinstance(col, np.ndarray) and col.dtype == object and col.ndim == 1)


def encode_columns(leaves: list, columns: list, n: int) -> list | None:
    """The records of ``n`` elements given as block columns, when every leaf is a numeric
    column or a column of bytes scalars (None otherwise: use :func:`encode_element`).
    Identical to ``encode_element`` element by element."""
    segments = []
    for leaf, col in zip(leaves, columns):
        if _numeric_column(leaf, col):
            head = np.frombuffer(_header(col.shape[1:]), np.uint8)
            data = np.ascontiguousarray(col, dtype=leaf.dtype.newbyteorder("<"))
            rows = np.concatenate([np.broadcast_to(head, (n, len(head))),
                                   data.reshape(n, -1).view(np.uint8)], axis=1)
            flat, width = rows.tobytes(), rows.shape[1]
            segments.append([flat[i * width:(i + 1) * width] for i in range(n)])
        elif _bytes_column(leaf, col) and all(isinstance(v, bytes) for v in col.tolist()):
            values = col.tolist()
            lengths = np.asarray([len(v) for v in values], _I64).tobytes()
            segments.append([b"\x00" + lengths[8 * i:8 * i + 8] + v for i, v in enumerate(values)])
        else:
            return None
    if len(segments) == 1:
        return segments[0]
    return [b"".join(parts) for parts in zip(*segments)]


def _gather(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """``buf[pos[i]:pos[i] + width]`` for every i, as an ``(n, width)`` uint8 matrix."""
    return buf[pos[:, None] + np.arange(width, dtype=np.int64)]


def decode_columns(leaves: list, records: list) -> list | None:
    """The block columns of ``records`` when every leaf is a tensor whose rows share one shape
    (numbers of any shape, bytes scalars); None otherwise (use :func:`decode_element`).
    Identical to ``decode_element`` record by record, with numpy over all records at once."""
    n = len(records)
    if not n or any(leaf.kind != "tensor" for leaf in leaves):
        return None
    joined = b"".join(records)
    buf = np.frombuffer(joined, np.uint8)
    lengths = np.fromiter(map(len, records), np.int64, n)
    ends = np.cumsum(lengths)
    pos = ends - lengths
    columns = []
    for leaf in leaves:
        ndim = len(leaf.shape)
        if (pos + 1 + 8 * ndim > ends).any() or (buf[pos] != ndim).any():
            return None
        pos = pos + 1
        dims = _gather(buf, pos, 8 * ndim).view(_I64).reshape(n, ndim)
        if ndim and (dims != dims[0]).any():
            return None  # rows of different shapes: element by element
        shape = tuple(int(d) for d in dims[0])
        pos = pos + 8 * ndim
        if leaf.dtype == BYTES:
            if ndim or (pos + 8 > ends).any():
                return None
            sizes = _gather(buf, pos, 8).view(_I64).ravel()
            pos = pos + 8
            if (sizes < 0).any() or (pos + sizes > ends).any():
                return None
            col = np.empty(n, dtype=object)
            col[:] = [joined[p:p + k] for p, k in zip(pos.tolist(), sizes.tolist())]
            pos = pos + sizes
        else:
            nbytes = int(np.prod(shape, dtype=np.int64)) * leaf.dtype.itemsize
            if (pos + nbytes > ends).any():
                return None
            raw = _gather(buf, pos, nbytes)
            col = raw.view(leaf.dtype.newbyteorder("<")).reshape((n,) + shape)
            col = col.astype(leaf.dtype, copy=False)
            pos = pos + nbytes
        columns.append(col)
    if (pos != ends).any():
        return None
    return columns


__all__ = ["FORMAT", "Leaf", "METADATA", "VERSION", "check_leaf", "decode_columns", "decode_element",
           "dtype_from_name", "dtype_name", "encode_columns", "encode_element", "leaf_of"]
