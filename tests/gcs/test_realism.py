"""Latency paid per request under a bandwidth cap, per-request rate jitter, and max_in_flight.

Only lower bounds on time: a loaded machine can make a request slower, never faster.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from fake_gcs import FakeGCSServer, Knobs
from fake_gcs.handler import PIECE
from fake_gcs.knobs import BURST_S, Faults, Throttle
from tests.gcs.helpers import Raw, bucket_with_object, object_path


class _Sleeps:
    """A Throttle ``sleep`` that records when each sleep would end, instead of sleeping."""

    def __init__(self) -> None:
        self.end = 0.0

    def __call__(self, seconds: float) -> None:
        self.end = max(self.end, time.monotonic() + seconds)


def test_throttle_gives_no_credit_for_idle_time_between_requests():
    sleeps = _Sleeps()
    throttle = Throttle(10, sleep=sleeps)  # 10 MB/s: 1 MB takes 0.1 s
    t0 = time.monotonic()
    throttle.begin()
    throttle(1_000_000)
    assert sleeps.end >= t0 + 0.1
    time.sleep(0.15)  # idle (or a latency sleep) between two requests
    t0 = time.monotonic()
    throttle.begin()
    throttle(1_000_000)
    assert sleeps.end >= t0 + 0.1  # the old limiter credited up to 1 s of idle time here
    time.sleep(0.15)  # a stall inside one transfer: at most BURST_S of catch-up
    t0 = time.monotonic()
    throttle(1_000_000)
    assert sleeps.end >= t0 + 0.1 - BURST_S


def test_throttle_rate_factor_and_jitter_are_seeded():
    sleeps = _Sleeps()
    throttle = Throttle(10, sleep=sleeps)
    t0 = time.monotonic()
    throttle.begin(0.5)  # half the cap: 1 MB takes 0.2 s
    throttle(1_000_000)
    assert sleeps.end >= t0 + 0.2
    knobs = Knobs(bandwidth_mbps=10, bandwidth_jitter=0.5, seed=3)
    seq = _draws(knobs, 50)
    other = Knobs(bandwidth_mbps=10, bandwidth_jitter=0.5, seed=4)
    assert seq == _draws(knobs, 50) and seq != _draws(other, 50)
    assert all(0.5 <= f <= 1.5 for f in seq) and max(seq) - min(seq) > 0.3
    assert Faults(Knobs(bandwidth_mbps=10)).rate_factor() == 1.0
    assert Faults(Knobs(bandwidth_jitter=0.5)).rate_factor() == 1.0  # no cap: nothing to vary
    for bad in (dict(bandwidth_jitter=1.0), dict(bandwidth_jitter=-0.1), dict(max_in_flight=0)):
        with pytest.raises(ValueError):
            Knobs(**bad)


def test_each_keep_alive_request_pays_latency_then_streams_at_the_cap():
    """3 sequential 1 MB reads on one connection, 100 ms latency, 10 MB/s: at least 3 x (0.1 + ~0.07) s."""
    size, rate, latency, n = 1_000_000, 10e6, 0.1, 3
    data = os.urandom(size)
    with FakeGCSServer(port=0) as server:
        bucket_with_object(server.url, "lat-bucket", "o", data)
        server.knobs = Knobs(latency_ms=latency * 1000, bandwidth_mbps=rate / 1e6)
        raw = Raw(server.url)
        t0 = time.perf_counter()
        for _ in range(n):
            status, _, body = raw("GET", object_path("o", "lat-bucket") + "?alt=media")
            assert status == 200 and body == data
        elapsed = time.perf_counter() - t0
        raw.close()
        assert server.stats()["connections"]["max_requests_per_connection"] == n  # one connection
    # the client has the last bytes once the last piece is written: that piece's time may not show
    assert elapsed >= n * (latency + (size - PIECE) / rate), elapsed  # the old limiter: ~n * latency


def _draws(knobs: Knobs, n: int) -> list[float]:
    faults = Faults(knobs)
    return [faults.rate_factor() for _ in range(n)]


def test_bandwidth_jitter_varies_each_requests_rate():
    size, cap, n = 1_000_000, 20e6, 4
    data = os.urandom(size)
    knobs = Knobs(bandwidth_mbps=cap / 1e6, bandwidth_jitter=0.9, seed=4)
    factors = _draws(knobs, n)  # the server draws the same: one per request, from the seed
    nominal = n * (size - PIECE) / cap
    expected = sum((size - PIECE) / (cap * f) for f in factors)
    assert expected > 2 * nominal  # this seed draws mostly slow requests (0.52, 0.29, 0.81, 0.38)
    with FakeGCSServer(port=0) as server:
        bucket_with_object(server.url, "jit-bucket", "o", data)
        server.knobs = knobs
        raw = Raw(server.url)
        t0 = time.perf_counter()
        for _ in range(n):
            assert raw("GET", object_path("o", "jit-bucket") + "?alt=media")[2] == data
        elapsed = time.perf_counter() - t0
        raw.close()
    assert elapsed >= expected, (elapsed, expected)


def _concurrent_gets(url: str, n: int) -> list[int]:
    """``n`` clients, connected first, each sending one GET at the same moment; their statuses."""
    raws = [Raw(url) for _ in range(n)]
    for raw in raws:
        raw.conn.connect()
    barrier = threading.Barrier(n)
    statuses: list[int] = []

    def get(raw: Raw) -> None:
        barrier.wait(10)
        statuses.append(raw("GET", "/storage/v1/b")[0])
        raw.close()

    threads = [threading.Thread(target=get, args=(raw,)) for raw in raws]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return statuses


def test_max_in_flight_queues_the_excess():
    with FakeGCSServer(port=0, latency_ms=200, max_in_flight=2) as server:
        t0 = time.perf_counter()
        statuses = _concurrent_gets(server.url, 6)
        elapsed = time.perf_counter() - t0
        got = server.stats()["in_flight"]
    assert statuses == [200] * 6
    assert got["peak"] <= 2 and got["peak_queued"] >= 1 and got["queued"] == 0
    assert elapsed >= 3 * 0.2  # 6 requests, 2 at a time, 200 ms each


def test_without_a_limit_nothing_queues(fake_gcs_server):
    fake_gcs_server.knobs = Knobs(latency_ms=100)
    assert _concurrent_gets(fake_gcs_server.url, 4) == [200] * 4
    got = fake_gcs_server.stats()
    assert got["in_flight"]["peak_queued"] == 0 and got["requests"]["total"] == 4
