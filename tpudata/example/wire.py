"""Protocol buffer wire format for tf.train messages, in pure Python.

``locate_pure`` and ``decode_pure`` are the reference twins of the accelerator's ``locate`` and
``decode`` (same arguments, same results, same error codes); the test suite compares them on
random and malformed inputs. The message layout they walk::

    Example  { Features features = 1; }
    Features { map<string, Feature> feature = 1; }     // entries: key = 1, value = 2
    Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
                            Int64List int64_list = 3; } }
    BytesList{ repeated bytes value = 1; }  FloatList { repeated float value = 1 [packed]; }
    Int64List{ repeated int64 value = 1 [packed]; }
"""

from __future__ import annotations

import struct

import numpy as np

from tpudata.example.spec import KIND_BYTES, KIND_FLOAT, KIND_INT64, KIND_NONE

WT_VARINT, WT_I64, WT_LEN, WT_I32 = 0, 1, 2, 5
E_OK, E_KIND, E_COUNT, E_MALFORMED, E_MULTI = 0, 1, 2, 3, 4
_U64 = (1 << 64) - 1


class Malformed(Exception):
    """Malformed wire data at byte ``pos`` of the buffer being walked."""

    def __init__(self, pos: int):
        super().__init__(pos)
        self.pos = pos


class MultipleLists(Malformed):
    """A Feature that sets more than one of bytes_list / float_list / int64_list."""


# -- reading -------------------------------------------------------------------------------------
def read_varint(b, p: int, e: int) -> tuple[int, int]:
    """``(value, new_pos)``; raises :class:`Malformed` at ``p`` when truncated or too long."""
    v = 0
    shift = 0
    q = p
    while shift < 64 and q < e:
        c = b[q]
        q += 1
        if shift == 63 and c > 1:
            raise Malformed(p)
        v |= (c & 0x7F) << shift
        if not c & 0x80:
            return v, q
        shift += 7
    raise Malformed(p)


def read_field(b, p: int, e: int) -> tuple[int, int, int, int]:
    """``(field, wire_type, length, pos)`` of the field at ``p`` (length only for WT_LEN)."""
    at = p
    try:
        tag, p = read_varint(b, p, e)
    except Malformed:
        raise Malformed(at) from None
    field, wt = tag >> 3, tag & 7
    if field == 0 or field > 0x1FFFFFFF:
        raise Malformed(at)
    length = 0
    if wt == WT_LEN:
        try:
            length, p = read_varint(b, p, e)
        except Malformed:
            raise Malformed(at) from None
        if length > e - p:
            raise Malformed(at)
    return field, wt, length, p


def skip_payload(b, p: int, e: int, wt: int, length: int, at: int) -> int:
    """Position after the payload of a field whose tag started at ``at``."""
    if wt == WT_VARINT:
        try:
            return read_varint(b, p, e)[1]
        except Malformed:
            raise Malformed(at) from None
    if wt == WT_I64:
        if e - p < 8:
            raise Malformed(at)
        return p + 8
    if wt == WT_LEN:
        return p + length
    if wt == WT_I32:
        if e - p < 4:
            raise Malformed(at)
        return p + 4
    raise Malformed(at)  # groups are not used by tf.train messages


def iter_fields(b, p: int, e: int):
    """Yield ``(field, wire_type, payload_start, payload_end, tag_start)`` for each field."""
    while p < e:
        at = p
        field, wt, length, p = read_field(b, p, e)
        end = skip_payload(b, p, e, wt, length, at)
        yield field, wt, p, end, at
        p = end


def map_entry(b, p: int, e: int) -> tuple[int, int, int, int]:
    """``(key_start, key_end, value_start, value_end)`` of a map entry (last field wins)."""
    ks = ke = e
    vs = ve = e
    for field, wt, s, t, _ in iter_fields(b, p, e):
        if field == 1 and wt == WT_LEN:
            ks, ke = s, t
        elif field == 2 and wt == WT_LEN:
            vs, ve = s, t
    return ks, ke, vs, ve


def features_entries(b, p: int, e: int):
    """Yield ``(key_start, key_end, value_start, value_end)`` for each entry of a Features."""
    for field, wt, s, t, _ in iter_fields(b, p, e):
        if field == 1 and wt == WT_LEN:
            yield map_entry(b, s, t)


def example_entries(b, p: int, e: int):
    """Yield the Features map entries of an Example (all ``features`` fields, in order)."""
    for field, wt, s, t, _ in iter_fields(b, p, e):
        if field == 1 and wt == WT_LEN:
            yield from features_entries(b, s, t)


def feature_list(b, p: int, e: int) -> tuple[int, int, int]:
    """``(kind, list_start, list_end)`` of a Feature; kind 0 when no list is set."""
    kind, ls, le = KIND_NONE, 0, 0
    for field, wt, s, t, at in iter_fields(b, p, e):
        if wt == WT_LEN and 1 <= field <= 3:
            if kind != KIND_NONE:
                raise MultipleLists(at)
            kind, ls, le = field, s, t
    return kind, ls, le


def list_values(b, p: int, e: int, kind: int) -> list:
    """Values of a list message: float32 bit patterns (uint32, so NaN payloads survive), ints, or
    (offset, length) pairs for bytes."""
    out: list = []
    while p < e:
        at = p
        field, wt, length, p = read_field(b, p, e)
        if field != 1:
            p = skip_payload(b, p, e, wt, length, at)
            continue
        if kind == KIND_BYTES and wt == WT_LEN:
            out.append((p, length))
            p += length
        elif kind == KIND_FLOAT and wt == WT_LEN:
            if length % 4:
                raise Malformed(at)
            out.extend(np.frombuffer(b, "<u4", length // 4, p).tolist())
            p += length
        elif kind == KIND_FLOAT and wt == WT_I32:
            if e - p < 4:
                raise Malformed(at)
            out.append(struct.unpack_from("<I", b, p)[0])
            p += 4
        elif kind == KIND_INT64 and wt == WT_LEN:
            q, qe = p, p + length
            while q < qe:
                v, q = read_varint(b, q, qe)
                out.append(v - (1 << 64) if v >> 63 else v)
            p = qe
        elif kind == KIND_INT64 and wt == WT_VARINT:
            v, p = read_varint(b, p, e)
            out.append(v - (1 << 64) if v >> 63 else v)
        else:
            raise Malformed(at)
    return out


# -- the accelerator's twins ---------------------------------------------------------------------
def _as_bytes(buf):
    return buf if isinstance(buf, bytes) else memoryview(buf).cast("B").tobytes()


def _buffers(buf, bidx, n: int) -> tuple[list, list]:
    """The records' buffers as bytes, and which one holds each record (see the accelerator)."""
    if isinstance(buf, tuple) != (bidx is not None):
        raise TypeError("a tuple of buffers needs bidx, one buffer takes none")
    if bidx is None:
        return [_as_bytes(buf)], [0] * n
    which = np.asarray(bidx).tolist()
    if len(which) != n or any(not 0 <= k < len(buf) for k in which):
        raise ValueError("bidx must name a given buffer for each record")
    return [_as_bytes(b) for b in buf], which


def locate_pure(buf, offsets, lengths, keys: tuple, locs: np.ndarray,
                bidx=None) -> tuple[int, int]:
    """Fill ``locs`` (n * nkeys * 2 int64) like the accelerator; returns (bad_record, bad_pos).
    ``buf`` is one buffer, or a tuple of them with ``bidx`` naming each record's."""
    bufs, which = _buffers(buf, bidx, len(offsets))
    nkeys = len(keys)
    table = {k: i for i, k in enumerate(keys)}
    rows = locs.reshape(len(offsets), nkeys, 2)
    rows[:, :, 0] = -1
    rows[:, :, 1] = 0
    for r, (o, n) in enumerate(zip(np.asarray(offsets).tolist(), np.asarray(lengths).tolist())):
        b = bufs[which[r]]
        try:
            for ks, ke, vs, ve in example_entries(b, o, o + n):
                k = table.get(b[ks:ke])
                if k is not None:
                    rows[r, k, 0] = vs
                    rows[r, k, 1] = ve - vs
        except Malformed as exc:
            return r, exc.pos - o
    return -1, -1


def decode_pure(buf, locs, nkeys, fidx, kind, mode, n, out, aux, bidx=None):
    """Twin of the accelerator's ``decode``: returns (err, record, got_kind, got_count, bad_off)."""
    rows = np.asarray(locs).reshape(-1, nkeys, 2)
    count = rows.shape[0]
    bufs, which = _buffers(buf, bidx, count)
    pos = 0
    for r in range(count):
        b = bufs[which[r]]
        off, length = int(rows[r, fidx, 0]), int(rows[r, fidx, 1])
        k = KIND_NONE
        try:
            if off >= 0:
                k, ls, le = feature_list(b, off, off + length)
        except MultipleLists as exc:
            return E_MULTI, r, 0, 0, exc.pos
        except Malformed as exc:
            return E_MALFORMED, r, 0, 0, exc.pos
        if k == KIND_NONE:
            if mode == 0:
                aux[r] = 0
            elif mode == 1:
                aux[r] = 0
            continue
        if k != kind:
            return E_KIND, r, k, 0, -1
        try:
            values = list_values(b, ls, le, kind)
        except Malformed as exc:
            return E_MALFORMED, r, 0, 0, exc.pos
        c = len(values)
        if mode == 0:
            if c != n:
                return E_COUNT, r, 0, c, -1
            _store(out, r * n, values, kind)
            aux[r] = 1
        elif mode == 1:
            aux[r] = c
        else:
            if c != aux[r]:
                return E_COUNT, r, 0, c, -1
            _store(out, pos, values, kind)
            pos += c
    return E_OK, -1, 0, 0, -1


def _store(out, start: int, values: list, kind: int) -> None:
    if not values:
        return
    if kind == KIND_BYTES:
        out[2 * start : 2 * (start + len(values))] = np.asarray(values, dtype=np.int64).ravel()
    elif kind == KIND_FLOAT:
        out.view(np.uint32)[start : start + len(values)] = values
    else:
        out[start : start + len(values)] = values


# -- writing -------------------------------------------------------------------------------------
def encode_varint(v: int) -> bytes:
    """Varint of a uint64 (negative int64 values as their two's complement)."""
    v &= _U64
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def encode_varints(values: np.ndarray) -> bytes:
    """Concatenated varints of an int64 array (vectorised)."""
    u = np.asarray(values, dtype=np.int64).astype(np.uint64).ravel()
    if u.size == 0:
        return b""
    if u.size < 8:
        return b"".join(encode_varint(int(x)) for x in u.tolist())
    nbytes = np.ones(u.size, dtype=np.int64)
    for i in range(1, 10):
        nbytes += u >= np.uint64(1 << (7 * i))
    groups = np.empty((u.size, 10), dtype=np.uint8)
    for i in range(10):
        groups[:, i] = ((u >> np.uint64(7 * i)) & np.uint64(0x7F)).astype(np.uint8)
    cont = np.arange(10)[None, :] < (nbytes[:, None] - 1)
    groups |= (cont * 0x80).astype(np.uint8)
    keep = np.arange(10)[None, :] < nbytes[:, None]
    return groups[keep].tobytes()


def tag(field: int, wt: int) -> bytes:
    return encode_varint(field << 3 | wt)


def len_field(field: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return tag(field, WT_LEN) + encode_varint(len(payload)) + payload
