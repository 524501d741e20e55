"""FakeGCSServer: the HTTP server in a thread (tests, demos) or in the foreground (CLI)."""

from __future__ import annotations

import logging
import os
import socket
import threading
from http.server import ThreadingHTTPServer

from fake_gcs.app import App, Limits
from fake_gcs.blobs import DiskBackend, MemoryBackend
from fake_gcs.handler import Handler
from fake_gcs.knobs import Faults, Knobs
from fake_gcs.stats import Stats
from fake_gcs.store import Store

logger = logging.getLogger(__name__)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, address, app: App, faults: Faults) -> None:
        self.app = app
        self.faults = faults
        self.stats = Stats()
        self._connections: set[socket.socket] = set()
        self._conn_lock = threading.Lock()
        self.stopping = app.stopping  # wakes injected stalls when the server stops
        super().__init__(address, Handler)

    @property
    def thread_prefix(self) -> str:
        """Connection threads are named ``fake_gcs:PORT conn:CLIENT_PORT``."""
        return f"fake_gcs:{self.server_address[1]} conn:"

    @property
    def host_port(self) -> str:
        host, port = self.server_address[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def track(self, conn: socket.socket, alive: bool) -> None:
        with self._conn_lock:
            if alive:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def close_connections(self) -> None:
        """Cut every open keep-alive connection (so a stopped server really stops answering)."""
        with self._conn_lock:
            conns = list(self._connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request, client_address) -> None:
        logger.debug("connection from %s ended with an error", client_address, exc_info=True)


class _HTTPServer6(_HTTPServer):
    address_family = socket.AF_INET6


class FakeGCSServer:
    """A GCS JSON API server.

    >>> with FakeGCSServer(port=0) as server:
    ...     server.url.startswith("http://127.0.0.1:")
    True

    ``data_dir`` keeps objects on disk (they survive a restart); without it everything lives in
    memory. The realism knobs (see :class:`~fake_gcs.knobs.Knobs`) can be given one by one or
    as ``knobs=``, and changed while running through :attr:`knobs`. :meth:`stats` counts
    requests by kind, connections and requests in flight (as ``GET /_stats`` does).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        data_dir: str | os.PathLike | None = None,
        *,
        latency_ms: float = 0.0,
        jitter_ms: float = 0.0,
        bandwidth_mbps: float | None = None,
        error_rate: float = 0.0,
        cut_rate: float = 0.0,
        seed: int | None = None,
        bandwidth_jitter: float = 0.0,
        max_in_flight: int | None = None,
        knobs: Knobs | None = None,
        limits: Limits | None = None,
        max_object_size: int | None = None,
    ) -> None:
        if knobs is None:
            knobs = Knobs(
                latency_ms,
                jitter_ms,
                bandwidth_mbps,
                error_rate,
                cut_rate,
                seed,
                bandwidth_jitter,
                max_in_flight,
            )
        if limits is None:
            limits = Limits() if max_object_size is None else Limits(max_object_size=max_object_size)
        backend = DiskBackend(os.fspath(data_dir)) if data_dir is not None else MemoryBackend()
        self.store = Store(backend)
        self.app = App(self.store, limits)
        self.faults = Faults(knobs)
        cls = _HTTPServer6 if ":" in host else _HTTPServer
        self._httpd = cls((host, port), self.app, self.faults)
        self._thread: threading.Thread | None = None
        self.data_dir = os.fspath(data_dir) if data_dir is not None else None

    @property
    def knobs(self) -> Knobs:
        return self.faults.knobs

    @knobs.setter
    def knobs(self, knobs: Knobs) -> None:
        """Swap the realism knobs (applies to requests and connections from now on)."""
        self.faults = Faults(knobs)
        self._httpd.faults = self.faults

    def stats(self) -> dict:
        """Request, connection and in-flight counters: the JSON of ``GET /_stats``."""
        return self._httpd.stats.snapshot()

    def connection_threads(self) -> int:
        """How many threads serve this server's connections now (one per open connection)."""
        prefix = self._httpd.thread_prefix
        return sum(1 for t in threading.enumerate() if t.name.startswith(prefix))

    def reset_stats(self) -> None:
        """Zero the counters (as ``POST /_stats/reset`` does)."""
        self._httpd.stats.reset()

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def host_port(self) -> str:
        """``host:port``, the value for ``STORAGE_EMULATOR_HOST`` without the scheme."""
        return self._httpd.host_port

    @property
    def url(self) -> str:
        """``http://host:port``: the value to export as ``STORAGE_EMULATOR_HOST``."""
        return f"http://{self.host_port}"

    def start(self) -> "FakeGCSServer":
        """Serve in a daemon thread; returns self."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.1},
                name=f"fake_gcs:{self.port}",
                daemon=True,
            )
            self._thread.start()
            logger.info("fake_gcs serving at %s", self.url)
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread until :meth:`stop` (or KeyboardInterrupt)."""
        logger.info("fake_gcs serving at %s", self.url)
        try:
            self._httpd.serve_forever(poll_interval=0.2)
        finally:
            self._httpd.close_connections()

    def stop(self) -> None:
        """Stop accepting, cut open connections, release the port."""
        self._httpd.stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._httpd.close_connections()
        self._httpd.server_close()

    def __enter__(self) -> "FakeGCSServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
