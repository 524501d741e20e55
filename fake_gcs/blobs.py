"""Where object bytes live: in memory, or in files under a data directory.

A :class:`Blob` is immutable once written. Readers get a :class:`BlobReader` (opened while the
store holds its lock, so a concurrent delete cannot pull the data away half-way) and send byte
ranges from it without copying the object: memoryview slices, or ``sendfile`` from a file.

The on-disk layout never uses a client-chosen string as a path component: buckets and objects
are stored under the SHA-256 of their names, so no name (``..``, ``/x``, ``%2F``, NUL, very
long, unicode) can reach outside the data directory.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from typing import Iterable

logger = logging.getLogger(__name__)


def name_hash(name: str) -> str:
    """The file-system-safe key of a client-chosen name."""
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()


class BlobReader:
    """An open handle on a blob's bytes: ``view`` (memory) or ``file`` (disk)."""

    def __init__(self, size: int, view: memoryview | None = None, file=None):
        self.size = size
        self.view = view
        self.file = file

    def read(self, start: int, length: int) -> bytes:
        """Copy ``length`` bytes from ``start`` (used for compose and small internal reads)."""
        if self.view is not None:
            return bytes(self.view[start : start + length])
        return os.pread(self.file.fileno(), length, start)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    def __enter__(self) -> "BlobReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Blob:
    """Immutable object data."""

    size: int

    def open(self) -> BlobReader:
        raise NotImplementedError


class MemoryBlob(Blob):
    def __init__(self, data: bytes):
        self.data = data
        self.size = len(data)

    def open(self) -> BlobReader:
        return BlobReader(self.size, view=memoryview(self.data))


class FileBlob(Blob):
    def __init__(self, path: str, size: int):
        self.path = path
        self.size = size

    def open(self) -> BlobReader:
        return BlobReader(self.size, file=open(self.path, "rb", buffering=0))


class BlobWriter:
    """Collects an upload; :meth:`finish` turns it into a :class:`Blob`."""

    size = 0

    def write(self, data) -> None:
        raise NotImplementedError

    def finish(self) -> Blob:
        raise NotImplementedError

    def abort(self) -> None:
        pass

    def truncate(self, size: int) -> None:
        """Forget everything written after the first ``size`` bytes."""
        raise NotImplementedError


class MemoryWriter(BlobWriter):
    def __init__(self) -> None:
        self._parts: list = []
        self.size = 0

    def write(self, data) -> None:
        self._parts.append(data)
        self.size += len(data)

    def finish(self) -> Blob:
        parts, self._parts = self._parts, []
        if len(parts) == 1 and isinstance(parts[0], bytes):
            return MemoryBlob(parts[0])
        return MemoryBlob(b"".join(parts))

    def abort(self) -> None:
        self._parts = []

    def truncate(self, size: int) -> None:
        while self.size > size:
            last = self._parts.pop()
            self.size -= len(last)
            if self.size < size:
                self._parts.append(bytes(last[: size - self.size]))
                self.size = size


class FileWriter(BlobWriter):
    def __init__(self, path: str) -> None:
        self.path = path
        self._f = open(path, "wb")
        self.size = 0

    def write(self, data) -> None:
        self._f.write(data)
        self.size += len(data)

    def truncate(self, size: int) -> None:
        if size < self.size:
            self._f.truncate(size)
            self._f.seek(size)
            self.size = size

    def finish(self) -> Blob:
        self._f.close()
        return FileBlob(self.path, self.size)

    def abort(self) -> None:
        self._f.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class MemoryBackend:
    """Keeps everything in memory; nothing survives the process."""

    persistent = False

    def writer(self) -> BlobWriter:
        return MemoryWriter()

    def from_bytes(self, data: bytes) -> Blob:
        return MemoryBlob(bytes(data))

    def place(self, blob: Blob, bucket: str, name: str, generation: int) -> Blob:
        return blob

    def share(self, blob: Blob, bucket: str, name: str, generation: int) -> Blob:
        return blob  # immutable bytes: a copy may share them

    def discard(self, blob: Blob) -> None:
        pass

    def save_object(self, version) -> None:
        pass

    def delete_object(self, version) -> None:
        pass

    def save_bucket(self, bucket) -> None:
        pass

    def delete_bucket(self, name: str) -> None:
        pass

    def load(self) -> Iterable[tuple[dict, list[tuple[dict, Blob]]]]:
        return []


class DiskBackend(MemoryBackend):
    """Objects as files under ``root``; metadata as JSON beside them; survives restarts.

    Layout: ``buckets/<sha256(bucket)>/bucket.json`` and
    ``buckets/<sha256(bucket)>/o/<sha256(name)[:2]>/<sha256(name)>/<generation>.{bin,json}``;
    uploads in progress live in ``tmp/``.
    """

    persistent = True

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.tmp = os.path.join(self.root, "tmp")
        self.buckets = os.path.join(self.root, "buckets")
        os.makedirs(self.tmp, exist_ok=True)
        os.makedirs(self.buckets, exist_ok=True)
        for leftover in os.listdir(self.tmp):  # uploads cut short by a previous stop
            os.unlink(os.path.join(self.tmp, leftover))

    def _bucket_dir(self, bucket: str) -> str:
        return os.path.join(self.buckets, name_hash(bucket))

    def _object_dir(self, bucket: str, name: str) -> str:
        h = name_hash(name)
        return os.path.join(self._bucket_dir(bucket), "o", h[:2], h)

    def _tmp_path(self) -> str:
        return os.path.join(self.tmp, uuid.uuid4().hex)

    def _write_json(self, path: str, state: dict) -> None:
        tmp = self._tmp_path()
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(state, f)
        os.replace(tmp, path)

    def writer(self) -> BlobWriter:
        return FileWriter(self._tmp_path())

    def from_bytes(self, data: bytes) -> Blob:
        w = self.writer()
        w.write(data)
        return w.finish()

    def place(self, blob: Blob, bucket: str, name: str, generation: int) -> Blob:
        directory = self._object_dir(bucket, name)
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{generation}.bin")
        os.replace(blob.path, path)
        return FileBlob(path, blob.size)

    def share(self, blob: Blob, bucket: str, name: str, generation: int) -> Blob:
        tmp = self._tmp_path()
        try:
            os.link(blob.path, tmp)
        except OSError:
            shutil.copyfile(blob.path, tmp)
        return self.place(FileBlob(tmp, blob.size), bucket, name, generation)

    def discard(self, blob: Blob) -> None:
        try:
            os.unlink(blob.path)
        except FileNotFoundError:
            pass

    def save_object(self, version) -> None:
        directory = self._object_dir(version.bucket, version.name)
        self._write_json(os.path.join(directory, f"{version.generation}.json"), version.to_state())

    def delete_object(self, version) -> None:
        directory = self._object_dir(version.bucket, version.name)
        for ext in (".json", ".bin"):
            try:
                os.unlink(os.path.join(directory, f"{version.generation}{ext}"))
            except FileNotFoundError:
                pass
        try:
            os.rmdir(directory)
        except OSError:
            pass

    def save_bucket(self, bucket) -> None:
        directory = self._bucket_dir(bucket.name)
        os.makedirs(directory, exist_ok=True)
        self._write_json(os.path.join(directory, "bucket.json"), bucket.to_state())

    def delete_bucket(self, name: str) -> None:
        shutil.rmtree(self._bucket_dir(name), ignore_errors=True)

    def load(self) -> Iterable[tuple[dict, list[tuple[dict, Blob]]]]:
        """Yield ``(bucket_state, [(object_state, blob), ...])`` for everything on disk."""
        for bucket_key in sorted(os.listdir(self.buckets)):
            bdir = os.path.join(self.buckets, bucket_key)
            try:
                with open(os.path.join(bdir, "bucket.json"), encoding="utf-8") as f:
                    bstate = json.load(f)
            except (OSError, ValueError):
                logger.warning("skipping unreadable bucket directory %s", bdir)
                continue
            objects = []
            for root, _dirs, files in os.walk(os.path.join(bdir, "o")):
                for fname in files:
                    if not fname.endswith(".json"):
                        continue
                    bin_path = os.path.join(root, fname[: -len(".json")] + ".bin")
                    try:
                        with open(os.path.join(root, fname), encoding="utf-8") as f:
                            ostate = json.load(f)
                        size = os.path.getsize(bin_path)
                    except (OSError, ValueError):
                        logger.warning("skipping unreadable object %s/%s", root, fname)
                        continue
                    objects.append((ostate, FileBlob(bin_path, size)))
            yield bstate, objects
