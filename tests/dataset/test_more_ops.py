"""take_while, reduce, get_single_element, counter, unique: tf.data's semantics, checkpointable."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tpudata.dataset import UNKNOWN, Dataset, TFRecordDataset
from tpudata.errors import SpecError
from tests.dataset.helpers import SPEC, check_restore_everywhere, outputs, write_shards


def test_take_while_stops_at_the_first_false():
    calls = []

    def below_four(x):
        calls.append(int(x))
        return x < 4

    assert outputs(Dataset.range(10).take_while(below_four)) == [0, 1, 2, 3]
    assert calls == [0, 1, 2, 3, 4]  # never past the element that ended it
    assert outputs(Dataset.range(10).take_while(lambda x: x % 5 != 4).repeat(2)) == [0, 1, 2, 3] * 2
    assert Dataset.range(10).take_while(lambda x: True).cardinality() == UNKNOWN
    assert Dataset.range(0).take_while(lambda x: True).cardinality() == 0
    with pytest.raises(TypeError, match="scalar boolean"):
        outputs(Dataset.range(3).take_while(lambda x: np.array([True, False])))


def test_take_while_restores_at_every_element(tmp_path):
    files = write_shards(tmp_path, 3, 7)
    out = check_restore_everywhere(
        lambda: TFRecordDataset(files).parse(SPEC).take_while(lambda e: e["id"] < 15).batch(4))
    assert [i for b in out for i in b["id"]] == list(range(15))
    check_restore_everywhere(lambda: Dataset.range(30).shuffle(8, seed=2)
                             .take_while(lambda x: x != 17))


def test_reduce():
    assert int(Dataset.range(5).reduce(np.int64(0), lambda s, x: s + x)) == 10
    pair = Dataset.range(5).map(lambda x: (x, x * 2)).reduce(
        (np.int64(0), np.int64(0)), lambda s, e: (s[0] + e[0], s[1] + e[1]))
    assert [int(v) for v in pair] == [10, 20]
    empty = Dataset.range(0).reduce({"n": 0}, lambda s, x: {"n": s["n"] + 1})
    assert empty == {"n": 0} and isinstance(empty["n"], np.int64)
    with pytest.raises(SpecError):
        Dataset.range(3).reduce(np.int64(0), lambda s, x: s + 0.5)


def test_get_single_element():
    assert int(Dataset.range(7, 8).get_single_element()) == 7
    assert Dataset.from_tensors({"a": np.arange(3)}).get_single_element()["a"].tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="empty"):
        Dataset.range(0).get_single_element()
    with pytest.raises(ValueError, match="more than one"):
        Dataset.range(2).get_single_element()


def test_counter():
    assert outputs(Dataset.counter().take(3)) == [0, 1, 2]
    assert outputs(Dataset.counter(10, -3, dtype=np.int32).take(4)) == [10, 7, 4, 1]
    assert Dataset.counter(dtype=np.int32).element_spec.dtype == np.int32
    assert Dataset.counter().cardinality() == -1 and Dataset.counter().take(5).cardinality() == 5
    check_restore_everywhere(lambda: Dataset.zip((Dataset.counter(5), Dataset.range(12))))


def test_unique():
    assert outputs(Dataset.from_tensor_slices([3, 1, 3, 2, 1, 4]).unique()) == [3, 1, 2, 4]
    assert outputs(Dataset.from_tensor_slices(["b", "a", "b"]).unique()) == [b"b", b"a"]
    with pytest.raises(TypeError, match="integer or bytes scalar"):
        Dataset.from_tensor_slices(np.zeros((3, 2))).unique()
    with pytest.raises(TypeError, match="integer or bytes scalar"):
        Dataset.range(3).map(lambda x: np.float32(x)).unique()
    out = check_restore_everywhere(
        lambda: Dataset.range(60).map(lambda x: x % 13).shuffle(10, seed=4).unique().batch(3))
    assert sorted(v for b in out for v in b) == list(range(13))


def test_random():
    a = Dataset.random(seed=3)
    first = outputs(a.take(50))
    assert outputs(a.take(50)) == first  # the same stream each iteration, as in TF
    assert outputs(Dataset.random(seed=3).take(50)) == first
    assert outputs(Dataset.random(seed=4).take(50)) != first
    assert len(set(first)) == 50 and min(first) < 0 < max(first)  # the whole int64 range
    epochs = outputs(Dataset.random(seed=3, rerandomize_each_iteration=True).take(5).repeat(2))
    assert epochs[:5] != epochs[5:]
    assert outputs(Dataset.random(seed=3).take(5).repeat(2)) == first[:5] * 2
    assert Dataset.random().cardinality() == -1
    assert Dataset.random().element_spec.dtype == np.int64
    assert outputs(Dataset.random().take(20)) != outputs(Dataset.random().take(20))
    check_restore_everywhere(lambda: Dataset.random(seed=9).skip(4090).take(12))
    check_restore_everywhere(lambda: Dataset.random(5, rerandomize_each_iteration=True).take(3)
                             .repeat(3))
    unseeded = Dataset.random()  # its seed travels in the state, into a fresh object too
    with unseeded.take(10).iterator() as it:
        next(it)
        state = it.get_state()
        rest = outputs_of(it)
    with Dataset.random().take(10).iterator(state) as resumed:
        assert outputs_of(resumed) == rest and len(rest) == 9


def outputs_of(it) -> list:
    return [int(x) for x in it]


def test_same_as_live_tf_data():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    tf = pytest.importorskip("tensorflow")
    for build in (lambda D: D.range(20).take_while(lambda x: x % 7 != 6),
                  lambda D: D.range(20).take_while(lambda x: x < 100).take(5),
                  lambda D: D.counter(7, 3).take(4),
                  lambda D: D.range(40).map(lambda x: (x * 7) % 11).unique()):
        ours = outputs(build(Dataset))
        assert ours == [int(x) for x in build(tf.data.Dataset).as_numpy_iterator()]
    assert int(Dataset.range(9).reduce(np.int64(1), lambda s, x: s * (x + 1))) == \
        int(tf.data.Dataset.range(9).reduce(tf.constant(1, tf.int64), lambda s, x: s * (x + 1)))
