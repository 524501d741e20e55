"""Element order against live tf.data (runs only where TensorFlow is importable)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")

import tpudata  # noqa: E402
from tpudata.dataset import Dataset, FixedLengthRecordDataset, TextLineDataset, TFRecordDataset  # noqa: E402
from tests.dataset.helpers import outputs, plain, write_shards  # noqa: E402


def tf_out(ds) -> list:
    return [plain(e) for e in ds.as_numpy_iterator()]


CASES = {
    "shard": (lambda D: D.range(23).shard(4, 3)),
    "skip_take_repeat": (lambda D: D.range(10).skip(2).take(5).repeat(2)),
    "batch": (lambda D: D.range(11).batch(4)),
    "batch_drop": (lambda D: D.range(11).batch(4, drop_remainder=True)),
    "unbatch": (lambda D: D.range(11).batch(3).unbatch()),
    "filter": (lambda D: D.range(20).filter(lambda x: x % 3 == 1)),
    "zip": (lambda D: D.zip((D.range(4), D.range(10, 17)))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_order_as_tf_data(name):
    build = CASES[name]
    assert outputs(build(Dataset)) == tf_out(build(tf.data.Dataset))


@pytest.mark.parametrize("cycle,block", [(1, 1), (2, 1), (3, 2), (2, 4), (5, 3)])
def test_interleave_like_tf(cycle, block):
    lengths = [3, 0, 7, 1, 5, 2]

    def ours(i):
        return Dataset.range(100 * int(i), 100 * int(i) + lengths[int(i)])

    def theirs(i):
        return tf.data.Dataset.range(100 * i, 100 * i + tf.gather(tf.constant(lengths, tf.int64), i))

    a = outputs(Dataset.range(6).interleave(ours, cycle_length=cycle, block_length=block))
    b = tf_out(tf.data.Dataset.range(6).interleave(theirs, cycle_length=cycle, block_length=block))
    assert a == b


def test_padded_batch_like_tf():
    ours = Dataset.range(1, 6).map(lambda x: np.full(int(x), x)).padded_batch(2)
    theirs = tf.data.Dataset.range(1, 6).map(lambda x: tf.fill([x], x)).padded_batch(2)
    assert outputs(ours) == tf_out(theirs)


def test_readers_like_tf(tmp_path):
    paths = write_shards(tmp_path, 3, [3, 5, 2])
    assert outputs(TFRecordDataset(paths, num_parallel_reads=2)) == tf_out(
        tf.data.TFRecordDataset(paths, num_parallel_reads=2))
    text = tmp_path / "t.txt"
    text.write_bytes(b"one\r\ntwo\n\nthree\nfour")
    assert outputs(TextLineDataset(str(text))) == tf_out(tf.data.TextLineDataset(str(text)))
    fixed = tmp_path / "f.bin"
    fixed.write_bytes(bytes(range(50)))
    assert outputs(FixedLengthRecordDataset(str(fixed), 7, 5, 3)) == tf_out(
        tf.data.FixedLengthRecordDataset(str(fixed), 7, 5, 3))


def test_parse_then_batch_like_tf(tmp_path):
    paths = write_shards(tmp_path, 2, [4, 3])
    spec_ours = {"id": tpudata.FixedLenFeature([], np.int64), "x": tpudata.FixedLenFeature([3], np.float32)}
    spec_tf = {"id": tf.io.FixedLenFeature([], tf.int64), "x": tf.io.FixedLenFeature([3], tf.float32)}
    ours = outputs(TFRecordDataset(paths).batch(3).parse(spec_ours))
    theirs = tf_out(tf.data.TFRecordDataset(paths).batch(3).map(lambda r: tf.io.parse_example(r, spec_tf)))
    assert ours == theirs


def _new_op_cases():
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "data"))
    from dataset_op_cases import CASES, SAMPLED

    return CASES, SAMPLED


@pytest.mark.parametrize("name", sorted(_new_op_cases()[0]))
def test_new_ops_like_tf(name):
    """enumerate, concatenate, scan, from_generator, flat_map, apply, choose_from_datasets
    against live tf.data (the pipelines the golden file dataset_ops.json was written from)."""
    build = _new_op_cases()[0][name]
    ours = outputs(build(Dataset, tpudata.TensorSpec, bytes))
    assert ours == tf_out(build(tf.data.Dataset, tf.TensorSpec, tf.string))


@pytest.mark.parametrize("name", sorted(_new_op_cases()[1]))
def test_sampled_elements_like_tf(name):
    """sample_from_datasets: the same elements (TF's random picks are not reproduced)."""
    build = _new_op_cases()[1][name]
    ours = outputs(build(Dataset, tpudata.TensorSpec, bytes))
    assert sorted(ours) == sorted(tf_out(build(tf.data.Dataset, tf.TensorSpec, tf.string)))


def test_from_generator_takes_tf_specs():
    sig = (tf.TensorSpec((), tf.int64), tf.TensorSpec((None,), tf.float32))
    ds = Dataset.from_generator(lambda: ((i, [1.0] * i) for i in range(3)), output_signature=sig)
    assert ds.element_spec == (tpudata.TensorSpec((), np.dtype(np.int64)),
                               tpudata.TensorSpec((None,), np.dtype(np.float32)))
    assert outputs(ds) == tf_out(tf.data.Dataset.from_generator(
        lambda: ((i, [1.0] * i) for i in range(3)), output_signature=sig))


def test_list_files_defaults_like_tf(tmp_path):
    for i in range(8):
        (tmp_path / f"f{i}").write_bytes(b"")
    pattern = str(tmp_path / "f*")
    assert outputs(Dataset.list_files(pattern, shuffle=False)) == tf_out(
        tf.data.Dataset.list_files(pattern, shuffle=False))
    ours, theirs = outputs(Dataset.list_files(pattern)), tf_out(tf.data.Dataset.list_files(pattern))
    names = sorted(ours)
    assert sorted(theirs) == names  # both shuffle by default (with different generators)
    assert ours != names and theirs != names
