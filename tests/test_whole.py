"""Whole small local files read and framed in one call (tpudata.tfrecord.whole): the same
records and the same errors (class, file, offset) as the reader's own reads, on the native and
the pure path, and every file descriptor closed."""

from __future__ import annotations

import gzip
import os

import pytest

import tpudata
from tpudata.errors import CorruptRecordError, TruncatedRecordError
from tpudata.tfrecord.reader import TFRecordFileReader
from tpudata.tfrecord.whole import MAX_WHOLE_BYTES, read_whole, whole_file


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _records(path, whole: bool, cap: int = 4096, **kw):
    """(records, error) of a reader, given a whole-file read (framing at most ``cap`` records
    itself) or reading for itself."""
    reader = TFRecordFileReader(str(path), **kw)
    if whole:
        job = whole_file(str(path), 1 << 20, kw.get("verify", True), max_records=cap)
        read_whole([job])
        assert job.done and not job.declined
        reader.use_whole(job)
    out = []
    try:
        for batch in reader:
            out += batch.to_list()
    except (CorruptRecordError, TruncatedRecordError) as exc:
        return out, (type(exc), exc.path, exc.offset, str(exc))
    return out, None


def _damaged(tmp_path):
    records = [os.urandom(n) for n in (5, 300, 0, 77, 4000)]
    clean = tmp_path / "clean.tfrecord"
    tpudata.write_records(str(clean), records)
    data = clean.read_bytes()
    files = {"clean": clean}
    for name, change in [("data_crc", lambda d: d[:40] + bytes([d[40] ^ 1]) + d[41:]),
                         ("header_crc", lambda d: d[:5 + 16 + 9] + b"\xff" + d[5 + 16 + 10:]),
                         ("cut_record", lambda d: d[:-10]),
                         ("cut_header", lambda d: d[:len(d) - 4000 - 16 + 5]),
                         ("garbage", lambda d: b"not a tfrecord file at all")]:
        p = tmp_path / f"{name}.tfrecord"
        p.write_bytes(change(data))
        files[name] = p
    return records, files


@pytest.mark.parametrize("verify", [True, False])
def test_same_records_and_errors_as_the_reader(accel, tmp_path, verify):
    records, files = _damaged(tmp_path)
    before = _fds()
    for name, path in files.items():
        expected = _records(path, False, verify=verify)
        for cap in (4096, 2, 1):  # the reader frames what the whole-file read did not
            assert _records(path, True, cap, verify=verify) == expected, (name, cap)
        skipped = _records(path, True, verify=verify, on_error="skip")
        assert skipped == (expected[0], None), name  # skip: every intact record, then stop
    assert _records(files["clean"], True)[0] == records
    assert _records(files["data_crc"], True)[1][0] is CorruptRecordError
    assert _records(files["cut_record"], True)[1][0] is TruncatedRecordError
    assert _fds() == before


def test_native_and_pure_frame_alike(tmp_path):
    from tpudata import _accel

    if not _accel.available():
        pytest.skip("the accelerator is not built")
    _, files = _damaged(tmp_path)
    paths = [str(p) for p in files.values()] + [str(tmp_path), str(tmp_path / "missing")]
    results = {}
    for native in (True, False):
        previous = _accel.use_native(native)
        try:
            for cap in (4096, 2):
                jobs = [whole_file(p, 1 << 20, max_records=cap) for p in paths]
                read_whole(jobs)
                results[native, cap] = [
                    (j.declined, j.nread, j.count, j.pos, j.err, j.err_offset, j.need,
                     None if j.declined else (j.offsets[:j.count].tolist(),
                                              j.lengths[:j.count].tolist(), bytes(j.buf)))
                    for j in jobs]
        finally:
            _accel.use_native(previous)
    for cap in (4096, 2):
        assert results[True, cap] == results[False, cap]
        assert [r[0] for r in results[True, cap]] == [False] * len(files) + [True, True]


def test_what_qualifies(accel, tmp_path, memfs):
    small = tmp_path / "small.tfrecord"
    tpudata.write_records(str(small), [b"x" * 100])
    big = tmp_path / "big.tfrecord"
    tpudata.write_records(str(big), [bytes(MAX_WHOLE_BYTES)])
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    before = _fds()
    assert whole_file("memory://whole/r.tfrecord", 1 << 20) is None  # local files only
    cases = [(str(small), 50, True),  # larger than the reader's buffer
             (str(big), 64 << 20, True),  # larger than MAX_WHOLE_BYTES
             (str(tmp_path), 1 << 20, True),  # a directory
             (str(tmp_path / "missing"), 1 << 20, True),  # the general path reports it
             (str(empty), 1 << 20, True),
             ("file://" + str(small), 1 << 20, False),
             (str(small), 1 << 20, False)]
    jobs = [whole_file(url, limit) for url, limit, _ in cases]
    read_whole(jobs)
    assert [j.declined for j in jobs] == [d for _, _, d in cases]
    assert jobs[-1].nread == small.stat().st_size and jobs[-1].count == 1
    assert _fds() == before  # every file closed


def test_a_compressed_file_takes_the_general_path(tmp_path):
    raw = tmp_path / "r.tfrecord"
    tpudata.write_records(str(raw), [b"a", b"bc"])
    gz = tmp_path / "r.gz"
    gz.write_bytes(gzip.compress(raw.read_bytes()))
    job = whole_file(str(gz), 1 << 20)
    read_whole([job])
    reader = TFRecordFileReader(str(gz))
    reader.use_whole(job)
    assert [r for b in reader for r in b.to_list()] == [b"a", b"bc"]
    assert reader.compression == "GZIP"
    with pytest.raises(ValueError, match="use_whole"):
        TFRecordFileReader(str(raw), start_offset=5).use_whole(job)
    with pytest.raises(ValueError, match="use_whole"):
        TFRecordFileReader(str(raw), compression="GZIP").use_whole(job)
    declined = whole_file(str(tmp_path), 1 << 20)  # a directory: the reader's own error
    read_whole([declined])
    reader = TFRecordFileReader(str(tmp_path))
    reader.use_whole(declined)
    with pytest.raises((OSError, tpudata.errors.StorageError)):
        list(reader)
