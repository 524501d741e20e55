"""TFRecord framing, streaming reader, writer and index."""

from __future__ import annotations

import gzip
import io
import logging
import os
import pickle
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpudata
from tpudata import _accel
from tpudata.errors import (
    CorruptRecordError, DataLossError, StaleIndexError, StorageError, TruncatedRecordError,
)
from tpudata.tfrecord import framing
from tpudata.tfrecord.reader import TFRecordFileReader, detect_compression

records_st = st.lists(st.binary(max_size=300), max_size=40)


def framed(records) -> bytes:
    return framing.frame_pure(records)


def write_file(path, records, compression=None) -> str:
    with tpudata.TFRecordWriter(str(path), compression) as w:
        w.write_many(records)
    return str(path)


# -- checksums and framing ------------------------------------------------------------------------
def test_crc32c_known_values(accel):
    assert framing.crc32c(b"123456789") == 0xE3069283
    assert framing.crc32c(b"") == 0
    data = os.urandom(100_000)
    assert framing.crc32c(data[5000:], framing.crc32c(data[:5000])) == framing.crc32c(data)


def test_mask_roundtrip_and_tensorflow_value():
    for crc in (0, 1, 0xFFFFFFFF, 0x12345678):
        assert framing.unmask_crc(framing.mask_crc(crc)) == crc
    # from tf.io.TFRecordWriter's output for b"hi"
    assert framing.masked_crc32c(b"hi") == 0x5608D613


@given(records_st)
@settings(max_examples=60, deadline=None)
def test_native_and_pure_frame_and_scan_agree(records):
    data = framing.frame_pure(records)
    if _accel.available():
        assert _accel._compiled.frame(records) == data
    for cap in (1, 3, 64):
        offsets = np.empty(cap, np.int64)
        lengths = np.empty(cap, np.int64)
        pure = framing.scan_pure(data, 0, len(data), True, offsets, lengths)
        pure_arrays = (offsets.copy(), lengths.copy())
        if _accel.available():
            nat = _accel._compiled.scan(data, 0, len(data), True, offsets, lengths)
            assert nat == pure
            n = pure[0]
            assert np.array_equal(offsets[:n], pure_arrays[0][:n])
            assert np.array_equal(lengths[:n], pure_arrays[1][:n])


@given(records_st, st.data())
@settings(max_examples=60, deadline=None)
def test_scan_of_a_cut_buffer_reports_what_it_needs(records, data):
    buf = framed(records)
    cut = data.draw(st.integers(0, len(buf)))
    for mode in ("native", "pure") if _accel.available() else ("pure",):
        prev = _accel.use_native(mode == "native")
        try:
            r = framing.scan(buf, 0, cut, True, capacity=1000)
        finally:
            _accel.use_native(prev)
        starts = np.cumsum([0] + [len(x) + 16 for x in records])
        complete = int(np.searchsorted(starts, cut, side="right")) - 1
        assert r.count == complete and r.err == framing.OK
        assert r.pos == starts[complete]
        if r.pos < cut or complete < len(records):
            expect_need = 12 if cut - r.pos < 12 else len(records[complete]) + 16
            assert r.need == expect_need
        else:
            assert r.need == 12


def test_scan_reports_tensorflow_offsets_for_bad_crcs(accel):
    buf = bytearray(framed([b"abc", b"defgh"]))
    second = 3 + 16
    bad_header = bytearray(buf)
    bad_header[second + 2] ^= 1
    r = framing.scan(bytes(bad_header), 0, len(buf))
    assert (r.count, r.err, r.err_offset, r.pos) == (1, framing.BAD_HEADER_CRC, second, second)
    bad_data = bytearray(buf)
    bad_data[second + 13] ^= 1
    r = framing.scan(bytes(bad_data), 0, len(buf))
    assert (r.count, r.err, r.err_offset) == (1, framing.BAD_DATA_CRC, second + 12)
    r = framing.scan(bytes(bad_data), 0, len(buf), verify=False)
    assert r.count == 2 and r.err == framing.OK


# -- reader ---------------------------------------------------------------------------------------
@given(records_st, st.integers(64, 700), st.integers(1, 7))
@settings(max_examples=80, deadline=None)
def test_reader_any_buffer_size_and_batch_capacity(records, buffer_size, max_batch):
    buf = framed(records)
    fs_path = f"memory://hyp/{len(records)}-{buffer_size}-{max_batch}.tfrecord"
    with tpudata.storage.open_atomic(fs_path) as f:
        f.write(buf)
    reader = TFRecordFileReader(fs_path, buffer_size=buffer_size, max_batch_records=max_batch)
    got = []
    for batch in reader:
        assert 0 < len(batch) <= max_batch
        starts = batch.record_offsets
        for i, rec in enumerate(batch.to_list()):
            expect_start = sum(len(x) + 16 for x in records[: len(got) + i])
            assert starts[i] == expect_start
            assert rec == records[len(got) + i]
        got.extend(batch.to_list())
        assert reader.offset == batch.end_offset
    assert got == records
    assert reader.offset == len(buf)


def test_reader_resumes_at_every_record_boundary(accel, tmp_path):
    records = [os.urandom(n) for n in (0, 5, 100, 3000, 7, 0, 64)]
    for compression in (None, "GZIP", "ZLIB"):
        path = write_file(tmp_path / f"r{compression}.tfrecord", records, compression)
        offsets = [0] + list(np.cumsum([len(r) + 16 for r in records]))
        for i, off in enumerate(offsets):
            reader = TFRecordFileReader(path, start_offset=int(off), buffer_size=256)
            assert [r for b in reader for r in b.to_list()] == records[i:]


def test_small_files_get_a_buffer_of_their_size(tmp_path):
    # many small files must not each allocate (and page-fault) a whole 8 MiB read buffer
    records = [os.urandom(n) for n in (10, 300, 7)]
    for compression in (None, ""):
        path = write_file(tmp_path / f"s{compression}.tfrecord", records, compression)
        size = os.path.getsize(path)
        for start in (0, 26):
            batches = list(TFRecordFileReader(path, compression=compression, start_offset=start))
            assert [r for b in batches for r in b.to_list()] == records[start // 26:]
            assert {len(b.buffer) for b in batches} == {size - start}
    big = write_file(tmp_path / "big.tfrecord", [bytes(1000)] * 10)
    assert [len(b.buffer) for b in TFRecordFileReader(big, buffer_size=4096)][0] == 4096


def test_read_records_over_many_files_and_globs(tmp_path):
    a = write_file(tmp_path / "d-00000-of-00002", [b"a1", b"a2"])
    b = write_file(tmp_path / "d-00001-of-00002", [b"b1"], "GZIP")
    assert list(tpudata.read_records(str(tmp_path / "d-*"))) == [b"a1", b"a2", b"b1"]
    assert list(tpudata.read_records([b, a])) == [b"b1", b"a1", b"a2"]
    with pytest.raises(StorageError, match="no files match"):
        list(tpudata.read_records(str(tmp_path / "nothing-*")))
    with pytest.raises(StorageError, match="no such file"):
        list(tpudata.read_records(str(tmp_path / "missing.tfrecord")))


def test_empty_file_has_no_records(tmp_path):
    p = tmp_path / "empty.tfrecord"
    p.write_bytes(b"")
    assert list(tpudata.read_records(str(p))) == []
    assert list(tpudata.read_records(str(p), compression="GZIP")) == []


@pytest.mark.parametrize("size", [1, 5, 11])
def test_tiny_garbage_is_truncated_at_zero_with_hint(accel, tmp_path, size):
    p = tmp_path / "tiny"
    p.write_bytes(b"x" * size)
    with pytest.raises(TruncatedRecordError) as info:
        list(tpudata.read_records(str(p)))
    assert info.value.offset == 0
    assert "truncated record at 0 (Is this even a TFRecord file?)" in str(info.value)


def test_every_truncation_point(accel, tmp_path):
    records = [b"", b"abc", os.urandom(40), b"z"]
    data = framed(records)
    starts = [0] + list(np.cumsum([len(r) + 16 for r in records]))
    p = tmp_path / "t.tfrecord"
    for cut in range(len(data) + 1):
        p.write_bytes(data[:cut])
        got = []
        try:
            for rec in tpudata.read_records(str(p), buffer_size=64):
                got.append(rec)
        except TruncatedRecordError as exc:
            k = max(i for i, s in enumerate(starts) if s <= cut)
            assert exc.offset == starts[k] and cut != starts[k]
            assert got == records[:k]  # everything before the damage is delivered
        else:
            assert cut in starts and got == records[: starts.index(cut)]


def test_skip_mode_logs_and_stops_the_file(accel, tmp_path, caplog):
    records = [b"one", b"two", b"three"]
    data = bytearray(framed(records))
    data[3 + 16 + 12] ^= 0xFF  # data of record 1
    p = tmp_path / "bad.tfrecord"
    p.write_bytes(bytes(data))
    good = write_file(tmp_path / "good.tfrecord", [b"next"])
    with caplog.at_level(logging.WARNING, logger="tpudata"):
        got = list(tpudata.read_records([str(p), good], on_error="skip"))
    assert got == [b"one", b"next"]
    assert any(str(p) in r.getMessage() and "corrupted record at 31" in r.getMessage()
               for r in caplog.records)
    with pytest.raises(CorruptRecordError):
        list(tpudata.read_records(str(p)))


def test_skip_mode_on_truncation_and_corrupt_gzip(tmp_path, caplog):
    p = tmp_path / "cut.tfrecord"
    p.write_bytes(framed([b"keep", b"lost"])[:-3])
    with caplog.at_level(logging.WARNING, logger="tpudata"):
        assert list(tpudata.read_records(str(p), on_error="skip")) == [b"keep"]
    assert "truncated record at 20" in caplog.text
    records = [os.urandom(1000) for _ in range(20)]
    g = tmp_path / "cut.gz"
    g.write_bytes(gzip.compress(framed(records))[:10_000])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tpudata"):
        got = list(tpudata.read_records(str(g), on_error="skip"))
    assert 0 < len(got) < 20 and got == records[: len(got)]
    start = len(got) * 1016  # TensorFlow's offset: the decompressed start of the lost record
    assert f"truncated record at {start} (the GZIP stream ends" in caplog.text
    assert str(g) in caplog.text


def test_multi_member_gzip_and_zlib_trailing_garbage(tmp_path):
    p = tmp_path / "multi.gz"
    p.write_bytes(gzip.compress(framed([b"a", b"b"])) + gzip.compress(framed([b"c"])))
    assert list(tpudata.read_records(str(p))) == [b"a", b"b", b"c"]
    z = tmp_path / "trail.zlib"
    z.write_bytes(zlib.compress(framed([b"a"])) + b"garbage")
    with pytest.raises(DataLossError, match="after the end of the ZLIB stream"):
        list(tpudata.read_records(str(z), compression="ZLIB"))


def test_truncated_and_corrupt_gzip_are_data_loss(tmp_path):
    blob = gzip.compress(framed([os.urandom(500) for _ in range(10)]))
    cut = tmp_path / "cut.gz"
    cut.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(TruncatedRecordError, match=r"truncated record at \d+ \(the GZIP stream"):
        list(tpudata.read_records(str(cut)))
    bad = bytearray(blob)
    bad[len(blob) // 2] ^= 0x55
    (tmp_path / "bad.gz").write_bytes(bytes(bad))
    with pytest.raises(DataLossError):
        list(tpudata.read_records(str(tmp_path / "bad.gz")))


def test_detect_compression():
    plain = framed([b"abc"])
    assert detect_compression(plain) == ""
    assert detect_compression(gzip.compress(plain)) == "GZIP"
    assert detect_compression(zlib.compress(plain)) == "ZLIB"
    assert detect_compression(b"") == ""
    # a record whose length bytes look like a zlib header is still recognised by its CRC
    rec = b"x" * 0x9C78
    assert framed([rec])[:2] == b"\x78\x9c" and detect_compression(framed([rec])) == ""


def test_verify_false_reads_corrupt_data(tmp_path):
    data = bytearray(framed([b"abc"]))
    data[12] = ord("X")
    p = tmp_path / "c.tfrecord"
    p.write_bytes(bytes(data))
    assert list(tpudata.read_records(str(p), verify=False)) == [b"Xbc"]


def test_reader_rejects_bad_arguments(tmp_path):
    p = write_file(tmp_path / "a", [b"x"])
    with pytest.raises(ValueError, match="compression"):
        TFRecordFileReader(p, compression="LZ4")
    with pytest.raises(ValueError, match="on_error"):
        TFRecordFileReader(p, on_error="ignore")
    with pytest.raises(ValueError, match="buffer_size"):
        TFRecordFileReader(p, buffer_size=8)


@pytest.mark.parametrize("use_mmap", [True, False])
def test_reader_closes_file_when_abandoned(tmp_path, use_mmap):
    p = write_file(tmp_path / "a", [b"x"] * 10)
    fds = len(os.listdir("/proc/self/fd"))
    reader = TFRecordFileReader(p, buffer_size=64, max_batch_records=2, use_mmap=use_mmap)
    it = iter(reader)
    batch = next(it)
    assert len(os.listdir("/proc/self/fd")) > fds
    it.close()
    del batch  # a batch keeps its (mmap) window alive until dropped
    assert len(os.listdir("/proc/self/fd")) == fds


@pytest.mark.parametrize("use_mmap", [True, False])
def test_record_bigger_than_window(accel, tmp_path, use_mmap, monkeypatch):
    from tpudata.tfrecord import reader as reader_module

    monkeypatch.setattr(reader_module, "MMAP_WINDOW", 4096)
    records = [b"a", os.urandom(50_000), b"b", os.urandom(9000)]
    p = write_file(tmp_path / "big", records)
    got = list(tpudata.read_records(p, buffer_size=1000, use_mmap=use_mmap))
    assert got == records
    cut = tmp_path / "cut"
    cut.write_bytes(open(p, "rb").read()[:30_000])
    with pytest.raises(TruncatedRecordError, match="truncated record at 17"):
        list(tpudata.read_records(str(cut), buffer_size=1000, use_mmap=use_mmap))


# -- writer ---------------------------------------------------------------------------------------
def test_writer_is_atomic(tmp_path):
    target = tmp_path / "out.tfrecord"
    with pytest.raises(RuntimeError):
        with tpudata.TFRecordWriter(str(target)) as w:
            w.write(b"partial")
            w.flush()
            assert not target.exists()  # nothing under the final name while writing
            raise RuntimeError("crash")
    assert not target.exists()
    assert os.listdir(tmp_path) == []  # no temporary left behind


def test_unclosed_writer_never_publishes(tmp_path):
    target = tmp_path / "gc.tfrecord"
    w = tpudata.TFRecordWriter(str(target))
    w.write(b"x")
    del w
    import gc

    gc.collect()
    assert os.listdir(tmp_path) == []


def test_writer_api(tmp_path):
    sink = io.BytesIO()
    w = tpudata.TFRecordWriter(sink)
    w.write("text ✓")
    w.write(np.arange(3, dtype=np.uint8))
    assert w.write_many(iter([b"a", bytearray(b"b")])) == 2
    w.flush()
    assert len(sink.getvalue()) == w.bytes_written
    w.close()
    w.close()
    assert not sink.closed  # a file object passed in is not ours to close
    assert w.records_written == 4
    with pytest.raises(ValueError, match="closed"):
        w.write(b"more")
    sink.seek(0)
    assert list(tpudata.read_records([_to_file(tmp_path, sink.getvalue())])) == [
        "text ✓".encode(), b"\x00\x01\x02", b"a", b"b"]
    with pytest.raises(TypeError):
        tpudata.TFRecordWriter(str(tmp_path / "x")).write(12)


def _to_file(tmp_path, data):
    p = tmp_path / "from_sink.tfrecord"
    p.write_bytes(data)
    return str(p)


def test_writer_flush_gzip_is_readable_after_close(tmp_path):
    p = str(tmp_path / "f.gz")
    with tpudata.TFRecordWriter(p, "gzip") as w:
        for i in range(1000):
            w.write(b"%d" % i)
            if i % 100 == 0:
                w.flush()
    assert list(tpudata.read_records(p)) == [b"%d" % i for i in range(1000)]


def test_memory_urls(memfs):
    n = tpudata.write_records("memory://bucket/x.tfrecord", [b"1", b"22"])
    assert n == 2
    assert list(tpudata.read_records("memory://bucket/x.tfrecord")) == [b"1", b"22"]
    with pytest.raises(RuntimeError):
        with tpudata.TFRecordWriter("memory://bucket/y.tfrecord") as w:
            w.write(b"a")
            raise RuntimeError
    assert not memfs.exists("/bucket/y.tfrecord")


# -- record batches -------------------------------------------------------------------------------
def test_record_batch():
    b = tpudata.RecordBatch.from_records([b"ab", b"", b"cde"])
    assert len(b) == 3 and b[0] == b"ab" and b[-1] == b"cde" and list(b) == [b"ab", b"", b"cde"]
    assert b[1:].to_list() == [b"", b"cde"]
    assert b.record_offsets.tolist() == [0, 2, 2] and b.end_offset == 5
    assert tpudata.RecordBatch.from_records(b) is b
    assert tpudata.RecordBatch.from_records(np.array([b"x", b"yz"], dtype=object)).to_list() == [
        b"x", b"yz"]
    assert "3 records" in repr(b)


# -- index ----------------------------------------------------------------------------------------
def test_index_format_matches_dali(tmp_path):
    records = [b"", b"abc", os.urandom(1000)]
    p = write_file(tmp_path / "i.tfrecord", records)
    idx_path = str(tmp_path / "i.idx")
    index = tpudata.build_index(p, idx_path)
    # DALI's tfrecord2idx: "<offset> <frame length>" per record, computed by walking the file
    expected, pos = [], 0
    with open(p, "rb") as f:
        while True:
            head = f.read(8)
            if not head:
                break
            (n,) = struct.unpack("<Q", head)
            f.seek(4 + n + 4, 1)
            expected.append(f"{pos} {f.tell() - pos}\n")
            pos = f.tell()
    with open(idx_path) as f:
        assert f.read() == "".join(expected)
    assert tpudata.read_index(idx_path).tolist() == index.tolist()
    for i, rec in enumerate(records):
        assert tpudata.read_record_at(p, i, idx_path) == rec
    indexed = tpudata.IndexedTFRecordFile(p, index)
    assert len(indexed) == 3 and indexed[-1] == records[-1]
    with pytest.raises(IndexError):
        indexed[3]
    clone = pickle.loads(pickle.dumps(indexed))
    assert clone[1] == b"abc"


def test_index_detects_damage(tmp_path):
    p = write_file(tmp_path / "i.tfrecord", [b"abc", b"defg"])
    idx = tpudata.build_index(p)
    data = bytearray(open(p, "rb").read())
    data[19 + 12] ^= 1
    open(p, "wb").write(bytes(data))
    with pytest.raises(CorruptRecordError, match="corrupted record at 31"):
        tpudata.read_record_at(p, 1, idx)
    assert tpudata.read_record_at(p, 0, idx) == b"abc"
    data[19 + 12] ^= 1  # repaired
    open(p, "wb").write(bytes(data))
    assert tpudata.read_record_at(p, 1, idx) == b"defg"
    wrong = idx.copy()
    wrong[1, 1] -= 1  # an index that does not cover the file is refused before any read
    with pytest.raises(StaleIndexError, match="covers 38 bytes"):
        tpudata.read_record_at(p, 1, wrong)
    wrong[:] = [[0, 20], [20, 19]]  # covers it, but disagrees with the file's framing
    with pytest.raises(CorruptRecordError, match="index says"):
        tpudata.read_record_at(p, 0, wrong)
    with pytest.raises((CorruptRecordError, TruncatedRecordError)):
        tpudata.read_record_at(p, 1, wrong)
    bad = tmp_path / "bad.idx"
    bad.write_text("0 20\nnot numbers\n")
    with pytest.raises(ValueError, match="bad.idx:2"):
        tpudata.read_index(str(bad))


def test_transient_error_classification():
    import aiohttp

    from tpudata.tfrecord.reader import is_transient

    def wrapped(outer, inner):
        try:
            try:
                raise inner
            except Exception as exc:
                raise outer from exc
        except Exception as exc:
            return exc

    assert is_transient(ConnectionResetError())
    assert is_transient(TimeoutError())
    assert not is_transient(FileNotFoundError("gone"))
    assert not is_transient(PermissionError())
    assert not is_transient(CorruptRecordError("corrupted record at 3", "f", 3))
    assert not is_transient(ValueError("bug"))
    req = aiohttp.RequestInfo(url="http://x", method="GET", headers={}, real_url="http://x")
    for status, want in ((503, True), (429, True), (408, True), (404, False), (403, False)):
        assert is_transient(aiohttp.ClientResponseError(req, (), status=status)) is want
    assert is_transient(wrapped(FileNotFoundError("u"), aiohttp.ClientResponseError(req, (), status=503)))
    assert not is_transient(wrapped(FileNotFoundError("u"), aiohttp.ClientResponseError(req, (), status=404)))
    assert not is_transient(wrapped(StorageError("cannot open"), ValueError("bad url")))
    assert is_transient(wrapped(StorageError("cannot open"), ConnectionError()))


def _framed_stream(records, compression):
    data = framed(records)
    if compression == "GZIP":
        return gzip.compress(data, mtime=0)
    return zlib.compress(data)


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
@pytest.mark.parametrize("given", [True, False])
@pytest.mark.parametrize("buffer_size", [64, 4096, 8 << 20])
def test_damaged_checksum_delivers_every_intact_record(tmp_path, compression, given, buffer_size):
    """Only the stream's trailing checksum is damaged: all 4 records come back, then the error at
    the end of the last record (a zlib error must not discard what the same chunk decoded to)."""
    records = [os.urandom(100_000) for _ in range(4)]
    blob = bytearray(_framed_stream(records, compression))
    blob[-6 if compression == "GZIP" else -2] ^= 0xFF  # the CRC32 / the Adler-32
    p = tmp_path / "bad"
    p.write_bytes(bytes(blob))
    got = []
    with pytest.raises(CorruptRecordError) as info:
        for r in tpudata.read_records(str(p), compression if given else None,
                                      buffer_size=buffer_size):
            got.append(r)
    assert got == records
    end = 4 * (100_000 + 16)
    assert info.value.offset == end and info.value.path == str(p)
    assert info.value.message.startswith(f"corrupted record at {end} (damaged {compression} stream")


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_compressed_offsets_are_record_starts_independent_of_buffers(tmp_path, compression):
    """TensorFlow's offset for a cut compressed file: the decompressed start of the cut record."""
    records = [os.urandom(100_000) for _ in range(4)]
    blob = _framed_stream(records, compression)
    p = tmp_path / "cut"
    p.write_bytes(blob[: len(blob) * 3 // 8])  # inside record 1 (the data is incompressible)
    seen = set()
    for buffer_size in (64, 1000, 65536, 8 << 20):
        got = []
        with pytest.raises(TruncatedRecordError) as info:
            for r in tpudata.read_records(str(p), buffer_size=buffer_size):
                got.append(r)
        assert got == records[:1]
        seen.add((info.value.offset, info.value.message))
    assert seen == {(100016, "truncated record at 100016 (the "
                     f"{compression} stream ends before its end marker)")}


def test_compressed_damage_inside_a_record(tmp_path):
    records = [bytes(range(256)) * 400 for _ in range(6)]  # compressible: damage lands mid-stream
    blob = bytearray(_framed_stream(records, "ZLIB"))
    blob[len(blob) // 2] ^= 0x10
    p = tmp_path / "bad.zlib"
    p.write_bytes(bytes(blob))
    got = []
    with pytest.raises(DataLossError) as info:
        for r in tpudata.read_records(str(p)):
            got.append(r)
    assert got == records[: len(got)] and len(got) < 6
    start = len(got) * (len(records[0]) + 16)
    # zlib's error at the record's start, or TensorFlow's data-CRC offset (start + 12) when the
    # damage decoded to wrong bytes without a zlib error
    assert info.value.offset in (start, start + 12)
    assert info.value.message.startswith(f"corrupted record at {info.value.offset}")


@pytest.mark.parametrize("compression", ["", "GZIP", "ZLIB"])
@pytest.mark.parametrize("use_mmap", [False, True])
def test_start_offset_past_the_end_raises_on_every_path(tmp_path, compression, use_mmap):
    data = framed([b"abc", b"defg"])
    p = tmp_path / "f"
    p.write_bytes(_framed_stream([b"abc", b"defg"], compression) if compression else data)
    r = TFRecordFileReader(str(p), compression, start_offset=len(data), use_mmap=use_mmap)
    assert list(r) == []  # the end itself is a valid resume point
    r = TFRecordFileReader(str(p), compression, start_offset=19, use_mmap=use_mmap)
    assert [b.to_list() for b in r] == [[b"defg"]]
    for detect in (None, compression):
        r = TFRecordFileReader(str(p), detect, start_offset=len(data) + 1, use_mmap=use_mmap)
        with pytest.raises(ValueError, match=f"start_offset {len(data) + 1}|start offset"):
            list(r)


def test_misspelt_keywords_raise_with_the_closest_name(tmp_path):
    p = str(tmp_path / "k.tfrecord")
    tpudata.write_records(p, [b"a"])
    with pytest.raises(TypeError, match="'bufer_size'; did you mean 'buffer_size'"):
        tpudata.read_records(p, bufer_size=10, compresion="GZIP")
    with pytest.raises(TypeError, match="'compresion'; did you mean 'compression'"):
        tpudata.read_record_batches(p, compresion="GZIP")
    with pytest.raises(TypeError, match="'verfy'; did you mean 'verify'"):
        TFRecordFileReader(p, verfy=False)
    with pytest.raises(TypeError, match="'token'.*storage_options"):
        tpudata.build_index(p, token="anon")
    with pytest.raises(TypeError, match="did you mean 'storage_options'"):
        tpudata.read_index(p, storage_option={})
    with pytest.raises(TypeError, match="did you mean 'compression'"):
        tpudata.write_records(p, [b"a"], compresion="GZIP")
    with pytest.raises(TypeError, match="did you mean 'index'"):
        tpudata.IndexedTFRecordFile(p, indx=None)
    # the explicit way works and reaches fsspec
    assert list(tpudata.read_records(p, storage_options={})) == [b"a"]


_SHRINK_SCRIPT = """
import os, sys
import tpudata
from tpudata.errors import DataLossError
path, cut, use_mmap = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
reader = tpudata.TFRecordFileReader(path, buffer_size=1 << 16, use_mmap=use_mmap)
batches = reader.batches()
next(batches)
os.truncate(path, cut)  # another process cuts the file while it is being read
try:
    n = sum(len(b) for b in batches)
    print("END", n)
except DataLossError as e:
    print(type(e).__name__, e.path == path, e.offset, e.message)
"""


@pytest.mark.parametrize("at_boundary", [False, True])
def test_file_truncated_while_read_is_data_loss_not_sigbus(tmp_path, at_boundary):
    """The default (no mmap) path turns a file that shrinks under the reader into a
    TruncatedRecordError naming it; the process survives (a mapped file would die of SIGBUS)."""
    import subprocess
    import sys

    p = tmp_path / "shrinking.tfrecord"
    tpudata.write_records(str(p), [os.urandom(1000) for _ in range(2000)])
    cut = 1016 * 1500 + (0 if at_boundary else 100)
    out = subprocess.run([sys.executable, "-c", _SHRINK_SCRIPT, str(p), str(cut), "0"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    kind, named, offset, message = out.stdout.split(" ", 3)
    assert (kind, named, int(offset)) == ("TruncatedRecordError", "True", 1016 * 1500)
    if at_boundary:
        assert "shrank from 2032000 bytes while it was read" in message


@pytest.mark.parametrize("compression_type", ["GZIP", None])
def test_tfrecord_dataset_delivers_intact_compressed_records_first(tmp_path, compression_type):
    records = [os.urandom(100_000) for _ in range(4)]
    blob = bytearray(_framed_stream(records, "GZIP"))
    blob[-6] ^= 0xFF
    p = tmp_path / "bad.gz"
    p.write_bytes(bytes(blob))
    got = []
    with pytest.raises(CorruptRecordError) as info:
        for r in tpudata.TFRecordDataset(str(p), compression_type=compression_type).prefetch(2):
            got.append(bytes(r))
    assert got == records and info.value.offset == 400_064 and info.value.path == str(p)


_SHRINK_DATASET_SCRIPT = """
import os, sys
import tpudata
path = sys.argv[1]
it = iter(tpudata.TFRecordDataset(path, buffer_size=1 << 16).prefetch(4))
next(it)
os.truncate(path, 1016 * 1500 + 100)  # another process cuts the file
try:
    n = 1 + sum(1 for _ in it)
    print("END", n)
except tpudata.DataLossError as e:
    print(type(e).__name__, e.path == path, e.offset)
"""


def test_dataset_over_a_file_truncated_while_read_survives(tmp_path):
    """The issue's SIGBUS (exit 135): TFRecordDataset(...).prefetch(4) over a file cut while it
    is read now ends in a DataLossError naming the file."""
    import subprocess
    import sys

    p = tmp_path / "shrinking.tfrecord"
    tpudata.write_records(str(p), [os.urandom(1000) for _ in range(20_000)])
    out = subprocess.run([sys.executable, "-c", _SHRINK_DATASET_SCRIPT, str(p)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    # read-ahead may have read past the cut (or to the end) before it happened; then the error
    # comes where reading found the file shorter, at a record boundary
    words = out.stdout.split()
    if words[0] != "END":
        assert words[:2] == ["TruncatedRecordError", "True"]
        assert int(words[2]) >= 1016 * 1500 and int(words[2]) % 1016 == 0
    else:
        assert words == ["END", "20000"]
