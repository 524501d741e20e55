"""batch() stacks elements as tf.data does: elements of different shapes raise (naming the
component, the elements and their shapes) instead of making object arrays; strings, VarLen
features, padded_batch and the record/column fast paths keep working; rebatch checks too."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tpudata
from tpudata import Dataset, FixedLenFeature, TFRecordDataset, VarLenFeature
from tpudata.errors import BatchError, TpuDataError
from tpudata.example.parse import VarLenValues


def ragged(i):
    return np.zeros(int(i) % 3 + 1, np.float32)


def test_elements_of_different_shapes_raise_as_tf_data_does():
    ds = Dataset.range(6).map(ragged).batch(3)
    with pytest.raises(BatchError) as info:
        list(ds)
    e = info.value
    assert isinstance(e, ValueError) and isinstance(e, TpuDataError)
    text = str(e)
    assert "different shapes in component 0" in text
    assert "shape [1]" in text and "shape [2]" in text and "input element 1" in text
    assert "padded_batch" in text
    assert e.index == 1 and e.component == "<element>"
    # what it should have been written as: padded_batch gives float32 (3, 3) batches
    assert [(b.dtype, b.shape) for b in Dataset.range(6).map(ragged).padded_batch(3)] == [
        (np.dtype(np.float32), (3, 3))] * 2


def test_error_names_the_component_and_the_input_element_of_a_later_batch():
    def element(i):
        n = 2 if int(i) == 5 else 1
        return {"a": np.zeros(2, np.int64), "b": np.zeros(n, np.int32)}

    it = Dataset.range(8).map(element).batch(2).iterator()
    assert [b["b"].shape for b in (next(it), next(it))] == [(2, 1), (2, 1)]
    with pytest.raises(BatchError, match=r"component 1 \('b'\).*input element 4.*\[1\].*"
                                         r"input element 5.*\[2\]") as info:
        next(it)
    assert info.value.component == "b" and info.value.index == 5


def test_string_tensors_are_kept_and_string_vectors_stacked():
    names = np.array([b"a", b"bb", b"ccc"], dtype=object)
    assert [b.tolist() for b in Dataset.from_tensor_slices(names).batch(2)] == [[b"a", b"bb"], [b"ccc"]]
    assert Dataset.from_tensor_slices(["x", "yz"]).batch(2).get_single_element().tolist() == [b"x", b"yz"]

    def pair(i):
        return np.array([b"k%d" % int(i), b"v"], dtype=object)

    ds = Dataset.range(4).map(pair).batch(2)
    b = next(iter(ds))
    assert b.dtype == object and b.shape == (2, 2)  # not a (2,) array of arrays
    assert b.tolist() == [[b"k0", b"v"], [b"k1", b"v"]]
    assert tuple(ds.element_spec.shape) == (None, 2)
    assert [x.tolist() for x in ds.unbatch()] == [[b"k%d" % i, b"v"] for i in range(4)]
    with pytest.raises(BatchError, match="shape"):
        list(Dataset.range(4).map(lambda i: np.array([b"x"] * (int(i) + 1), dtype=object)).batch(2))


@pytest.fixture
def records(tmp_path):
    path = os.path.join(tmp_path, "a.tfrecord")
    with tpudata.TFRecordWriter(path) as w:
        for i in range(7):
            w.write(tpudata.encode_example({"ids": np.arange(i % 3, dtype=np.int64), "name": b"n%d" % i,
                                            "label": i}))
    return path


def test_varlen_records_and_columns_batch_as_before(records):
    spec = {"ids": VarLenFeature(np.int64), "name": FixedLenFeature([], bytes),
            "label": FixedLenFeature([], np.int64)}
    batches = list(TFRecordDataset(records).parse(spec).batch(3))
    assert isinstance(batches[0]["ids"], VarLenValues)
    assert [r.tolist() for r in batches[0]["ids"].to_list()] == [[], [0], [0, 1]]
    assert batches[0]["name"].tolist() == [b"n0", b"n1", b"n2"] and batches[2]["label"].tolist() == [6]
    # records batched before the parse (the whole batch parsed from the read buffers)
    after = list(TFRecordDataset(records).batch(3).parse(spec))
    assert [b["label"].tolist() for b in after] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [len(b) for b in TFRecordDataset(records).batch(4)] == [4, 3]
    # the padded last batch and the numeric fast path
    last = list(TFRecordDataset(records).parse(spec).batch(4, pad_remainder=True))[-1]
    assert last["label"].tolist() == [4, 5, 6, 0] and last["weight"].tolist() == [1, 1, 1, 0]
    assert [b.shape for b in Dataset.range(7).batch(3)] == [(3,), (3,), (1,)]


def test_rebatch_checks_shapes_and_regroups_rows():
    assert [b.tolist() for b in Dataset.range(10).batch(4).rebatch([2, 3])] == [
        [0, 1], [2, 3, 4], [5, 6], [7, 8, 9]]
    # batches padded to different lengths cannot be regrouped into one batch
    ds = Dataset.range(8).map(ragged).padded_batch(2).rebatch(3)  # rows of 2, 2, 3, 3, ...
    with pytest.raises(BatchError, match=r"rebatch\(3\).*row|rebatch\(3\).*input element 2") as info:
        list(ds)
    assert info.value.index == 2
    # unbatch then padded_batch is the way: the rows keep their padded lengths
    rows = Dataset.range(5).map(ragged).padded_batch(2).unbatch()
    assert [r.shape for r in rows] == [(2,), (2,), (3,), (3,), (2,)]
