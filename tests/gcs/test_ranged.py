"""The shared pool of ranged reads (tpudata._ranged) under gs:// readers, against fake_gcs.

Counted at the server: parallel ranges of one object, keep-alive reuse, the byte bound, the
order ranges are fetched in, cancellation, errors naming the object, and the fallback through
gcsfs's own session.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import tpudata
from fake_gcs import Knobs
from fake_gcs.env import clear_fsspec_cache
from tpudata import _ranged, storage
from tpudata.errors import StorageError

BUCKET = "ranged-bkt"
MIB = 1 << 20


@pytest.fixture
def server(fake_gcs_server):
    storage.gcs_filesystem().mkdir(BUCKET)
    yield fake_gcs_server
    clear_fsspec_cache()


@pytest.fixture
def pool():
    """A fresh process pool for the test (its numbers are the test's alone)."""
    yield _ranged.configure(connections=16, max_bytes=256 * MIB)
    _ranged.configure(_ranged.CONNECTIONS, _ranged.MAX_BYTES)


def _shard(name: str, n: int, size: int, seed: int = 0) -> list[bytes]:
    """Write ``n`` records of ``size`` random bytes to gs://BUCKET/name; returns them."""
    rng = np.random.default_rng(seed)
    records = [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for _ in range(n)]
    with tpudata.TFRecordWriter(f"gs://{BUCKET}/{name}") as w:
        w.write_many(records)
    return records


def _read(url: str, **kw) -> list[bytes]:
    [url] = storage.glob(url)  # sizes and generations from the listing, as pipelines get them
    return [r for batch in tpudata.TFRecordFileReader(url, **kw) for r in batch.to_list()]


def test_one_object_read_alone_is_fetched_in_parallel_ranges_on_kept_alive_connections(server, pool):
    records = _shard("one/a", 48, 256 * 1024)  # 12 MiB
    server.knobs = Knobs(latency_ms=30, bandwidth_mbps=40)
    server.reset_stats()
    assert _read(f"gs://{BUCKET}/one/a", buffer_size=MIB) == records
    stats = server.stats()
    media = stats["requests"]["by_kind"]["media"]
    assert media == 13  # 1 MiB ranges (the reader's buffer size), each byte once
    assert stats["in_flight"]["peak"] >= 4, stats["in_flight"]
    assert stats["connections"]["max_requests_per_connection"] >= 2, stats["connections"]
    assert stats["connections"]["opened"] <= pool.connections
    assert pool.stats()["requests"] == media and pool.stats()["bytes"] == storage.stat(
        f"gs://{BUCKET}/one/a").size


def test_bytes_held_stay_within_the_pool_bound(server):
    files = {f"bound/{k}": _shard(f"bound/{k}", 16, 256 * 1024, seed=k) for k in range(3)}
    pool = _ranged.configure(connections=8, max_bytes=3 * MIB)
    try:
        server.knobs = Knobs(latency_ms=5)
        results = {}

        def read(name):
            results[name] = _read(f"gs://{BUCKET}/{name}", buffer_size=MIB)

        threads = [threading.Thread(target=read, args=(name,)) for name in files]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == files
        st = pool.stats()
        # the bound, plus one range for each reader waiting on the range it needs now
        assert st["max_held_bytes"] <= 3 * MIB + len(files) * MIB, st
        assert st["held_bytes"] == 0 and st["running"] == 0
    finally:
        _ranged.configure(_ranged.CONNECTIONS, _ranged.MAX_BYTES)


def test_a_waited_for_range_is_fetched_before_read_ahead_and_nearer_ranges_first():
    pool = _ranged.RangePool(connections=1, max_bytes=64 * MIB)
    order = []
    gate = threading.Event()

    def fetcher(name):
        def fetch(conns, start, end, out, cancelled):
            if not order:
                gate.wait(5)  # the first request holds the only worker while the rest queue
            order.append((name, start))
            out[:] = bytes([start // 10 % 256]) * (end - start)
        return fetch

    a = pool.stream(fetcher("a"), 100, chunk_bytes=10, window_bytes=40)
    b = pool.stream(fetcher("b"), 100, chunk_bytes=10, window_bytes=40)
    got = {}
    ta = threading.Thread(target=lambda: got.setdefault("a", a.readinto(0, memoryview(bytearray(10)))))
    ta.start()
    while not pool.running:  # a's first range holds the worker; a's second one is queued
        pass
    with pool.lock:
        b.pos = 0
        b._extend()  # b queues its first two ranges (as a reader opened ahead does)
    tb = threading.Thread(target=lambda: got.setdefault("b", b.readinto(20, memoryview(bytearray(10)))))
    tb.start()  # b now waits for bytes 20..30: a seek, so its window starts there
    while True:
        with pool.lock:
            if any(r.waited for r in b.ranges):
                break
    gate.set()
    ta.join(5)
    tb.join(5)
    assert got == {"a": 10, "b": 10}
    # a's first range; then the range a reader waits for (b at 20); then the nearest ahead
    assert order[:2] == [("a", 0), ("b", 20)], order
    a.close()
    b.close()


def test_closing_a_reader_mid_file_cancels_its_ranges_and_frees_the_budget(server, pool):
    _shard("cancel/a", 64, 256 * 1024)  # 16 MiB
    [url] = storage.glob(f"gs://{BUCKET}/cancel/a")
    server.knobs = Knobs(latency_ms=20, bandwidth_mbps=20)
    server.reset_stats()
    reader = tpudata.TFRecordFileReader(url, buffer_size=MIB)
    batches = iter(reader)
    next(batches)
    reader.close()
    assert _ranged.wait_idle()
    st = pool.stats()
    assert st["held_bytes"] == 0 and st["running"] == 0
    assert server.stats()["requests"]["by_kind"]["media"] < 16  # not read to its end


def test_a_shard_deleted_mid_read_names_it(server, pool, monkeypatch):
    _shard("gone/a", 32, 64 * 1024)
    [url] = storage.glob(f"gs://{BUCKET}/gone/a")
    monkeypatch.setattr(_ranged, "WINDOW_BYTES", 128 * 1024)  # two ranges ahead, not the file
    batches = iter(tpudata.TFRecordFileReader(url, buffer_size=64 * 1024))
    next(batches)
    assert _ranged.wait_idle()
    storage.gcs_filesystem().rm(f"{BUCKET}/gone/a")
    with pytest.raises(StorageError, match="deleted while it was read") as err:
        for _ in batches:
            pass
    assert url in str(err.value)


def test_statuses_keep_their_meaning_and_reads_are_exact(server, pool):
    from tpudata.tfrecord.reader import is_transient

    records = _shard("status/a", 4, 1000)
    [url] = storage.glob(f"gs://{BUCKET}/status/a")
    obj = storage.open_read(url, sequential=True)
    for status, cls, transient in ((404, FileNotFoundError, False), (403, PermissionError, False),
                                   (429, OSError, True), (503, OSError, True)):
        exc = _ranged._status_error(status, url, b"")
        assert isinstance(exc, cls) and exc.status == status
        assert is_transient(exc) == transient
    whole = storage.read_bytes(url)
    assert obj.read(8) == whole[:8]
    obj.seek(0)
    assert obj.read() == whole
    obj.close()
    assert list(tpudata.read_records(url)) == records


def test_a_filesystem_with_its_own_session_settings_reads_through_gcsfs(server, pool):
    records = _shard("session/a", 24, 128 * 1024)
    server.reset_stats()
    opts = {"session_kwargs": {"trust_env": False}}
    [url] = storage.glob(f"gs://{BUCKET}/session/a", **opts)
    got = [r for b in tpudata.TFRecordFileReader(url, buffer_size=512 * 1024,
                                                  storage_options=opts) for r in b.to_list()]
    assert got == records
    obj = storage.open_read(url, sequential=True, **opts)
    assert obj._http is False  # gcsfs's cat_file, from the pool's threads
    obj.close()
    assert pool.stats()["requests"] >= 6


def test_a_forked_child_gets_a_pool_of_its_own(monkeypatch):
    first = _ranged.get_pool()
    monkeypatch.setattr(_ranged, "_pool_pid", os.getpid() + 1)  # as a child sees its parent's
    second = _ranged.get_pool()
    assert second is not first and _ranged.get_pool() is second


def test_pool_sizes_below_one_are_refused_and_leave_the_pool_as_it_was():
    before = _ranged.get_pool()
    for kw in ({"connections": 0}, {"max_bytes": 0}):
        with pytest.raises(ValueError):
            storage.configure_gcs_reads(**kw)
        assert _ranged.get_pool() is before
