"""Streaming TFRecord reader: big buffered reads, batch-level framing, CRCs checked.

:class:`TFRecordFileReader` reads one file (any fsspec URL) in ``buffer_size`` chunks (8 MiB by
default), frames every record in a chunk with one :func:`framing.scan` call and yields
:class:`RecordBatch` views into the chunk. It never holds more than about two chunks (or one
record, when a record is bigger than a chunk). :func:`read_records` is the per-record iterator on
top of it.

Compression is given (``"GZIP"``, ``"ZLIB"``, ``""``/``"NONE"``) or detected (``None``): a valid
TFRecord header at byte 0 means uncompressed, then the gzip magic, then a zlib header.

>>> from tpudata.tfrecord import TFRecordWriter
>>> with TFRecordWriter("memory://doc/r.tfrecord") as w:
...     _ = w.write_many([b"a", b"bb"])
>>> list(read_records("memory://doc/r.tfrecord"))
[b'a', b'bb']
"""

from __future__ import annotations

import logging
import mmap
import os
import time
from typing import Iterable, Iterator, Mapping

import numpy as np

from tpudata import _accel, _gcs, _outpool, storage
from tpudata._objects import fill
from tpudata._keywords import strict_keywords
from tpudata.errors import CorruptRecordError, DataLossError, StorageError, TruncatedRecordError
from tpudata.tfrecord import framing
from tpudata.tfrecord.batch import RecordBatch
from tpudata.tfrecord.compression import (  # noqa: F401 - normalize/detect re-exported
    DecompressedStream,
    detect_compression,
    normalize_compression,
    record_error,
)

logger = logging.getLogger(__name__)

DEFAULT_BUFFER_SIZE = storage.DEFAULT_BUFFER_SIZE
MAX_BATCH_RECORDS = 65536
MMAP_WINDOW = 8 << 20
_NOT_TFRECORD_HINT = " (Is this even a TFRecord file?)"
_ON_ERROR = ("raise", "skip")


def _status(exc) -> int | None:
    """HTTP status of an aiohttp / gcsfs error, if it has one."""
    for attr in ("status", "code"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether a storage error is worth retrying: connection problems, timeouts, HTTP 408/429/5xx.

    A FileNotFoundError counts only when it wraps such an error (fsspec's HTTP filesystem reports
    a 503 while opening a file as FileNotFoundError).
    """
    if isinstance(exc, (DataLossError, PermissionError)) or _gcs.is_denied(exc):
        return False
    if isinstance(exc, FileNotFoundError):
        cause = exc.__cause__ or exc.__context__
        return cause is not None and cause is not exc and is_transient(cause)
    if isinstance(exc, StorageError):  # tpudata's own verdict (unreachable, no bucket): final
        return exc.__cause__ is not None and is_transient(exc.__cause__)
    status = _status(exc)
    if status is not None and status >= 400:
        return status in (408, 429) or status >= 500
    if isinstance(exc, (OSError, TimeoutError)):
        return True
    try:
        import aiohttp

        if isinstance(exc, aiohttp.ClientError):
            return True
    except ImportError:  # pragma: no cover
        pass
    try:
        from gcsfs.retry import HttpError

        return isinstance(exc, HttpError) and status is None
    except ImportError:  # pragma: no cover
        return False


def _buffer(size: int) -> np.ndarray:
    """A read buffer of ``size`` bytes in recycled memory (no fresh pages per block): sizes
    are rounded up to whole MiB so files of similar sizes share mappings."""
    return _outpool.empty((-(-size // (1 << 20)) << 20,), np.uint8)[:size]


class _RawSource:
    """Bytes of one file from a position on. Remote reads that fail (connection cut, 5xx, ...)
    are retried by re-opening the file at the exact byte position, with backoff."""

    def __init__(self, url, buffer_size, start, retries, storage_options):
        self.url = url
        self.buffer_size = buffer_size
        self.pos = start
        self.retries = 0 if storage.is_local(url) else retries
        self.storage_options = storage_options
        self.f = None
        self._retrying(self._open, "open")
        size = getattr(self.f, "size", None)
        if size is None and storage.is_local(url):
            size = os.fstat(self.f.fileno()).st_size
        self.size = size if isinstance(size, int) else None

    def _open(self):
        f = storage.open_read(self.url, self.buffer_size, True, **self.storage_options)
        try:
            if self.pos:
                f.seek(self.pos)
        except BaseException:
            f.close()
            raise
        self.f = f

    def _retrying(self, fn, what: str):
        attempt = 0
        while True:
            try:
                if self.f is None and what != "open":
                    self._open()
                return fn()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                attempt += 1
                if attempt > self.retries:
                    raise StorageError(
                        f"{what} of {self.url} at byte {self.pos} failed after {attempt} "
                        f"attempt(s): {exc}") from exc
                logger.warning("retrying %s of %s at byte %d (attempt %d of %d): %s", what,
                               self.url, self.pos, attempt, self.retries, exc)
                self._drop()
                time.sleep(min(0.02 * 2**attempt, 2.0))

    def _drop(self):
        if self.f is not None:
            try:
                self.f.close()
            except Exception:  # pragma: no cover - the handle is broken anyway
                pass
            self.f = None

    def _readinto_once(self, mv) -> int:
        n = self.f.readinto(mv) or 0
        self.pos += n
        return n

    def readinto(self, mv) -> int:
        return self._retrying(lambda: self._readinto_once(mv), "read")

    def close(self):
        self._drop()


class _PeekedSource:
    """A source whose first bytes were already read (for compression detection)."""

    def __init__(self, raw, head: bytes):
        self.raw = raw
        self.head = memoryview(head)
        self.pos = raw.pos - len(head)
        self.size = raw.size

    def readinto(self, mv) -> int:
        if self.head.nbytes:
            n = min(self.head.nbytes, len(mv))
            mv[:n] = self.head[:n]
            self.head = self.head[n:]
            self.pos += n
            return n
        n = self.raw.readinto(mv)
        self.pos += n
        return n

    def close(self):
        self.raw.close()


class TFRecordFileReader:
    """Reads the records of one TFRecord file as :class:`RecordBatch` objects.

    ``verify`` checks both masked CRC32C values of every record. ``on_error="skip"`` stops at the
    first corrupt or truncated record with a logged warning naming file and offset (tf.data's
    ``ignore_errors``) instead of raising. ``start_offset`` resumes at a record boundary
    (a previous :attr:`offset`).

    Files are read with ``readinto`` in ``buffer_size`` blocks; compressed files (given or
    detected) are decoded by :class:`~tpudata.tfrecord.compression.DecompressedStream`, and every
    record that decodes intact before damage is delivered first. ``use_mmap=True`` memory-maps
    local uncompressed files in windows of ``max(buffer_size, 8 MiB)`` instead (batches are views
    of the page cache: no read copy) - at a risk: a mapped file that another process truncates
    while it is read kills this process with SIGBUS, which Python cannot catch. Without it, a
    file that shrinks ends in a :class:`~tpudata.errors.TruncatedRecordError` naming it.
    ``storage_options`` go to fsspec (e.g. ``{"token": "anon"}``); a misspelt keyword raises
    ``TypeError`` naming the closest valid one.

    >>> with TFRecordFileReader("memory://doc/r.tfrecord") as r:
    ...     [len(b) for b in r], r.offset
    ([2], 35)
    """

    @strict_keywords
    def __init__(
        self,
        url: str,
        compression: str | None = None,
        verify: bool = True,
        buffer_size: int = DEFAULT_BUFFER_SIZE,
        on_error: str = "raise",
        start_offset: int = 0,
        max_batch_records: int | None = None,
        retries: int = 10,
        use_mmap: bool = False,
        storage_options: Mapping | None = None,
    ):
        if on_error not in _ON_ERROR:
            raise ValueError(f"on_error must be one of {_ON_ERROR}, not {on_error!r}")
        if buffer_size < 64:
            raise ValueError(f"buffer_size must be at least 64 bytes, not {buffer_size}")
        if start_offset < 0:
            raise ValueError(f"start_offset must be >= 0, not {start_offset}")
        _accel.tune_allocator_if_requested()
        self.url = url
        self.compression = normalize_compression(compression)
        self.verify = verify
        self.buffer_size = int(buffer_size)
        self.on_error = on_error
        self.offset = int(start_offset)  # next record's stream offset
        self.max_batch_records = max(1, int(max_batch_records or MAX_BATCH_RECORDS))
        self.retries = retries
        self.use_mmap = use_mmap
        self.storage_options = dict(storage_options or {})
        self._src = None
        self._whole = None  # a WholeFile already read and framed (use_whole)
        self.records_read = 0

    # -- opening ---------------------------------------------------------------------------------
    def _open(self):
        raw = _RawSource(
            self.url, self.buffer_size, 0 if self.compression != "" else self.offset,
            self.retries, self.storage_options,
        )
        compression = self.compression
        src = raw
        if compression is None:
            # detect from the first bytes read anyway: a header's worth where reading on costs
            # no round trip (a local file, a gs:// object read ahead), else a whole buffer
            small = storage.is_local(self.url) or getattr(raw.f, "sequential", False)
            head = bytearray(framing.HEADER_SIZE if small else self.buffer_size)
            head = bytes(head[:fill(raw.readinto, head)])
            compression = detect_compression(head)
            src = _PeekedSource(raw, head)
            self.compression = compression
        if compression:
            src = DecompressedStream(src, compression, self.url)
            self._src = src
            if self.offset:
                src.skip(self.offset)  # ValueError past the end, as on every path
        else:
            if self.offset and src is not raw:
                # detection read from byte 0 of an uncompressed file: reopen at the resume point
                raw.close()
                src = raw = _RawSource(
                    self.url, self.buffer_size, self.offset, self.retries, self.storage_options)
            self._src = src
            if raw.size is not None and self.offset > raw.size:
                raise ValueError(self._past_end(raw.size))
        self._src = src
        return src

    # -- errors ----------------------------------------------------------------------------------
    def _past_end(self, size: int) -> str:
        return f"start_offset {self.offset} is past the end of {self.url} ({size} bytes)"

    def _fail(self, cls, kind: str, offset: int, partial_header: bool = False, note: str = ""):
        # TensorFlow adds the hint to "corrupted record at 0"; a partial header at 0 (which
        # TensorFlow silently takes for the end of the file) gets it too.
        hint = _NOT_TFRECORD_HINT if offset == 0 and (kind == "corrupted" or partial_header) else ""
        message = f"{kind} record at {offset}{hint}{note}"
        if self.on_error == "skip":
            logger.warning("skipping the rest of %s: %s", self.url, message)
            return
        raise cls(message, self.url, offset)

    # -- reading ---------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[RecordBatch]:
        return self.batches()

    def _mmap_path(self) -> str | None:
        """The local path to memory-map, when this file takes the mmap path."""
        if not (self.use_mmap and storage.is_local(self.url)) or self.compression not in (None, ""):
            return None
        path = storage.local_path(self.url)
        if self.compression is None:
            with open(path, "rb") as f:
                self.compression = detect_compression(f.read(framing.HEADER_SIZE))
            if self.compression:
                return None
        return path

    def use_whole(self, job) -> None:
        """Take the bytes and framing of a :class:`~tpudata.tfrecord.whole.WholeFile` read
        already (the whole file from byte 0) instead of reading the file again (a declined
        one, or one whose read failed, is read the general way)."""
        if self._src is not None or self.offset or self.use_mmap or self.compression not in (None, ""):
            raise ValueError("use_whole() needs a reader that has not read yet, from byte 0, "
                             "of a file not declared compressed, without use_mmap")
        self._whole = job

    def _whole_bytes(self):
        """``(buf, nread, first scan)`` of a :meth:`use_whole` file that holds uncompressed
        records, or None (compressed after all, or its read failed: read it the general way)."""
        job, self._whole = self._whole, None
        if job is None or job.declined or job.nread <= 0:
            return None
        if self.compression is None:
            compression = detect_compression(bytes(job.buf[: min(job.nread, framing.HEADER_SIZE)]))
            if compression:
                return None
            self.compression = ""
        first = framing.ScanResult(job.count, job.pos, job.err, job.err_offset, job.need,
                                   job.offsets[: job.count], job.lengths[: job.count])
        buf, job.buf = job.buf, None  # the batches hold it now, and no longer than they live
        return buf, job.nread, first

    def batches(self) -> Iterator[RecordBatch]:
        """Yield the file's records as batches; raises (or skips) at the first bad record."""
        path = self._mmap_path() if self._src is None else None
        try:
            if path is not None:
                yield from self._mmap_batches(path)
                return
            whole = self._whole_bytes() if self._whole is not None else None
            if whole is not None:
                yield from self._batches(None, *whole)
                return
            src = self._src or self._open()
            yield from self._batches(src)
        except DataLossError as exc:
            if self.on_error != "skip":
                raise
            logger.warning("skipping the rest of %s: %s", self.url, exc.message)
        finally:
            self.close()

    def _batches(self, src, buf: np.ndarray | None = None, filled: int = 0,
                 first: framing.ScanResult | None = None) -> Iterator[RecordBatch]:
        """Frame ``src``'s bytes; or, with ``buf``, a whole file read already (``filled``
        bytes from byte 0 of a file of ``len(buf)`` bytes, framed as far as ``first`` says)."""
        bufsize = self.buffer_size
        if buf is not None:
            known_size, eof = len(buf), True
        else:
            known_size, eof = (src.size if not self.compression else None), False
            if known_size is not None:  # a small file gets a buffer of its size, not buffer_size
                bufsize = max(1, min(bufsize, known_size - self.offset))
            buf = _buffer(bufsize)
        base = self.offset
        source_error: DataLossError | None = None
        while True:
            mv = memoryview(buf)
            while filled < len(buf) and not eof:
                try:
                    n = src.readinto(mv[filled:])
                except DataLossError as exc:  # damaged compressed stream: frame what came before
                    source_error, n = exc, 0
                if n:
                    filled += n
                else:
                    eof = True
            pos, need, bad = yield from self._scan_window(buf, 0, filled, base, first)
            first = None
            if bad is not None:
                return self._fail(CorruptRecordError, "corrupted", bad)
            if source_error is not None:  # TensorFlow's offset: the first record not delivered
                raise record_error(source_error, base + pos, self.url)
            if eof and pos == filled and known_size is not None and base + pos < known_size:
                return self._fail(TruncatedRecordError, "truncated", base + pos, note=(
                    f" (the file shrank from {known_size} bytes while it was read)"))
            if pos == filled and (eof or (known_size is not None and base + pos >= known_size)):
                return  # clean end of file
            beyond = known_size is not None and base + pos + need > known_size
            if eof or beyond:
                if eof and pos == filled:
                    return
                return self._fail(
                    TruncatedRecordError, "truncated", base + pos, need == framing.HEADER_SIZE
                )
            # carry the incomplete record to a fresh buffer (earlier batches keep the old one)
            tail = filled - pos
            size = max(bufsize, tail + 1)
            if need > size:
                size = need if known_size is not None else max(size, min(need, 2 * len(buf)))
            new = _buffer(size)
            new[:tail] = buf[pos:filled]
            buf, filled, base = new, tail, base + pos

    def _scan_window(self, buf, pos: int, end: int, base: int,
                     first: framing.ScanResult | None = None):
        """Frame ``buf[pos:end]``: yields batches, then returns ``(pos, need, error)``.
        ``first``: the framing of its start, done already (a whole-file read)."""
        while True:
            if first is not None:
                res, first = first, None
                full = res.need == 0  # (with no error: it stopped at its capacity)
            else:
                cap = min(self.max_batch_records, (end - pos) // framing.OVERHEAD + 1)
                res = framing.scan(buf, pos, end, self.verify, cap)
                full = res.need == 0 and res.count == cap
            if res.count:
                self.offset = base + res.pos
                self.records_read += res.count
                yield RecordBatch(buf, res.offsets, res.lengths, self.url, base)
            pos = res.pos
            if res.err != framing.OK:
                return pos, 0, base + res.err_offset
            if full and pos < end:
                continue  # capacity reached: frame the rest
            return pos, res.need, None

    def _mmap_batches(self, path: str) -> Iterator[RecordBatch]:
        gran = mmap.ALLOCATIONGRANULARITY
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            pos = self.offset
            need = 0
            while pos < size:
                off = pos - pos % gran
                length = min(max(self.buffer_size, MMAP_WINDOW, pos - off + need), size - off)
                mm = mmap.mmap(fd, length, access=mmap.ACCESS_READ, offset=off)
                rel, need, bad = yield from self._scan_window(mm, pos - off, length, off)
                if bad is not None:
                    return self._fail(CorruptRecordError, "corrupted", bad)
                pos = off + rel
                if pos < size and pos + need > size:
                    return self._fail(
                        TruncatedRecordError, "truncated", pos, need == framing.HEADER_SIZE
                    )
                del mm  # batches still using the window keep it alive
            if pos > size:
                raise ValueError(self._past_end(size))
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._src is not None:
            self._src.close()
            self._src = None

    def __enter__(self) -> "TFRecordFileReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@strict_keywords
def read_record_batches(
    urls: str | Iterable[str],
    compression: str | None = None,
    verify: bool = True,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
    on_error: str = "raise",
    use_mmap: bool = False,
    storage_options: Mapping | None = None,
) -> Iterator[RecordBatch]:
    """Batches of records from one or more files (paths, URLs or globs), in order.

    Arguments as for :class:`TFRecordFileReader`; a misspelt keyword raises ``TypeError``.
    """
    so = dict(storage_options or {})
    normalize_compression(compression)  # bad arguments raise at the call, not at the first next()
    if on_error not in _ON_ERROR:
        raise ValueError(f"on_error must be one of {_ON_ERROR}, not {on_error!r}")
    return _batches_of(urls, compression, verify, buffer_size, on_error, use_mmap, so)


def _batches_of(urls, compression, verify, buffer_size, on_error, use_mmap, so):
    for url in storage.expand(urls, **so):
        reader = TFRecordFileReader(url, compression, verify, buffer_size, on_error,
                                    use_mmap=use_mmap, storage_options=so)
        yield from reader.batches()


@strict_keywords
def read_records(
    url: str | Iterable[str],
    compression: str | None = None,
    verify: bool = True,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
    on_error: str = "raise",
    use_mmap: bool = False,
    storage_options: Mapping | None = None,
) -> Iterator[bytes]:
    """Iterate over the records (bytes) of TFRecord file(s), checking CRCs unless ``verify=False``.

    Errors are TensorFlow's: :class:`~tpudata.errors.CorruptRecordError` ("corrupted record at N")
    and :class:`~tpudata.errors.TruncatedRecordError` ("truncated record at N"), both carrying
    ``path`` and ``offset`` (for compressed files: the record's start in the decompressed
    stream); every record before the bad one is delivered first. ``use_mmap=True`` memory-maps
    local uncompressed files (faster, but a file truncated while it is read kills the process
    with SIGBUS). ``storage_options`` go to fsspec.
    """
    for batch in read_record_batches(url, compression, verify, buffer_size, on_error, use_mmap,
                                     storage_options):
        yield from batch.to_list()
