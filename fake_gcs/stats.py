"""Request, connection and in-flight counters, for tests that count round trips (``GET /_stats``).

Kinds of request: ``metadata`` (object or bucket GET/HEAD without ``alt=media``), ``list`` (one
per page of objects or buckets), ``media`` (object data reads, ranged or whole), ``upload``
(media, multipart and resumable uploads, each chunk a request), ``batch``, ``emulator`` (the
Retry Test API) and ``other`` (patches, deletes, copies, ACLs, unknown paths...). Requests to
``/_stats`` itself are not counted.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

from fake_gcs.request import Request
from fake_gcs.retry_test import is_media_read

logger = logging.getLogger(__name__)

KINDS = ("metadata", "list", "media", "upload", "batch", "emulator", "other")
_METADATA = frozenset({"storage.objects.get", "storage.buckets.get"})
_LIST = frozenset({"storage.objects.list", "storage.buckets.list"})


def classify(path: str, api: str | None, req: Request | None) -> str:
    """The kind of a request (see the module docstring)."""
    if path.startswith("/upload/"):
        return "upload"
    if api is None:
        if path.startswith(("/retry_test", "/retry_tests")):
            return "emulator"
        if path.startswith("/batch"):
            return "batch"
        return "other"
    if api == "storage.objects.get":
        return "media" if req is not None and is_media_read(req) else "metadata"
    if api in _METADATA:
        return "metadata"
    if api in _LIST:
        return "list"
    if api == "storage.objects.insert":
        return "upload"
    return "other"


class Connection:
    """One connection's request count (since it opened, or since the last reset)."""

    __slots__ = ("requests",)

    def __init__(self) -> None:
        self.requests = 0


class Stats:
    """Thread-safe counters of one server; :meth:`snapshot` is what ``GET /_stats`` answers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[Connection] = set()
        self.in_flight = 0
        self.queued = 0
        self._reset_counters()

    def _reset_counters(self) -> None:
        self.total = 0
        self.by_kind: Counter = Counter({k: 0 for k in KINDS})
        self.by_method: Counter = Counter()
        self.by_api: Counter = Counter()
        self.by_status: Counter = Counter()
        self.ranged_reads = 0
        self.abandoned = 0
        self.bytes_sent = 0
        self.bytes_received = 0
        self.opened = 0
        self.peak_open = len(self._open)
        self.closed_hist: Counter = Counter()  # requests on a connection -> closed connections
        self.peak_in_flight = self.in_flight
        self.peak_queued = self.queued

    def reset(self) -> None:
        """Zero the counters; open connections and requests in flight stay (counted from 0)."""
        with self._lock:
            self._reset_counters()
            for conn in self._open:
                conn.requests = 0

    # ------------------------------------------------------------ connections
    def connection_opened(self) -> Connection:
        conn = Connection()
        with self._lock:
            self._open.add(conn)
            self.opened += 1
            self.peak_open = max(self.peak_open, len(self._open))
        return conn

    def connection_closed(self, conn: Connection) -> None:
        with self._lock:
            if conn in self._open:
                self._open.discard(conn)
                if conn.requests:
                    self.closed_hist[conn.requests] += 1

    # --------------------------------------------------------------- requests
    def request_started(
        self, conn: Connection | None, method: str, kind: str, api: str | None, ranged: bool
    ) -> None:
        """Count a request (before it is answered)."""
        with self._lock:
            self.total += 1
            self.by_kind[kind] += 1
            self.by_method[method] += 1
            if api:
                self.by_api[api] += 1
            if ranged and kind == "media":
                self.ranged_reads += 1
            if conn is not None:
                conn.requests += 1

    def queue(self, delta: int) -> None:
        """A request starts (+1) or stops (-1) waiting for an in-flight slot."""
        with self._lock:
            self.queued += delta
            self.peak_queued = max(self.peak_queued, self.queued)

    def admitted(self) -> None:
        """The request is being served (it holds an in-flight slot, when there is a limit)."""
        with self._lock:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def answering(self, status: int, received: int) -> None:
        """The answer's status is known and the request body was read (``received`` bytes)."""
        with self._lock:
            self.by_status[str(status)] += 1
            self.bytes_received += received

    def request_done(self, admitted: bool, sent: int, gone: bool) -> None:
        """The answer was written (``sent`` body bytes; -1 for none) or the client left."""
        with self._lock:
            if admitted:
                self.in_flight -= 1
            self.bytes_sent += max(sent, 0)
            if gone:
                self.abandoned += 1

    # --------------------------------------------------------------- snapshot
    def snapshot(self) -> dict:
        """All counters as a JSON-ready dict."""
        with self._lock:
            hist = Counter(self.closed_hist)
            for conn in self._open:
                if conn.requests:
                    hist[conn.requests] += 1
            return {
                "requests": {
                    "total": self.total,
                    "by_kind": dict(self.by_kind),
                    "by_method": dict(self.by_method),
                    "by_api": dict(self.by_api),
                    "by_status": dict(self.by_status),
                    "ranged_reads": self.ranged_reads,
                    "abandoned": self.abandoned,
                },
                "connections": {
                    "opened": self.opened,
                    "open": len(self._open),
                    "peak_open": self.peak_open,
                    "requests_per_connection": {str(k): hist[k] for k in sorted(hist)},
                    "max_requests_per_connection": max(hist, default=0),
                },
                "in_flight": {
                    "current": self.in_flight,
                    "peak": self.peak_in_flight,
                    "queued": self.queued,
                    "peak_queued": self.peak_queued,
                },
                "bytes": {"sent": self.bytes_sent, "received": self.bytes_received},
            }
