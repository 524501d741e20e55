"""Byte-range reads that are safe from many threads and in worker processes.

:class:`RangeReader` keeps no file position: local files are read with ``os.pread`` on a
descriptor opened once per process (``pread`` is atomic with respect to other threads' reads),
remote URLs with the filesystem's ``cat_file`` / ``cat_ranges`` (gcsfs fetches many ranges
concurrently). It pickles without open handles; a forked or spawned worker opens its own.

>>> from tpudata.tfrecord import write_records
>>> _ = write_records("memory://doc/ranges.tfrecord", [b"abc"])
>>> bytes(RangeReader().read("memory://doc/ranges.tfrecord", 12, 15))
b'abc'
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Mapping

from tpudata import storage
from tpudata._keywords import storage_options_dict, strict_keywords
from tpudata.errors import TruncatedRecordError

logger = logging.getLogger(__name__)


class RangeReader:
    """Reads ``[start, end)`` byte ranges of files without shared seek state.

    ``storage_options`` go to fsspec for remote URLs. Reads past the end of a file raise
    :class:`~tpudata.errors.TruncatedRecordError` naming the file and offset.
    """

    @strict_keywords
    def __init__(self, *, storage_options: Mapping | None = None):
        self.storage_options = storage_options_dict("RangeReader", storage_options)
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._fds: dict[str, int] = {}
        self._fs: dict[str, tuple] = {}

    # -- per-process handles -------------------------------------------------------------------
    def _check_pid(self) -> None:
        if self._pid != os.getpid():  # a forked child: never use the parent's descriptors
            self._pid = os.getpid()
            self._lock = threading.Lock()
            self._fds = {}
            self._fs = {}

    def _fd(self, url: str) -> int:
        self._check_pid()
        fd = self._fds.get(url)
        if fd is None:
            with self._lock:
                fd = self._fds.get(url)
                if fd is None:
                    fd = os.open(storage.local_path(url), os.O_RDONLY)
                    self._fds[url] = fd
        return fd

    def _fs_path(self, url: str):
        self._check_pid()
        hit = self._fs.get(url)
        if hit is None:
            hit = storage.url_to_fs(url, **self.storage_options)
            self._fs[url] = hit
        return hit

    # -- reading -------------------------------------------------------------------------------
    def _truncated(self, url: str, start: int, got: int, want: int):
        return TruncatedRecordError(
            f"truncated record at {start}: the file ends after {got} of the {want} bytes the "
            f"index promises (is the index stale? rebuild it)", url, start)

    def read(self, url: str, start: int, end: int):
        """The bytes ``[start, end)`` of ``url`` (a bytes-like object)."""
        want = end - start
        if storage.is_local(url):
            fd = self._fd(url)
            data = os.pread(fd, want, start)
            if len(data) == want:
                return data
            parts = [data]  # a short read: go on until the end of the range or of the file
            got = len(data)
            while got < want:
                more = os.pread(fd, want - got, start + got)
                if not more:
                    raise self._truncated(url, start, got, want)
                parts.append(more)
                got += len(more)
            return b"".join(parts)
        fs, path = self._fs_path(url)
        data = fs.cat_file(path, start=start, end=end)
        if len(data) != want:
            raise self._truncated(url, start, len(data), want)
        return data

    def read_many(self, ranges: list[tuple[str, int, int]]) -> list:
        """Several ranges at once: local ones in turn, remote ones concurrently (``cat_ranges``)."""
        out: list = [None] * len(ranges)
        remote: dict[int, list[int]] = {}
        for k, (url, start, end) in enumerate(ranges):
            if storage.is_local(url):
                out[k] = self.read(url, start, end)
            else:
                fs, _ = self._fs_path(url)
                remote.setdefault(id(fs), []).append(k)
        for ks in remote.values():
            if len(ks) == 1:
                k = ks[0]
                out[k] = self.read(*ranges[k])
                continue
            fs, _ = self._fs_path(ranges[ks[0]][0])
            paths = [self._fs_path(ranges[k][0])[1] for k in ks]
            got = fs.cat_ranges(paths, [ranges[k][1] for k in ks], [ranges[k][2] for k in ks],
                                on_error="raise")
            for k, data in zip(ks, got):
                if isinstance(data, BaseException):
                    raise data
                url, start, end = ranges[k]
                if len(data) != end - start:
                    raise self._truncated(url, start, len(data), end - start)
                out[k] = data
        return out

    def close(self) -> None:
        """Close this process's descriptors (reads reopen them)."""
        with self._lock:
            if self._pid == os.getpid():
                for fd in self._fds.values():
                    os.close(fd)
            self._fds = {}
            self._fs = {}

    def __getstate__(self):
        return {"storage_options": self.storage_options}

    def __setstate__(self, state):
        self.__init__(**state["storage_options"])

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


__all__ = ["RangeReader"]
