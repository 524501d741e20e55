"""What listings taught about objects, and reads pinned to one object generation (gs://).

A listing (one paged request per prefix) returns every matched object's size and generation.
:class:`ObjectTable` keeps them, so opening, sizing and probing the listed objects afterwards
costs no metadata request: 1,024 shards open with one listing, not 1,024 round trips. Entries
are replaced by each new listing of their prefix and dropped by tpudata's own writes, moves and
removals of the object.

:class:`PinnedObject` reads one object with ranged GETs pinned to the generation the listing (or
one metadata request) saw, so a file is never read as a mix of two generations: when the object
changes after it was listed, reading it raises :class:`~tpudata.errors.StorageError` naming the
object and both generations (list again to read the new one).
"""

from __future__ import annotations

import io
import logging
import threading
from collections import OrderedDict
from typing import NamedTuple
from urllib.parse import urlencode

from tpudata import _ranged
from tpudata.errors import StorageError

logger = logging.getLogger(__name__)

MAX_ENTRIES = 1 << 20  # objects remembered per process (~200 bytes each)
MAX_LISTINGS = 64  # complete listings kept (each answers "is there an index file?" for its prefix)


class ObjectInfo(NamedTuple):
    """An object's size in bytes and its generation (None where the store has none)."""

    size: int
    generation: str | None


class ObjectTable:
    """What complete listings (and single metadata requests) said of objects; thread-safe.

    Keys are ``(endpoint, path)``: the same bucket on two servers (a test's fake GCS and
    another's) never shares entries. A listing is kept whole under its ``(endpoint, prefix)``:
    the next listing of that prefix replaces it, so an object deleted since is gone with it, and
    a path a listing covers but does not hold is known not to exist (:meth:`known_absent`). The
    oldest listings are dropped past ``max_listings`` or ``max_entries`` objects in all.
    """

    def __init__(self, max_entries: int = MAX_ENTRIES, max_listings: int = MAX_LISTINGS):
        self._lock = threading.Lock()
        self._listings: OrderedDict[tuple[str, str], dict[str, ObjectInfo]] = OrderedDict()
        # asked one by one; None: changed by tpudata since it was listed (ask again)
        self._single: OrderedDict[tuple[str, str], ObjectInfo | None] = OrderedDict()
        self._entries = 0  # objects in all listings
        self.max_entries = max_entries
        self.max_listings = max_listings

    def _covering(self, endpoint: str, path: str) -> list[tuple[str, str]]:
        """The listings that hold ``path``'s prefix, newest first."""
        return [k for k in reversed(self._listings) if k[0] == endpoint and path.startswith(k[1])]

    def record_listing(self, endpoint: str, prefix: str, infos: dict[str, ObjectInfo]) -> None:
        """Remember a complete listing of every object whose path starts with ``prefix``."""
        with self._lock:
            old = self._listings.pop((endpoint, prefix), None)
            self._entries -= len(old or ())
            for key in [k for k in self._single if k[0] == endpoint and k[1].startswith(prefix)]:
                del self._single[key]
            if len(infos) > self.max_entries:
                return
            self._listings[(endpoint, prefix)] = dict(infos)
            self._entries += len(infos)
            while len(self._listings) > self.max_listings or self._entries > self.max_entries:
                self._entries -= len(self._listings.popitem(last=False)[1])

    def remember(self, endpoint: str, path: str, info: ObjectInfo) -> None:
        """What one metadata request said of ``path``."""
        with self._lock:
            self._set_single((endpoint, path), info)

    def get(self, endpoint: str, path: str) -> ObjectInfo | None:
        with self._lock:
            if (endpoint, path) in self._single:
                return self._single[(endpoint, path)]
            covering = self._covering(endpoint, path)
            return self._listings[covering[0]].get(path) if covering else None

    def known_absent(self, endpoint: str, path: str) -> bool:
        """Whether the newest listing that covers ``path`` saw no such object (and tpudata has
        not written it since)."""
        with self._lock:
            if (endpoint, path) in self._single:
                return False
            covering = self._covering(endpoint, path)
            return bool(covering) and path not in self._listings[covering[0]]

    def forget(self, endpoint: str, path: str) -> None:
        """tpudata wrote, moved or removed ``path``: what listings said of it no longer holds,
        and the next :meth:`get` asks (the rest of their objects stay known)."""
        with self._lock:
            for key in self._covering(endpoint, path):
                if self._listings[key].pop(path, None) is not None:
                    self._entries -= 1
            self._set_single((endpoint, path), None)

    def _set_single(self, key: tuple[str, str], info: ObjectInfo | None) -> None:
        self._single[key] = info
        self._single.move_to_end(key)
        while len(self._single) > self.max_entries:
            self._single.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._listings.clear()
            self._single.clear()
            self._entries = 0

    def __len__(self) -> int:
        return self._entries + len(self._single)


TABLE = ObjectTable()


def endpoint_of(fs) -> str:
    """The server a filesystem talks to (gcsfs: its endpoint URL), part of every table key."""
    return str(getattr(fs, "_location", None) or getattr(fs, "protocol", "") or type(fs).__name__)


def info_of(entry: dict) -> ObjectInfo:
    """An :class:`ObjectInfo` from an fsspec/gcsfs info dict."""
    generation = entry.get("generation")
    return ObjectInfo(int(entry.get("size") or 0), str(generation) if generation else None)


def _not_found(exc: BaseException) -> bool:
    if isinstance(exc, FileNotFoundError):
        return True
    return getattr(exc, "code", None) == 404 or getattr(exc, "status", None) == 404


class PinnedObject(io.RawIOBase):
    """A read-only file over one GCS object generation, read with ranged GETs.

    ``info`` is what a listing said (size and generation); without it the object is asked for
    once. Every GET is pinned to the generation (``?generation=``). ``sequential=True`` (a
    reader going front to back) reads ahead through the process's shared
    :class:`~tpudata._ranged.RangePool`: a window of ranges fetched in parallel, so one object
    read alone reaches the link. Otherwise each ``readinto`` is one ranged GET of at most the
    buffer's size. Supports ``seek``/``tell``, ``size`` and ``generation``.
    """

    def __init__(self, fs, path: str, url: str, info: ObjectInfo | None = None,
                 sequential: bool = False, chunk_bytes: int = _ranged.CHUNK_BYTES):
        super().__init__()
        self.fs = fs
        self.path = path
        self.url = url
        self._pos = 0
        self._read_any = False
        if info is None:
            info = self._ask()
        self.size = info.size
        self.generation = info.generation
        self.sequential = sequential
        self.chunk_bytes = chunk_bytes
        self._stream = None
        # plain HTTP GETs unless the filesystem brings its own session settings (a proxy)
        self._http = (hasattr(fs, "url") and hasattr(fs, "_get_headers")
                      and not getattr(fs, "session_kwargs", None))

    def _ask(self) -> ObjectInfo:
        invalidate = getattr(self.fs, "invalidate_cache", None)
        if invalidate is not None:
            invalidate(self.path)
        info = info_of(self.fs.info(self.path))
        TABLE.remember(endpoint_of(self.fs), self.path, info)
        return info

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self.size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset} in {self.url}")
        self._pos = base + offset
        return self._pos

    def _fetch_into(self, conns: dict, start: int, end: int, out, cancelled=lambda: False) -> None:
        """Bytes ``[start, end)`` into ``out``; ``EOFError`` when the object has fewer."""
        if self._http:
            url = self.fs.url(self.path, generation=self.generation)
            params = self.fs._get_params({})
            if params:
                url += "&" + urlencode(params)
            timeout = getattr(self.fs, "requests_timeout", None) or _ranged.TIMEOUT_S
            _ranged.get_range(conns, url, self.fs._get_headers(None), start, end, out,
                              cancelled, timeout)
            return
        kwargs = {"generation": self.generation} if self.generation else {}
        data = self.fs.cat_file(self.path, start=start, end=end, **kwargs)
        out[: len(data)] = data
        if len(data) < end - start:
            raise EOFError(f"{len(data)} of {end - start} bytes")

    def readall(self) -> bytes:
        """The rest of the object (one ranged GET unless reading ahead)."""
        out = bytearray(max(0, self.size - self._pos))
        return bytes(out[:fill(self.readinto, out)])

    def readinto(self, buffer) -> int:
        mv = memoryview(buffer).cast("B")
        n = min(len(mv), self.size - self._pos)
        if n <= 0:
            return 0
        try:
            if self.sequential:
                if self._stream is None:
                    self._stream = _ranged.get_pool().stream(
                        self._fetch_into, self.size, self.chunk_bytes,
                        max(_ranged.WINDOW_BYTES, self.chunk_bytes))
                got = self._stream.readinto(self._pos, mv[:n])
            else:
                self._fetch_into(_direct_connections(), self._pos, self._pos + n, mv[:n])
                got = n
        except EOFError as exc:
            raise StorageError(
                f"{self.url} (generation {self.generation}) returned fewer bytes than asked "
                f"({exc}): it is shorter than the {self.size} bytes listed", url=self.url) from exc
        except Exception as exc:
            if not (self.generation and _not_found(exc)):
                raise
            self._changed(exc)
        self._pos += got
        self._read_any = True
        return got

    def _changed(self, exc: BaseException):
        """Raise for a 404 on a pinned generation: deleted, replaced, or (same generation) the
        original error."""
        old = self.generation
        try:
            now = self._ask()
        except FileNotFoundError:
            raise StorageError(
                f"{self.url} was deleted while it was read (generation {old}, at byte "
                f"{self._pos}): list the files again and restart the epoch", url=self.url) from exc
        if now.generation == old:
            raise exc
        when = (f"while it was read (read up to byte {self._pos})" if self._read_any else
                "since it was listed")
        raise StorageError(
            f"{self.url} changed {when}: generation {old} ({self.size} bytes) is now "
            f"generation {now.generation} ({now.size} bytes); list the files again (restart "
            f"the epoch or the pipeline) to read the new one", url=self.url) from exc

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        super().close()


def fill(readinto, buffer) -> int:
    """Call ``readinto`` until ``buffer`` is full or it returns 0; the bytes read."""
    mv = memoryview(buffer)
    got = 0
    while got < len(mv):
        n = readinto(mv[got:])
        if not n:
            break
        got += n
    return got


_local = threading.local()


def _direct_connections() -> dict:
    """This thread's keep-alive connections for reads that do not go through the pool."""
    conns = getattr(_local, "conns", None)
    if conns is None:
        conns = _local.conns = {}
    return conns


__all__ = ["ObjectInfo", "ObjectTable", "PinnedObject", "TABLE", "endpoint_of", "fill", "info_of"]
