"""Background threads: bounded, stopped and joined on close / with / garbage collection; errors
raised in them surface in the consumer with their original traceback."""

from __future__ import annotations

import gc
import time
import traceback

import numpy as np
import pytest

from tpudata.dataset import Dataset, TFRecordDataset
from tpudata.errors import CorruptRecordError
from tests.dataset.helpers import SPEC, tpudata_threads, write_shards


def _threaded(tmp_path):
    paths = write_shards(tmp_path, 4, 50)
    return (Dataset.from_tensor_slices(paths)
            .interleave(lambda f: TFRecordDataset(f), cycle_length=4, num_parallel_calls=4)
            .parse(SPEC, num_parallel_calls=2)
            .map(lambda e: e, num_parallel_calls=2)
            .batch(8).prefetch(3))


def _wait_for_no_threads(timeout=5.0):
    deadline = time.time() + timeout
    while tpudata_threads() and time.time() < deadline:
        time.sleep(0.01)
    return tpudata_threads()


def test_close_joins_every_thread(tmp_path, monkeypatch):
    from tpudata.tfrecord import reader as reader_module

    monkeypatch.setattr(reader_module, "MAX_BATCH_RECORDS", 5)  # slot threads stay busy
    assert tpudata_threads() == []
    it = _threaded(tmp_path).iterator()
    next(it)
    running = tpudata_threads()
    assert any(n.startswith("tpudata-prefetch") for n in running)
    assert any(n.startswith("tpudata-interleave") for n in running)
    it.close()
    assert tpudata_threads() == []  # joined, not just signalled


def test_with_block_and_garbage_collection(tmp_path):
    with _threaded(tmp_path).iterator() as it:
        next(it)
        assert tpudata_threads()
    assert tpudata_threads() == []
    it = _threaded(tmp_path).iterator()
    next(it)
    del it
    gc.collect()
    assert _wait_for_no_threads() == []
    for _ in _threaded(tmp_path).take(2):  # abandoned for-loop iterators too
        pass
    gc.collect()
    assert _wait_for_no_threads() == []


def test_prefetch_is_bounded():
    produced = []

    def record(x):
        produced.append(int(x))
        return x

    it = Dataset.range(1000).map(record).batch(10).prefetch(3).iterator()
    next(it)
    time.sleep(0.3)
    # the prefetch buffer holds <= 3 batches, and the map ran only for what was produced
    assert len(it._it.items) <= 3
    assert len(produced) <= 10 * (1 + 3 + 1), len(produced)  # taken + buffered + in production
    it.close()


def test_error_in_map_thread_surfaces_with_traceback():
    def boom(x):
        if x == 37:
            raise KeyError("bad element 37")
        return x

    ds = Dataset.range(100).map(boom, num_parallel_calls=3).prefetch(2)
    with pytest.raises(KeyError, match="bad element 37") as info:
        list(ds)
    frames = "".join(traceback.format_tb(info.value.__traceback__))
    assert "in boom" in frames  # the producer's frames are kept
    assert _wait_for_no_threads() == []


def test_corrupt_file_in_parallel_interleave_surfaces(tmp_path):
    paths = write_shards(tmp_path, 3, 20)
    data = bytearray(open(paths[2], "rb").read())
    data[100] ^= 0xFF
    open(paths[2], "wb").write(bytes(data))
    ds = (Dataset.from_tensor_slices(paths)
          .interleave(lambda f: TFRecordDataset(f), cycle_length=3, num_parallel_calls=3)
          .parse(SPEC).prefetch(2))
    seen = []
    with pytest.raises(CorruptRecordError) as info:
        for e in ds:
            seen.append(e["id"])
    assert info.value.path == paths[2]
    assert "_batches" in "".join(traceback.format_tb(info.value.__traceback__))
    assert _wait_for_no_threads() == []


def test_parse_error_names_the_file(tmp_path):
    import tpudata

    p = tmp_path / "mixed.tfrecord"
    tpudata.write_records(str(p), [tpudata.encode_example({"id": 1}), tpudata.encode_example({"x": 1.0})])
    with pytest.raises(tpudata.SpecError, match=rf"{p}: record 1 of the file \(byte offset \d+\)"):
        list(TFRecordDataset(str(p)).parse({"id": tpudata.FixedLenFeature([], np.int64)}))
