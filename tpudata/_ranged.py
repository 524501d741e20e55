"""One pool of ranged reads shared by every gs:// object a process reads.

A :class:`~tpudata._objects.PinnedObject` read front to back (a TFRecord stream) keeps a window of
``chunk_bytes`` ranged GETs ahead of its reader; all windows draw on one :class:`RangePool`:

- at most ``connections`` requests run at once (worker threads, each with keep-alive HTTP
  connections of its own), so 8 files read in parallel, or one file read alone, keep the link
  busy (parallel ranges of one object);
- the pool picks the next request in the order the readers will want the bytes: first a range a
  reader is waiting for, then the range nearest ahead of its reader's position, the object opened
  first breaking ties (the files an interleave reads now before those it opened ahead);
- memory is bounded: chunk buffers (running and fetched, not yet read) take at most ``max_bytes``
  in all, plus one chunk for each reader that waits on a range it needs now; a reader's window
  is at most ``window_bytes``. Buffers are reused (no fresh pages per chunk).

Requests go out on plain ``http.client`` connections (the gcsfs filesystem provides the URL, the
auth headers and ``userProject``): a response is read straight into its chunk with ``readinto``,
with the GIL released during ``recv``. A filesystem given ``session_kwargs`` (a proxy, its own
connector) is read through its own ``cat_file`` instead, still from the pool's threads.

Errors travel to the reader that reaches the range: HTTP statuses as :class:`HTTPStatusError`
(404 a ``FileNotFoundError``, 401/403 a ``PermissionError``), so the reader's exact-byte retries
and the generation checks work as for any read. The pool itself only retries a request whose
reused keep-alive connection turned out closed before any byte came back.

>>> pool = get_pool()
>>> pool.connections >= 1
True
"""

from __future__ import annotations

import http.client
import logging
import os
import socket
import struct
import sys
import threading
import time
from typing import Callable
from urllib.parse import urlsplit

import numpy as np

logger = logging.getLogger(__name__)

CONNECTIONS = 32
MAX_BYTES = 256 << 20
WINDOW_BYTES = 64 << 20
CHUNK_BYTES = 8 << 20
START_RANGES = 2  # a new reader asks for this many ranges at once, one more per range it reads
IDLE_EXIT_S = 10.0  # a worker with nothing to do for this long ends (a new read starts one again)
TIMEOUT_S = 60.0
_PIECE = 1 << 20  # a response is read in pieces of this size, so a cancelled range stops early
_BODY_PIECE = 4 << 20  # (straight from the socket: one GIL release each)


class HTTPStatusError(OSError):
    """An HTTP error status from a ranged GET (``status``/``code`` hold it)."""

    def __init__(self, status: int, url: str, body: bytes = b""):
        text = body.decode("utf-8", "replace").strip()[:300]
        super().__init__(f"HTTP {status} from GET {url}" + (f": {text}" if text else ""))
        self.status = self.code = status


class NotFoundStatus(HTTPStatusError, FileNotFoundError):
    """404: the object (or the listed generation of it) is gone."""


class DeniedStatus(HTTPStatusError, PermissionError):
    """401/403: the credentials may not read the object."""


def _status_error(status: int, url: str, body: bytes) -> HTTPStatusError:
    cls = NotFoundStatus if status == 404 else DeniedStatus if status in (401, 403) else HTTPStatusError
    return cls(status, url, body)


class Range:
    """One ranged GET: bytes ``[start, end)`` of an object, fetched into ``buf`` by the pool."""

    __slots__ = ("stream", "start", "end", "buf", "done", "error", "waited", "cancelled", "running")

    def __init__(self, stream: "Stream", start: int, end: int):
        self.stream = stream
        self.start = start
        self.end = end
        self.buf = None
        self.done = self.waited = self.cancelled = self.running = False
        self.error: BaseException | None = None


class Stream:
    """The read-ahead window of one object read front to back (see :class:`RangePool`).

    ``fetch(conns, start, end, out)`` fills memoryview ``out`` with bytes ``[start, end)``
    (``conns``: the calling worker's connection cache); ``size`` bounds the ranges.
    """

    def __init__(self, pool: "RangePool", fetch: Callable, size: int, chunk_bytes: int,
                 window_bytes: int):
        self.pool = pool
        self.fetch = fetch
        self.size = size
        self.chunk = max(1, int(chunk_bytes))
        self.window = max(self.chunk, int(window_bytes))
        self.pos = 0  # the reader's position
        self.ranges: list[Range] = []  # consecutive, from the one holding ``pos`` on
        self.consumed = 0  # ranges read to their end: the window grows with them (2, 3, ...)
        self.seq = pool._next_seq()
        self.closed = False

    def readinto(self, pos: int, out: memoryview) -> int:
        """Copy bytes from ``pos`` into ``out``: waits for the first range it needs, then takes
        what the following ranges hold already. Returns the count (0 at the end)."""
        pool = self.pool
        n = min(len(out), self.size - pos)
        if n <= 0:
            return 0
        got = 0
        dst = np.frombuffer(out, np.uint8)
        with pool.lock:
            if self.pos != pos or (self.ranges and self.ranges[0].start > pos):
                self._drop_ranges()  # a seek: start the window again here
            self.pos = pos
            self._extend()
        while got < n:
            with pool.lock:
                r = self.ranges[0]
                if not r.done:
                    if got:
                        break  # return what is here; the next call waits
                    r.waited = True
                    pool._wake()
                    while not r.done:
                        pool.ready.wait()
                if r.error is not None:
                    error = r.error
                    self._drop_ranges()
                    raise error
            # only this stream's reader takes its ranges: copy without the lock (numpy drops
            # the GIL for it too)
            a = self.pos - r.start
            k = min(n - got, r.end - self.pos)
            dst[got:got + k] = np.frombuffer(r.buf, np.uint8, k, a)
            got += k
            self.pos += k
            if self.pos >= r.end:
                with pool.lock:
                    self.ranges.pop(0)
                    self.consumed += 1
                    pool._give_back(r)
                    self._extend()
                    if not self.ranges:
                        break
        return got

    def _extend(self) -> None:
        """Queue ranges until the window from ``pos`` is covered (caller holds the lock)."""
        end = self.ranges[-1].end if self.ranges else self.pos
        # a new reader asks for START_RANGES ranges, one more per range it reads, up to the
        # window: the first bytes of every file come before the read-ahead of any
        window = min(self.window, (START_RANGES + self.consumed) * self.chunk)
        limit = min(self.size, self.pos + window)
        added = False
        while end < limit or not self.ranges and end < self.size:
            r = Range(self, end, min(self.size, end + self.chunk))
            self.ranges.append(r)
            self.pool.pending.append(r)
            end = r.end
            added = True
        if added:
            self.pool._wake()

    def _drop_ranges(self) -> None:
        for r in self.ranges:
            self.pool._cancel(r)
        self.ranges = []

    def close(self) -> None:
        """Cancel what is queued, drop what was fetched (a running range stops early)."""
        with self.pool.lock:
            if not self.closed:
                self.closed = True
                self._drop_ranges()


class RangePool:
    """Worker threads that run the :class:`Range` requests of every :class:`Stream`."""

    def __init__(self, connections: int = CONNECTIONS, max_bytes: int = MAX_BYTES):
        if connections < 1:
            raise ValueError(f"connections must be at least 1, not {connections}")
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, not {max_bytes}")
        self.connections = int(connections)
        self.max_bytes = int(max_bytes)
        self.lock = threading.Lock()
        self.work = threading.Condition(self.lock)  # idle workers wait here
        self.ready = threading.Condition(self.lock)  # readers wait here for their range
        self.pending: list[Range] = []
        self.workers = 0
        self.idle = 0
        self.held = 0  # bytes of chunk buffers handed out (running or fetched, not yet read)
        self.max_held = 0
        self.free: list[bytearray] = []  # buffers to reuse
        self._seq = 0
        self.requests = self.bytes = self.running = self.max_running = 0

    def _next_seq(self) -> int:
        with self.lock:
            self._seq += 1
            return self._seq

    def stream(self, fetch: Callable, size: int, chunk_bytes: int = CHUNK_BYTES,
               window_bytes: int = WINDOW_BYTES) -> Stream:
        """A read-ahead window over an object of ``size`` bytes that ``fetch`` reads."""
        return Stream(self, fetch, size, chunk_bytes, window_bytes)

    def stats(self) -> dict:
        """Requests and bytes fetched, requests running now and at most, bytes held now and
        at most."""
        with self.lock:
            return {"requests": self.requests, "bytes": self.bytes, "running": self.running,
                    "max_running": self.max_running, "held_bytes": self.held,
                    "max_held_bytes": self.max_held,
                    "workers": self.workers, "connections": self.connections,
                    "max_bytes": self.max_bytes}

    # -- scheduling (all under ``lock``) --------------------------------------------------------
    def _wake(self) -> None:
        if self.idle:
            self.work.notify()
        elif self.workers < self.connections:
            self.workers += 1
            threading.Thread(target=self._run, name=f"tpudata-gcs-read-{self.workers}",
                             daemon=True).start()

    def _pick(self) -> Range | None:
        """The next range to fetch: a waited-for one first, else the nearest ahead of its
        reader (the older stream first) while the byte budget allows."""
        best = None
        best_key = None
        for r in self.pending:
            key = (not r.waited, r.start - r.stream.pos, r.stream.seq)
            if best_key is None or key < best_key:
                best, best_key = r, key
        if best is None:
            return None
        size = best.end - best.start
        if not best.waited and self.held + size > self.max_bytes:
            return None
        self.pending.remove(best)
        self.held += size
        self.max_held = max(self.max_held, self.held)
        best.buf = self._buffer(size)
        best.running = True
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        return best

    def _buffer(self, size: int) -> bytearray:
        for i, b in enumerate(self.free):
            if len(b) >= size:
                return self.free.pop(i)
        return bytearray(size)

    def _give_back(self, r: Range) -> None:
        if r.buf is not None:
            self.held -= r.end - r.start
            if len(self.free) * CHUNK_BYTES < self.max_bytes:
                self.free.append(r.buf)
            r.buf = None
            if self.pending:
                self._wake()  # budget freed: a worker may start the next range

    def _cancel(self, r: Range) -> None:
        r.cancelled = True
        if r.running:
            return  # its worker gives the buffer back when it stops
        if not r.done:
            self.pending.remove(r)
        self._give_back(r)

    # -- workers --------------------------------------------------------------------------------
    def _run(self) -> None:
        conns: dict = {}
        try:
            while True:
                with self.lock:
                    r = self._pick()
                    while r is None:
                        self.idle += 1
                        timed_out = not self.work.wait(IDLE_EXIT_S)
                        self.idle -= 1
                        r = self._pick()
                        if r is None and timed_out:
                            self.workers -= 1
                            if not self.workers:
                                self.free.clear()  # idle: give the buffers back too
                            return
                error = None
                try:
                    if not r.cancelled:
                        r.stream.fetch(conns, r.start, r.end, memoryview(r.buf)[: r.end - r.start],
                                       lambda r=r: r.cancelled)
                except BaseException as exc:  # handed to the reader that reaches this range
                    error = exc
                    for c in conns.values():
                        c.close()
                    conns.clear()
                with self.lock:
                    self.running -= 1
                    r.running = False
                    r.done = True
                    r.error = error
                    if error is None:
                        self.requests += 1
                        self.bytes += r.end - r.start
                    if r.cancelled:
                        self._give_back(r)
                    self.ready.notify_all()
        finally:
            for c in conns.values():
                c.close()


# -- HTTP --------------------------------------------------------------------------------------
def _connection(conns: dict, scheme: str, netloc: str, timeout: float):
    key = (scheme, netloc)
    conn = conns.get(key)
    if conn is None:
        cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        conn = conns[key] = cls(netloc, timeout=timeout)
    return conn


def get_range(conns: dict, url: str, headers: dict, start: int, end: int, out: memoryview,
              cancelled: Callable[[], bool] = lambda: False, timeout: float = TIMEOUT_S) -> None:
    """GET bytes ``[start, end)`` of ``url`` into ``out`` on a keep-alive connection from
    ``conns``. Raises :class:`HTTPStatusError` for an error status, ``EOFError`` when the
    response is short (the object is shorter than asked)."""
    parts = urlsplit(url)
    target = parts.path + ("?" + parts.query if parts.query else "")
    head = dict(headers, Range=f"bytes={start}-{end - 1}")
    for attempt in (0, 1):
        conn = _connection(conns, parts.scheme, parts.netloc, timeout)
        reused = conn.sock is not None
        try:
            conn.request("GET", target, headers=head)
            resp = conn.getresponse()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            conn.close()
            conns.pop((parts.scheme, parts.netloc), None)
            if reused and attempt == 0:
                continue  # a keep-alive connection the server had closed: once more, fresh
            raise
        except http.client.HTTPException as exc:  # a garbled reply: worth another try
            conn.close()
            conns.pop((parts.scheme, parts.netloc), None)
            raise ConnectionResetError(f"bad HTTP reply to GET {url}: {exc!r}") from exc
        break
    try:
        if resp.status not in (200, 206):
            raise _status_error(resp.status, url, resp.read())
        got, n = 0, end - start
        if resp.status == 200 and (start or (resp.length is not None and resp.length != n)):
            raise HTTPStatusError(200, url, (
                b"the server ignored the Range header (a gzip-encoded object served "
                b"decompressed?): store TFRecord files without Content-Encoding"))
        if resp.length is not None and resp.length < n:  # the server says there is less
            raise EOFError(f"{url}: {resp.length} of {n} bytes at byte {start}")
        if resp.length == n and not resp.chunked and _WAITALL:
            if _read_body(conn, resp, out[:n], timeout, cancelled):
                resp.close()  # the body is read: the connection serves the next request
            return
        while got < n:
            if cancelled():
                conn.close()
                return
            try:
                k = resp.readinto(out[got:min(n, got + _PIECE)])
            except http.client.HTTPException as exc:
                raise ConnectionResetError(f"bad HTTP body from GET {url}: {exc!r}") from exc
            if not k:  # the connection ended early: worth another try
                raise ConnectionResetError(
                    f"connection closed after {got} of {n} bytes at byte {start} of {url}")
            got += k
        if resp.length:  # the server sent more than asked for: this connection is spent
            conn.close()
    except BaseException:
        conn.close()
        raise
    finally:
        if resp.will_close:
            conn.close()


_WAITALL = getattr(socket, "MSG_WAITALL", 0) and hasattr(socket, "SO_RCVTIMEO") and sys.platform == "linux"


def _read_body(conn, resp, out: memoryview, timeout: float, cancelled) -> bool:
    """Read a response body of exactly ``len(out)`` bytes into ``out``: what http.client has
    buffered, then straight from the socket in pieces of ``_BODY_PIECE`` with ``MSG_WAITALL``
    (the GIL is released once a piece, not once a TCP segment). False when cancelled (the
    connection is closed then)."""
    n = len(out)
    got = min(n, len(resp.peek(1)))  # bytes http.client read past the headers
    if got:
        got = resp.readinto(out[:got])
    sock = conn.sock
    sock.settimeout(None)  # blocking: MSG_WAITALL waits for the whole piece (SO_RCVTIMEO bounds it)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                    struct.pack("ll", int(timeout), int(timeout % 1 * 1e6)))
    try:
        while got < n:
            if cancelled():
                conn.close()
                return False
            try:
                k = sock.recv_into(out[got:min(n, got + _BODY_PIECE)], 0, socket.MSG_WAITALL)
            except BlockingIOError as exc:  # SO_RCVTIMEO ran out
                raise TimeoutError(f"no bytes for {timeout:g} s after {got} of {n}") from exc
            if not k:
                raise ConnectionResetError(f"connection closed after {got} of {n} bytes")
            got += k
    finally:
        if conn.sock is not None:
            sock.settimeout(timeout)
    return True


_pool: RangePool | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def get_pool() -> RangePool:
    """The process's pool (a new one in a forked child: threads do not survive a fork)."""
    global _pool, _pool_pid, _pool_lock
    pid = os.getpid()
    if _pool_pid != pid:  # first use, or a forked child (whose copy of the lock may be held)
        _pool_lock = threading.Lock()
        _pool, _pool_pid = None, pid
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = RangePool()
    return _pool


def configure(connections: int | None = None, max_bytes: int | None = None) -> RangePool:
    """Replace the process's pool with one of ``connections`` and ``max_bytes`` (reads under
    way finish on the old one)."""
    global _pool, _pool_pid
    old = get_pool()
    with _pool_lock:
        _pool = RangePool(old.connections if connections is None else connections,
                          old.max_bytes if max_bytes is None else max_bytes)
        _pool_pid = os.getpid()
    return _pool


def wait_idle(timeout: float = 10.0) -> bool:
    """Wait until the pool has nothing running or queued (tests)."""
    pool = get_pool()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with pool.lock:
            if not pool.running and not pool.pending:
                return True
        time.sleep(0.01)
    return False


__all__ = ["CHUNK_BYTES", "CONNECTIONS", "DeniedStatus", "HTTPStatusError", "MAX_BYTES",
           "NotFoundStatus", "Range", "RangePool", "Stream", "WINDOW_BYTES", "configure",
           "get_pool", "get_range", "wait_idle"]
