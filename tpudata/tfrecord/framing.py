"""TFRecord framing: masked CRC32C and the batch-level record scanner.

A TFRecord file is a sequence of records, each framed as::

    uint64 length          (little endian)
    uint32 masked_crc32c(length bytes)
    byte   data[length]
    uint32 masked_crc32c(data)

:func:`scan` finds the records in a buffer and verifies both checksums. It is the hot path of
every reader: the compiled accelerator does it without the GIL, and :func:`scan_pure` is the
reference it is tested against.

>>> framed = frame([b"hello", b""])
>>> r = scan(framed, 0, len(framed), True, capacity=8)
>>> r.count, r.offsets.tolist(), r.lengths.tolist(), r.pos == len(framed)
(2, [12, 33], [5, 0], True)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable, Sequence

import crc32c as _crc32c_pkg
import numpy as np

from tpudata import _accel

HEADER_SIZE = 12  # length (8) + masked crc of length (4)
FOOTER_SIZE = 4  # masked crc of data
OVERHEAD = HEADER_SIZE + FOOTER_SIZE
_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF

# scan() error codes
OK = 0
BAD_HEADER_CRC = 1
BAD_DATA_CRC = 2


def crc32c(data, value: int = 0) -> int:
    """CRC32C (Castagnoli) of ``data``, continuing from a previous ``value``."""
    nat = _accel.native
    if nat is not None:
        return nat.crc32c(data, value)
    return _crc32c_pkg.crc32c(data, value)


def mask_crc(crc: int) -> int:
    """TensorFlow's checksum masking: rotate right by 15 bits and add a constant."""
    return ((((crc >> 15) | (crc << 17)) & _U32) + _MASK_DELTA) & _U32


def unmask_crc(masked: int) -> int:
    """Inverse of :func:`mask_crc`."""
    rot = (masked - _MASK_DELTA) & _U32
    return ((rot >> 17) | (rot << 15)) & _U32


def masked_crc32c(data) -> int:
    """The masked CRC32C that TFRecord stores after the length and after the data."""
    return mask_crc(crc32c(data))


def frame_pure(records: Iterable) -> bytes:
    """Reference framing of ``records`` (bytes-like objects) into TFRecord bytes."""
    parts: list = []
    pack_len = struct.Struct("<Q").pack
    pack_crc = struct.Struct("<I").pack
    crc = _crc32c_pkg.crc32c
    for rec in records:
        header = pack_len(memoryview(rec).nbytes)
        parts += (header, pack_crc(mask_crc(crc(header))), rec, pack_crc(mask_crc(crc(rec))))
    return b"".join(parts)


def frame(records: Sequence) -> bytes:
    """TFRecord framing of ``records`` (a sequence of bytes-like objects) as one bytes object."""
    nat = _accel.native
    if nat is not None:
        return nat.frame(records)
    return frame_pure(records)


@dataclass
class ScanResult:
    """What :func:`scan` found in ``buf[pos:end]``.

    ``count`` records were framed (data at ``offsets[:count]``, ``lengths[:count]``); ``pos`` is
    where scanning stopped (the start of the next record). ``err`` is :data:`OK`,
    :data:`BAD_HEADER_CRC` or :data:`BAD_DATA_CRC` with ``err_offset`` the TensorFlow-style offset
    of the problem. When the buffer ended inside a record, ``need`` is the number of bytes that
    record occupies from ``pos`` (12 while its header is incomplete); otherwise 0.
    """

    count: int
    pos: int
    err: int
    err_offset: int
    need: int
    offsets: np.ndarray
    lengths: np.ndarray


def scan_pure(buf, pos: int, end: int, verify: bool, offsets: np.ndarray, lengths: np.ndarray):
    """Reference implementation of the accelerator's ``scan`` (same arguments and result tuple)."""
    mv = memoryview(buf).cast("B")
    unpack_q = struct.Struct("<Q").unpack_from
    unpack_i = struct.Struct("<I").unpack_from
    crc = _crc32c_pkg.crc32c
    cap = len(offsets)
    count = 0
    while count < cap:
        avail = end - pos
        if avail < HEADER_SIZE:
            return count, pos, OK, -1, HEADER_SIZE
        (length,) = unpack_q(mv, pos)
        if verify and mask_crc(crc(mv[pos : pos + 8])) != unpack_i(mv, pos + 8)[0]:
            return count, pos, BAD_HEADER_CRC, pos, 0
        if avail < OVERHEAD or length > avail - OVERHEAD:
            return count, pos, OK, -1, length + OVERHEAD
        start = pos + HEADER_SIZE
        if verify and mask_crc(crc(mv[start : start + length])) != unpack_i(mv, start + length)[0]:
            return count, pos, BAD_DATA_CRC, start, 0
        offsets[count] = start
        lengths[count] = length
        count += 1
        pos = start + length + FOOTER_SIZE
    return count, pos, OK, -1, 0


def scan(buf, pos: int, end: int, verify: bool = True, capacity: int = 4096) -> ScanResult:
    """Frame the records in ``buf[pos:end]``, at most ``capacity`` of them.

    ``buf`` is any C-contiguous bytes-like object; offsets are positions in ``buf``.
    """
    offsets = np.empty(capacity, dtype=np.int64)
    lengths = np.empty(capacity, dtype=np.int64)
    nat = _accel.native
    if nat is not None:
        res = nat.scan(buf, pos, end, verify, offsets, lengths)
    else:
        res = scan_pure(buf, pos, end, verify, offsets, lengths)
    count, pos, err, err_offset, need = res
    return ScanResult(count, pos, err, err_offset, need, offsets[:count], lengths[:count])


def split_pure(buf, offsets: np.ndarray, lengths: np.ndarray) -> list:
    """Reference: the slices ``buf[o:o+l]`` as a list of bytes objects."""
    mv = memoryview(buf).cast("B")
    return [mv[o : o + n].tobytes() for o, n in zip(offsets.tolist(), lengths.tolist())]


def split(buf, offsets: np.ndarray, lengths: np.ndarray) -> list:
    """The slices ``buf[o:o+l]`` as a list of bytes objects (one C call when accelerated)."""
    nat = _accel.native
    if nat is not None:
        return nat.split(
            buf,
            np.ascontiguousarray(offsets, dtype=np.int64),
            np.ascontiguousarray(lengths, dtype=np.int64),
        )
    return split_pure(buf, offsets, lengths)


def find_frame_pure(buf, pos: int, end: int) -> int:
    """Reference: first offset >= pos holding a valid frame (see :func:`find_frame`), or -1."""
    mv = memoryview(buf).cast("B")
    crc = _crc32c_pkg.crc32c
    unpack_q = struct.Struct("<Q").unpack_from
    unpack_i = struct.Struct("<I").unpack_from
    while pos + HEADER_SIZE <= end:
        if mask_crc(crc(mv[pos : pos + 8])) == unpack_i(mv, pos + 8)[0]:
            (length,) = unpack_q(mv, pos)
            start = pos + HEADER_SIZE
            if length + FOOTER_SIZE > end - start or (
                mask_crc(crc(mv[start : start + length])) == unpack_i(mv, start + length)[0]
            ):
                return pos
        pos += 1
    return -1


def find_frame(buf, pos: int, end: int) -> int:
    """First offset at or after ``pos`` where a valid TFRecord frame starts, or -1.

    Valid means the header CRC matches and, when the record fits in ``buf[:end]``, the data CRC
    too. Used to resynchronise after a corrupt record.
    """
    nat = _accel.native
    if nat is not None:
        return nat.find_frame(buf, pos, end)
    return find_frame_pure(buf, pos, end)
