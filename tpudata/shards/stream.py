"""Write a stream of serialized records into shards, in this process.

With ``num_shards`` the records are split into balanced contiguous slices (the record count
must be known: a sequence, or ``num_records=`` for an iterator). With ``target_shard_bytes``
(default 100 MB) a sequence is planned from its record sizes, so ``-of-N`` is right from the
start; a one-shot iterator is cut into shards as they fill up, written under temporary names,
and renamed to ``-of-N`` once ``N`` is known.

A planned build resumes: a shard whose earlier copy (recorded in the manifest or journal) has
the same content is not written again - the records are still read, to compare.

>>> r = write_shards([b"x" * 10] * 5, "memory://doc/stream", "s", num_shards=2)
>>> [(s.name, s.records) for s in r.manifest.shards]
[('s-00000-of-00002', 3), ('s-00001-of-00002', 2)]
>>> r = write_shards(iter([b"x" * 10] * 5), "memory://doc/stream", "t", target_shard_bytes=60)
>>> [(s.name, s.records) for s in r.manifest.shards]
[('t-00000-of-00003', 2), ('t-00001-of-00003', 2), ('t-00002-of-00003', 1)]
"""

from __future__ import annotations

import io
import logging
from typing import Iterable, Iterator, Mapping, Sequence

from tpudata import storage
from tpudata.shards import journal as journal_mod
from tpudata.shards.builder import normalize_schema
from tpudata.shards.manifest import Manifest, ShardInfo
from tpudata.shards.planning import (
    DEFAULT_TARGET_SHARD_BYTES,
    RECORD_OVERHEAD,
    check_prefix,
    plan_by_count,
    plan_shards,
    shard_name,
)
from tpudata.shards.progress import BuildResult, Progress
from tpudata.shards.writing import (
    ChecksumSink,
    existing_shard_is_valid,
    write_records_to,
    write_shard,
    write_shard_bytes,
)
from tpudata.tfrecord.compression import normalize_compression

logger = logging.getLogger(__name__)


def _nbytes(record) -> int:
    return len(record) if isinstance(record, (bytes, bytearray, str)) else memoryview(record).nbytes


def _take(it: Iterator, n: int, expected_total: int, taken_before: int) -> Iterator:
    for _ in range(n):
        try:
            yield next(it)
        except StopIteration:
            raise ValueError(
                f"the record stream ended after {taken_before} records; "
                f"num_records said {expected_total}"
            ) from None
        taken_before += 1


def write_shards(
    records: Iterable,
    output: str,
    prefix: str,
    *,
    num_shards: int | None = None,
    target_shard_bytes: int | None = None,
    num_records: int | None = None,
    compression: str | None = None,
    schema: Mapping | None = None,
    metadata: Mapping | None = None,
    resume: bool = True,
    progress: bool | None = None,
    storage_options: Mapping | None = None,
) -> BuildResult:
    """Write serialized ``records`` into ``{output}/{prefix}-NNNNN-of-NNNNN`` plus a manifest.

    See the module doc for how shards are planned. Every shard appears atomically; a failure
    leaves the finished shards journaled for a rerun and no partial file under a final name.
    """
    check_prefix(prefix)
    so = dict(storage_options or {})
    comp = normalize_compression(compression) or None
    template = Manifest(prefix, [], comp, normalize_schema(schema), dict(metadata or {}))
    if num_shards is not None and target_shard_bytes is not None:
        raise ValueError("give num_shards or target_shard_bytes, not both")
    is_sequence = isinstance(records, Sequence) and not isinstance(records, (str, bytes))
    if is_sequence:
        n = len(records)
        if num_records is not None and num_records != n:
            raise ValueError(f"num_records={num_records} but the sequence holds {n} records")
        sizes = None if num_shards is not None else [_nbytes(r) for r in records]
        plan = plan_shards(n, num_shards=num_shards, item_sizes=sizes,
                           target_shard_bytes=None if num_shards else
                           (target_shard_bytes or DEFAULT_TARGET_SHARD_BYTES))
        return _write_planned(iter(records), n, plan, output, template, resume, progress, so)
    if num_shards is not None:
        if num_records is None:
            raise ValueError(
                "splitting a stream into num_shards needs its length: pass num_records=, "
                "a sequence, or target_shard_bytes= instead"
            )
        plan = plan_by_count(num_records, num_shards)
        return _write_planned(iter(records), num_records, plan, output, template, resume,
                              progress, so)
    return _write_rolling(iter(records), target_shard_bytes or DEFAULT_TARGET_SHARD_BYTES,
                          output, template, progress, so)


def _write_planned(it: Iterator, total: int, plan, output: str, template: Manifest,
                   resume: bool, progress: bool | None, so: dict) -> BuildResult:
    prefix = template.prefix
    count = len(plan)
    previous = journal_mod.previous_shards(output, prefix, so) if resume else {}
    names = [shard_name(prefix, i, count) for i in range(count)]
    carried = {name: previous[name] for name in names if name in previous}
    journal = journal_mod.begin(output, template, carried, 0.0, so)
    bar = Progress(prefix, total, count, progress)
    infos: list[ShardInfo] = []
    try:
        for (start, stop), name in zip(plan, names):
            url = storage.join(output, name)
            records = _take(it, stop - start, total, start)
            prev = carried.get(name)
            if prev is not None and prev.records == stop - start and existing_shard_is_valid(
                url, prev, True, so
            ):
                info, skipped = _compare_or_write(url, records, prev, template.compression, so)
            else:
                info = write_shard(url, records, template.compression, storage_options=so)
                skipped = False
            infos.append(info)
            journal.record(info)
            bar.shard_done(info, skipped)
        if next(it, None) is not None:
            raise ValueError(f"the record stream holds more than num_records={total} records")
    except BaseException:
        bar.close()
        journal_mod.abandon(output, prefix, journal)
        raise
    manifest = Manifest(prefix, infos, template.compression, template.schema, template.metadata)
    url = journal_mod.finish(output, manifest, journal, so)
    return bar.result(manifest, url)


def _compare_or_write(url: str, records: Iterator, prev: ShardInfo, compression, so: dict):
    """Build the shard in memory; keep the stored copy if it is the same, else publish this one."""
    buf = io.BytesIO()
    sink = ChecksumSink(buf)
    n = write_records_to(sink, records, compression)
    info = ShardInfo(prev.name, n, sink.bytes, sink.crc, None)
    if (n, sink.bytes, sink.crc) == (prev.records, prev.bytes, prev.crc32c):
        return prev, True
    return write_shard_bytes(url, buf.getvalue(), info, so), False


def _write_rolling(it: Iterator, target: int, output: str, template: Manifest,
                   progress: bool | None, so: dict) -> BuildResult:
    """Cut an unsized stream into shards of at most ``target`` bytes (a bigger record gets a shard
    of its own); name them ``-of-N`` when the stream ends."""
    prefix = template.prefix
    journal_mod.begin(output, template, {}, 0.0, so).remove()
    bar = Progress(prefix, None, None, progress)
    written: list[tuple[str, ShardInfo]] = []
    pending = next(it, None)
    try:
        while pending is not None or not written:
            state = {"next": pending}

            def shard_records() -> Iterator:
                size = 0
                while state["next"] is not None:
                    record = state["next"]
                    framed = _nbytes(record) + RECORD_OVERHEAD
                    if size and size + framed > target:
                        return  # full: this record starts the next shard
                    size += framed
                    yield record
                    state["next"] = next(it, None)

            temp = storage.join(output, f".{prefix}-{len(written):05d}{storage.TEMP_MARKER}rolling")
            info = write_shard(temp, shard_records(), template.compression, storage_options=so)
            written.append((temp, info))
            bar.shard_done(info, False)
            pending = state["next"]
        count = len(written)
        infos = []
        for index, (temp, info) in enumerate(written):
            name = shard_name(prefix, index, count)
            storage.move(temp, storage.join(output, name), **so)
            infos.append(ShardInfo(name, info.records, info.bytes, info.crc32c, None))
    except BaseException:
        bar.close()
        for temp, _ in written:
            storage.remove(temp, **so)
        journal_mod.abandon(output, prefix, None, so)
        raise
    manifest = Manifest(prefix, infos, template.compression, template.schema, template.metadata)
    url = journal_mod.finish(output, manifest, None, so)
    return bar.result(manifest, url)


__all__ = ["write_shards"]
