"""parse keeps the good rows: every element before a malformed Example is delivered, then the
error names the file, the record's index in it and its byte offset - on every path."""

from __future__ import annotations

import numpy as np
import pytest

import tpudata
from tpudata.dataset import TFRecordDataset
from tpudata.errors import InvalidExampleError, SpecError
from tpudata.tfrecord import reader as reader_module

SPEC = {"id": tpudata.FixedLenFeature([], np.int64)}
BAD = 10


def _file(tmp_path, bad_record: bytes) -> tuple[str, int]:
    records = [tpudata.encode_example({"id": i}) for i in range(25)]
    records[BAD] = bad_record
    path = str(tmp_path / "data.tfrecord")
    tpudata.write_records(path, records)
    offset = sum(len(r) + 16 for r in records[:BAD])
    return path, offset


PATHS = {
    "parse": lambda p: TFRecordDataset(p).parse(SPEC),
    "parse_threads": lambda p: TFRecordDataset(p).parse(SPEC, num_parallel_calls=2),
    "parse_prefetch": lambda p: TFRecordDataset(p).parse(SPEC).prefetch(3),
    "interleave": lambda p: TFRecordDataset([p, p], num_parallel_reads=2).take(22).parse(SPEC),
    "batch_then_parse": lambda p: TFRecordDataset(p).batch(4).parse(SPEC),
}


@pytest.mark.parametrize("small_blocks", [False, True])
@pytest.mark.parametrize("name", sorted(PATHS))
@pytest.mark.parametrize("bad,error", [
    (tpudata.encode_example({"other": 1}), SpecError),  # missing feature
    (b"\xff\xff\xff", InvalidExampleError),  # not a protocol buffer
])
def test_good_rows_first_then_a_located_error(tmp_path, monkeypatch, name, small_blocks, bad, error):
    if small_blocks:
        monkeypatch.setattr(reader_module, "MAX_BATCH_RECORDS", 3)
    path, offset = _file(tmp_path, bad)
    got = []
    with pytest.raises(error) as info:
        for e in PATHS[name](path):
            got.extend(np.atleast_1d(e["id"]).tolist())
    if name == "batch_then_parse":
        assert got == list(range(8))  # the batches before the one holding record 10
    elif name == "interleave":
        assert got == [i for i in range(BAD) for _ in range(2)]
    else:
        assert got == list(range(BAD))
    e = info.value
    assert (e.path, e.offset, e.record_index) == (path, offset, BAD)
    assert f"{path}: record {BAD} of the file (byte offset {offset})" in str(e)
