"""Realism knobs: latency, bandwidth cap, seeded 503/429 faults and cut connections."""

from __future__ import annotations

import http.client
import json
import os
import random
import time

import pytest

from fake_gcs import FakeGCSServer, Knobs
from tests.gcs.helpers import Raw, bucket_with_object, object_path


def _timed_get(raw: Raw, path: str) -> tuple[float, int, bytes]:
    t0 = time.perf_counter()
    status, _, body = raw("GET", path)
    return time.perf_counter() - t0, status, body


def test_latency_and_jitter(timed):
    with FakeGCSServer(port=0, latency_ms=60, jitter_ms=40, seed=1) as server:
        raw = Raw(server.url)
        times = [_timed_get(raw, "/storage/v1/b")[0] for _ in range(8)]
        raw.close()
    assert min(times) >= 0.06
    if timed:
        assert max(times) < 0.5
    assert max(times) - min(times) > 0.005  # jitter varies the delay


def test_bandwidth_cap_per_connection(timed):
    data = os.urandom(3_000_000)
    with FakeGCSServer(port=0) as server:
        bucket_with_object(server.url, "bw-bucket", "o", data)
        raw = Raw(server.url)
        fast, _, _ = _timed_get(raw, object_path("o", "bw-bucket") + "?alt=media")
        server.knobs = Knobs(bandwidth_mbps=10)
        raw.close()
        raw = Raw(server.url)  # the cap applies to connections opened from now on
        slow, status, body = _timed_get(raw, object_path("o", "bw-bucket") + "?alt=media")
        raw.close()
    assert status == 200 and body == data
    assert 0.25 <= slow  # 3 MB at 10 MB/s is ~0.3 s
    if timed:
        assert slow < 2.0 and fast < 0.25


def _fault_sequence(seed: int) -> list[int]:
    with FakeGCSServer(port=0, error_rate=0.3, seed=seed) as server:
        raw = Raw(server.url)
        out = [raw("GET", "/storage/v1/b")[0] for _ in range(60)]
        raw.close()
    return out


def test_injected_errors_are_seeded_and_gcs_shaped():
    first, again, other = _fault_sequence(7), _fault_sequence(7), _fault_sequence(8)
    assert first == again and first != other
    assert {503, 429} <= set(first) and 200 in first
    assert 8 <= sum(s != 200 for s in first) <= 30
    with FakeGCSServer(port=0, error_rate=1.0, seed=0) as server:
        status, _, body = Raw(server.url)("GET", "/storage/v1/b")
    assert status in (503, 429) and json.loads(body)["error"]["code"] == status


def test_cut_connections_truncate_bodies():
    data = os.urandom(1_000_000)
    with FakeGCSServer(port=0) as server:
        bucket_with_object(server.url, "cut-bucket", "o", data)
        server.knobs = Knobs(cut_rate=1.0, seed=3)
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("GET", object_path("o", "cut-bucket") + "?alt=media")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Length") == str(len(data))
        with pytest.raises(http.client.IncompleteRead) as info:
            resp.read()
        assert data.startswith(info.value.partial) and len(info.value.partial) < len(data)
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)  # uploads are cut too
        with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
            conn.request("POST", "/upload/storage/v1/b/cut-bucket/o?uploadType=media&name=x", body=data)
            conn.getresponse().read()
        conn.close()
        server.knobs = Knobs()
        assert Raw(server.url)("GET", object_path("x", "cut-bucket"))[0] == 404  # nothing half-made


def test_gcsfs_rides_through_faults(fake_gcs_server):
    """gcsfs's own retries recover from injected 503/429s and cut downloads."""
    import gcsfs.core

    fs = gcsfs.core.GCSFileSystem(token="anon", endpoint_url=fake_gcs_server.url, skip_instance_cache=True)
    fs.mkdir("fault-bucket")
    data = os.urandom(2_000_000)
    fs.pipe("fault-bucket/o", data)
    fake_gcs_server.knobs = Knobs(error_rate=0.2, cut_rate=0.3, seed=6)
    rng = random.Random(0)
    for _ in range(4):
        start = rng.randrange(len(data) - 1)
        end = rng.randrange(start + 1, len(data) + 1)
        assert fs.cat_file("fault-bucket/o", start=start, end=end) == data[start:end]
    assert fake_gcs_server.faults.injected_cuts >= 1 and fake_gcs_server.faults.injected_errors >= 1


def test_tpudata_reads_every_record_exactly_once_with_5pct_faults(fake_gcs_server):
    """A sharded TFRecord dataset read through tpudata over gs:// with 5 % injected faults."""
    from tpudata import TFRecordWriter, read_records, storage

    storage.gcs_filesystem().mkdir("dataset-bucket")
    rng = random.Random(5)
    expected = []
    for shard in range(6):
        url = f"gs://dataset-bucket/train/data-{shard:05d}-of-00006.tfrecord"
        with TFRecordWriter(url) as w:
            for i in range(300):
                record = f"shard {shard} record {i} ".encode() + rng.randbytes(rng.randint(0, 2000))
                w.write(record)
                expected.append(record)
    errors = cuts = 0
    for attempt in range(4):  # until both kinds of fault have hit a read (usually the first pass)
        fake_gcs_server.knobs = Knobs(error_rate=0.05, cut_rate=0.05, seed=2024 + attempt)
        got = list(read_records("gs://dataset-bucket/train/data-*", buffer_size=64 * 1024))
        assert len(got) == len(expected)
        assert got == expected  # every record, once, in order
        errors += fake_gcs_server.faults.injected_errors
        cuts += fake_gcs_server.faults.injected_cuts
        if errors and cuts:
            break
    assert errors >= 1 and cuts >= 1, (errors, cuts)
