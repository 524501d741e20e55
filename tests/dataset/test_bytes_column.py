"""A large scalar bytes feature stays in the read buffers from parse through batch (BytesColumn):
users index it and get bytes; a shuffle, cache or small feature gives plain object arrays."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

import tpudata
from tpudata import Dataset, FixedLenFeature, TFRecordDataset
from tpudata.dataset.core.columns import BytesColumn

SPEC = {"img": FixedLenFeature([], bytes), "name": FixedLenFeature([], bytes),
        "label": FixedLenFeature([], np.int64)}


def _value(i: int) -> bytes:
    return bytes([i % 251]) * (500 + 37 * i)


@pytest.fixture
def path(tmp_path):
    p = os.path.join(tmp_path, "a.tfrecord")
    with tpudata.TFRecordWriter(p) as w:
        for i in range(10):
            w.write(tpudata.encode_example({"img": _value(i), "name": f"n{i}".encode(), "label": i}))
    return p


def test_batched_large_bytes_feature_is_a_zero_copy_column_that_looks_like_bytes(path):
    batches = list(TFRecordDataset(path).parse(SPEC).batch(4))
    col = batches[0]["img"]
    assert isinstance(col, BytesColumn)
    assert col[1] == _value(1) and col[-1] == _value(3) and isinstance(col[0], bytes)
    assert col.tolist() == [_value(i) for i in range(4)] == list(col)
    assert len(col) == 4 and col.shape == (4,) and col.ndim == 1 and col.dtype == object
    arr = np.asarray(col)
    assert arr.dtype == object and arr.tolist() == col.tolist()
    assert col[1:3].tolist() == [_value(1), _value(2)]
    assert col[np.array([True, False, False, True])].tolist() == [_value(0), _value(3)]
    assert (col == _value(2)).tolist() == [False, False, True, False]
    with pytest.raises(IndexError):
        col[4]
    back = pickle.loads(pickle.dumps(col))
    assert isinstance(back, BytesColumn) and back.tolist() == col.tolist()
    # the values are views: the buffer holds the whole records (other features, framing) too
    assert sum(len(b) for b in col.buffers) > int(col.lengths.sum())
    # the small feature is an ordinary object array, and elements before batch are bytes
    assert type(batches[0]["name"]) is np.ndarray and batches[0]["name"].tolist() == [b"n0", b"n1", b"n2", b"n3"]
    assert [e["img"] for e in TFRecordDataset(path).parse(SPEC)] == [_value(i) for i in range(10)]
    # the final, padded batch and parse after batch
    last = list(TFRecordDataset(path).parse(SPEC).batch(4, pad_remainder=True))[-1]
    assert isinstance(last["img"], BytesColumn) and last["img"].tolist() == [_value(8), _value(9), b"", b""]
    after = list(TFRecordDataset(path).batch(4).parse(SPEC))
    assert isinstance(after[1]["img"], BytesColumn) and after[1]["img"].tolist() == [_value(i) for i in range(4, 8)]
    assert [e["img"] for e in TFRecordDataset(path).parse(SPEC).batch(3).unbatch()] == [_value(i) for i in range(10)]


def test_shuffle_and_cache_of_small_values_keep_copies_and_give_the_same_values(path):
    # values under STORE_MIN (2 KB) on average: the shuffle holds bytes objects (larger ones
    # stay a column over its store: tests/dataset/test_shuffle_store.py)
    shuffled = list(TFRecordDataset(path).parse(SPEC).shuffle(10, seed=3).batch(5))
    assert type(shuffled[0]["img"]) is np.ndarray
    assert sorted(v for b in shuffled for v in b["img"].tolist()) == sorted(_value(i) for i in range(10))
    cached = TFRecordDataset(path).parse(SPEC).cache().batch(5)
    for _ in range(2):
        assert [v for b in cached for v in list(b["img"])] == [_value(i) for i in range(10)]


def test_zero_copy_column_restores_exactly(path):
    ds = TFRecordDataset(path).parse(SPEC).batch(3)
    with ds.iterator() as it:
        next(it)
        state = it.get_state()
        rest = [b["img"].tolist() for b in it]
    with ds.iterator(state) as it:
        assert [b["img"].tolist() for b in it] == rest


def test_parse_after_batch_keeps_the_column_without_copying_it_out(path, monkeypatch):
    # a block of batched elements holds each element's column itself: nothing converts it to
    # bytes objects on the way (BytesColumn.to_list is the copy)
    from tpudata.dataset.core.block import as_column

    col = BytesColumn.from_bytes([b"ab", b"cde"])
    calls = []
    monkeypatch.setattr(BytesColumn, "to_list", lambda self: calls.append(1) or [])
    out = as_column([col, col])
    assert out.dtype == object and out.shape == (2,) and out[0] is col and out[1] is col
    batches = list(TFRecordDataset(path).batch(5).parse(SPEC))
    assert calls == [] and all(isinstance(b["img"], BytesColumn) for b in batches)
    monkeypatch.undo()
    assert [v for b in batches for v in b["img"].tolist()] == [_value(i) for i in range(10)]


def test_columns_pickle_as_their_values_not_their_read_buffers():
    from tpudata.dataset.core.columns import RecordColumn

    values = [bytes([i]) * 10_000 for i in range(100)]  # 1 MB of read buffer
    for cls in (RecordColumn, BytesColumn):
        col = cls.from_bytes(values).take(np.array([7, 3]))
        data = pickle.dumps(col, protocol=5)
        assert len(data) < 25_000, f"{cls.__name__} pickled {len(data)} bytes for 20 KB of values"
        back = pickle.loads(data)
        assert type(back) is cls and back.to_list() == [values[7], values[3]]
        buffers = []
        pickle.dumps(col, protocol=5, buffer_callback=buffers.append)
        assert max(memoryview(b).nbytes for b in buffers) == 20_000  # the values, in one piece
