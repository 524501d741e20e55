"""Parallel, resumable sharded builds: items -> encoder -> ``{prefix}-NNNNN-of-NNNNN`` shards.

:func:`build_shards` splits a sequence of items (file names, row numbers, ...) into contiguous
shards, has an executor encode each item to a serialized record and write each shard, and
writes a manifest next to the shards. Every shard's bytes depend only on its items and the
encoder, so the output is the same for any number of workers and any executor, and a rerun
after a crash keeps the shards that are complete and valid and rebuilds the rest.

>>> result = build_shards(range(10), str, "memory://doc/build", "nums", num_shards=3, workers=1)
>>> [(s.name, s.records) for s in result.manifest.shards]
[('nums-00000-of-00003', 4), ('nums-00001-of-00003', 3), ('nums-00002-of-00003', 3)]
>>> build_shards(range(10), str, "memory://doc/build", "nums", num_shards=3, workers=1).skipped
3
"""

from __future__ import annotations

import logging
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from typing import Any, Callable, Mapping, Sequence

from tpudata import storage
from tpudata._pickling import picklable_function
from tpudata.shards import journal as journal_mod
from tpudata.shards.executors import make_executor, sends_to_processes
from tpudata.shards.manifest import Manifest, ShardInfo, schema_from_spec
from tpudata.shards.planning import (
    DEFAULT_TARGET_SHARD_BYTES,
    check_prefix,
    describe_callable,
    plan_shards,
    shard_fingerprint,
    shard_name,
)
from tpudata.shards.progress import BuildResult, Progress
from tpudata.shards.writing import ShardTask, run_shard_lane, run_shard_task
from tpudata.tfrecord.compression import normalize_compression

logger = logging.getLogger(__name__)


def normalize_schema(schema: Mapping | None) -> dict | None:
    """Accept a ``{name: FixedLenFeature | VarLenFeature}`` spec or an already-JSON schema."""
    if not schema:
        return None
    first = next(iter(schema.values()))
    if isinstance(first, Mapping):
        return {str(k): dict(v) for k, v in schema.items()}
    return schema_from_spec(schema)


def _journal_interval(output: str) -> float:
    return 0.0 if storage.is_local(output) or output.startswith("memory://") else 2.0


MAX_LANE = 4


def lane_size(output: str, count: int, limit: int) -> int:
    """Shards per executor task: 1 for local output; for object stores up to :data:`MAX_LANE`
    consecutive shards (while keeping ``limit`` tasks in flight), each published in the
    background while the next is written (:func:`~tpudata.shards.writing.run_shard_lane`)."""
    if storage.is_local(output) or output.startswith("memory://"):
        return 1
    return max(1, min(MAX_LANE, count // max(1, limit)))


def build_shards(
    items: Sequence[Any],
    encoder: Callable[[Any], bytes],
    output: str,
    prefix: str,
    *,
    num_shards: int | None = None,
    target_shard_bytes: int | None = None,
    item_sizes: Sequence[int] | None = None,
    executor: Executor | None = None,
    workers: int | None = None,
    max_in_flight: int | None = None,
    compression: str | None = None,
    schema: Mapping | None = None,
    metadata: Mapping | None = None,
    resume: bool = True,
    verify_existing: bool = True,
    item_key: Callable[[Any], str] = repr,
    progress: bool | None = None,
    storage_options: Mapping | None = None,
) -> BuildResult:
    """Encode ``items`` into TFRecord shards ``{output}/{prefix}-NNNNN-of-NNNNN``.

    Args:
      items: a sequence of picklable items; shard ``i`` gets a contiguous slice, in order.
      encoder: callable turning one item into a serialized record (e.g. an Example); with more
        than one worker process it must pickle (a module-level function, or with cloudpickle
        installed a lambda or nested function), else NotPicklableError names it up front.
        Its ``fingerprint`` attribute, if any, names its configuration for resuming.
      num_shards: fixed shard count (balanced contiguous slices), or else
      target_shard_bytes: plan ``ceil(total / target)`` shards (default 100 MB) from
        ``item_sizes``, the (estimated) record size of each item.
      executor: any ``concurrent.futures.Executor`` (e.g. ``dask.distributed.Client(...)
        .get_executor()``); by default a process pool of ``workers`` processes (default: one
        per core; ``workers=1`` runs in this process).
      max_in_flight: tasks submitted ahead of results (default: unbounded for an executor you
        pass, twice the workers for the default pool).
      compression: ``None``, ``"GZIP"`` or ``"ZLIB"``.
      schema: the feature spec of the records, recorded in the manifest.
      metadata: JSON-able extra information for the manifest (e.g. class names).
      resume: keep shards a previous run of the same build completed (checked by fingerprint,
        size and - with ``verify_existing`` - CRC32C of the file).
      item_key: how an item is described in the shard fingerprint (default ``repr``).
      progress: show a progress bar (default: when stderr is a terminal).
      storage_options: passed to fsspec (e.g. ``{"project": ...}`` for gcsfs).

    Returns a :class:`~tpudata.shards.progress.BuildResult`. If a shard fails, the other
    finished shards are journaled and the first error is raised: run the same build again to
    resume.

    To an object store (``gs://``) each executor task builds a lane of up to :data:`MAX_LANE`
    consecutive shards, publishing each (its last parts' upload and compose, see
    :mod:`tpudata._upload`) in the background while it encodes the next, so neither the
    network nor the encoder waits for the other; shards are journaled as their lane finishes,
    so a killed build redoes at most the lanes that were running. Uploads a killed build left
    (hidden ``.{shard}.tmp-*`` objects, never a partial shard under its name) are deleted by
    the next run.
    """
    check_prefix(prefix)
    so = dict(storage_options or {})
    items = items if isinstance(items, Sequence) else list(items)
    if num_shards is None and target_shard_bytes is None:
        target_shard_bytes = DEFAULT_TARGET_SHARD_BYTES
    plan = plan_shards(len(items), num_shards=num_shards, target_shard_bytes=target_shard_bytes,
                       item_sizes=item_sizes)
    count = len(plan)
    comp = normalize_compression(compression) or None
    encoder_description = describe_callable(encoder)
    template = Manifest(prefix, [], comp, normalize_schema(schema), dict(metadata or {}))
    if sends_to_processes(executor, workers, count):  # refused now, naming it, not in a worker
        encoder = picklable_function(encoder, "build_shards()", main_by_value=True)  # spawned

    previous = journal_mod.previous_shards(output, prefix, so) if resume else {}
    tasks = []
    carried = {}
    for index, (start, stop) in enumerate(plan):
        name = shard_name(prefix, index, count)
        chunk = items[start:stop]
        fp = shard_fingerprint(name, chunk, encoder_description, comp, item_key)
        prev = previous.get(name)
        expected = prev if prev is not None and prev.fingerprint == fp else None
        if expected is not None:
            carried[name] = expected
        tasks.append(ShardTask(storage.join(output, name), chunk, encoder, comp, fp, expected,
                               verify_existing, so))
    if carried:
        logger.info("%s: %d of %d shard(s) were finished by a previous run; checking them",
                    prefix, len(carried), count)

    journal = journal_mod.begin(output, template, carried, _journal_interval(output), so)
    own_executor = executor is None
    if own_executor:
        executor, default_in_flight = make_executor(workers, count)
    else:
        default_in_flight = count
    limit = max(1, max_in_flight or default_in_flight)
    progress_ = Progress(prefix, len(items), count, progress)
    results: dict[int, ShardInfo] = {}
    try:
        error = _run(executor, tasks, limit, lane_size(output, count, limit), results, journal,
                     progress_)
    except BaseException:  # e.g. KeyboardInterrupt: stop the workers before cleaning up
        progress_.close()
        if own_executor:
            executor.shutdown(wait=True, cancel_futures=True)
        journal_mod.abandon(output, prefix, journal)
        raise
    if own_executor:
        executor.shutdown(wait=True, cancel_futures=True)
    if error is not None:
        progress_.close()
        journal_mod.abandon(output, prefix, journal)
        if hasattr(error, "add_note"):
            error.add_note(f"{len(results)} of {count} shard(s) of {prefix!r} in {output} are "
                           "complete and journaled: run the same build again to resume")
        raise error
    manifest = Manifest(prefix, [results[i] for i in range(count)], comp, template.schema,
                        template.metadata)
    url = journal_mod.finish(output, manifest, journal, so)
    return progress_.result(manifest, url)


def _run(executor: Executor, tasks: list[ShardTask], limit: int, lane: int,
         results: dict[int, ShardInfo], journal, progress: Progress) -> BaseException | None:
    """Run ``tasks`` with at most ``limit`` executor tasks in flight, ``lane`` shards each;
    returns the first error (after draining)."""
    pending: dict[Future, range] = {}
    next_task = 0
    error: BaseException | None = None
    while next_task < len(tasks) or pending:
        while error is None and next_task < len(tasks) and len(pending) < limit:
            span = range(next_task, min(next_task + lane, len(tasks)))
            if len(span) == 1:
                future = executor.submit(run_shard_task, tasks[span[0]])
            else:
                future = executor.submit(run_shard_lane, [tasks[i] for i in span])
            pending[future] = span
            next_task = span.stop
        if not pending:
            break
        done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
        for future in done:
            span = pending.pop(future)
            if future.cancelled():
                continue
            exc = future.exception()
            if exc is not None:
                if error is None:
                    error = exc
                    names = ", ".join(tasks[i].name for i in span)
                    logger.error("shard(s) %s failed: %s: %s", names, type(exc).__name__, exc)
                    for other in pending:
                        other.cancel()
                continue
            outcome = future.result()
            for index, result in zip(span, outcome if isinstance(outcome, list) else [outcome]):
                results[index] = result.info
                journal.record(result.info)
                progress.shard_done(result.info, result.skipped)
    journal.flush()
    return error


__all__ = ["build_shards", "lane_size", "normalize_schema"]
