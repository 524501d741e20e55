"""End to end: digits -> `tpudata convert numpy` -> shards on (fake) GCS -> Dataset over gs:// ->
TPUEstimator with 8 replicas -> exact-epoch evaluation."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import tpudata
from tpudata import Dataset, TFRecordDataset, tpu
from tpudata.cli import main

from fake_gcs.pytest_plugin import fake_gcs_server  # noqa: F401  (fixture)
from tests.tpu.events import load, series

datasets = pytest.importorskip("sklearn.datasets")

SPEC = {"x": tpudata.FixedLenFeature([64], np.float32), "y": tpudata.FixedLenFeature([], np.int64)}
BUCKET = "gs://digits-e2e"


@pytest.fixture
def digits_on_gcs(fake_gcs_server, tmp_path):  # noqa: F811
    digits = datasets.load_digits()
    rng = np.random.default_rng(0)
    order = rng.permutation(len(digits.target))
    x = (digits.data[order] / 16.0).astype(np.float32)
    y = digits.target[order].astype(np.int32)
    split = 1400
    np.savez(tmp_path / "train.npz", x=x[:split], y=y[:split])
    np.savez(tmp_path / "test.npz", x=x[split:], y=y[split:])
    tpudata.storage.gcs_filesystem().mkdir(BUCKET[5:])
    for name, shards in (("train", 8), ("test", 3)):
        assert main(["convert", "numpy", str(tmp_path / f"{name}.npz"), "-o", f"{BUCKET}/data",
                     "--prefix", name, "--num-shards", str(shards), "--workers", "1"]) == 0
    return x[split:], y[split:]


def train_input_fn(params):
    ctx = params["context"]
    files = Dataset.list_files(f"{BUCKET}/data/train-*", shuffle=False).shard(ctx.num_hosts, ctx.current_host)
    return (files.interleave(lambda f: TFRecordDataset(f), cycle_length=4, num_parallel_calls=4)
            .repeat().shuffle(2000, seed=0).parse(SPEC)
            .batch(params["batch_size"], drop_remainder=True).map(tpu.make_tpu_ready).prefetch(4))


def eval_input_fn(params):
    return (TFRecordDataset(Dataset.list_files(f"{BUCKET}/data/test-*", shuffle=False)).parse(SPEC)
            .batch(params["batch_size"], pad_remainder=True).map(tpu.make_tpu_ready))


def make_estimator(model_dir=None, use_tpu=True, backend="numpy"):
    config = tpu.RunConfig(model_dir=model_dir, save_checkpoints_steps=100,
                           tpu_config=tpu.TPUConfig(iterations_per_loop=10, num_shards=8))
    model_fn = tpu.models.softmax_regression(10, feature_key="x", label_key="y", learning_rate=0.5)
    return tpu.TPUEstimator(model_fn, config, use_tpu=use_tpu, train_batch_size=128,
                            eval_batch_size=64, predict_batch_size=64, backend=backend)


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_digits_from_gcs_to_an_eight_replica_tpu(digits_on_gcs, backend):
    if backend == "jax":
        pytest.importorskip("jax")
    x_test, y_test = digits_on_gcs
    assert TFRecordDataset(tpudata.storage.glob(f"{BUCKET}/data/test-*")).cardinality() == len(y_test)
    est = make_estimator(model_dir=f"{BUCKET}/model", backend=backend)
    est.train(train_input_fn, max_steps=300)
    assert est.latest_checkpoint() == "model.ckpt-00000300.npz"  # written to gs://
    result = est.evaluate(eval_input_fn)
    W, b = est.get_variable_value("softmax/W"), est.get_variable_value("softmax/b")
    direct = float(((x_test @ W + b).argmax(axis=1) == y_test).mean())
    assert result["examples"] == len(y_test)  # exact epoch: every held-out example once
    # float32 on the devices may order a near-tie differently from numpy: at most one example
    assert result["accuracy"] == pytest.approx(direct, abs=1.5 / len(y_test) if backend == "jax" else 1e-12)
    assert result["accuracy"] >= 0.93
    report = est.last_train_report
    assert report.steps == 300 and report.records == 300 * 128
    if importlib.util.find_spec("tensorboardX") and importlib.util.find_spec("tensorboard"):
        losses = series(load(f"{BUCKET}/model"), "loss")  # TensorBoard's event file on gs://
        assert [s for s, _ in losses] == [100, 200, 300] and losses[2][1] < 0.8 * losses[0][1]


def test_eight_replicas_equal_cpu_on_the_same_global_batches(digits_on_gcs):
    on_tpu = make_estimator().train(train_input_fn, steps=40)
    on_cpu = make_estimator(use_tpu=False).train(train_input_fn, steps=40)
    for name in on_tpu.get_variable_names():
        np.testing.assert_allclose(on_tpu.get_variable_value(name), on_cpu.get_variable_value(name),
                                   atol=1e-6)
