"""Realism knobs: first-byte latency, per-connection bandwidth cap, concurrency, seeded faults."""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable

logger = logging.getLogger(__name__)

BURST_S = 0.02  # the most idle time a throttled transfer may catch up on (timer slack, load)


@dataclass(frozen=True)
class Knobs:
    """How far from a perfect local server to behave.

    latency_ms: delay before the first response byte of every request; jitter_ms adds uniform
    0..jitter on top.
    bandwidth_mbps: cap per connection, in MB/s (10**6 bytes), for request and response bodies.
    Each request pays its latency, then streams at the cap from its first body byte: idle time
    and the latency sleep earn no credit (at most ``BURST_S`` of catch-up within a transfer).
    error_rate: fraction of requests answered 503 or 429 (retryable) instead of being served.
    cut_rate: fraction of media bodies (downloads and uploads) whose connection is cut half-way.
    seed: makes the fault sequence reproducible (per server, in request order).
    bandwidth_jitter: per-request throughput variance: each request streams at
    ``bandwidth_mbps * U(1 - j, 1 + j)`` (drawn from the seeded generator); 0 <= j < 1.
    max_in_flight: requests served at once (None: no limit); more wait in a queue, as behind
    a real front end, until a slot frees (or their client goes away).
    """

    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    bandwidth_mbps: float | None = None
    error_rate: float = 0.0
    cut_rate: float = 0.0
    seed: int | None = None
    bandwidth_jitter: float = 0.0
    max_in_flight: int | None = None

    def __post_init__(self) -> None:
        if self.latency_ms < 0 or self.jitter_ms < 0:
            raise ValueError("latency_ms and jitter_ms must be >= 0")
        if self.bandwidth_mbps is not None and self.bandwidth_mbps <= 0:
            raise ValueError("bandwidth_mbps must be > 0 (or None for no cap)")
        for name in ("error_rate", "cut_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")
        if not 0.0 <= self.bandwidth_jitter < 1.0:
            raise ValueError(f"bandwidth_jitter must be >= 0 and < 1, got {self.bandwidth_jitter}")
        if self.max_in_flight is not None and self.max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1 (or None for no limit), got {self.max_in_flight}")

    @property
    def active(self) -> bool:
        return bool(
            self.latency_ms
            or self.jitter_ms
            or self.bandwidth_mbps
            or self.error_rate
            or self.cut_rate
            or self.max_in_flight
        )


class Faults:
    """Thread-safe, seeded decisions for one server (and its in-flight slots)."""

    def __init__(self, knobs: Knobs) -> None:
        self.knobs = knobs
        self._rng = random.Random(knobs.seed)
        self._lock = threading.Lock()
        self.injected_errors = 0
        self.injected_cuts = 0
        self.slots = threading.Semaphore(knobs.max_in_flight) if knobs.max_in_flight else None

    def first_byte_delay(self) -> float:
        """Seconds to wait before answering."""
        k = self.knobs
        if not k.latency_ms and not k.jitter_ms:
            return 0.0
        with self._lock:
            jitter = self._rng.uniform(0, k.jitter_ms) if k.jitter_ms else 0.0
        return (k.latency_ms + jitter) / 1000.0

    def rate_factor(self) -> float:
        """This request's multiplier on the per-connection rate (1.0 without bandwidth_jitter)."""
        j = self.knobs.bandwidth_jitter
        if not j or not self.knobs.bandwidth_mbps:
            return 1.0
        with self._lock:
            return self._rng.uniform(1.0 - j, 1.0 + j)

    def error_status(self) -> int | None:
        """503 or 429 for a request that should fail, else None."""
        if not self.knobs.error_rate:
            return None
        with self._lock:
            if self._rng.random() >= self.knobs.error_rate:
                return None
            self.injected_errors += 1
            return 503 if self._rng.random() < 0.5 else 429

    def cut_point(self, length: int) -> int | None:
        """Where to cut a body of ``length`` bytes (0 <= cut < length), or None."""
        if not self.knobs.cut_rate or length <= 0:
            return None
        with self._lock:
            if self._rng.random() >= self.knobs.cut_rate:
                return None
            self.injected_cuts += 1
            return self._rng.randrange(length)


class Throttle:
    """Paces one connection's bodies at ``mbps`` MB/s; :meth:`__call__` sleeps as needed.

    :meth:`begin` starts each request afresh (no credit from idle time or the latency sleep);
    within a transfer, a server that fell behind catches up by at most ``burst_s`` seconds'
    worth of bytes, so N bytes never take less than ``N / rate - burst_s``.
    """

    def __init__(
        self, mbps: float, burst_s: float = BURST_S, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.base_rate = mbps * 1e6
        self.rate = self.base_rate
        self.burst_s = burst_s
        self.sleep = sleep
        self._due = time.monotonic()

    def begin(self, factor: float = 1.0) -> None:
        """A new request: rate ``factor`` times the cap, and no credit carried over."""
        self.rate = self.base_rate * factor
        self._due = time.monotonic()

    def restart(self) -> None:
        """Drop any credit (after the first-byte latency sleep)."""
        self._due = time.monotonic()

    def __call__(self, nbytes: int) -> None:
        now = time.monotonic()
        self._due = max(self._due, now - self.burst_s) + nbytes / self.rate
        delay = self._due - now
        if delay > 0:
            self.sleep(delay)
