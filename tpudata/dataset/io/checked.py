"""Files the pipeline writes for itself (cache parts, spilled shuffle buffers): a format header and a
checksum around a pickle, checked once per file on read; and the removal of what a killed run
left behind.

A file is ``MAGIC`` (8 bytes), its kind (8 bytes, e.g. ``b"cache"``), the format version (u32), the
payload's length (u64) and CRC32C (u32), then the payload (a pickle). Reading checks all of them
before unpickling and names the file in every error. Such files are only ever located by the
pipeline's own configuration (the cache or spill directory it was given, a name checked by
:func:`check_name`), never by a path read from a state or another file.

>>> blob = pack([1, 2], "spill")
>>> unpack(blob, "mem://x", "spill")
[1, 2]
>>> unpack(blob[:-1], "mem://x", "spill")
Traceback (most recent call last):
...
tpudata.errors.DataLossError: mem://x: damaged spill file: 19 bytes of payload, the header says 20 (remove it, or write it again)
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import struct
import time

from tpudata import storage
from tpudata.errors import DataLossError
from tpudata.tfrecord.framing import crc32c

logger = logging.getLogger(__name__)

MAGIC = b"TPUDATA\x00"
VERSION = 1
_HEADER = struct.Struct("<8s8sIQI")  # magic, kind, version, payload length, payload CRC32C
HEADER_SIZE = _HEADER.size
# a temporary or an unfinished file older than this belongs to a run that is gone (a live writer
# renames or extends its files well within it)
STALE_SECONDS = 3600.0


def header(payload, kind: str) -> bytes:
    """The header for ``payload`` (bytes-like) of ``kind``."""
    return _HEADER.pack(MAGIC, kind.encode("ascii"), VERSION, len(payload), crc32c(payload))


def pack(obj, kind: str) -> bytes:
    """``obj`` pickled, behind its header (for small objects; large ones: :func:`write`)."""
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return header(payload, kind) + payload


def write(f, obj, kind: str) -> None:
    """Write ``obj`` to the binary file ``f`` as one checked file (no copy of the pickle)."""
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(header(payload, kind))
    f.write(payload)


def unpack(data, url: str, kind: str, legacy: bool = True):
    """The object in ``data`` (a file's bytes, read from ``url``), after checking its header and
    checksum. ``legacy``: a bare pickle (written before files had headers) is accepted."""
    data = memoryview(data)
    if bytes(data[:8]) != MAGIC:
        if legacy and bytes(data[:1]) == b"\x80":  # a pickle written by tpudata < 1 header
            logger.debug("%s has no header (written by an older tpudata): read unchecked", url)
            return _unpickle(data, url, kind)
        raise DataLossError(f"not a tpudata {kind} file (no header): remove it, or write it again",
                            url)
    if len(data) < HEADER_SIZE:
        raise DataLossError(f"damaged {kind} file: {len(data)} bytes, shorter than its header",
                            url)
    _, got_kind, version, length, crc = _HEADER.unpack_from(data)
    got_kind = got_kind.rstrip(b"\x00").decode("ascii", "replace")
    if got_kind != kind:
        raise DataLossError(f"a {got_kind} file where a {kind} file was expected", url)
    if version > VERSION:
        raise DataLossError(f"{kind} file of format version {version}, newer than this tpudata "
                            f"reads ({VERSION}): upgrade tpudata", url)
    payload = data[HEADER_SIZE:]
    if len(payload) != length:
        raise DataLossError(f"damaged {kind} file: {len(payload)} bytes of payload, the header "
                            f"says {length} (remove it, or write it again)", url)
    if crc32c(payload) != crc:
        raise DataLossError(f"damaged {kind} file: its CRC32C does not match its bytes (remove "
                            "it, or write it again)", url)
    return _unpickle(payload, url, kind)


def _unpickle(payload, url: str, kind: str):
    try:
        return pickle.loads(payload)
    except Exception as exc:  # UnpicklingError, EOFError, ...: say which file
        raise DataLossError(f"damaged {kind} file ({type(exc).__name__}: {exc})", url) from None


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,200}")


def check_name(name, pattern: re.Pattern, what: str) -> str:
    """``name`` when it is a plain file name matching ``pattern`` (no directory, no ``..``);
    otherwise ValueError (callers turn it into their own error)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name or \
            not pattern.fullmatch(name):
        raise ValueError(f"{str(name)[:200]!r} is not the name of a {what} (a plain file name "
                         "in the configured directory)")
    return name


def remove_leftovers(directory: str, prefixes: tuple, older_than: float = STALE_SECONDS,
                     **storage_options) -> list[str]:
    """Remove the temporaries (``.{name}.tmp-*``, see ``storage.TEMP_MARKER``) of files whose names
    start with one of ``prefixes`` in a local ``directory``, once older than ``older_than``
    seconds: what writers killed in the middle of an atomic write left behind. Newer ones may
    belong to a live writer and are kept. Returns the removed paths."""
    if not storage.is_local(directory) or not os.path.isdir(storage.local_path(directory)):
        return []
    path = storage.local_path(directory)
    removed, now = [], time.time()
    for entry in os.scandir(path):
        name = entry.name
        if not name.startswith(".") or storage.TEMP_MARKER not in name:
            continue
        if not name[1:name.index(storage.TEMP_MARKER)].startswith(prefixes):
            continue
        try:
            if now - entry.stat().st_mtime < older_than:
                continue
            os.remove(entry.path)
            removed.append(entry.path)
        except FileNotFoundError:  # raced with another cleanup
            continue
    if removed:
        logger.info("removed %d temporary file(s) of killed writers from %s", len(removed),
                    directory)
    return removed


def age_seconds(url: str) -> float | None:
    """Seconds since a local file was last written (None for other storage, or when gone)."""
    if not storage.is_local(url):
        return None
    try:
        return time.time() - os.stat(storage.local_path(url)).st_mtime
    except FileNotFoundError:
        return None


__all__ = ["HEADER_SIZE", "MAGIC", "STALE_SECONDS", "age_seconds", "check_name", "header", "pack",
           "remove_leftovers", "unpack", "write"]
