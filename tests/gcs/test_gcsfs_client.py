"""fake_gcs through the real gcsfs client: the operations fsspec users run."""

from __future__ import annotations

import hashlib
import os

import pytest

from tests.gcs.helpers import BUCKET

B = BUCKET


def test_pipe_cat_and_info(gcsfs_fs):
    fs = gcsfs_fs
    fs.pipe(f"{B}/dir/a.txt", b"hello")
    assert fs.cat(f"{B}/dir/a.txt") == b"hello"
    info = fs.info(f"{B}/dir/a.txt")
    assert info["size"] == 5 and info["type"] == "file" and info["generation"]
    assert fs.isdir(f"{B}/dir") and not fs.exists(f"{B}/nope")
    with pytest.raises(FileNotFoundError):
        fs.cat(f"{B}/nope")


def test_range_reads_at_odd_offsets(gcsfs_fs):
    fs = gcsfs_fs
    data = os.urandom(3 * 1024 * 1024 + 17)
    fs.pipe(f"{B}/r.bin", data)
    for start, end in [
        (0, 1),
        (1, 2),
        (12345, 1234567),
        (len(data) - 3, len(data)),
        (7, None),
        (999_999, 3_000_001),
    ]:
        assert fs.cat_file(f"{B}/r.bin", start=start, end=end) == data[start:end]
    assert fs.cat_file(f"{B}/r.bin", start=-11) == data[-11:]
    got = fs.cat_ranges([f"{B}/r.bin"] * 3, [3, 100_001, 2_000_003], [9, 700_003, len(data)])
    assert got == [data[3:9], data[100_001:700_003], data[2_000_003:]]
    with fs.open(f"{B}/r.bin", "rb", block_size=256 * 1024) as f:
        f.seek(1_048_577)
        assert f.read(333_333) == data[1_048_577:1_381_910]
        f.seek(-5, 2)
        assert f.read() == data[-5:]


def test_streamed_write_is_resumable_upload(gcsfs_fs):
    fs = gcsfs_fs
    h = hashlib.md5()
    with fs.open(f"{B}/stream.bin", "wb", block_size=5 * 2**20) as f:
        for i in range(13):
            piece = bytes([i]) * (1024 * 1024 + i)
            h.update(piece)
            f.write(piece)
    assert hashlib.md5(fs.cat(f"{B}/stream.bin")).digest() == h.digest()


def test_listing_glob_find_du(gcsfs_fs):
    fs = gcsfs_fs
    fs.pipe({f"{B}/t/{n}": n.encode() for n in ["a.json", "b.json", "c.csv", "sub/d.json", "sub/deeper/e"]})
    assert fs.ls(f"{B}/t", detail=False) == [f"{B}/t/a.json", f"{B}/t/b.json", f"{B}/t/c.csv", f"{B}/t/sub"]
    assert fs.glob(f"{B}/t/*.json") == [f"{B}/t/a.json", f"{B}/t/b.json"]
    assert fs.glob(f"{B}/t/**/*.json") == [f"{B}/t/a.json", f"{B}/t/b.json", f"{B}/t/sub/d.json"]
    assert len(fs.find(f"{B}/t")) == 5
    assert fs.du(f"{B}/t") == sum(len(n) for n in ["a.json", "b.json", "c.csv", "sub/d.json", "sub/deeper/e"])
    fs.rm(f"{B}/t/sub", recursive=True)
    fs.invalidate_cache()
    assert fs.find(f"{B}/t") == [f"{B}/t/a.json", f"{B}/t/b.json", f"{B}/t/c.csv"]


def test_copy_move_merge_xattrs(gcsfs_fs):
    fs = gcsfs_fs
    fs.pipe(f"{B}/src", b"abc")
    fs.cp(f"{B}/src", f"{B}/copy")
    fs.mv(f"{B}/copy", f"{B}/moved")
    assert fs.cat(f"{B}/moved") == b"abc" and not fs.exists(f"{B}/copy")
    fs.pipe(f"{B}/second", b"def")
    fs.merge(f"{B}/merged", [f"{B}/src", f"{B}/second", f"{B}/moved"])
    assert fs.cat(f"{B}/merged") == b"abcdefabc"
    fs.setxattrs(f"{B}/src", content_type="text/plain", color="blue")
    fs.invalidate_cache()
    assert fs.getxattr(f"{B}/src", "color") == "blue"
    assert fs.info(f"{B}/src")["contentType"] == "text/plain"


def test_exclusive_create(gcsfs_fs):
    fs = gcsfs_fs
    fs.pipe(f"{B}/x", b"1")
    with pytest.raises(FileExistsError):
        fs.pipe(f"{B}/x", b"2", mode="create")
    with pytest.raises(FileExistsError):
        with fs.open(f"{B}/x", "xb") as f:
            f.write(b"3")
    assert fs.cat(f"{B}/x") == b"1"


def test_versioned_bucket(fake_gcs_server):
    import gcsfs.core

    fs = gcsfs.core.GCSFileSystem(
        token="anon", endpoint_url=fake_gcs_server.url, version_aware=True, skip_instance_cache=True
    )
    fs.mkdir("versioned-bucket", enable_versioning=True)
    path = "versioned-bucket/obj"
    fs.pipe(path, b"v1")
    g1 = fs.info(path)["generation"]
    fs.pipe(path, b"v2")
    fs.invalidate_cache()
    g2 = fs.info(path)["generation"]
    assert g1 != g2
    assert fs.cat(f"{path}#{g1}") == b"v1" and fs.cat(path) == b"v2"
    assert {g1, g2} == {o["generation"] for o in fs.ls("versioned-bucket", versions=True, detail=True)}
    fs.rm(f"{path}#{g1}")
    fs.invalidate_cache()
    assert [o["generation"] for o in fs.ls("versioned-bucket", versions=True, detail=True)] == [g2]


def test_tpudata_storage_layer_uses_the_emulator(fake_gcs_server):
    """tpudata's gs:// code path (STORAGE_EMULATOR_HOST set by the fixture) reaches this server."""
    from tpudata import storage

    fs = storage.gcs_filesystem()
    fs.mkdir("tpudata-bucket")
    with storage.open_atomic("gs://tpudata-bucket/a/b.bin") as f:
        f.write(b"payload")
    assert storage.read_bytes("gs://tpudata-bucket/a/b.bin") == b"payload"
    assert storage.size("gs://tpudata-bucket/a/b.bin") == 7
    assert storage.glob("gs://tpudata-bucket/a/*.bin") == ["gs://tpudata-bucket/a/b.bin"]
