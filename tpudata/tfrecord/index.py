"""Record index: ``(offset, length)`` of every record, in DALI's ``tfrecord2idx`` text format.

Each line is ``"<offset> <length>"`` where ``offset`` is where a record's frame starts and
``length`` the size of the whole frame (12 + data + 4) - the format DALI's ``tfrecord2idx`` and
the ``tfrecord`` PyPI package write and read. With an index, record ``i`` is read with one ranged
read, without scanning the file.

An index is only used once it is checked against its file (once per file, never per record):
its frames must tile the file exactly - start at 0, each where the previous one ends, the last
ending at the file's size - and the file must not have been modified after the index was written
(local files: modification time; ``gs://``: object generation). A stale, cut or edited index
raises :class:`~tpudata.errors.StaleIndexError` naming both files, or, when the caller asks
(``rebuild_stale_index=True``), is rebuilt by scanning the file, with a warning.

>>> from tpudata.tfrecord import write_records
>>> _ = write_records("memory://doc/i.tfrecord", [b"x", b"yz"])
>>> idx = build_index("memory://doc/i.tfrecord")
>>> idx.tolist(), read_record_at("memory://doc/i.tfrecord", 1, idx)
([[0, 17], [17, 18]], b'yz')
"""

from __future__ import annotations

import io
import logging
import os
import struct
from typing import Mapping

import numpy as np

from tpudata import storage
from tpudata._keywords import strict_keywords
from tpudata.errors import CorruptRecordError, StaleIndexError, TruncatedRecordError
from tpudata.tfrecord import framing
from tpudata.tfrecord.ranges import RangeReader
from tpudata.tfrecord.reader import DEFAULT_BUFFER_SIZE, TFRecordFileReader

logger = logging.getLogger(__name__)


@strict_keywords
def build_index(
    url: str,
    index_url: str | None = None,
    verify: bool = True,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
    storage_options: Mapping | None = None,
) -> np.ndarray:
    """Scan an uncompressed TFRecord file; returns an ``(n, 2)`` int64 array of (offset, length).

    With ``index_url`` the index is also written there in the text format.
    """
    reader = TFRecordFileReader(url, "", verify, buffer_size, storage_options=storage_options)
    parts = []
    for batch in reader:
        parts.append(np.stack([batch.record_offsets, batch.lengths + framing.OVERHEAD], axis=1))
    index = np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.int64)
    if index_url is not None:
        write_index(index_url, index, storage_options=storage_options)
    return index


def format_index(index: np.ndarray) -> str:
    """The text form of an index: one ``"offset length"`` line per record."""
    return "".join(f"{o} {n}\n" for o, n in np.asarray(index, dtype=np.int64).tolist())


@strict_keywords
def write_index(index_url: str, index: np.ndarray, storage_options: Mapping | None = None) -> None:
    """Write an index file (atomically)."""
    with storage.open_atomic(index_url, **dict(storage_options or {})) as f:
        f.write(format_index(index).encode("ascii"))


@strict_keywords
def read_index(index_url: str, storage_options: Mapping | None = None) -> np.ndarray:
    """Read an index file; returns an ``(n, 2)`` int64 array. Malformed lines raise ValueError."""
    text = storage.read_bytes(index_url, **dict(storage_options or {})).decode("ascii")
    rows = []
    for lineno, line in enumerate(io.StringIO(text), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2:
            raise ValueError(f"{index_url}:{lineno}: expected 'offset length', got {line!r}")
        try:
            offset, length = int(fields[0]), int(fields[1])
        except ValueError:
            raise ValueError(f"{index_url}:{lineno}: not two integers: {line!r}") from None
        if offset < 0 or length < framing.OVERHEAD:
            raise ValueError(f"{index_url}:{lineno}: impossible record offset/length {line!r}")
        rows.append((offset, length))
    return np.array(rows, dtype=np.int64).reshape(-1, 2)


def file_version(url: str, storage_options: Mapping | None = None) -> tuple[int, int | None]:
    """``(size, version)`` of a file: the version orders writes (local: modification time in ns;
    ``gs://``: the object's generation; None where the store has neither)."""
    if storage.is_local(url):
        st = os.stat(storage.local_path(url))
        return st.st_size, st.st_mtime_ns
    info = storage.stat(url, **dict(storage_options or {}))
    generation = str(info.generation or "")
    return info.size, int(generation) if generation.isdigit() else None


def check_index(index: np.ndarray, url: str, index_url: str | None = None,
                storage_options: Mapping | None = None) -> None:
    """Raise :class:`~tpudata.errors.StaleIndexError` unless ``index`` (an ``(n, 2)`` array, read
    from ``index_url`` if given) describes ``url`` as it is now: its frames tile the whole file,
    and the file was not modified after the index file was written."""
    size, version = file_version(url, storage_options)
    where = index_url or "the index given"
    fix = ("rebuild it (tpudata index FILE, or pass rebuild_stale_index=True)"
           if index_url else "rebuild it for the file as it is now")
    index = np.asarray(index, dtype=np.int64).reshape(-1, 2)
    offsets, lengths = index[:, 0], index[:, 1]
    ends = offsets + lengths
    problem = None
    if not len(index):
        if size:
            problem = f"{where} lists no record, but {url} has {size} bytes"
    elif offsets[0] != 0:
        problem = f"{where} starts at byte {int(offsets[0])} of {url}, not at 0"
    else:
        gaps = np.flatnonzero(offsets[1:] != ends[:-1])
        if len(gaps):
            k = int(gaps[0]) + 1
            problem = (f"record {k} of {where} starts at byte {int(offsets[k])}, but record "
                       f"{k - 1} ends at {int(ends[k - 1])} (a line missing, repeated or moved)")
        elif int(ends[-1]) != size:
            problem = (f"{where} covers {int(ends[-1])} bytes, but {url} has {size} (the file "
                       "changed after it was indexed, or the index was cut)")
    if problem is None and index_url is not None and version is not None:
        _, index_version = file_version(index_url, storage_options)
        if index_version is not None and version > index_version:
            problem = f"{url} was modified after its index {index_url} was written"
    if problem is not None:
        raise StaleIndexError(f"stale index: {problem}; {fix}", url, index_url)


def load_index(url: str, index_url: str, rebuild_stale_index: bool = False, verify: bool = True,
               storage_options: Mapping | None = None, write: bool = False) -> np.ndarray:
    """The index of ``url`` read from ``index_url`` and checked (:func:`check_index`). A stale one
    raises StaleIndexError; with ``rebuild_stale_index`` it is rebuilt by scanning ``url``
    instead (and written back to ``index_url`` when ``write``), with a warning."""
    try:
        index = read_index(index_url, storage_options=storage_options)
        check_index(index, url, index_url, storage_options)
        return index
    except (StaleIndexError, ValueError) as exc:
        if not rebuild_stale_index:
            if isinstance(exc, StaleIndexError):
                raise
            raise StaleIndexError(f"unreadable index {index_url}: {exc}; rebuild it (tpudata "
                                  "index FILE, or pass rebuild_stale_index=True)", url,
                                  index_url) from None
        logger.warning("%s; rebuilding the index of %s by scanning it%s", exc, url,
                       f" (and writing it to {index_url})" if write else "")
        return build_index(url, index_url if write else None, verify=verify,
                           storage_options=storage_options)


def _decode_frame(frame: bytes, url: str, offset: int, verify: bool) -> bytes:
    if len(frame) < framing.HEADER_SIZE:
        raise TruncatedRecordError(f"truncated record at {offset}", url, offset)
    (length,) = struct.unpack_from("<Q", frame, 0)
    if verify and framing.masked_crc32c(frame[:8]) != struct.unpack_from("<I", frame, 8)[0]:
        raise CorruptRecordError(f"corrupted record at {offset}", url, offset)
    if len(frame) != length + framing.OVERHEAD:
        if len(frame) < length + framing.OVERHEAD:
            raise TruncatedRecordError(f"truncated record at {offset}", url, offset)
        raise CorruptRecordError(
            f"corrupted record at {offset} (index says {len(frame)} bytes, header {length + 16})",
            url,
            offset,
        )
    data = frame[framing.HEADER_SIZE : framing.HEADER_SIZE + length]
    if verify and framing.masked_crc32c(data) != struct.unpack_from("<I", frame, 12 + length)[0]:
        raise CorruptRecordError(f"corrupted record at {offset + 12}", url, offset + 12)
    return data


class IndexedTFRecordFile:
    """Random access to the records of an uncompressed TFRecord file through its index.

    ``index``: None (scan the file), an index file's URL or an ``(n, 2)`` array; either is checked
    against the file first (:func:`check_index`), and a stale index file raises
    :class:`~tpudata.errors.StaleIndexError` unless ``rebuild_stale_index=True`` (then the file
    is scanned instead, with a warning).

    Reads are positionless byte-range reads, so any number of threads may share one object;
    it pickles without open handles. For many files, ``len`` from manifests and batched
    reads, use :class:`tpudata.source.TFRecordSource`.

    >>> f = IndexedTFRecordFile("memory://doc/i.tfrecord")
    >>> len(f), f[0], f[-1]
    (2, b'x', b'yz')
    """

    @strict_keywords
    def __init__(self, url: str, index=None, verify: bool = True,
                 storage_options: Mapping | None = None, rebuild_stale_index: bool = False):
        self.url = url
        self.verify = verify
        self.storage_options = dict(storage_options or {})
        if index is None:
            index = build_index(url, verify=verify, storage_options=self.storage_options)
        elif isinstance(index, (str, os.PathLike)):
            index = load_index(url, os.fspath(index), rebuild_stale_index, verify,
                               self.storage_options)
        else:  # an array: it must still describe the file
            index = np.asarray(index, dtype=np.int64).reshape(-1, 2)
            check_index(index, url, None, self.storage_options)
        self.index = np.asarray(index, dtype=np.int64).reshape(-1, 2)
        self._reader = RangeReader(storage_options=self.storage_options)

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> bytes:
        n = len(self.index)
        if not -n <= i < n:
            raise IndexError(f"record {i} out of range for {self.url} with {n} records")
        offset, length = (int(v) for v in self.index[i])
        try:
            frame = bytes(self._reader.read(self.url, offset, offset + length))
        except TruncatedRecordError:
            raise TruncatedRecordError(f"truncated record at {offset}", self.url, offset) from None
        return _decode_frame(frame, self.url, offset, self.verify)

    def close(self) -> None:
        self._reader.close()

    def __enter__(self) -> "IndexedTFRecordFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@strict_keywords
def read_record_at(url: str, i: int, index=None, verify: bool = True,
                   storage_options: Mapping | None = None) -> bytes:
    """Record ``i`` of ``url`` using ``index`` (an array, an index file URL, or None to build one)."""
    with IndexedTFRecordFile(url, index, verify, storage_options) as f:
        return f[i]
