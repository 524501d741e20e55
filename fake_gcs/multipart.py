"""MIME multipart bodies (RFC 2046): ``multipart/related`` uploads and ``multipart/mixed`` batches.

Parsed exactly by the declared boundary and streamed: a part's payload ends right before the
delimiter, which is the line break before ``--boundary`` plus ``--boundary``. The line break is
the one the client's first boundary line uses: CRLF (google-cloud-storage, RFC 2046) or a bare
LF (gcsfs). So a payload ending in ``\\r``, ``\\r\\n``, ``\\n`` or ``--`` keeps every byte.

>>> body = b"--xx\\n\\nmeta\\n--xx\\nContent-Type: a/b\\n\\nabc\\r\\n--xx--"
>>> [(h, bytes(p)) for h, p in parse_related(body, "multipart/related; boundary=xx")]
[({}, b'meta'), ({'content-type': 'a/b'}, b'abc\\r')]
"""

from __future__ import annotations

import io
import logging
import re
from typing import Callable, Iterator

from fake_gcs.errors import bad_request

logger = logging.getLogger(__name__)

_BOUNDARY_RE = re.compile(r'boundary\s*=\s*(?:"([^"]+)"|([^;\s]+))', re.IGNORECASE)
MAX_PARTS = 1000
MAX_HEADER_BYTES = 65536  # a part's header block, and the preamble before the first boundary
PIECE = 1 << 20  # bytes asked of the source per read


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
    """Split ``headers CRLF CRLF body`` (or LF LF); a block with no blank line is all headers."""
    raw = bytes(data[:MAX_HEADER_BYTES])
    if raw.startswith(b"\r\n"):
        return {}, data[2:]
    if raw.startswith(b"\n"):
        return {}, data[1:]
    ends = [(i, n) for i, n in ((raw.find(b"\r\n\r\n"), 4), (raw.find(b"\n\n"), 2)) if i >= 0]
    if not ends:
        if len(data) > MAX_HEADER_BYTES:
            raise bad_request("Multipart part headers too long.")
        return parse_header_block(raw), data[len(data) :]
    i, n = min(ends)
    return parse_header_block(raw[:i]), data[i + n :]


class MultipartStream:
    """Read a multipart body part by part from ``read(n)`` (``b""`` at the end), in bounded memory.

    Call :meth:`next_headers` (None after the closing delimiter), then iterate
    :meth:`iter_payload` to the end of that part; repeat.
    """

    def __init__(self, read: Callable[[int], bytes], boundary: bytes) -> None:
        self._read = read
        self._buf = bytearray()
        self._eof = False
        self._dash = b"--" + boundary
        self.delimiter: bytes | None = None  # line break + "--" + boundary, known after the first line
        self.done = False
        self.parts = 0

    def _fill(self) -> bool:
        if self._eof:
            return False
        piece = self._read(PIECE)
        if not piece:
            self._eof = True
            return False
        self._buf += piece
        return True

    def _need(self, n: int) -> None:
        while len(self._buf) < n and self._fill():
            pass

    def _start(self) -> None:
        """Skip the preamble and the first boundary line; learn the client's line break."""
        while True:
            if self._buf.startswith(self._dash):
                del self._buf[: len(self._dash)]
                break
            i = self._buf.find(b"\n" + self._dash)
            if i >= 0:
                del self._buf[: i + 1 + len(self._dash)]
                break
            if len(self._buf) > MAX_HEADER_BYTES:
                raise bad_request("Multipart body does not start with its boundary.")
            if not self._fill():
                raise bad_request("Multipart body does not contain its boundary.")
        eol = self._after_delimiter()
        self.delimiter = (eol or b"\r\n") + self._dash

    def _after_delimiter(self) -> bytes | None:
        """Consume what follows a delimiter: ``--`` (the close: None) or padding and a line break."""
        self._need(2)
        if self._buf.startswith(b"--"):
            self.done = True
            return None
        while True:
            i = self._buf.find(b"\n")
            if i >= 0:
                break
            if len(self._buf) > 1024 or not self._fill():
                raise bad_request("Multipart boundary line is malformed.")
        line = bytes(self._buf[:i])
        del self._buf[: i + 1]
        eol = b"\r\n" if line.endswith(b"\r") else b"\n"
        if line.rstrip(b"\r").strip(b" \t"):
            raise bad_request("Multipart boundary line is followed by unexpected bytes.")
        return eol

    def next_headers(self) -> dict[str, str] | None:
        """The next part's headers (lower-case names), or None when the body is closed."""
        if self.delimiter is None:
            self._start()
        if self.done:
            return None
        self.parts += 1
        if self.parts > MAX_PARTS:
            raise bad_request("Too many parts in a multipart body.")
        lines = []
        size = 0
        while True:
            i = self._buf.find(b"\n")
            if i < 0:
                if len(self._buf) > MAX_HEADER_BYTES or not self._fill():
                    raise bad_request("Multipart part headers are too long or cut short.")
                continue
            line = bytes(self._buf[:i]).rstrip(b"\r")
            del self._buf[: i + 1]
            if not line:
                return parse_header_block(b"\n".join(lines))
            size += len(line)
            if size > MAX_HEADER_BYTES:
                raise bad_request("Multipart part headers too long.")
            lines.append(line)

    def iter_payload(self) -> Iterator[bytes]:
        """The current part's payload in pieces, up to (not including) the next delimiter."""
        d = self.delimiter
        keep = len(d) - 1
        while True:
            i = self._buf.find(d)
            if i >= 0:
                if i:
                    yield bytes(self._buf[:i])
                del self._buf[: i + len(d)]
                self._after_delimiter()
                return
            if len(self._buf) > keep:
                n = len(self._buf) - keep
                piece = bytes(self._buf[:n])
                del self._buf[:n]
                yield piece
            if not self._fill():
                raise bad_request("Multipart body is missing its closing boundary.")

    def read_payload(self, limit: int, what: str) -> bytes:
        """The current part's payload as bytes; 400 past ``limit`` bytes."""
        out = bytearray()
        for piece in self.iter_payload():
            out += piece
            if len(out) > limit:
                raise bad_request(f"The {what} part is larger than {limit} bytes.")
        return bytes(out)


def parse_related(body: bytes, content_type: str) -> list[tuple[dict[str, str], memoryview]]:
    """``[(headers, payload), ...]`` of a whole ``multipart/related`` or ``multipart/mixed`` body."""
    stream = MultipartStream(io.BytesIO(body).read, boundary_of(content_type))
    parts = []
    while (headers := stream.next_headers()) is not None:
        parts.append((headers, memoryview(b"".join(stream.iter_payload()))))
    return parts
