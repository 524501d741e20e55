"""CRC32C (Castagnoli) and MD5 as GCS reports them: base64 of the big-endian digest.

CRC32C uses the ``crc32c`` or ``google_crc32c`` extension when one is installed (both are
hardware-accelerated); otherwise a table-driven pure-Python fallback, which is slow (~10 MB/s).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import struct

logger = logging.getLogger(__name__)


def _make_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


def _crc32c_python(data, crc: int = 0) -> int:
    table = _TABLE
    crc ^= 0xFFFFFFFF
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


_TABLE: list[int] = []
try:  # pragma: no branch - which one depends on the environment
    import crc32c as _crc32c_mod

    def crc32c_update(crc: int, data) -> int:
        """Extend ``crc`` (0 to start) over ``data``."""
        return _crc32c_mod.crc32c(data, crc)

except ImportError:  # pragma: no cover
    try:
        import google_crc32c as _google_crc32c

        def crc32c_update(crc: int, data) -> int:
            """Extend ``crc`` (0 to start) over ``data``."""
            return _google_crc32c.extend(crc, bytes(data))

    except ImportError:
        _TABLE = _make_table()
        logger.warning("no crc32c extension installed; using the slow pure-Python CRC32C")

        def crc32c_update(crc: int, data) -> int:
            """Extend ``crc`` (0 to start) over ``data``."""
            return _crc32c_python(data, crc)


def crc32c_b64(crc: int) -> str:
    """Base64 of the big-endian 4-byte CRC, as in ``crc32c`` fields and ``x-goog-hash``."""
    return base64.b64encode(struct.pack(">I", crc)).decode()


def md5_b64(digest: bytes) -> str:
    """Base64 of an MD5 digest."""
    return base64.b64encode(digest).decode()


def decode_crc32c(value: str) -> int | None:
    """The CRC from a base64 string, or None when it is not 4 bytes of base64."""
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return struct.unpack(">I", raw)[0] if len(raw) == 4 else None


def decode_md5(value: str) -> bytes | None:
    """The digest from a base64 string, or None when it is not 16 bytes of base64."""
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == 16 else None


def parse_goog_hash(header: str | None) -> dict[str, str]:
    """``x-goog-hash: crc32c=AAAA==,md5=BBBB==`` -> ``{"crc32c": ..., "md5": ...}``."""
    out: dict[str, str] = {}
    if not header:
        return out
    for item in header.split(","):
        key, sep, value = item.strip().partition("=")
        if sep:
            out[key.strip().lower()] = value.strip()
    return out


class Hasher:
    """Running CRC32C and MD5 over data fed in pieces (``md5=False``: CRC32C only, as for
    composite objects, which GCS gives no MD5)."""

    def __init__(self, md5: bool = True) -> None:
        self.crc = 0
        self.md5 = hashlib.md5() if md5 else None
        self.size = 0

    def copy(self) -> "Hasher":
        """An independent copy of the running state (to roll back a failed chunk)."""
        other = Hasher(md5=False)
        other.crc, other.size = self.crc, self.size
        other.md5 = self.md5.copy() if self.md5 is not None else None
        return other

    def update(self, data) -> None:
        """Feed the next piece."""
        self.crc = crc32c_update(self.crc, data)
        if self.md5 is not None:
            self.md5.update(data)
        self.size += len(data)
