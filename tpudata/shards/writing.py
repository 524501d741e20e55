"""Writing one shard: serialized records -> a TFRecord file, atomically, with its size and CRC32C.

:func:`write_shard` frames records a few MB at a time (one C call per chunk), checksums the
file bytes as they stream out, and publishes the file under its final name only when it is
complete. :func:`run_shard_task` is what an executor runs for one shard of a parallel build: it
keeps a shard from a previous run when that shard is still valid, and otherwise encodes the
shard's items and writes it. :func:`run_shard_lane` does so for several shards, publishing each
in the background while the next is written (object stores, where publishing is network time).

>>> info = write_shard("memory://doc/shards/s-00000-of-00001", [b"a", b"bc"])
>>> (info.name, info.records, info.bytes)
('s-00000-of-00001', 2, 35)
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from tpudata import storage
from tpudata._keywords import storage_options_dict, strict_keywords
from tpudata.shards.manifest import ShardInfo, file_crc32c
from tpudata.tfrecord.framing import crc32c, frame
from tpudata.tfrecord.writer import TFRecordWriter

logger = logging.getLogger(__name__)

_CHUNK_BYTES = 4 << 20
_CHUNK_RECORDS = 4096


class ChecksumSink:
    """A file-like wrapper that keeps the CRC32C and length of everything written through it."""

    def __init__(self, sink):
        self._sink = sink
        self.crc = 0
        self.bytes = 0

    def write(self, data) -> int:
        self.crc = crc32c(data, self.crc)
        self.bytes += memoryview(data).nbytes
        self._sink.write(data)
        return len(data)

    def flush(self) -> None:
        flush = getattr(self._sink, "flush", None)
        if flush is not None:
            flush()


def _as_record(record):
    if isinstance(record, (bytes, bytearray)):
        return record
    if isinstance(record, str):
        return record.encode("utf-8")
    try:
        return memoryview(record).cast("B")
    except TypeError:
        raise TypeError(
            f"a shard record must be bytes-like (a serialized Example), not {type(record).__name__}"
        ) from None


def write_records_to(sink, records: Iterable, compression: str | None = None) -> int:
    """Frame ``records`` into the open binary file ``sink`` (not closed); returns the count."""
    writer = TFRecordWriter(sink, compression)
    n = 0
    chunk: list = []
    size = 0
    for record in records:
        record = _as_record(record)
        chunk.append(record)
        size += len(record)
        if size >= _CHUNK_BYTES or len(chunk) >= _CHUNK_RECORDS:
            writer.write_framed(frame(chunk))
            n += len(chunk)
            chunk = []
            size = 0
    if chunk:
        writer.write_framed(frame(chunk))
        n += len(chunk)
    writer.close()
    return n


@strict_keywords
def write_shard(
    url: str,
    records: Iterable,
    compression: str | None = None,
    fingerprint: str | None = None,
    *,
    storage_options: Mapping | None = None,
) -> ShardInfo:
    """Write ``records`` to ``url`` as one TFRecord file that appears only when complete
    (``storage_options``: fsspec's).

    An exception while writing (or while producing ``records``) leaves nothing under ``url``.
    """
    so = storage_options_dict("write_shard", storage_options)
    return _write_unpublished(url, records, compression, fingerprint, so).publish()


@dataclass
class _Unpublished:
    """A shard written through an open :class:`~tpudata.storage.AtomicWriter`, not yet closed."""

    atomic: Any
    sink: ChecksumSink
    info: ShardInfo

    def publish(self) -> ShardInfo:
        """Close the writer: the shard appears under its name (or nothing does, and it raises)."""
        try:
            self.atomic.close()
        except BaseException:
            self.atomic.abort()
            raise
        return self.info


def _write_unpublished(url: str, records: Iterable, compression: str | None,
                       fingerprint: str | None, storage_options: Mapping | None = None) -> _Unpublished:
    atomic = storage.open_atomic(url, **(storage_options or {}))
    sink = ChecksumSink(atomic)
    try:
        n = write_records_to(sink, records, compression)
    except BaseException:
        atomic.abort()
        raise
    info = ShardInfo(os.path.basename(url.rstrip("/")), n, sink.bytes, sink.crc, fingerprint)
    return _Unpublished(atomic, sink, info)


def write_shard_bytes(url: str, data: bytes, info: ShardInfo,
                      storage_options: Mapping | None = None) -> ShardInfo:
    """Publish already-built shard ``data`` (whose :class:`ShardInfo` is known) at ``url``."""
    with storage.open_atomic(url, **(storage_options or {})) as f:
        f.write(data)
    return info


def existing_shard_is_valid(url: str, expected: ShardInfo, verify: bool = True,
                            storage_options: Mapping | None = None) -> bool:
    """Whether ``url`` holds exactly the shard ``expected`` describes (size, and CRC32C if asked).

    Object stores are asked afresh (no cached listing) and their stored CRC32C is used when they
    keep one; local files are re-read.
    """
    so = dict(storage_options or {})
    try:
        if storage.is_local(url):
            size = os.path.getsize(storage.local_path(url))
        else:
            fs, path = storage.url_to_fs(url, **so)
            fs.invalidate_cache(path)
            size = int(fs.info(path)["size"])
        if size != expected.bytes:
            logger.info("%s: %d bytes, not %d as recorded; rebuilding", url, size, expected.bytes)
            return False
        if verify:
            size, crc = file_crc32c(url, storage_options=so)
            if size != expected.bytes or crc != expected.crc32c:
                logger.warning("%s: CRC32C %08x differs from the recorded %08x; rebuilding",
                               url, crc, expected.crc32c)
                return False
    except FileNotFoundError:
        return False
    return True


def _add_note(exc: BaseException, note: str) -> None:
    if hasattr(exc, "add_note"):
        exc.add_note(note)


def _encode_items(items: Sequence, encoder: Callable, name: str) -> Iterator:
    for i, item in enumerate(items):
        try:
            record = encoder(item)
        except Exception as exc:
            _add_note(exc, f"while encoding item {i} of shard {name}: {item!r:.300}")
            raise
        yield record


@dataclass(frozen=True)
class ShardTask:
    """One shard of a parallel build: where it goes and what goes in it (picklable)."""

    url: str
    items: Sequence
    encoder: Callable[[Any], bytes]
    compression: str | None = None
    fingerprint: str | None = None
    expected: ShardInfo | None = None  # a previous run's record of this shard, if any
    verify_existing: bool = True
    storage_options: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return os.path.basename(self.url.rstrip("/"))


@dataclass(frozen=True)
class ShardResult:
    """What :func:`run_shard_task` did: the shard's info, whether it was kept, how long it took."""

    info: ShardInfo
    skipped: bool
    seconds: float


def _kept(task: ShardTask) -> bool:
    """Whether a previous run's copy of the shard is still valid (then it is not rebuilt)."""
    return task.expected is not None and existing_shard_is_valid(
        task.url, task.expected, task.verify_existing, task.storage_options)


def _write_task(task: ShardTask) -> _Unpublished:
    records = _encode_items(task.items, task.encoder, task.name)
    written = _write_unpublished(task.url, records, task.compression, task.fingerprint,
                                 task.storage_options)
    if written.info.records != len(task.items):  # pragma: no cover - one record per item
        written.atomic.abort()
        raise RuntimeError(f"{task.url}: wrote {written.info.records} records for "
                           f"{len(task.items)} items")
    return written


def run_shard_task(task: ShardTask) -> ShardResult:
    """Build one shard (in whatever process the executor runs this)."""
    t0 = time.perf_counter()
    if _kept(task):
        return ShardResult(task.expected, True, time.perf_counter() - t0)
    info = _write_task(task).publish()
    return ShardResult(info, False, time.perf_counter() - t0)


def run_shard_lane(tasks: Sequence[ShardTask]) -> list[ShardResult]:
    """Build several shards one after the other, each published while the next is written.

    For object stores, where publishing a shard (the last parts' upload, the compose) is
    network time: a background thread closes shard ``i`` while this thread encodes and writes
    shard ``i + 1``, so the link and the encoder both stay busy. The encoder is still called
    from this thread only, in order. At most one shard is being published while another is
    written: a lane holds at most two writers' buffers (see
    :class:`tpudata.storage.AtomicWriter`). The first error is raised once the shard being
    published has finished (or failed); shards published before it are in the results of
    nobody, so a rerun rebuilds them.
    """
    results: list[ShardResult] = []
    publishing: tuple[Future, float] | None = None

    def collect() -> None:
        nonlocal publishing
        if publishing is not None:
            future, t0 = publishing
            publishing = None
            results.append(ShardResult(future.result(), False, time.perf_counter() - t0))

    with ThreadPoolExecutor(1, thread_name_prefix="tpudata-publish") as publisher:
        for task in tasks:
            t0 = time.perf_counter()
            if _kept(task):
                collect()
                results.append(ShardResult(task.expected, True, time.perf_counter() - t0))
                continue
            written = _write_task(task)  # meanwhile the previous shard is being published
            try:
                collect()
            except BaseException:
                written.atomic.abort()
                raise
            publishing = (publisher.submit(written.publish), t0)
        collect()
    return results


def cleanup_shard_temporaries(output: str, prefix: str,
                              storage_options: Mapping | None = None) -> list[str]:
    """Remove leftovers of interrupted writes of ``prefix``'s shards, manifest and journal in
    ``output`` (only names of this prefix: other builds in the same directory keep theirs):
    local temporary files, and on ``gs://`` the part objects of uploads a killed run left (an
    unfinished upload never appears under a final name)."""
    names = (f"{prefix}-", f"{prefix}.manifest", f".{prefix}.manifest")
    return storage.cleanup_temporaries(output, names, **(storage_options or {}))


__all__ = [
    "ChecksumSink",
    "ShardResult",
    "ShardTask",
    "cleanup_shard_temporaries",
    "existing_shard_is_valid",
    "run_shard_lane",
    "run_shard_task",
    "write_records_to",
    "write_shard",
    "write_shard_bytes",
]
