"""Corruption fuzz: damaged files give back exactly the original records or a DataLossError.

Every single-byte change and every truncation of small valid files (uncompressed and GZIP) is
read back; the reader may deliver a prefix of the original records and then must raise a
DataLossError - it must never return a record that was not written.
"""

from __future__ import annotations

import gzip
import io
import os
import random
import re

import pytest
from fuzz_cases import BASES, PARSE_BATCH, apply_edit, expected_records, record_starts

import tpudata
from tpudata.errors import CorruptRecordError, DataLossError, TruncatedRecordError
from tpudata.tfrecord import framing

GOLDEN_FUZZ = os.path.join(os.path.dirname(__file__), "data", "golden", "fuzz")
RECORDS = [b"", b"a", b"hello world", bytes(range(40)), b"\x00" * 17, b"tail"]


def _read(data: bytes, compression, buffer_size: int):
    """(records, error) reading ``data`` from an in-memory file object path."""
    path = "memory://fuzz/file"
    import fsspec

    fsspec.filesystem("memory").pipe_file(path, data)
    got = []
    try:
        for batch in tpudata.read_record_batches(path, compression=compression,
                                                 buffer_size=buffer_size):
            got.extend(batch.to_list())
    except DataLossError as exc:
        return got, exc
    return got, None


def _check(data: bytes, compression, buffer_size: int, original: list, allow_identical: bool):
    got, err = _read(data, compression, buffer_size)
    assert got == original[: len(got)], "a record that was never written came back"
    if err is None:
        # no error: the damage did not change the record stream (e.g. a gzip header field)
        assert allow_identical and got == original
    return err is not None


@pytest.mark.parametrize("buffer_size", [64, 8 << 20])
def test_every_byte_flip_uncompressed(accel, buffer_size, memfs):
    data = framing.frame_pure(RECORDS)
    rng = random.Random(1)
    detected = 0
    for i in range(len(data)):
        for delta in (1, 0x80, rng.randrange(1, 256)):
            bad = bytearray(data)
            bad[i] ^= delta
            detected += _check(bytes(bad), None, buffer_size, RECORDS, allow_identical=False)
    assert detected == 3 * len(data)  # CRC32C catches every single-byte error


def test_every_truncation_uncompressed(accel, memfs):
    data = framing.frame_pure(RECORDS)
    boundaries = {0}
    pos = 0
    for r in RECORDS:
        pos += len(r) + 16
        boundaries.add(pos)
    for cut in range(len(data)):
        got, err = _read(data[:cut], None, 64)
        assert got == RECORDS[: len(got)]
        assert (err is None) == (cut in boundaries)


def _gzip(data: bytes) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as f:
        f.write(data)
    return out.getvalue()


def test_gzip_flips_and_truncations(accel, memfs):
    records = RECORDS + [bytes(random.Random(2).randrange(256) for _ in range(300))]
    blob = _gzip(framing.frame_pure(records))
    rng = random.Random(3)
    errors = 0
    trials = 0
    for i in range(len(blob)):
        for delta in (1, rng.randrange(1, 256)):
            bad = bytearray(blob)
            bad[i] ^= delta
            # compression=None: damage to the magic bytes also changes what detection decides
            errors += _check(bytes(bad), None, 8 << 20, records, allow_identical=True)
            errors += _check(bytes(bad), "GZIP", 64, records, allow_identical=True)
            trials += 2
    # the only harmless changes are to gzip header fields zlib ignores (mtime, xfl, os, ...)
    assert errors >= trials - 2 * 2 * 10
    for cut in range(len(blob)):
        got, err = _read(blob[:cut], "GZIP", 64)
        assert got == records[: len(got)]
        assert err is not None or cut == 0  # an empty file is an empty file


def test_random_multi_byte_damage(accel, memfs):
    rng = random.Random(4)
    data = framing.frame_pure(RECORDS * 5)
    for _ in range(2000):
        bad = bytearray(data)
        for _ in range(rng.randrange(1, 6)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        if bytes(bad) == data:
            continue
        cut = len(bad) if rng.random() < 0.7 else rng.randrange(len(bad))
        got, err = _read(bytes(bad[:cut]), None, rng.choice([64, 100, 4096]))
        assert got == (RECORDS * 5)[: len(got)]
        if err is None:  # silence is only allowed when what was read is undamaged
            assert bytes(bad[:cut]) == data[:cut]


# -- against TensorFlow: committed golden results (tests/data/make_fuzz_golden.py) -----------------
def _golden_cases():
    import json

    with open(os.path.join(GOLDEN_FUZZ, "cases.json")) as f:
        return json.load(f)["cases"]


_TF_AT = re.compile(r"(corrupted|truncated) record at (\d+)")


def _check_against_tf(case, data, got, err, exact: bool):
    """tpudata on one damaged file vs what TensorFlow did with it (``exact``: same decoder)."""
    expected = expected_records(case["name"], case["edit"])
    assert got == expected[: len(got)], "a record that was never written came back"
    tf_error, tf_n = case["tf_error"], case["tf_records"]
    if tf_error is not None:
        assert err is not None, f"TensorFlow raised {tf_error['message']!r}; tpudata did not"
    if not exact:
        return
    assert len(got) >= tf_n, "tpudata delivered fewer records than TensorFlow"
    if err is None:
        return
    start = record_starts(expected)[len(got)]  # the first record not delivered
    assert err.path == "memory://fuzzgold/f"
    m = _TF_AT.match(tf_error["message"]) if tf_error else None
    if m and len(got) == tf_n:  # TensorFlow's own framing message: the same words and offset
        assert err.message.startswith(f"{m.group(1)} record at {m.group(2)}")
        assert err.offset == int(m.group(2))
        assert type(err) is (CorruptRecordError if m.group(1) == "corrupted" else TruncatedRecordError)
    elif isinstance(err, TruncatedRecordError):
        assert err.offset == start and err.message.startswith(f"truncated record at {start}")
    else:
        assert isinstance(err, CorruptRecordError)
        assert err.offset in (start, start + 12)  # a header or a data CRC (TF's offsets)
        assert err.message.startswith(f"corrupted record at {err.offset}")
    if tf_error is None:  # tpudata raises where TensorFlow silently stops: the documented cases
        if not case["compression"]:
            assert isinstance(err, TruncatedRecordError) and len(data) - start < 12  # partial header
        elif isinstance(err, TruncatedRecordError):
            assert "stream ends before its end marker" in err.message
        else:
            assert case["compression"] == "ZLIB" and "after the end of the ZLIB stream" in err.message


@pytest.mark.parametrize("path", ["given-257", "given-8M", "detected", "given-pure"])
def test_damaged_files_against_tensorflow(path, memfs):
    """818 damaged files (bit flips, overwrites, cuts, insertions, deletions, garbage,
    concatenations, crafted lengths; none/GZIP/ZLIB): never a misread, every record TensorFlow
    delivers and more where a compressed chunk held intact records, TensorFlow's words and
    offsets, and an error wherever TensorFlow raised one."""
    from tpudata import _accel
    from tpudata.tfrecord import detect_compression

    previous = _accel.native is not None
    if path == "given-pure":
        _accel.use_native(False)
    bases: dict = {}
    more = 0
    try:
        for case in _golden_cases():
            key = (case["name"], case["compression"])
            if key not in bases:
                bases[key] = (framing.frame_pure(BASES[case["name"]]) if not case["compression"]
                              else open(os.path.join(GOLDEN_FUZZ, case["base"]), "rb").read())
            data = apply_edit(bases[key], case["edit"])
            memfs.pipe_file("/fuzzgold/f", data)
            compression = None if path == "detected" else case["compression"]
            buffer_size = 257 if path == "given-257" else 8 << 20
            got, err = [], None
            try:
                for batch in tpudata.read_record_batches("memory://fuzzgold/f", compression,
                                                         buffer_size=buffer_size):
                    got.extend(batch.to_list())
            except DataLossError as exc:
                err = exc
            exact = path != "detected" or detect_compression(data[:12]) == case["compression"]
            _check_against_tf(case, data, got, err, exact)
            more += len(got) > case["tf_records"]
    finally:
        _accel.use_native(previous)
    assert more >= 200  # compressed files: what TensorFlow's read-ahead lost, tpudata delivers


# -- item 3 of issue 15: parsing keeps the good rows (golden: tests/data/golden/fuzz/parse.json) --
def _parse_cases():
    import json

    with open(os.path.join(GOLDEN_FUZZ, "parse.json")) as f:
        return json.load(f)["cases"]


@pytest.mark.parametrize("order", ["parse_then_batch", "batch_then_parse"])
@pytest.mark.parametrize("case", _parse_cases(), ids=lambda c: c["file"])
def test_parse_delivers_the_rows_tensorflow_delivers(case, order):
    """``good`` Examples then one bad record: every row TensorFlow delivers comes first, then an
    error naming the file, the bad record's index in the file and its byte offset."""
    import numpy as np

    path = os.path.join(GOLDEN_FUZZ, case["file"])
    spec = {"id": tpudata.FixedLenFeature([], np.int64)}
    ds = tpudata.TFRecordDataset(path)
    ds = ds.parse(spec).batch(PARSE_BATCH) if order == "parse_then_batch" else (
        ds.batch(PARSE_BATCH).parse(spec))
    rows = []
    with pytest.raises(ValueError) as info:
        for batch in ds:
            rows.extend(np.asarray(batch["id"]).tolist())
    assert rows == case[order]["rows"]
    offset = int(tpudata.build_index(path)[case["good"]][0])
    message = str(info.value)
    assert path in message and re.search(rf"record {case['good']}\b", message)
    assert re.search(rf"offset {offset}\b", message)


def test_mmap_path_matches_the_read_path(tmp_path, accel):
    """The opt-in memory-mapped path gives the same records and the same error, word for word,
    as the default path on every uncompressed damaged file of the TensorFlow fuzz."""
    path = str(tmp_path / "f.tfrecord")
    checked = 0
    for case in _golden_cases():
        if case["compression"]:
            continue
        data = apply_edit(framing.frame_pure(BASES[case["name"]]), case["edit"])
        with open(path, "wb") as f:
            f.write(data)
        results = []
        for use_mmap in (False, True):
            got, err = [], None
            try:
                for batch in tpudata.read_record_batches(path, "", buffer_size=4096,
                                                         use_mmap=use_mmap):
                    got.extend(batch.to_list())
            except DataLossError as exc:
                err = (type(exc), exc.message, exc.offset)
            results.append((got, err))
        assert results[0] == results[1], case["edit"]
        checked += 1
    assert checked > 250
