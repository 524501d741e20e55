"""Start-up in O(1) round trips: a glob's matches, sizes and generations come from one listing.

Requests are counted at a real fake_gcs server (``server.stats()``) that real gcsfs talks to.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import tpudata
from fake_gcs import FakeGCSServer
from fake_gcs.env import clear_fsspec_cache, pointed_at
from tpudata import _ranged, storage
from tpudata.errors import StorageError

BUCKET = "listing-bkt"


@pytest.fixture
def server():
    with FakeGCSServer(port=0) as srv, pointed_at(srv):
        storage.gcs_filesystem().mkdir(BUCKET)
        yield srv
        clear_fsspec_cache()


def _shard_bytes(records: list[bytes]) -> bytes:
    url = f"memory://listing/{os.getpid()}-{len(records)}-{hash(tuple(records))}"
    with tpudata.TFRecordWriter(url) as w:
        for r in records:
            w.write(r)
    return storage.read_bytes(url)


def _upload(files: dict[str, bytes]) -> None:
    fs = storage.gcs_filesystem()
    fs.pipe({f"{BUCKET}/{name}": data for name, data in files.items()})
    fs.invalidate_cache()


def _requests(srv) -> dict:
    return srv.stats()["requests"]["by_kind"]


def _fresh(srv):
    clear_fsspec_cache()
    srv.reset_stats()


def test_1024_shards_open_with_one_paged_listing(server):
    n = 1024
    rec = tpudata.encode_example({"x": np.arange(3, dtype=np.int64)})
    data = _shard_bytes([rec, rec])
    _upload({f"data/train-{i:05d}-of-{n:05d}": data for i in range(n)})
    pattern = f"gs://{BUCKET}/data/train-*"

    _fresh(server)
    files = tpudata.Dataset.list_files(pattern, shuffle=False)
    assert len(list(files)) == n
    kinds = _requests(server)
    assert kinds.get("metadata", 0) == 0, kinds
    assert 1 <= kinds["list"] <= 2, kinds  # 1,000 objects a page

    _fresh(server)
    ds = files.interleave(tpudata.TFRecordDataset, cycle_length=8, num_parallel_calls=8)
    it = iter(ds)
    assert next(it) == rec
    kinds = _requests(server)
    assert kinds.get("metadata", 0) == 0, kinds
    assert kinds["list"] <= 2 and kinds["media"] >= 1, kinds

    # a restore lists again (once) and asks nothing per file
    state = it.get_state()
    it.close()
    _fresh(server)
    again = ds.iterator(state)
    assert next(again) == rec
    again.close()
    kinds = _requests(server)
    assert kinds.get("metadata", 0) == 0 and kinds["list"] <= 2, kinds

    _fresh(server)
    assert next(iter(tpudata.read_records(pattern))) == rec
    kinds = _requests(server)
    assert kinds.get("metadata", 0) == 0 and kinds["list"] <= 2 and kinds["media"] == 1, kinds


def test_random_access_source_reads_indexes_and_manifest_without_metadata(server, tmp_path):
    rec = tpudata.encode_example({"y": np.arange(2, dtype=np.int64)})
    out = f"gs://{BUCKET}/src"
    tpudata.build_shards(list(range(40)), lambda i: rec, out, "train", num_shards=8, workers=1,
                         progress=False)
    pattern = f"{out}/train-*"
    for url in storage.glob(pattern):
        tpudata.build_index(url, url + ".idx")

    _fresh(server)
    source = tpudata.TFRecordSource(pattern, progress=False)
    assert len(source) == 40 and source[39] == rec
    kinds = _requests(server)
    assert kinds.get("metadata", 0) == 0, kinds
    assert kinds["list"] == 1, kinds

    _fresh(server)  # the CLI's count reads every file whole: media only
    from tpudata.cli import main

    assert main(["count", pattern]) == 0
    kinds = _requests(server)
    assert kinds.get("metadata", 0) == 0 and kinds["list"] == 1 and kinds["media"] == 8, kinds


def test_a_file_that_changes_generation_while_read_raises_naming_it(server, monkeypatch):
    records = [bytes([i]) * 100 for i in range(20)]
    _upload({"gen/a": _shard_bytes(records)})
    [url] = storage.glob(f"gs://{BUCKET}/gen/*")
    listed = storage.stat(url)
    monkeypatch.setattr(_ranged, "WINDOW_BYTES", 512)  # read ahead two ranges, not the file
    reader = tpudata.TFRecordFileReader(url, buffer_size=256)
    batches = iter(reader)
    first = next(batches)
    assert first.to_list()[0] == records[0]
    _upload({"gen/a": _shard_bytes(records[::-1])})  # a new generation under the same name
    with pytest.raises(StorageError) as err:
        for _ in batches:
            pass
    message = str(err.value)
    assert url in message and listed.generation in message and "changed while it was read" in message


def test_a_file_read_ahead_whole_before_it_changes_is_the_old_generation_whole(server):
    records = [bytes([i]) * 100 for i in range(20)]
    _upload({"ahead/a": _shard_bytes(records)})
    [url] = storage.glob(f"gs://{BUCKET}/ahead/*")
    batches = iter(tpudata.TFRecordFileReader(url, buffer_size=2048))
    got = next(batches).to_list()
    assert _ranged.wait_idle()  # both ranges of the file fetched (a new reader asks for two)
    _upload({"ahead/a": _shard_bytes(records[::-1])})
    for batch in batches:
        got += batch.to_list()
    assert got == records


def test_a_file_rewritten_after_listing_is_refused_until_listed_again(server):
    _upload({"stale/a": _shard_bytes([b"old"])})
    [url] = storage.glob(f"gs://{BUCKET}/stale/*")
    _upload({"stale/a": _shard_bytes([b"new", b"newer"])})
    with pytest.raises(StorageError, match="changed since it was listed"):
        list(tpudata.read_records(url))
    assert list(tpudata.read_records(f"gs://{BUCKET}/stale/*")) == [b"new", b"newer"]


def test_a_shard_deleted_after_listing_is_named(server):
    _upload({"gone/a": _shard_bytes([b"x"]), "gone/b": _shard_bytes([b"y"])})
    files = storage.glob(f"gs://{BUCKET}/gone/*")
    storage.gcs_filesystem().rm_file(f"{BUCKET}/gone/b")
    with pytest.raises((StorageError, FileNotFoundError), match="gone/b"):
        list(tpudata.read_records(files))


def test_our_own_writes_replace_what_a_listing_said(server):
    _upload({"own/a": _shard_bytes([b"1"])})
    [url] = storage.glob(f"gs://{BUCKET}/own/*")
    with tpudata.TFRecordWriter(url) as w:
        w.write(b"22")
    assert storage.stat(url).size == len(_shard_bytes([b"22"]))
    assert list(tpudata.read_records(url)) == [b"22"]


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_side_files_are_not_matched_by_shard_globs(where, server, tmp_path):
    """Index files and manifests beside shards: every reader that takes a glob skips them."""
    rec = tpudata.encode_example({"v": np.arange(2, dtype=np.int64)})
    out = str(tmp_path / "sf") if where == "local" else f"gs://{BUCKET}/sf"
    tpudata.build_shards(list(range(12)), lambda i: rec, out, "train", num_shards=2, workers=1,
                         progress=False)
    pattern = storage.join(out, "train*")
    for url in storage.glob(pattern):
        tpudata.build_index(url, url + ".idx")
    every = storage.glob(storage.join(out, "*"), include_side_files=True)
    assert sum(u.endswith(".idx") for u in every) == 2
    assert sum(u.endswith(".manifest.json") for u in every) == 1
    assert [u.rsplit("/", 1)[-1] for u in storage.glob(pattern)] == [
        "train-00000-of-00002", "train-00001-of-00002"]
    assert len(storage.glob(storage.join(out, "*.idx"))) == 2  # asked for by name
    assert len(tpudata.TFRecordSource(pattern, progress=False)) == 12
    assert len(list(tpudata.read_records(pattern))) == 12
    assert len(list(tpudata.Dataset.list_files(pattern))) == 2
    assert len(list(tpudata.TFRecordDataset(pattern))) == 12
    assert len(list(tpudata.Dataset.list_files(pattern).interleave(tpudata.TFRecordDataset))) == 12
    from tpudata.jax import tfrecord_batches  # (imports JAX only when it is used)

    batches = tfrecord_batches(pattern, 4, process_index=0, process_count=1, progress=False,
                               pipeline=lambda ds, _: ds.parse({"v": tpudata.FixedLenFeature([2], np.int64)}))
    assert sum(int(b["weight"].sum()) for b in batches) == 12


def test_tfrecord_dataset_expands_a_glob(tmp_path):
    for i in range(3):
        with tpudata.TFRecordWriter(str(tmp_path / f"part-{i}")) as w:
            w.write(b"%d" % i)
    assert list(tpudata.TFRecordDataset(str(tmp_path / "part-*"))) == [b"0", b"1", b"2"]
    assert list(tpudata.TFRecordDataset([str(tmp_path / "part-[12]")], num_parallel_reads=2)) == [
        b"1", b"2"]
    with pytest.raises(StorageError, match="no files match"):
        tpudata.TFRecordDataset(str(tmp_path / "nothing-*"))


def test_writing_beside_listed_shards_keeps_the_others_known(server):
    _upload({f"beside/s{i}": _shard_bytes([b"%d" % i]) for i in range(4)})
    files = storage.glob(f"gs://{BUCKET}/beside/s*")
    assert not storage.listed_exists(files[0] + ".idx")  # the listing saw none: no request
    tpudata.build_index(files[0], files[0] + ".idx")  # tpudata writes under the listed prefix
    server.reset_stats()
    assert list(tpudata.read_records(files[1:])) == [b"1", b"2", b"3"]
    assert _requests(server).get("metadata", 0) == 0
    assert storage.listed_exists(files[0] + ".idx")  # written since the listing: asked afresh
