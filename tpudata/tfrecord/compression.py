"""One decompression stream for every reader (TFRecord, text lines, fixed-length records).

:func:`open_stream` opens a file (any URL) as a readable stream of its decompressed bytes;
:class:`DecompressedStream` wraps any object with ``readinto`` (an already open file). Both give
``readinto(buffer)``, ``read(n)``, ``skip(n)``, ``pos`` (decompressed bytes delivered) and
``close()``. What a reader can rely on:

- **every intact byte comes first**: bytes that decode before the damage are delivered, then the
  next read raises (a zlib error never discards what the same compressed chunk decoded to);
- damage is a :class:`~tpudata.errors.DataLossError` naming the file: a damaged stream (bad
  header, bad deflate data, bad checksum, garbage after a GZIP member, data after the end of a
  ZLIB stream) is a :class:`~tpudata.errors.CorruptRecordError`, a stream cut before its end
  marker a :class:`~tpudata.errors.TruncatedRecordError`. ``offset`` is the decompressed offset
  of the first byte that could not be delivered (``pos`` when raised), ``detail`` what was wrong;
  neither depends on buffer sizes. Record readers report the start of the record instead
  (:func:`record_error`);
- GZIP files may hold several members (as ``cat a.gz b.gz`` makes); an empty file is an empty
  stream; ``skip(n)`` past the end raises ``ValueError`` (the same for every compression).

>>> import gzip, io
>>> s = DecompressedStream(io.BytesIO(gzip.compress(b"hello world")[:-1]), "GZIP", "x.gz")
>>> s.read(100)
b'hello world'
>>> try:
...     s.read(1)
... except DataLossError as e:
...     type(e).__name__, e.offset
('TruncatedRecordError', 11)
"""

from __future__ import annotations

import logging
import os
import zlib
from typing import Mapping

from tpudata import storage
from tpudata.errors import CorruptRecordError, DataLossError, TruncatedRecordError
from tpudata.tfrecord.framing import HEADER_SIZE, masked_crc32c

logger = logging.getLogger(__name__)

RAW_CHUNK = 1 << 20  # compressed bytes read from storage at a time
_FEED = 256 << 10  # compressed bytes given to zlib per call (bounds what a salvage redoes)
_OUT_LIMIT = 4 << 20  # decompressed bytes per zlib call (bounds memory on "zip bombs")


def normalize_compression(compression: str | None) -> str | None:
    """``None`` (detect), ``""`` (none), ``"GZIP"`` or ``"ZLIB"``; raises ValueError otherwise."""
    if compression is None:
        return None
    if not isinstance(compression, str):
        raise TypeError(f"compression must be a string or None, not {type(compression).__name__}")
    c = compression.upper()
    if c in ("", "NONE"):
        return ""
    if c in ("GZIP", "ZLIB"):
        return c
    raise ValueError(f"compression must be None, '', 'GZIP' or 'ZLIB', not {compression!r}")


def detect_compression(head: bytes) -> str:
    """Guess a TFRecord file's compression from its first bytes (at least 12 when available).

    A valid TFRecord header at byte 0 means uncompressed, then the gzip magic, then a zlib header.
    """
    if len(head) >= HEADER_SIZE:
        if masked_crc32c(head[:8]) == int.from_bytes(head[8:12], "little"):
            return ""
    if head[:2] == b"\x1f\x8b":
        return "GZIP"
    if len(head) >= 2:
        cmf, flg = head[0], head[1]
        if cmf & 0x0F == 8 and cmf >> 4 <= 7 and (cmf << 8 | flg) % 31 == 0:
            return "ZLIB"
    return ""


def _salvage(snapshot, piece) -> bytes:
    """What ``snapshot`` decodes from the longest prefix of ``piece`` that raises no zlib error."""
    lo, hi = 0, len(piece) - 1  # the whole piece fails; find the longest prefix that does not
    best = b""
    while lo <= hi:
        mid = (lo + hi + 1) // 2
        try:
            out = snapshot.copy().decompress(piece[:mid])
        except zlib.error:
            hi = mid - 1
            continue
        best, lo = out, mid + 1
        if lo > hi:
            break
    return best


class DecompressedStream:
    """The decompressed bytes of a GZIP (possibly multi-member) or ZLIB source.

    ``source`` is anything with ``readinto`` (and ``close``); it is read ``raw_chunk`` bytes at a
    time and closed with the stream.
    """

    def __init__(self, source, compression: str, url: str = "", raw_chunk: int = RAW_CHUNK):
        compression = normalize_compression(compression)
        if compression not in ("GZIP", "ZLIB"):
            raise ValueError(f"DecompressedStream needs 'GZIP' or 'ZLIB', not {compression!r}")
        self.source = source
        self.compression = compression
        self.url = url
        self.pos = 0
        self.raw_read = 0
        self._wbits = 31 if compression == "GZIP" else 15
        self._d = zlib.decompressobj(self._wbits)
        self._raw_chunk = max(int(raw_chunk), 1)
        self._in = memoryview(b"")  # compressed bytes not yet given to zlib
        self._out = memoryview(b"")  # decoded bytes not yet delivered
        self._damage: tuple[type, str] | None = None  # raised once _out is drained
        self._raw_eof = False
        self._done = False

    # -- decoding --------------------------------------------------------------------------------
    def _refill(self) -> bool:
        """Make ``_in`` non-empty from the source; False at the source's end."""
        if self._in.nbytes:
            return True
        if self._raw_eof:
            return False
        chunk = bytearray(self._raw_chunk)
        n = self.source.readinto(memoryview(chunk)) or 0
        if not n:
            self._raw_eof = True
            return False
        self.raw_read += n
        del chunk[n:]
        self._in = memoryview(chunk)
        return True

    def _produce(self) -> None:
        """Decode the next piece into ``_out``, or note the end or the damage."""
        d = self._d
        if d.eof:
            if d.unused_data:
                self._in = memoryview(d.unused_data + bytes(self._in))
            if not self._refill():
                self._done = True
                return
            if self.compression == "ZLIB":
                self._damage = (CorruptRecordError, "data after the end of the ZLIB stream")
                return
            self._d = d = zlib.decompressobj(self._wbits)  # the next gzip member
        piece = d.unconsumed_tail
        if not piece:
            if not self._refill():
                if self.raw_read == 0:
                    self._done = True  # an empty file holds nothing, as in TensorFlow
                else:
                    self._damage = (
                        TruncatedRecordError,
                        f"the {self.compression} stream ends before its end marker",
                    )
                return
            piece = self._in[:_FEED]
            self._in = self._in[_FEED:]
        snapshot = d.copy()
        try:
            self._out = memoryview(d.decompress(piece, _OUT_LIMIT))
        except zlib.error as exc:
            self._out = memoryview(_salvage(snapshot, bytes(piece)))
            self._damage = (CorruptRecordError, f"damaged {self.compression} stream: {exc}")

    def _raise_damage(self):
        cls, detail = self._damage
        exc = cls(f"{detail} (decompressed offset {self.pos})", self.url, self.pos)
        exc.detail = detail
        raise exc

    # -- reading ---------------------------------------------------------------------------------
    def readinto(self, buffer) -> int:
        """Fill ``buffer``; fewer bytes only at the end of the stream or just before damage."""
        mv = memoryview(buffer).cast("B")
        want = mv.nbytes
        total = 0
        while total < want:
            if self._out.nbytes:
                n = min(self._out.nbytes, want - total)
                mv[total : total + n] = self._out[:n]
                self._out = self._out[n:]
                total += n
                continue
            if self._done or self._damage is not None:
                break
            self._produce()
        self.pos += total
        if not total and want and self._damage is not None:
            self._raise_damage()
        return total

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all that is left for ``n < 0``); short only at the end or damage."""
        if n is None or n < 0:
            parts = []
            while True:
                part = self.read(1 << 20)
                if not part:
                    return b"".join(parts)
                parts.append(part)
        buf = bytearray(n)
        got = self.readinto(buf)
        del buf[got:]
        return bytes(buf)

    def skip(self, n: int) -> None:
        """Move ``n`` decompressed bytes on; ``ValueError`` when the stream ends first."""
        start = self.pos
        scratch = bytearray(min(max(n, 1), 1 << 20))
        while self.pos - start < n:
            view = memoryview(scratch)[: min(len(scratch), n - (self.pos - start))]
            if not self.readinto(view):
                raise ValueError(
                    f"start offset {start + n} is past the end of {self.url} "
                    f"({self.pos} bytes decompressed)"
                )

    def close(self) -> None:
        close = getattr(self.source, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> "DecompressedStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class PlainStream:
    """An uncompressed source with the same interface (``skip`` is a seek when possible)."""

    def __init__(self, source, url: str = "", size: int | None = None):
        self.source = source
        self.url = url
        self.size = size
        self.pos = 0

    def readinto(self, buffer) -> int:
        n = self.source.readinto(buffer) or 0
        self.pos += n
        return n

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            data = self.source.read()
            self.pos += len(data)
            return data
        buf = bytearray(n)
        got = 0
        with memoryview(buf) as view:
            while got < n:
                k = self.readinto(view[got:])
                if not k:
                    break
                got += k
        del buf[got:]
        return bytes(buf)

    def skip(self, n: int) -> None:
        target = self.pos + n
        if self.size is not None:
            if target > self.size:
                raise ValueError(
                    f"start offset {target} is past the end of {self.url} ({self.size} bytes)")
            self.source.seek(target)
            self.pos = target
            return
        scratch = bytearray(min(max(n, 1), 1 << 20))
        while self.pos < target:
            if not self.readinto(memoryview(scratch)[: min(len(scratch), target - self.pos)]):
                raise ValueError(
                    f"start offset {target} is past the end of {self.url} ({self.pos} bytes)")

    def close(self) -> None:
        self.source.close()

    def __enter__(self) -> "PlainStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def wrap(source, compression: str | None, url: str = "", size: int | None = None):
    """``source`` (an open binary file) as a stream of decompressed bytes.

    ``compression`` is ``""``/``"NONE"``, ``"GZIP"`` or ``"ZLIB"`` (``None`` counts as none here;
    detection needs the first bytes, see :func:`detect_compression`).
    """
    c = normalize_compression(compression) or ""
    if c:
        return DecompressedStream(source, c, url)
    return PlainStream(source, url, size)


def open_stream(
    url: str,
    compression: str | None = "",
    start: int = 0,
    buffer_size: int = storage.DEFAULT_BUFFER_SIZE,
    storage_options: Mapping | None = None,
):
    """Open ``url`` and return its (decompressed) bytes from offset ``start`` as a stream.

    ``start`` counts decompressed bytes; past the end it raises ``ValueError`` for every
    compression. The caller closes the stream (it is a context manager).

    >>> import fsspec, gzip
    >>> fsspec.filesystem("memory").pipe_file("/doc/t.gz", gzip.compress(b"a\\nb\\n"))
    >>> with open_stream("memory://doc/t.gz", "GZIP", start=2) as s:
    ...     s.read()
    b'b\\n'
    """
    so = dict(storage_options or {})
    raw = storage.open_read(url, buffer_size, True, **so)
    try:
        size = None
        if not normalize_compression(compression):
            size = getattr(raw, "size", None)
            if not isinstance(size, int):
                size = os.fstat(raw.fileno()).st_size if storage.is_local(url) else None
        stream = wrap(raw, compression, url, size)
        if start:
            stream.skip(start)
        return stream
    except BaseException:
        raw.close()
        raise


def record_error(exc: DataLossError, record_start: int, url: str | None = None) -> DataLossError:
    """A stream's damage as a record reader reports it: TensorFlow's "corrupted record at N" /
    "truncated record at N" with ``N`` the (decompressed) start of the first record not delivered.
    """
    kind = "truncated" if isinstance(exc, TruncatedRecordError) else "corrupted"
    detail = getattr(exc, "detail", None) or exc.message
    new = type(exc)(f"{kind} record at {record_start} ({detail})", url or exc.path, record_start)
    new.detail = detail
    return new


__all__ = [
    "DecompressedStream",
    "PlainStream",
    "detect_compression",
    "normalize_compression",
    "open_stream",
    "record_error",
    "wrap",
]
