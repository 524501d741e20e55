"""TensorFlow as the oracle, live: runs only where TensorFlow is importable (never in CI deps)."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")

import tpudata  # noqa: E402
from tpudata import FixedLenFeature, VarLenFeature  # noqa: E402
from tpudata.errors import CorruptRecordError, DataLossError, TruncatedRecordError  # noqa: E402


def _random_records(rng, n=50):
    return [rng.randbytes(rng.choice([0, 1, 12, 100, 5000])) for _ in range(n)]


@pytest.mark.parametrize("compression", [None, "GZIP", "ZLIB"])
def test_tensorflow_reads_what_tpudata_writes(tmp_path, compression):
    rng = random.Random(7)
    records = _random_records(rng)
    path = str(tmp_path / "w.tfrecord")
    tpudata.write_records(path, records, compression)
    got = [r.numpy() for r in tf.data.TFRecordDataset(path, compression_type=compression or "")]
    assert got == records


def _random_example(rng: np.random.Generator, i: int) -> dict:
    nvar = int(rng.integers(0, 5))
    return {
        "img": rng.bytes(int(rng.integers(0, 200))),
        "label": int(rng.integers(-(2**40), 2**40)),
        "vec": rng.standard_normal(3).astype(np.float32),
        "var_i": rng.integers(-5, 5, nvar),
        "var_f": rng.standard_normal(nvar).astype(np.float32),
        "var_b": [rng.bytes(2) for _ in range(nvar)] or np.array([], dtype=object),
        "name": f"n{i}",
    }


SPEC = {
    "img": (FixedLenFeature([], bytes), tf.io.FixedLenFeature([], tf.string)),
    "label": (FixedLenFeature([], np.int64), tf.io.FixedLenFeature([], tf.int64)),
    "vec": (FixedLenFeature([3], np.float32), tf.io.FixedLenFeature([3], tf.float32)),
    "missing": (FixedLenFeature([2], np.int64, [1, 2]),
                tf.io.FixedLenFeature([2], tf.int64, default_value=[1, 2])),
    "var_i": (VarLenFeature(np.int64), tf.io.VarLenFeature(tf.int64)),
    "var_f": (VarLenFeature(np.float32), tf.io.VarLenFeature(tf.float32)),
    "var_b": (VarLenFeature(bytes), tf.io.VarLenFeature(tf.string)),
    "name": (FixedLenFeature([], bytes), tf.io.FixedLenFeature([], tf.string)),
}


@pytest.mark.parametrize("seed", range(5))
def test_parse_examples_agrees_with_tensorflow(accel, seed):
    rng = np.random.default_rng(seed)
    records = [tpudata.encode_example(_random_example(rng, i)) for i in range(64)]
    ours = tpudata.parse_examples(records, {k: v[0] for k, v in SPEC.items()})
    theirs = tf.io.parse_example(tf.constant(records), {k: v[1] for k, v in SPEC.items()})
    for name in SPEC:
        t = theirs[name]
        if isinstance(t, tf.SparseTensor):
            assert ours[name].values.tolist() == t.values.numpy().tolist()
            assert ours[name].indices.tolist() == t.indices.numpy().tolist()
        else:
            assert ours[name].tolist() == t.numpy().tolist()


def test_decode_agrees_with_protobuf(accel):
    rng = np.random.default_rng(11)
    for i in range(50):
        rec = tpudata.encode_example(_random_example(rng, i))
        proto = tf.train.Example.FromString(rec)
        ours = tpudata.decode_example(rec)
        assert set(ours) == set(proto.features.feature)
        for name, feat in proto.features.feature.items():
            kind = feat.WhichOneof("kind")
            assert ours[name].tolist() == list(getattr(feat, kind).value)


def _tf_error(path):
    try:
        n = sum(1 for _ in tf.data.TFRecordDataset(path))
        return n, None
    except tf.errors.DataLossError as exc:
        return None, exc.message.split("}}")[-1].split("'")[0].split(" [Op:")[0].strip()


def test_random_damage_reports_tensorflows_offsets(accel, tmp_path):
    rng = random.Random(5)
    records = _random_records(rng, 20)
    path = str(tmp_path / "d.tfrecord")
    tpudata.write_records(path, records)
    good = open(path, "rb").read()
    checked = 0
    for trial in range(150):
        bad = bytearray(good)
        if trial % 3:
            i = rng.randrange(len(bad))
            bad[i] ^= rng.randrange(1, 256)
        else:
            bad = bad[: rng.randrange(len(bad))]
        open(path, "wb").write(bytes(bad))
        n, tf_msg = _tf_error(path)
        try:
            ours = len(list(tpudata.read_records(path)))
            ours_msg = None
        except DataLossError as exc:
            ours, ours_msg = None, exc.message
            assert isinstance(exc, (CorruptRecordError, TruncatedRecordError))
        if tf_msg is None and ours_msg is not None:
            # TF ends silently at a partial header; tpudata reports the truncation
            assert ours_msg.startswith("truncated record at")
            continue
        assert ours_msg == tf_msg and ours == n
        checked += 1
    assert checked > 100
