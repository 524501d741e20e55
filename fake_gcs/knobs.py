"""Realism knobs: first-byte latency, per-connection bandwidth cap, seeded fault injection."""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Knobs:
    """How far from a perfect local server to behave.

    latency_ms: delay before the first response byte; jitter_ms adds uniform 0..jitter on top.
    bandwidth_mbps: cap per connection, in MB/s (10**6 bytes), for request and response bodies.
    error_rate: fraction of requests answered 503 or 429 (retryable) instead of being served.
    cut_rate: fraction of media bodies (downloads and uploads) whose connection is cut half-way.
    seed: makes the fault sequence reproducible (per server, in request order).
    """

    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    bandwidth_mbps: float | None = None
    error_rate: float = 0.0
    cut_rate: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.latency_ms < 0 or self.jitter_ms < 0:
            raise ValueError("latency_ms and jitter_ms must be >= 0")
        if self.bandwidth_mbps is not None and self.bandwidth_mbps <= 0:
            raise ValueError("bandwidth_mbps must be > 0 (or None for no cap)")
        for name in ("error_rate", "cut_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")

    @property
    def active(self) -> bool:
        return bool(
            self.latency_ms or self.jitter_ms or self.bandwidth_mbps or self.error_rate or self.cut_rate
        )


class Faults:
    """Thread-safe, seeded decisions for one server."""

    def __init__(self, knobs: Knobs) -> None:
        self.knobs = knobs
        self._rng = random.Random(knobs.seed)
        self._lock = threading.Lock()
        self.injected_errors = 0
        self.injected_cuts = 0

    def first_byte_delay(self) -> float:
        """Seconds to wait before answering."""
        k = self.knobs
        if not k.latency_ms and not k.jitter_ms:
            return 0.0
        with self._lock:
            jitter = self._rng.uniform(0, k.jitter_ms) if k.jitter_ms else 0.0
        return (k.latency_ms + jitter) / 1000.0

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
    """A per-connection byte budget of ``mbps`` MB/s; :meth:`__call__` sleeps as needed."""

    def __init__(self, mbps: float) -> None:
        self.rate = mbps * 1e6
        self._start = time.monotonic()
        self._sent = 0

    def __call__(self, nbytes: int) -> None:
        self._sent += nbytes
        due = self._start + self._sent / self.rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        elif delay < -1.0:  # idle for a while: no credit for the idle time
            self._start = time.monotonic()
            self._sent = 0
