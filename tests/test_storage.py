"""One storage test suite run over every backend (fsspec's abstract-test pattern): local paths,
``file://``, ``memory://`` and ``gs://`` on fake_gcs. It tests what tpudata relies on - atomic
appearance, exact ranged reads, listing order, move, removal, temporaries cleanup - so a backend
that fakes any of these fails."""

from __future__ import annotations

import gc
import os
import random
import uuid

import pytest

import tpudata
from fake_gcs.pytest_plugin import fake_gcs_server  # noqa: F401 - the fixture
from tpudata import storage
from tpudata.errors import StorageError


class StorageSuite:
    """Tests every backend must pass; subclasses provide the ``root`` fixture (a URL prefix)."""

    def test_atomic_write_appears_only_on_close(self, root):
        url = storage.join(root, "a", "obj.bin")
        f = storage.open_atomic(url)
        f.write(b"x" * 1000)
        f.flush()
        assert not storage.exists(url)
        f.close()
        assert storage.exists(url) and storage.size(url) == 1000
        assert storage.read_bytes(url) == b"x" * 1000

    def test_error_inside_with_leaves_nothing(self, root):
        url = storage.join(root, "b", "obj.bin")
        with pytest.raises(KeyError):
            with storage.open_atomic(url) as f:
                f.write(b"partial")
                raise KeyError("boom")
        assert not storage.exists(url)
        assert not [u for u in storage.glob(storage.join(root, "b", "*"))]

    def test_overwrite_is_atomic(self, root):
        url = storage.join(root, "c.bin")
        with storage.open_atomic(url) as f:
            f.write(b"old")
        w = storage.open_atomic(url)
        w.write(b"new content")
        assert storage.read_bytes(url) == b"old"  # readers still see the old version
        w.close()
        assert storage.read_bytes(url) == b"new content"

    def test_glob_sorted_in_the_pattern_form(self, root):
        names = ["train-00002-of-00003", "train-00000-of-00003", "train-00001-of-00003", "val-0"]
        for name in names:
            with storage.open_atomic(storage.join(root, "g", name)) as f:
                f.write(b"1")
        found = storage.glob(storage.join(root, "g", "train-*"))
        assert found == [storage.join(root, "g", n) for n in sorted(names[:3])]
        assert storage.expand([storage.join(root, "g", "val-0")]) == [storage.join(root, "g", "val-0")]
        with pytest.raises(StorageError, match="no files match"):
            storage.expand(storage.join(root, "g", "test-*"))
        with pytest.raises(StorageError, match="no such file"):
            storage.expand(storage.join(root, "g", "missing"))

    def test_remove(self, root):
        url = storage.join(root, "r.bin")
        with storage.open_atomic(url) as f:
            f.write(b"1")
        storage.remove(url)
        assert not storage.exists(url)
        storage.remove(url)  # missing_ok
        with pytest.raises(FileNotFoundError):
            storage.remove(url, missing_ok=False)

    @pytest.mark.parametrize("compression", [None, "GZIP", "ZLIB"])
    def test_tfrecord_roundtrip(self, root, compression):
        url = storage.join(root, "t", f"data-{compression}.tfrecord")
        records = [os.urandom(n) for n in (0, 10, 70_000, 3)] * 3
        tpudata.write_records(url, records, compression)
        assert list(tpudata.read_records(url, buffer_size=4096)) == records
        assert list(tpudata.read_records(url, compression=compression)) == records

    def test_move(self, root):
        with storage.open_atomic(storage.join(root, "m1")) as f:
            f.write(b"moved")
        storage.move(storage.join(root, "m1"), storage.join(root, "m2"))
        assert storage.read_bytes(storage.join(root, "m2")) == b"moved"
        assert not storage.exists(storage.join(root, "m1"))

    def test_big_write_appears_only_on_close(self, root):
        """Several MiB in several flushes (a resumable upload on GCS): still nothing before close."""
        url = storage.join(root, "big", "obj.bin")
        chunk = os.urandom(3 << 20)
        f = storage.open_atomic(url)
        for _ in range(3):
            f.write(chunk)
            f.flush()
            assert not storage.exists(url)
            assert storage.glob(storage.join(root, "big", "*")) == []
        f.close()
        assert storage.size(url) == 9 << 20 and storage.read_bytes(url) == chunk * 3

    def test_abandoned_writer_never_publishes(self, root):
        """A writer dropped without close (an exception outside ``with``) leaves no file."""
        url = storage.join(root, "gone", "obj.bin")
        w = storage.open_atomic(url)
        w.write(b"half of it")
        del w
        gc.collect()
        assert not storage.exists(url)
        assert storage.glob(storage.join(root, "gone", "*")) == []

    def test_interrupted_writes_and_temporaries_cleanup(self, root):
        """What a crash leaves behind: nothing under a final name; cleanup_temporaries removes
        this build's temporaries (never another writer's) and only temporaries."""
        keep = storage.join(root, "tmp", "train-00000")
        with storage.open_atomic(keep) as f:
            f.write(b"done")
        mine = storage.open_atomic(storage.join(root, "tmp", "train-00001"))
        other = storage.open_atomic(storage.join(root, "tmp", "val-00000"))
        mine.write(b"1")
        other.write(b"2")
        assert storage.glob(storage.join(root, "tmp", "*-0000?")) == [keep]
        storage.cleanup_temporaries(storage.join(root, "tmp"), prefix="train")
        other_tmp = [u for u in storage.glob(storage.join(root, "tmp", ".*")) if "val-" in u]
        storage.cleanup_temporaries(storage.join(root, "tmp"), prefix=("x", "train"))
        assert [u for u in storage.glob(storage.join(root, "tmp", ".*")) if "val-" in u] == other_tmp
        storage.cleanup_temporaries(storage.join(root, "tmp"))
        assert storage.glob(storage.join(root, "tmp", "*")) == [keep]
        assert storage.glob(storage.join(root, "tmp", ".*")) == []
        assert storage.read_bytes(keep) == b"done"
        mine.abort()
        other.abort()

    def test_exact_ranged_reads(self, root):
        """Any (offset, length), across the reader's block boundaries, to and past the end."""
        url = storage.join(root, "ranged.bin")
        data = os.urandom(300_001)
        with storage.open_atomic(url) as f:
            f.write(data)
        rng = random.Random(0)
        spans = [(0, 1), (0, 300_001), (65_535, 3), (299_990, 100), (300_001, 10), (123, 0)]
        spans += [(rng.randrange(300_001), rng.randrange(1, 100_000)) for _ in range(20)]
        with storage.open_read(url, buffer_size=65_536) as f:
            for offset, length in spans:
                f.seek(offset)
                buf = bytearray(length)
                got = 0
                while got < length:
                    n = f.readinto(memoryview(buf)[got:])
                    if not n:
                        break
                    got += n
                assert bytes(buf[:got]) == data[offset : offset + length], (offset, length)
        # the random-access reader relies on the same: one ranged read per record
        records = [os.urandom(rng.randrange(0, 5000)) for _ in range(50)]
        turl = storage.join(root, "ranged.tfrecord")
        tpudata.write_records(turl, records)
        with tpudata.IndexedTFRecordFile(turl) as r:
            for i in rng.sample(range(50), 50):
                assert r[i] == records[i]

    def test_listing_order_is_byte_order(self, root):
        """TensorFlow's MatchingFiles order (sorted names), whatever order the store lists in."""
        names = ["b-10", "b-9", "B-1", "b-09", "b_1", "b-1", "b.1", "b-100", "b-1a"]
        for name in random.Random(1).sample(names, len(names)):
            with storage.open_atomic(storage.join(root, "order", name)) as f:
                f.write(name.encode())
        found = storage.glob(storage.join(root, "order", "*"))
        assert found == [storage.join(root, "order", n) for n in sorted(names)]
        assert storage.expand(storage.join(root, "order", "b-1*")) == [
            storage.join(root, "order", n) for n in sorted(n for n in names if n.startswith("b-1"))]

    def test_move_replaces_and_removes_the_source(self, root):
        src, dst = storage.join(root, "mv", "src"), storage.join(root, "mv", "dst")
        for url, body in ((src, b"new" * 1000), (dst, b"old")):
            with storage.open_atomic(url) as f:
                f.write(body)
        storage.move(src, dst)
        assert storage.read_bytes(dst) == b"new" * 1000 and storage.size(dst) == 3000
        assert not storage.exists(src)
        assert storage.glob(storage.join(root, "mv", "*")) == [dst]

    def test_open_read_seek_and_readinto(self, root):
        url = storage.join(root, "s.bin")
        with storage.open_atomic(url) as f:
            f.write(bytes(range(256)) * 4)
        with storage.open_read(url) as f:
            f.seek(250)
            buf = bytearray(10)
            assert f.readinto(buf) == 10
            assert bytes(buf) == bytes(range(250, 256)) + bytes(range(4))


class TestLocalPaths(StorageSuite):
    @pytest.fixture
    def root(self, tmp_path):
        return str(tmp_path)

    def test_no_temporaries_left_and_cleanup(self, root):
        mine = storage.open_atomic(os.path.join(root, "train-00000"))
        other = storage.open_atomic(os.path.join(root, "val-00000"))
        mine.write(b"1")
        leftovers = sorted(n for n in os.listdir(root) if storage.TEMP_MARKER in n)
        assert len(leftovers) == 2  # what a crash would leave behind
        assert storage.cleanup_temporaries(root, prefix="train") == [
            os.path.join(root, leftovers[0])]  # another writer's temporary is left alone
        assert storage.cleanup_temporaries(root) == [os.path.join(root, leftovers[1])]
        assert os.listdir(root) == []
        other.abort()

    def test_fsync_and_move(self, root):
        with storage.open_atomic(os.path.join(root, "a"), fsync=True) as f:
            f.write(b"durable")
        storage.move(os.path.join(root, "a"), os.path.join(root, "b"))
        assert storage.read_bytes(os.path.join(root, "b")) == b"durable"
        assert not storage.exists(os.path.join(root, "a"))


class TestFileUrls(StorageSuite):
    @pytest.fixture
    def root(self, tmp_path):
        return "file://" + str(tmp_path)


class TestMemory(StorageSuite):
    @pytest.fixture
    def root(self, memfs):
        return f"memory://suite-{uuid.uuid4().hex[:8]}"


class TestFakeGCS(StorageSuite):
    """gs:// through gcsfs against fake_gcs, a real HTTP server on 127.0.0.1 (port 0)."""

    @pytest.fixture
    def root(self, fake_gcs_server):
        bucket = f"suite-{uuid.uuid4().hex[:8]}"
        fs, _ = storage.url_to_fs(f"gs://{bucket}")
        fs.mkdir(bucket)
        yield f"gs://{bucket}"
        fs.clear_instance_cache()


def test_emulator_settings_applied_without_touching_the_environment(monkeypatch):
    """With STORAGE_EMULATOR_HOST set, gs:// uses gcsfs's core class (no gRPC bucket-type probe),
    given the endpoint and anonymous credentials as arguments; os.environ is left as it was."""
    import socket

    import gcsfs.core

    # two listening sockets on 127.0.0.1: the first use of an endpoint checks that it answers
    with socket.create_server(("127.0.0.1", 0)) as one, \
            socket.create_server(("127.0.0.1", 0)) as two:
        host, other = (f"127.0.0.1:{s.getsockname()[1]}" for s in (one, two))
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", host)
        monkeypatch.delenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", raising=False)
        before = dict(os.environ)
        fs = storage.gcs_filesystem()
        assert type(fs) is gcsfs.core.GCSFileSystem and fs._endpoint == f"http://{host}"
        fs2, path = storage.url_to_fs("gs://bucket/a/b")
        assert type(fs2) is gcsfs.core.GCSFileSystem and path == "bucket/a/b"
        assert dict(os.environ) == before
        monkeypatch.delenv("STORAGE_EMULATOR_HOST")
        fs3 = storage.gcs_filesystem(endpoint_url=f"http://{other}")  # explicit, no environment
        assert type(fs3) is gcsfs.core.GCSFileSystem and fs3._endpoint == f"http://{other}"
        assert dict(os.environ) == {k: v for k, v in before.items() if k != "STORAGE_EMULATOR_HOST"}
    gcsfs.core.GCSFileSystem.clear_instance_cache()


def test_unknown_protocol_is_a_storage_error():
    with pytest.raises(StorageError, match="cannot open"):
        storage.url_to_fs("nosuchproto://x/y")
