"""``tf.io.decode_raw``: reinterpret the bytes of string features as numbers.

>>> decode_raw(b"\\x01\\x00\\x02\\x00", np.int16).tolist()
[1, 2]
>>> decode_raw([b"\\x01\\x00", b"\\x03"], "int16", fixed_length=4).tolist()
[[1, 0], [3, 0]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tpudata.errors import DecodeError

_NAMES = {"half": "float16", "float": "float32", "double": "float64", "bfloat16": "bfloat16"}


def _dtype(out_type: Any) -> np.dtype:
    name = out_type.replace("tf.", "") if isinstance(out_type, str) else None
    if name == "bfloat16" or getattr(out_type, "__name__", None) == "bfloat16":
        from tpudata._extras import bfloat16  # noqa: PLC0415

        return bfloat16("decode_raw(out_type='bfloat16')")
    try:
        dt = np.dtype(_NAMES.get(name, name) if name is not None else out_type)
    except TypeError:
        raise TypeError(f"decode_raw: unsupported out_type {out_type!r}") from None
    if dt.kind not in "biufc" and dt.name != "bfloat16":
        raise TypeError(f"decode_raw: out_type must be a numeric or bool dtype, not {dt}")
    return dt


def decode_raw(input_bytes, out_type: Any, little_endian: bool = True, fixed_length: int | None = None) -> np.ndarray:
    """Decode raw bytes into a numeric array (``tf.io.decode_raw``).

    ``input_bytes`` is one bytes-like value (-> shape ``(n,)``) or an array/sequence of them
    (-> ``input.shape + (n,)``; all must have the same length unless ``fixed_length`` is given,
    which truncates or zero-pads each to that many bytes). Lengths must be a multiple of the
    type's size; bad lengths raise :class:`~tpudata.errors.DecodeError` naming the element.
    """
    dt = _dtype(out_type)
    order = "<" if little_endian else ">"
    src = dt.newbyteorder(order) if dt.itemsize > 1 else dt
    if fixed_length is not None:
        fixed_length = int(fixed_length)
        if fixed_length < 0 or fixed_length % dt.itemsize:
            raise DecodeError(
                f"decode_raw: fixed_length {fixed_length} must be a non-negative multiple of "
                f"{dt.itemsize}, the size of {dt}", index=None)
    scalar = isinstance(input_bytes, (bytes, bytearray, memoryview))
    if scalar:
        shape: tuple = ()
        flat = [bytes(input_bytes)]
    else:
        items = np.empty(len(input_bytes), dtype=object) if isinstance(input_bytes, (list, tuple)) \
            else np.asarray(input_bytes, dtype=object)
        if isinstance(input_bytes, (list, tuple)):
            items[:] = list(input_bytes)
        shape = items.shape
        flat = [bytes(b) if isinstance(b, (bytearray, memoryview)) else b for b in items.reshape(-1)]
    for i, b in enumerate(flat):
        if not isinstance(b, bytes):
            raise TypeError(f"decode_raw: element {i} is {type(b).__name__}, not bytes")
    if fixed_length is None:
        size = len(flat[0]) if flat else 0
        for i, b in enumerate(flat):
            if len(b) != size:
                raise DecodeError(
                    f"decode_raw: all inputs must have the same length, but element {i} has "
                    f"{len(b)} bytes != {size}; pass fixed_length= to pad or truncate", index=i)
        if size % dt.itemsize:
            raise DecodeError(
                f"decode_raw: input length {size} is not a multiple of {dt.itemsize}, the size "
                f"of {dt}", index=0)
        joined = b"".join(flat)
    else:
        size = fixed_length
        joined = b"".join(b[:size].ljust(size, b"\0") for b in flat)
    count = size // dt.itemsize
    if dt.kind == "b":
        out = np.frombuffer(joined, dtype=np.uint8) != 0
    else:
        out = np.frombuffer(joined, dtype=src).astype(dt, copy=True)
    return out.reshape(shape + (count,))


__all__ = ["decode_raw"]
