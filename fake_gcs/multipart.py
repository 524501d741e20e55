"""MIME multipart bodies: ``multipart/related`` uploads and ``multipart/mixed`` batches.

Accepts CRLF or bare LF line endings (gcsfs writes LF, google-cloud-storage CRLF). Part
payloads are memoryview slices of the body, not copies.
"""

from __future__ import annotations

import logging
import re

from fake_gcs.errors import bad_request

logger = logging.getLogger(__name__)

_BOUNDARY_RE = re.compile(r'boundary\s*=\s*(?:"([^"]+)"|([^;\s]+))', re.IGNORECASE)
MAX_PARTS = 1000


def boundary_of(content_type: str | None) -> bytes:
    """The boundary parameter of a multipart Content-Type; 400 without one."""
    m = _BOUNDARY_RE.search(content_type or "")
    if not m:
        raise bad_request("Multipart request without a boundary in Content-Type.")
    boundary = m.group(1) or m.group(2)
    if len(boundary) > 200:
        raise bad_request("Multipart boundary too long.")
    return boundary.encode("latin-1", "replace")


def parse_header_block(block: bytes) -> dict[str, str]:
    """``Name: value`` lines -> dict with lower-case names (first occurrence wins)."""
    headers: dict[str, str] = {}
    for line in block.decode("latin-1").splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip():
            headers.setdefault(name.strip().lower(), value.strip())
    return headers


def split_head(data: memoryview) -> tuple[dict[str, str], memoryview]:
    """Split ``headers CRLF CRLF body`` (or LF LF); a part with no blank line is all headers."""
    raw = bytes(data[:65536])
    if raw.startswith(b"\r\n"):
        return {}, data[2:]
    if raw.startswith(b"\n"):
        return {}, data[1:]
    ends = [(i, n) for i, n in ((raw.find(b"\r\n\r\n"), 4), (raw.find(b"\n\n"), 2)) if i >= 0]
    if not ends:
        if len(data) > 65536:
            raise bad_request("Multipart part headers too long.")
        return parse_header_block(raw), data[len(data) :]
    i, n = min(ends)
    return parse_header_block(raw[:i]), data[i + n :]


def split_parts(body: bytes, boundary: bytes) -> list[memoryview]:
    """The raw parts (headers + payload) between the boundaries of ``body``."""
    view = memoryview(body)
    delim = b"--" + boundary
    pos = body.find(delim)
    if pos < 0:
        raise bad_request("Multipart body does not contain its boundary.")
    parts = []
    while True:
        pos += len(delim)
        if body[pos : pos + 2] == b"--":
            return parts
        eol = body.find(b"\n", pos)
        if eol < 0:
            raise bad_request("Multipart body ended early.")
        start = eol + 1
        nxt = body.find(b"\n" + delim, start)
        if nxt < 0:
            raise bad_request("Multipart body is missing its closing boundary.")
        end = nxt - 1 if nxt > start and body[nxt - 1 : nxt] == b"\r" else nxt
        parts.append(view[start:end])
        if len(parts) > MAX_PARTS:
            raise bad_request("Too many parts in a multipart body.")
        pos = nxt + 1


def parse_related(body: bytes, content_type: str) -> list[tuple[dict[str, str], memoryview]]:
    """``[(headers, payload), ...]`` of a ``multipart/related`` or ``multipart/mixed`` body."""
    return [split_head(part) for part in split_parts(body, boundary_of(content_type))]
