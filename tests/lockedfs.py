"""fsspec's in-memory filesystem under ``locked://``, which refuses to open without
``storage_options={"password": PASSWORD}`` (as a bucket needs its credentials): a test passes
through an entry point only when that entry point hands its ``storage_options`` to fsspec."""

from __future__ import annotations

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

import tpudata

PASSWORD = "s3cret"
OPTIONS = {"password": PASSWORD}


class LockedMemoryFileSystem(MemoryFileSystem):
    protocol = "locked"
    store: dict = {}
    pseudo_dirs = [""]

    def __init__(self, *args, password=None, **kwargs):
        if password != PASSWORD:
            raise PermissionError("locked:// needs storage_options={'password': ...}")
        super().__init__(*args, **kwargs)

    @classmethod
    def _strip_protocol(cls, path):
        if path.startswith("locked://"):
            path = path[len("locked://"):]
        return MemoryFileSystem._strip_protocol(path)


@pytest.fixture
def locked():
    """The ``locked://`` filesystem registered and empty; emptied again afterwards."""
    fsspec.register_implementation("locked", LockedMemoryFileSystem, clobber=True)
    LockedMemoryFileSystem.store.clear()
    LockedMemoryFileSystem.clear_instance_cache()
    yield LockedMemoryFileSystem
    LockedMemoryFileSystem.store.clear()
    LockedMemoryFileSystem.clear_instance_cache()


def write_locked_shards(prefix: str, num_files: int = 2, per_file: int = 10) -> list[str]:
    """``num_files`` TFRecord files of ``per_file`` Examples ``{"id": k}`` (k counting from 0)
    at ``locked://{prefix}-NNNNN``."""
    urls = []
    for s in range(num_files):
        url = f"locked://{prefix}-{s:05d}"
        tpudata.write_records(url, [tpudata.encode_example({"id": s * per_file + i})
                                    for i in range(per_file)], storage_options=OPTIONS)
        urls.append(url)
    return urls
