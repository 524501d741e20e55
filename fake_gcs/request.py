"""Request and response objects shared by the HTTP handler, the API functions and batch."""

from __future__ import annotations

import io
import json
import logging
import re
import socket
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import parse_qsl

from fake_gcs.errors import GCSError, bad_request

logger = logging.getLogger(__name__)

READ_PIECE = 1 << 20  # most body bytes one read asks for: nothing is sized from a declared length
MIN_BODY_RATE = 1024  # bytes/s a body must average once it has taken longer than the body timeout
_RANGE_RE = re.compile(r"^\s*bytes\s*=\s*([0-9]{0,19})\s*-\s*([0-9]{0,19})\s*$", re.IGNORECASE)
_LENGTH_RE = re.compile(r"^[0-9]{1,19}$")
_CHUNK_SIZE_RE = re.compile(rb"^[0-9A-Fa-f]{1,16}$")


class Headers:
    """Case-insensitive header lookup over a list of ``(name, value)`` pairs."""

    def __init__(self, items) -> None:
        self._d: dict[str, str] = {}
        self.conflicting: set[str] = set()  # names sent twice with different values
        for name, value in items:
            key = name.lower()
            if key in self._d and self._d[key] != value:
                self.conflicting.add(key)
            self._d.setdefault(key, value)

    def get(self, name: str, default=None):
        return self._d.get(name.lower(), default)

    def __contains__(self, name: str) -> bool:
        return name.lower() in self._d


class Request:
    """One API request: method, raw path, query parameters, headers and a body to read once."""

    def __init__(
        self,
        method: str,
        path: str,
        query: str,
        headers: Headers,
        rfile=None,
        base_url: str = "",
        throttle: Callable[[int], None] | None = None,
        in_batch: bool = False,
    ) -> None:
        self.method = method.upper()
        self.path = path
        self.headers = headers
        self.base_url = base_url
        self.in_batch = in_batch
        self._rfile = rfile or io.BytesIO()
        self._throttle = throttle
        try:
            pairs = parse_qsl(query, keep_blank_values=True, errors="strict", max_num_fields=200)
        except (ValueError, UnicodeDecodeError):
            raise bad_request("Invalid query string.") from None
        self.params: dict[str, str] = {}
        for key, value in pairs:
            self.params.setdefault(key, value)
        self._pairs = pairs
        self._chunked = "chunked" in (headers.get("Transfer-Encoding") or "").lower()
        length = headers.get("Content-Length")
        if self._chunked:
            self._remaining = 0
        elif length is None:
            self._remaining = 0
        elif _LENGTH_RE.match(length.strip(" \t")) and "content-length" not in headers.conflicting:
            self._remaining = int(length)
        else:  # "+23", "2_3", "", "-0", two different values: 400, and the connection is closed
            self._remaining = 0
            self.bad_length = True
        self.declared_length = None if self._chunked else self._remaining
        self._chunk_left = 0
        self._eof = not self._chunked and self._remaining == 0

    bad_length = False
    slow_after: float | None = None  # seconds after which a body must average MIN_BODY_RATE (handler)
    _t0: float | None = None
    _got = 0
    fault = None  # a fake_gcs.retry_test.Fault the upload code applies to the bytes it receives
    pause: Callable[[float], None] | None = None  # the handler's client-aware sleep (stalls)
    api_method: str | None = None

    def param_values(self, key: str) -> list[str]:
        """Every value of a repeated query parameter, in order."""
        return [v for k, v in self._pairs if k == key]

    def header(self, name: str, default=None):
        return self.headers.get(name, default)

    # ----------------------------------------------------------------- body
    def _read_raw(self, n: int) -> bytes:
        """What the client sent so far, up to ``n`` bytes (one receive: no waiting for all ``n``)."""
        if self._t0 is None:
            self._t0 = time.monotonic()
        data = self._rfile.read1(n)
        self._got += len(data)
        if self._throttle and data:
            self._throttle(len(data))
        if self.slow_after is not None:
            elapsed = time.monotonic() - self._t0
            if elapsed > self.slow_after and self._got < MIN_BODY_RATE * elapsed:
                raise socket.timeout(f"request body slower than {MIN_BODY_RATE} bytes/s")
        return data

    def _next_chunk_size(self) -> int:
        line = self._rfile.readline(1026)
        if not line.endswith(b"\n"):
            raise bad_request("Malformed chunked body.")
        size = line.split(b";", 1)[0].strip(b" \t\r\n")
        if not _CHUNK_SIZE_RE.match(size):  # no sign, no "0x", no "_": hex digits only
            raise bad_request("Malformed chunked body: a chunk size must be hexadecimal digits.")
        return int(size, 16)

    def read_some(self, n: int = READ_PIECE) -> bytes:
        """Up to ``n`` body bytes; ``b""`` at the end. Raises 400 when the body is cut short."""
        if self._eof:
            return b""
        if not self._chunked:
            data = self._read_raw(min(n, self._remaining))
            if not data:
                self._eof = True
                raise bad_request("Request body ended before Content-Length bytes.")
            self._remaining -= len(data)
            self._eof = self._remaining == 0
            return data
        if self._chunk_left == 0:
            size = self._next_chunk_size()
            if size == 0:
                while self._rfile.readline(1026) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                self._eof = True
                return b""
            self._chunk_left = size
        data = self._read_raw(min(n, self._chunk_left))
        if not data:
            self._eof = True
            raise bad_request("Request body ended early.")
        self._chunk_left -= len(data)
        if self._chunk_left == 0:
            self._rfile.readline(3)
        return data

    def iter_body(self, limit: int):
        """Yield the body in pieces of at most READ_PIECE bytes; 413 once more than ``limit`` arrive."""
        total = 0
        if not self._chunked and self._remaining > limit:
            raise GCSError(413, f"Request body exceeds the limit of {limit} bytes.")
        while True:
            piece = self.read_some()
            if not piece:
                return
            total += len(piece)
            if total > limit:
                raise GCSError(413, f"Request body exceeds the limit of {limit} bytes.")
            yield piece

    def read_body(self, limit: int) -> bytes:
        """The whole body (bounded by ``limit``)."""
        return b"".join(self.iter_body(limit))

    def read_json(self, limit: int) -> dict:
        """The body as a JSON object (``{}`` when empty); 400 when it is not one."""
        raw = self.read_body(limit)
        if not raw.strip():
            return {}
        return parse_json_object(raw, "the request body")

    def drain(self, limit: int = 64 << 20) -> bool:
        """Discard what is left of the body; False if it is too big (close the connection)."""
        seen = 0
        try:
            while not self._eof:
                if not self._chunked and self._remaining > limit - seen:
                    return False
                piece = self.read_some(1 << 20)
                seen += len(piece)
                if seen > limit:
                    return False
        except (GCSError, OSError, ValueError):
            return False
        return True

    @property
    def body_done(self) -> bool:
        return self._eof


def parse_json_object(raw, what: str) -> dict:
    """``raw`` as a JSON object; 400 JSON when it is not one (bad syntax, too deep, not an object)."""
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise bad_request(f"Parse Error: {what} is not valid JSON (or is nested too deeply).") from None
    if not isinstance(value, dict):
        raise bad_request(f"Parse Error: {what} must be a JSON object.")
    return value


@dataclass
class Media:
    """A byte range of an open blob, sent without copying the object."""

    reader: object  # fake_gcs.blobs.BlobReader
    start: int
    length: int


@dataclass
class Response:
    status: int = 200
    headers: list = field(default_factory=list)
    body: bytes = b""
    media: Media | None = None

    def close(self) -> None:
        if self.media is not None:
            self.media.reader.close()

    def body_bytes(self) -> bytes:
        """The whole body as bytes (batch responses and tests)."""
        if self.media is None:
            return self.body
        return self.media.reader.read(self.media.start, self.media.length)


def json_response(obj, status: int = 200, headers=None) -> Response:
    body = json.dumps(obj).encode()
    hdrs = [("Content-Type", "application/json; charset=UTF-8")] + list(headers or [])
    return Response(status, hdrs, body)


def empty_response(status: int = 204, headers=None) -> Response:
    return Response(status, list(headers or []), b"")


def error_response(err: GCSError) -> Response:
    if err.status == 304:
        return Response(304, list(err.headers), b"")
    hdrs = [("Content-Type", "application/json; charset=UTF-8")] + err.headers
    return Response(err.status, hdrs, err.to_json())


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``(start, length)`` for a ``Range`` header, or None to send the whole object.

    ``bytes=a-b``, ``bytes=a-`` and ``bytes=-n``; 416 when nothing of it is in the object.
    A range whose end is before its start is ignored, as GCS does; other malformed or
    multi-range headers are 400.
    """
    if header is None:
        return None
    m = _RANGE_RE.match(header)
    if not m or (not m.group(1) and not m.group(2)):
        raise bad_request(f"Malformed Range header: {header[:100]!r}")
    first, last = m.group(1), m.group(2)
    if first:
        start = int(first)
        end = int(last) if last else size - 1
        if last and end < start:
            return None
        if start >= size:
            raise GCSError(
                416,
                "The requested range cannot be satisfied.",
                headers=[("Content-Range", f"bytes */{size}")],
            )
        end = min(end, size - 1)
        return start, end - start + 1
    suffix = int(last)
    if suffix == 0 or size == 0:
        raise GCSError(
            416, "The requested range cannot be satisfied.", headers=[("Content-Range", f"bytes */{size}")]
        )
    suffix = min(suffix, size)
    return size - suffix, suffix
