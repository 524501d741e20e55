"""Random access: TFRecordSource and IndexedTFRecordFile, from many threads, in worker processes,
over local files, memory:// and fake GCS; every record's identity is checked."""

from __future__ import annotations

import multiprocessing
import pickle
import random
import threading

import numpy as np
import pytest

import tpudata
from tpudata import storage
from tpudata.errors import CorruptRecordError, DataLossError, StaleIndexError, TruncatedRecordError
from tpudata.source import TFRecordSource
from tpudata.tfrecord import IndexedTFRecordFile, build_index, write_records

from fake_gcs.pytest_plugin import fake_gcs_server  # noqa: F401  (fixture)


def _record(f: int, i: int, rng: random.Random) -> bytes:
    return f"{f}:{i}:".encode() + rng.randbytes(rng.randint(0, 300))


def _files(base: str, sizes=(50, 0, 120, 7)) -> tuple[list[str], list[bytes]]:
    rng = random.Random(5)
    files, all_records = [], []
    for f, n in enumerate(sizes):
        recs = [_record(f, i, rng) for i in range(n)]
        url = f"{base}/part-{f}.tfrecord"
        write_records(url, recs)
        files.append(url)
        all_records += recs
    return files, all_records


def _identity(rec: bytes) -> tuple[int, int]:
    f, i, _ = rec.split(b":", 2)
    return int(f), int(i)


def test_getitems_matches_the_files_in_any_order(tmp_path):
    files, expected = _files(str(tmp_path))
    for gap in (0, 1 << 20):
        src = TFRecordSource(files, max_gap=gap, progress=False)
        assert len(src) == len(expected) == 177
        assert [src[i] for i in range(len(src))] == expected
        rng = np.random.default_rng(0)
        idx = rng.integers(-len(src), len(src), size=500)
        assert src.__getitems__(idx) == [expected[i] for i in idx.tolist()]
        assert src.__getitems__([]) == []
    with pytest.raises(IndexError, match="out of range"):
        src[177]
    with pytest.raises(TypeError):
        src["1"]


def test_threads_hammering_one_object_get_the_right_records(tmp_path):
    files, expected = _files(str(tmp_path), sizes=(400, 300))
    src = TFRecordSource(files, progress=False)
    single = IndexedTFRecordFile(files[0])
    errors, checked = [], [0] * 8

    def work(t):
        rng = random.Random(t)
        try:
            for _ in range(300):
                i = rng.randrange(len(src))
                assert src[i] == expected[i]
                j = rng.randrange(400)
                assert single[j] == expected[j] and _identity(single[j]) == (0, j)
                batch = [rng.randrange(len(src)) for _ in range(16)]
                assert src.__getitems__(batch) == [expected[b] for b in batch]
                checked[t] += 18
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert sum(checked) == 8 * 300 * 18


def test_counts_come_from_the_manifest_and_offsets_load_lazily(tmp_path):
    rng = random.Random(1)
    recs = [_record(0, i, rng) for i in range(90)]
    tpudata.write_shards(recs, str(tmp_path), "train", num_shards=3, progress=False)
    src = TFRecordSource(str(tmp_path / "train-*"), progress=False)
    assert len(src) == 90 and src.counts.sum() == 90
    assert all(ix is None for ix in src._indexes)  # len() needed no scan
    assert src.__getitems__([89, 0]) == [recs[89], recs[0]]
    assert src._indexes[1] is None  # only the files read were indexed


def test_index_files_are_written_and_used(tmp_path):
    files, expected = _files(str(tmp_path), sizes=(30, 20))
    TFRecordSource(files, write_index=True, progress=False)
    assert storage.exists(files[0] + ".idx")
    np.testing.assert_array_equal(tpudata.read_index(files[1] + ".idx"), build_index(files[1]))
    src = TFRecordSource(files, progress=False)
    assert src[45] == expected[45]
    # a stale index that puts records where the file has none is caught, not trusted
    tpudata.write_index(files[0] + ".idx", build_index(files[0])[:, ::-1] * 0 + [[0, 40]])
    with pytest.raises(DataLossError):
        TFRecordSource(files, progress=False)[3]


def test_corruption_and_truncation_are_reported_with_file_and_offset(tmp_path):
    files, expected = _files(str(tmp_path), sizes=(10,))
    idx = build_index(files[0])
    data = bytearray(open(files[0], "rb").read())
    off = int(idx[4, 0]) + 12
    data[off] ^= 0xFF
    open(files[0], "wb").write(bytes(data))
    src = TFRecordSource(files, index=[idx], progress=False)
    assert src[3] == expected[3]
    with pytest.raises(CorruptRecordError) as info:
        src.__getitems__([5, 4])
    assert info.value.path == files[0] and info.value.offset == off
    assert str(off) in str(info.value)
    open(files[0], "wb").write(bytes(data[: int(idx[8, 0]) + 20]))
    with pytest.raises(StaleIndexError, match="rebuild") as stale:  # before any read
        TFRecordSource(files, index=[idx], progress=False)[8]
    assert stale.value.path == files[0]
    with pytest.raises(StaleIndexError):
        IndexedTFRecordFile(files[0], idx)[9]
    cut = idx.copy()
    cut[8, 1] = len(data[: int(idx[8, 0]) + 20]) - int(idx[8, 0])  # covers the file: reads check
    with pytest.raises(TruncatedRecordError, match="rebuild"):
        TFRecordSource(files, index=[cut[:9]], progress=False)[8]


def test_compressed_files_get_a_clear_error(tmp_path):
    url = str(tmp_path / "z.tfrecord.gz")
    with tpudata.TFRecordWriter(url, compression="GZIP") as w:
        w.write(b"x")
    with pytest.raises(ValueError, match="GZIP-compressed.*uncompressed"):
        TFRecordSource([url], progress=False)


def _read_in_worker(args):
    src, indices = args
    return [_identity(r) for r in src.__getitems__(indices)]


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_pickles_without_handles_and_reads_in_workers(tmp_path, method, isolate_fork):
    if method == "fork" and isolate_fork():
        return
    files, expected = _files(str(tmp_path), sizes=(40, 25))
    src = TFRecordSource(files, progress=False)
    assert src[0] == expected[0]  # the parent holds open descriptors now
    clone = pickle.loads(pickle.dumps(src))
    assert clone.__getitems__([64, 1]) == [expected[64], expected[1]]
    ctx = multiprocessing.get_context(method)
    with ctx.Pool(2) as pool:
        got = pool.map(_read_in_worker, [(src, list(range(k, 65, 2))) for k in (0, 1)])
    assert sorted(got[0] + got[1]) == sorted(_identity(r) for r in expected)


def test_gcs_source_reads_ranges_concurrently(fake_gcs_server):  # noqa: F811
    storage.gcs_filesystem().mkdir("src-bucket")
    files, expected = _files("gs://src-bucket/d", sizes=(60, 45))
    src = TFRecordSource("gs://src-bucket/d/part-*", progress=False)
    assert src.files == files and len(src) == 105
    idx = np.random.default_rng(3).permutation(105)[:64]
    assert src.__getitems__(idx) == [expected[i] for i in idx.tolist()]
    assert IndexedTFRecordFile(files[1])[44] == expected[104]
    clone = pickle.loads(pickle.dumps(src))
    assert clone[104] == expected[104]


def test_grain_map_dataset_source(tmp_path):
    grain = pytest.importorskip("grain")
    files, expected = _files(str(tmp_path), sizes=(30, 12))
    src = TFRecordSource(files, progress=False)
    ds = grain.MapDataset.source(src).shuffle(seed=3).map(_identity)
    got = [ds[i] for i in range(len(ds))]
    assert len(ds) == 42 and sorted(got) == sorted(_identity(r) for r in expected)
    assert got != sorted(got)  # it really was shuffled through random access
