"""TFRecordWriter: byte-for-byte what ``tf.io.TFRecordWriter`` writes.

>>> import io
>>> out = io.BytesIO()
>>> with TFRecordWriter(out) as w:
...     w.write(b"hi")
>>> out.getvalue().hex()
'020000000000000078270b34686913d60856'
"""

from __future__ import annotations

import logging
import zlib
from typing import Iterable, Mapping

from tpudata import storage
from tpudata._keywords import strict_keywords
from tpudata.tfrecord import framing
from tpudata.tfrecord.compression import normalize_compression

logger = logging.getLogger(__name__)

_FLUSH_BYTES = 4 << 20
_MANY_CHUNK = 4096


def _as_buffer(record):
    if isinstance(record, str):
        return record.encode("utf-8")
    if isinstance(record, (bytes, bytearray)):
        return record
    try:
        return memoryview(record).cast("B")
    except TypeError:
        raise TypeError(f"records must be bytes-like or str, not {type(record).__name__}") from None


class TFRecordWriter:
    """Write TFRecord files to any fsspec URL (atomically) or to an open binary file object.

    ``compression`` is ``None``/``""`` (none), ``"GZIP"`` or ``"ZLIB"`` with TensorFlow's zlib
    settings (default level, window 15, memLevel 9). A URL is written atomically: the file appears
    when :meth:`close` succeeds, and an exception inside the ``with`` block leaves nothing behind.
    A file object passed in is flushed but not closed.
    """

    @strict_keywords
    def __init__(
        self,
        url_or_fileobj,
        compression: str | None = None,
        compression_level: int = zlib.Z_DEFAULT_COMPRESSION,
        storage_options: Mapping | None = None,
    ):
        comp = normalize_compression(compression) or ""
        self.compression = comp
        self.records_written = 0
        self.bytes_written = 0  # framed, before compression
        self._pending: list = []
        self._pending_bytes = 0
        self.closed = False
        if isinstance(url_or_fileobj, (str,)) or hasattr(url_or_fileobj, "__fspath__"):
            import os

            self.url = os.fspath(url_or_fileobj)
            self._sink = storage.open_atomic(self.url, **dict(storage_options or {}))
            self._owns_sink = True
        elif hasattr(url_or_fileobj, "write"):
            self.url = getattr(url_or_fileobj, "name", None)
            self._sink = url_or_fileobj
            self._owns_sink = False
        else:
            raise TypeError("TFRecordWriter needs a path/URL or a binary file object")
        self._deflate = None
        if comp:
            wbits = 31 if comp == "GZIP" else 15
            self._deflate = zlib.compressobj(compression_level, zlib.DEFLATED, wbits, 9)

    # -- writing ---------------------------------------------------------------------------------
    def _check_open(self):
        if self.closed:
            raise ValueError("write to a closed TFRecordWriter")

    def _push(self, framed: bytes) -> None:
        self._pending.append(framed)
        self._pending_bytes += len(framed)
        self.bytes_written += len(framed)
        if self._pending_bytes >= _FLUSH_BYTES:
            self._drain()

    def _drain(self) -> None:
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        if self._deflate is not None:
            data = self._deflate.compress(data)
        if data:
            self._sink.write(data)

    def write(self, record) -> None:
        """Append one record (bytes-like, or str encoded as UTF-8)."""
        self._check_open()
        self._push(framing.frame([_as_buffer(record)]))
        self.records_written += 1

    def write_many(self, records: Iterable) -> int:
        """Append many records; framing is done a few thousand at a time. Returns the count."""
        self._check_open()
        chunk: list = []
        n = 0
        for record in records:
            chunk.append(_as_buffer(record))
            if len(chunk) >= _MANY_CHUNK:
                self._push(framing.frame(chunk))
                n += len(chunk)
                self.records_written += len(chunk)
                chunk = []
        if chunk:
            self._push(framing.frame(chunk))
            n += len(chunk)
            self.records_written += len(chunk)
        return n

    def write_framed(self, data) -> None:
        """Append bytes that are already TFRecord-framed (e.g. copied from another file)."""
        self._check_open()
        self._push(bytes(data))

    def flush(self) -> None:
        """Hand everything written so far to the underlying file (as TensorFlow's Flush does)."""
        self._check_open()
        self._drain()
        flush = getattr(self._sink, "flush", None)
        if flush is not None:
            flush()

    def close(self) -> None:
        """Finish the file; a URL appears under its final name only now."""
        if self.closed:
            return
        try:
            self._drain()
            if self._deflate is not None:
                tail = self._deflate.flush(zlib.Z_FINISH)
                if tail:
                    self._sink.write(tail)
            if self._owns_sink:
                self._sink.close()
            elif hasattr(self._sink, "flush"):
                self._sink.flush()
        except BaseException:
            self.abort()
            raise
        self.closed = True

    def abort(self) -> None:
        """Stop writing and discard the file (for URLs nothing appears under the final name)."""
        if self.closed:
            return
        self.closed = True
        self._pending.clear()
        if self._owns_sink:
            self._sink.abort()

    def __enter__(self) -> "TFRecordWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            if self.url:
                logger.warning("discarding %s after %s", self.url, exc_type.__name__)
            self.abort()

    def __del__(self):
        if not getattr(self, "closed", True) and getattr(self, "_owns_sink", False):
            # never publish a file nobody closed: an unclosed writer is an interrupted writer
            try:
                self.abort()
            except Exception:  # pragma: no cover
                pass


@strict_keywords
def write_records(url_or_fileobj, records: Iterable, compression: str | None = None,
                  compression_level: int = zlib.Z_DEFAULT_COMPRESSION,
                  storage_options: Mapping | None = None) -> int:
    """Write ``records`` to a new TFRecord file; returns how many were written."""
    with TFRecordWriter(url_or_fileobj, compression, compression_level, storage_options) as w:
        return w.write_many(records)


__all__ = ["TFRecordWriter", "write_records"]
