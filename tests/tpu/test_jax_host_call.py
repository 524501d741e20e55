"""host_call and evaluate's summaries on TPUEstimator(backend="jax"): the numpy backend's event files."""

from __future__ import annotations

import dataclasses
import logging
import os
import traceback

import numpy as np
import pytest

from tpudata import Dataset, tpu
from tpudata.errors import HostCallError
from tpudata.tpu import models, summaries

jax = pytest.importorskip("jax")
pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
pytest.importorskip("tensorboardX")

from tests.tpu.events import load, series  # noqa: E402

RNG = np.random.default_rng(0)
X = RNG.standard_normal((480, 12)).astype(np.float32)
Y = (X @ RNG.standard_normal((12, 4))).argmax(axis=1).astype(np.int32)
BACKENDS = ("numpy", "jax")


@pytest.fixture(autouse=True, scope="module")
def eight_devices():
    assert jax.device_count() >= 8, "run with XLA_FLAGS=--xla_force_host_platform_device_count=8"


def train_input(params):
    return (Dataset.from_tensor_slices(({"x": X}, Y)).repeat().shuffle(480, seed=1)
            .batch(params["batch_size"], drop_remainder=True))


def eval_input(params):
    return Dataset.from_tensor_slices(({"x": X[:100]}, Y[:100])).batch(params["batch_size"],
                                                                       pad_remainder=True)


def estimator(backend, model_dir, model_fn, loop=5, every=5, use_tpu=True):
    cfg = tpu.RunConfig(model_dir=model_dir, save_summary_steps=every,
                        tpu_config=tpu.TPUConfig(iterations_per_loop=loop, num_shards=8))
    return tpu.TPUEstimator(model_fn, cfg, use_tpu=use_tpu, train_batch_size=64, eval_batch_size=32,
                            backend=backend)


def with_host_call(fn, tensors, model_fn=None):
    """The built-in softmax regression (numpy or jax.numpy, as the backend traces it) that also
    returns ``host_call=(fn, tensors(features, labels, spec))``."""
    model_fn = model_fn or models.softmax_regression(4, learning_rate=0.3)

    def wrapped(features, labels, mode, params):
        spec = model_fn(features, labels, mode, params)
        return dataclasses.replace(spec, host_call=(fn, tensors(features, labels, spec)))

    return wrapped


def recording_host_fn(calls: list):
    def host_fn(labels, loss):  # [steps, global batch], [steps, replicas]
        calls.append((labels.copy(), loss.copy(), summaries.steps().tolist()))
        summaries.scalar("host/mean_label", labels.mean(axis=1), step=summaries.steps())
        summaries.scalar("host/replica_loss_max", loss.max(axis=1), step=summaries.steps())
        summaries.histogram("host/labels", labels)  # at the loop's last step

    return host_fn


def loss_and_labels(features, labels, spec):
    return [labels, np.reshape(spec.loss, [1])]


@pytest.mark.parametrize("use_tpu", [True, False])
def test_jax_host_call_writes_the_numpy_backends_event_values(tmp_path, use_tpu):
    calls, accs = {}, {}
    for backend in BACKENDS:
        calls[backend] = []
        d = str(tmp_path / backend)
        est = estimator(backend, d, with_host_call(recording_host_fn(calls[backend]), loss_and_labels),
                        use_tpu=use_tpu)
        est.train(train_input, steps=13)  # loops of 5, 5 and 3 (padded to 5 on the devices)
        accs[backend] = load(d)
        if backend == "jax":
            assert est._jax.compilations == 1 and est._jax._traces == 1
    replicas = 8 if use_tpu else 1
    shapes = [(c[0].shape, c[1].shape, c[2]) for c in calls["jax"]]
    assert shapes == [((5, 64), (5, replicas), [1, 2, 3, 4, 5]),
                      ((5, 64), (5, replicas), [6, 7, 8, 9, 10]),
                      ((3, 64), (3, replicas), [11, 12, 13])]  # only the real steps of the last loop
    for (labels, loss, _), (ref_labels, ref_loss, _) in zip(calls["jax"], calls["numpy"]):
        np.testing.assert_array_equal(labels, ref_labels)  # same rows, replicas in order
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)  # float32 vs float64
    jx, ref = accs["jax"], accs["numpy"]
    assert jx.Tags()["scalars"] == ref.Tags()["scalars"]
    assert set(jx.Tags()["scalars"]) >= {"host/mean_label", "host/replica_loss_max", "loss"}
    for tag in jx.Tags()["scalars"]:
        if tag.startswith("host/") or tag == "loss":  # the rest are timings
            got, want = series(jx, tag), series(ref, tag)
            assert [s for s, _ in got] == [s for s, _ in want], tag
            np.testing.assert_allclose([v for _, v in got], [v for _, v in want], rtol=1e-5,
                                       err_msg=tag)
    assert [s for s, _ in series(jx, "host/mean_label")] == list(range(1, 14))
    hist, ref_hist = jx.Histograms("host/labels"), ref.Histograms("host/labels")
    assert [(h.step, h.histogram_value.num) for h in hist] == [(5, 320), (10, 320), (13, 192)]
    for h, r in zip(hist, ref_hist):
        assert h.histogram_value == r.histogram_value  # labels are exact: the same proto


def test_jax_host_call_when_the_input_ends_mid_loop(tmp_path):
    def short(params):  # 7 steps of input for 8 replicas, loops of 3: 3, 3, then 1
        return Dataset.from_tensor_slices(({"x": X[:7 * 64]}, Y[:7 * 64])).batch(params["batch_size"])

    calls = []
    d = str(tmp_path / "m")
    est = estimator("jax", d, with_host_call(recording_host_fn(calls), loss_and_labels), loop=3)
    est.train(short, steps=40)
    assert est.global_step == 7
    assert [c[2] for c in calls] == [[1, 2, 3], [4, 5, 6], [7]]
    labels = np.concatenate([c[0] for c in calls])  # step s: replica r read batch 8 * s + r
    np.testing.assert_array_equal(labels, Y[:7 * 64].reshape(7, 64))
    assert [s for s, _ in series(load(d), "host/mean_label")] == list(range(1, 8))


def test_jax_host_call_errors_surface_with_the_functions_traceback(tmp_path):
    def broken_host_fn(labels):
        return {}["missing"]

    model_fn = with_host_call(broken_host_fn, lambda f, l, spec: [l])
    with pytest.raises(HostCallError,
                       match="broken_host_fn failed on the host at global step 5") as info:
        estimator("jax", str(tmp_path / "m"), model_fn).train(train_input, steps=20)
    err = info.value
    assert err.step == 5 and err.fn_name.endswith("broken_host_fn")
    assert isinstance(err.__cause__, KeyError)
    frames = [f.name for f in traceback.extract_tb(err.__cause__.__traceback__)]
    assert frames[-1] == "broken_host_fn"


def test_jax_host_call_contract_errors_match_numpy():
    scalar = with_host_call(lambda loss: None, lambda f, l, spec: [spec.loss])
    bare = with_host_call(None, lambda f, l, spec: [l])
    for model_fn, error in ((scalar, ValueError), (bare, TypeError)):
        messages = []
        for backend in BACKENDS:
            with pytest.raises(error) as info:
                estimator(backend, None, model_fn).train(train_input, steps=5)
            messages.append(str(info.value))
        assert messages[0] == messages[1]
        assert ("has no batch dimension (shape ())" if error is ValueError
                else "host_call must be (fn, tensors)") in messages[0]


def test_one_compilation_with_a_host_call(tmp_path, caplog):
    calls = []
    est = estimator("jax", str(tmp_path / "m"), with_host_call(recording_host_fn(calls), loss_and_labels),
                    loop=10, every=100)
    with jax.log_compiles(), caplog.at_level(logging.WARNING, logger="jax"):
        est.train(train_input, steps=25)  # loops of 10, 10, 5: the 5 runs the same program
        est.train(train_input, steps=13)  # 10 and 3: nothing new
    assert est._jax.compilations == 1 and est._jax._traces == 1
    compiled = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Compiling")
                and "loop" in r.getMessage()]
    assert len(compiled) == 1, compiled
    assert [len(c[2]) for c in calls] == [10, 10, 5, 10, 3]
    assert calls[-1][2] == list(range(36, 39))


def test_jax_evaluate_writes_host_call_and_metrics_as_numpy(tmp_path):
    results, calls, accs = {}, {}, {}
    for backend in BACKENDS:
        calls[backend] = []

        def host_fn(labels, weight, seen=calls[backend]):
            seen.append((labels.copy(), weight.sum(), summaries.steps().tolist()))
            summaries.scalar("eval_host/real_rows", weight.sum())
            summaries.scalar("eval_host/label_sum", labels.sum())

        model_fn = with_host_call(host_fn, lambda f, l, spec: {
            "labels": l, "weight": np.ones(len(l), np.float32)})
        d = str(tmp_path / backend)
        est = estimator(backend, d, model_fn).train(train_input, steps=5)
        calls[backend].clear()
        results[backend] = est.evaluate(eval_input)  # 100 rows in 4 steps of 8 x 4, the last padded
        accs[backend] = load(os.path.join(d, "eval"))
    assert [(c[0].shape, c[1], c[2]) for c in calls["jax"]] == [((4, 32), 128.0, [5, 5, 5, 5])]
    np.testing.assert_array_equal(calls["jax"][0][0], calls["numpy"][0][0])
    jx, ref = accs["jax"], accs["numpy"]
    assert set(jx.Tags()["scalars"]) == set(ref.Tags()["scalars"]) == {
        "accuracy", "loss", "examples", "steps", "eval_host/real_rows", "eval_host/label_sum"}
    for tag in jx.Tags()["scalars"]:
        got, want = series(jx, tag), series(ref, tag)
        assert [s for s, _ in got] == [s for s, _ in want] == [5], tag
        assert got[0][1] == pytest.approx(want[0][1], rel=1e-5), tag
    assert series(jx, "accuracy") == [(5, pytest.approx(results["jax"]["accuracy"], rel=1e-6))]
