"""Whole small local files read and framed in one call, for readers that many small files feed.

A parallel ``interleave`` over hundreds of small TFRecord files spends most of its time per
file, not per byte: opening, reading and framing each file in a pool thread costs several thread
hand-offs and GIL round trips (each ~20-50 us on a VM), more than the read itself. Here a pool
task takes a group of files and :func:`read_whole` opens, sizes, reads, frames and closes them
all in one native call (``_native.read_files``) that holds the GIL only to allocate the buffers:
the thread that consumes the records makes no system call for them. A
:class:`~tpudata.tfrecord.reader.TFRecordFileReader` given the result (``use_whole``) frames no
byte again and reports damage exactly as its own reads would (same errors, same offsets).

Only files that qualify are read so: local regular files of 1 byte up to the reader's
``buffer_size`` and ``MAX_WHOLE_BYTES``, read from byte 0; a file that does not (or will not
open) comes back ``declined`` and is read the general way (which reports any error), as is one
found compressed after the read.

>>> import os, tempfile
>>> from tpudata.tfrecord import TFRecordWriter
>>> tmp = tempfile.TemporaryDirectory()
>>> path = os.path.join(tmp.name, "w.tfrecord")
>>> with TFRecordWriter(path) as w:
...     w.write(b"ab"); w.write(b"c")
>>> job = whole_file(path, 1 << 20)
>>> read_whole([job])
>>> job.declined, job.nread, job.count
(False, 35, 2)
>>> tmp.cleanup()
"""

from __future__ import annotations

import logging
import os
import stat

import numpy as np

from tpudata import _accel, storage
from tpudata.tfrecord import framing

logger = logging.getLogger(__name__)

# only files up to this size are read whole: per-file costs matter for small files; larger ones
# are better read in pipelined blocks
MAX_WHOLE_BYTES = 1 << 20
# records framed by the whole-file read itself (the reader frames any more): 1 MiB of records
# of 64 bytes or more
MAX_WHOLE_RECORDS = 16384


class WholeFile:
    """One file to read whole. After :func:`read_whole` (``done``): ``declined`` (it does not
    qualify: read it the general way), or ``nread`` bytes in ``buf`` (a buffer of the file's
    size; ``nread`` < 0: the read failed with that -errno), the first ``count`` records framed in
    ``offsets``/``lengths``, and ``framing.scan``'s ``pos``, ``err``, ``err_offset``, ``need``."""

    __slots__ = ("url", "path", "limit", "verify", "max_records", "done", "declined", "buf",
                 "offsets", "lengths", "nread", "count", "pos", "err", "err_offset", "need")

    def __init__(self, url: str, limit: int, verify: bool = True,
                 max_records: int = MAX_WHOLE_RECORDS):
        self.url = url
        self.path = storage.local_path(url)
        self.limit = int(limit)
        self.verify = bool(verify)
        self.max_records = int(max_records)
        self.done = self.declined = False
        self.buf = self.offsets = self.lengths = None
        self.nread = self.count = self.pos = self.err = self.need = 0
        self.err_offset = -1

    def fits(self) -> bool:
        """Whether the file qualifies now (one ``stat``; :func:`read_whole` checks again)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return stat.S_ISREG(st.st_mode) and 0 < st.st_size <= self.limit

    def __repr__(self) -> str:
        state = ("declined" if self.declined else f"nread={self.nread}") if self.done else "pending"
        return f"WholeFile({self.url!r}, {state})"


def whole_file(url: str, buffer_size: int, verify: bool = True,
               max_records: int = MAX_WHOLE_RECORDS) -> WholeFile | None:
    """A :class:`WholeFile` for a local ``url`` (read files up to ``buffer_size`` and
    ``MAX_WHOLE_BYTES``); None for other URLs. Touches nothing: :func:`read_whole` opens it."""
    if not storage.is_local(url):
        return None
    return WholeFile(url, min(int(buffer_size), MAX_WHOLE_BYTES), verify, max_records)


def read_whole(jobs: list[WholeFile]) -> None:
    """Open, read, frame and close every job's file: one native call per kind of job (the GIL is
    held only to allocate the buffers)."""
    nat = _accel.native
    groups: dict[tuple, list[WholeFile]] = {}
    for j in jobs:
        if not j.done:
            groups.setdefault((j.limit, j.max_records, j.verify), []).append(j)
    for (limit, max_records, verify), todo in groups.items():
        if nat is not None and hasattr(nat, "read_files"):
            results = nat.read_files([os.fsencode(j.path) for j in todo], limit, max_records,
                                     verify)
        else:
            results = [_read_file_pure(j.path, limit, max_records, verify) for j in todo]
        for j, res in zip(todo, results):
            if res is None:
                j.declined = True
            else:
                buf, j.nread, j.count, j.pos, j.err, j.err_offset, j.need, offs, lens = res
                j.buf = np.frombuffer(buf, dtype=np.uint8)
                j.offsets = np.frombuffer(offs, dtype=np.int64)
                j.lengths = np.frombuffer(lens, dtype=np.int64)
            j.done = True


def _read_file_pure(path: str, limit: int, max_records: int, verify: bool):
    """Reference for one path of ``_native.read_files`` (same result)."""
    try:
        f = open(path, "rb", buffering=0)
    except OSError:
        return None
    with f:
        try:
            st = os.fstat(f.fileno())
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode) or not 0 < st.st_size <= limit:
            return None
        buf = bytearray(st.st_size)
        cap = max(1, min(max_records, st.st_size // 16 + 1))
        offs, lens = bytearray(cap * 8), bytearray(cap * 8)
        filled = 0
        with memoryview(buf) as mv:
            while filled < len(buf):
                try:
                    n = f.readinto(mv[filled:])
                except OSError as exc:
                    filled = -(exc.errno or 5)
                    break
                if not n:
                    break
                filled += n
    if filled <= 0:
        return buf, filled, 0, 0, 0, -1, 12 if filled == 0 else 0, offs, lens
    count, pos, err, err_offset, need = framing.scan_pure(
        buf, 0, filled, verify, np.frombuffer(offs, dtype=np.int64),
        np.frombuffer(lens, dtype=np.int64))
    return buf, filled, count, pos, err, err_offset, need, offs, lens


__all__ = ["MAX_WHOLE_BYTES", "WholeFile", "read_whole", "whole_file"]
