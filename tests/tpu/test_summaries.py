"""TensorBoard summaries of the executor, read back with TensorBoard's own loader."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import tempfile
import traceback

import numpy as np
import pytest

from tpudata import Dataset, storage, tpu
from tpudata.errors import HostCallError
from tpudata.tpu import models, summaries

from fake_gcs.pytest_plugin import fake_gcs_server  # noqa: F401  (fixture)

pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
pytest.importorskip("tensorboardX")

from tests.tpu.events import load, series  # noqa: E402

RNG = np.random.default_rng(0)
X = RNG.standard_normal((480, 12)).astype(np.float32)
Y = (X @ RNG.standard_normal((12, 4))).argmax(axis=1).astype(np.int32)
AUTOMATIC = {"loss", "global_step/sec", "examples/sec", "infeed/device_seconds",
             "infeed/wait_seconds", "infeed/input_bound_percent", "infeed/records_per_sec",
             "infeed/MB_per_sec"}


def train_input(params):
    return (Dataset.from_tensor_slices(({"x": X}, Y)).repeat().shuffle(480, seed=1)
            .batch(params["batch_size"], drop_remainder=True))


def eval_input(params):
    return Dataset.from_tensor_slices(({"x": X[:100]}, Y[:100])).batch(params["batch_size"],
                                                                       pad_remainder=True)


def estimator(model_dir, model_fn=None, loop=5, every=5, shards=8):
    cfg = tpu.RunConfig(model_dir=model_dir, save_summary_steps=every,
                        tpu_config=tpu.TPUConfig(iterations_per_loop=loop, num_shards=shards))
    return tpu.TPUEstimator(model_fn or models.softmax_regression(4, learning_rate=0.3), cfg,
                            train_batch_size=64, eval_batch_size=32)


def staging() -> set:
    """This process's staging directories (other processes on the machine may stage too)."""
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith(f"tpudata-events-{os.getpid()}-")}


def logged_losses(caplog):
    return {r.args[0]: r.args[1] for r in caplog.records
            if r.name == "tpudata.tpu.estimator" and r.msg.startswith("step %d: loss")}


# -- the automatic summaries ----------------------------------------------------------------------
def test_train_writes_what_tpuestimator_records_and_the_infeed_report(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tpudata.tpu.estimator")
    est = estimator(str(tmp_path / "model")).train(train_input, steps=20)
    acc = load(str(tmp_path / "model"))
    assert set(acc.Tags()["scalars"]) == AUTOMATIC
    logged = logged_losses(caplog)
    assert sorted(logged) == [5, 10, 15, 20]
    assert [s for s, _ in series(acc, "loss")] == [5, 10, 15, 20]
    for step, value in series(acc, "loss"):
        assert value == pytest.approx(logged[step], rel=1e-6)
    reports = est.infeed_reports
    expected = {
        "global_step/sec": [r.steps / r.wall_seconds for r in reports],
        "examples/sec": [r.records / r.wall_seconds for r in reports],
        "infeed/device_seconds": [r.device_seconds for r in reports],
        "infeed/wait_seconds": [r.wait_seconds for r in reports],
        "infeed/input_bound_percent": [r.input_bound_percent for r in reports],
        "infeed/records_per_sec": [r.records_per_second for r in reports],
        "infeed/MB_per_sec": [r.mb_per_second for r in reports],
    }
    for tag, values in expected.items():
        got = series(acc, tag)
        assert [s for s, _ in got] == [5, 10, 15, 20], tag
        np.testing.assert_allclose([v for _, v in got], values, rtol=1e-6, err_msg=tag)
    assert all(r.records == 5 * 64 for r in reports)
    rates = [r.args[2] for r in caplog.records if r.msg.startswith("step %d: loss")]
    np.testing.assert_allclose(rates, expected["global_step/sec"], rtol=1e-6)  # the log line's


def test_save_summary_steps_spans_loops_and_none_turns_them_off(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tpudata.tpu.estimator")
    est = estimator(str(tmp_path / "m"), every=10).train(train_input, steps=30)
    acc = load(str(tmp_path / "m"))
    logged = logged_losses(caplog)
    assert [s for s, _ in series(acc, "loss")] == [10, 20, 30]
    for step, value in series(acc, "loss"):  # the mean over both 5-step loops of the window
        assert value == pytest.approx((logged[step - 5] + logged[step]) / 2, rel=1e-6)
    pairs = [est.infeed_reports[i] + est.infeed_reports[i + 1] for i in (0, 2, 4)]
    np.testing.assert_allclose([v for _, v in series(acc, "infeed/records_per_sec")],
                               [p.records_per_second for p in pairs], rtol=1e-6)
    estimator(str(tmp_path / "off"), every=None).train(train_input, steps=10)
    assert load(str(tmp_path / "off")).Tags()["scalars"] == []
    assert os.path.exists(tmp_path / "off" / "checkpoint")


def test_a_resumed_run_appends_a_new_event_file(tmp_path):
    d = str(tmp_path / "m")
    estimator(d).train(train_input, steps=10)
    estimator(d).train(train_input, steps=10)  # restores step 10, goes on to 20
    assert len([n for n in os.listdir(d) if n.startswith("events.out.tfevents.")]) == 2
    assert [s for s, _ in series(load(d), "loss")] == [5, 10, 15, 20]


@pytest.mark.parametrize("where", ["memory", "gcs"])
def test_event_files_on_remote_storage_are_uploaded_at_every_flush(where, request, tmp_path, memfs):
    if where == "gcs":
        request.getfixturevalue("fake_gcs_server")
        storage.gcs_filesystem().mkdir("tb-bucket")
    model_dir = "memory://tb/model" if where == "memory" else "gs://tb-bucket/model"
    seen_mid_run = []
    before = staging()

    def host_fn(labels):  # runs at each loop end: the previous loops are already uploaded
        files = storage.glob(storage.join(model_dir, "events.out.tfevents.*"))
        steps = [s for s, _ in series(load(model_dir), "loss")] if files else []
        seen_mid_run.append(steps)

    est = estimator(model_dir, with_host_call(models.softmax_regression(4), host_fn, lambda f, l: [l]))
    est.train(train_input, steps=15)
    assert seen_mid_run == [[], [5], [5, 10]]
    acc = load(model_dir)
    assert [s for s, _ in series(acc, "loss")] == [5, 10, 15]
    result = est.evaluate(eval_input)
    evals = load(storage.join(model_dir, "eval"))
    assert series(evals, "accuracy") == [(15, pytest.approx(result["accuracy"], rel=1e-6))]
    assert staging() == before  # the local staging files are gone


def test_evaluate_writes_its_metrics_under_eval_and_eval_name(tmp_path):
    d = str(tmp_path / "m")
    est = estimator(d).train(train_input, steps=10)
    first = est.evaluate(eval_input)
    est.train(train_input, steps=10)
    second = est.evaluate(eval_input)
    named = est.evaluate(eval_input, name="holdout")
    acc = load(os.path.join(d, "eval"))
    assert set(acc.Tags()["scalars"]) == {"accuracy", "loss", "examples", "steps"}
    for tag in ("accuracy", "loss", "examples"):
        assert series(acc, tag) == [(10, pytest.approx(first[tag], rel=1e-6)),
                                    (20, pytest.approx(second[tag], rel=1e-6))]
    assert series(load(os.path.join(d, "eval_holdout")), "accuracy") == [
        (20, pytest.approx(named["accuracy"], rel=1e-6))]
    assert first["examples"] == 100


# -- host_call ------------------------------------------------------------------------------------
def with_host_call(model_fn, fn, tensors):
    """model_fn that also returns ``host_call=(fn, tensors(features, labels) + ...)``."""

    def wrapped(features, labels, mode, params):
        spec = model_fn(features, labels, mode, params)
        return dataclasses.replace(spec, host_call=(fn, tensors(features, labels, spec)
                                                    if tensors.__code__.co_argcount == 3
                                                    else tensors(features, labels)))

    return wrapped


def test_host_call_gathers_replicas_and_runs_once_per_loop_over_stacked_steps(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tpudata.tpu.estimator")
    calls = []

    def host_fn(labels, loss):
        calls.append((labels, loss, summaries.steps()))
        summaries.scalar("host/mean_label", labels.mean(axis=1), step=summaries.steps())
        summaries.histogram("host/replica_loss", loss)  # at the loop's last step

    model_fn = with_host_call(models.softmax_regression(4, learning_rate=0.3), host_fn,
                              lambda f, l, spec: [l, np.reshape(spec.loss, [1])])
    d = str(tmp_path / "m")
    estimator(d, model_fn).train(train_input, steps=15)
    assert len(calls) == 3  # once per loop
    batches = [b[1] for b in train_input({"batch_size": 8}).take(15 * 8)]  # PER_HOST_V2 order
    for k, (labels, loss, steps) in enumerate(calls):
        assert labels.shape == (5, 64) and loss.shape == (5, 8)  # [steps in loop, replicas x batch]
        for i in range(5):
            np.testing.assert_array_equal(labels[i], np.concatenate(batches[(5 * k + i) * 8:][:8]))
        assert steps.tolist() == list(range(5 * k + 1, 5 * k + 6))
        assert loss.mean() == pytest.approx(logged_losses(caplog)[5 * k + 5], rel=1e-9)
    acc = load(d)
    got = series(acc, "host/mean_label")
    assert [s for s, _ in got] == list(range(1, 16))
    np.testing.assert_allclose([v for _, v in got], np.concatenate([c[0].mean(axis=1) for c in calls]),
                               rtol=1e-6)
    hist = acc.Histograms("host/replica_loss")
    assert [h.step for h in hist] == [5, 10, 15]
    assert [h.histogram_value.num for h in hist] == [40, 40, 40]
    assert [h.histogram_value.max for h in hist] == pytest.approx([c[1].max() for c in calls])
    assert [h.histogram_value.sum for h in hist] == pytest.approx([c[1].sum() for c in calls])
    assert [sum(h.histogram_value.bucket) for h in hist] == [40, 40, 40]


def test_host_call_with_a_dict_in_evaluate_and_without_model_dir(tmp_path):
    calls = []

    def host_fn(labels, weight):
        calls.append((labels.shape, weight.sum(), summaries.steps().tolist()))
        summaries.scalar("eval_host/real_rows", weight.sum())

    model_fn = with_host_call(models.softmax_regression(4), host_fn,
                              lambda f, l: {"labels": l, "weight": np.ones(len(l), np.float32)})
    d = str(tmp_path / "m")
    est = estimator(d, model_fn).train(train_input, steps=5)
    calls.clear()
    est.evaluate(eval_input)  # 100 rows in 4 steps of 8 x 4 (the last padded)
    assert calls == [((4, 32), 128.0, [5, 5, 5, 5])]
    assert series(load(os.path.join(d, "eval")), "eval_host/real_rows") == [(5, 128.0)]
    calls.clear()
    estimator(None, model_fn).train(train_input, steps=10)  # no model_dir: runs, writes nothing
    assert [c[0] for c in calls] == [(5, 64), (5, 64)]


def test_host_call_errors_surface_with_the_functions_traceback(tmp_path):
    def broken_host_fn(labels):
        return {}["missing"]

    model_fn = with_host_call(models.softmax_regression(4), broken_host_fn, lambda f, l: [l])
    with pytest.raises(HostCallError,
                       match="broken_host_fn failed on the host at global step 5") as info:
        estimator(str(tmp_path / "m"), model_fn).train(train_input, steps=20)
    err = info.value
    assert isinstance(err, RuntimeError) and err.step == 5 and err.fn_name.endswith("broken_host_fn")
    assert isinstance(err.__cause__, KeyError)
    frames = [f.name for f in traceback.extract_tb(err.__cause__.__traceback__)]
    assert frames[-1] == "broken_host_fn"
    assert "KeyError: 'missing'" in str(err)


def test_host_call_tensors_keep_a_batch_dimension(tmp_path):
    model_fn = with_host_call(models.softmax_regression(4), lambda loss: None,
                              lambda f, l, spec: [np.float32(spec.loss)])
    with pytest.raises(ValueError,
                       match=r"tensor 0 has no batch dimension \(shape \(\)\).*reshape scalars to \[1\]"):
        estimator(None, model_fn).train(train_input, steps=5)
    with pytest.raises(RuntimeError, match="inside a host_call function"):
        summaries.scalar("x", 1.0)
    calls = iter(range(1000))  # 8 replica calls a step: rows of 1, then 2 values per replica
    growing = with_host_call(models.softmax_regression(4), lambda t: None,
                             lambda f, l: [np.zeros(1 + next(calls) // 8)])
    with pytest.raises(ValueError, match=r"tensor 0 changes shape between steps \(\[\(8,\), \(16,\)"):
        estimator(None, growing).train(train_input, steps=5)
    bare = with_host_call(models.softmax_regression(4), None, lambda f, l: [l])
    with pytest.raises(TypeError, match="host_call must be \\(fn, tensors\\)"):
        estimator(None, bare).train(train_input, steps=5)


# -- without the writer ---------------------------------------------------------------------------
def test_without_tensorboardx_training_works_and_logs_once(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # import tensorboardX -> ImportError
    monkeypatch.setattr(summaries, "_warned_off", False)
    caplog.set_level(logging.WARNING, logger="tpudata.tpu.summaries")
    d = str(tmp_path / "m")
    est = estimator(d).train(train_input, steps=10)
    est.evaluate(eval_input)
    est.train(train_input, steps=10)
    assert est.latest_checkpoint() == "model.ckpt-00000020.npz"
    assert not [n for n in os.listdir(d) if n.startswith("events")] and not os.path.exists(
        os.path.join(d, "eval"))
    warnings = [r.getMessage() for r in caplog.records if r.name == "tpudata.tpu.summaries"]
    assert warnings == ["TensorBoard summaries are off: install the writer with pip install "
                        "'tpudata[tensorboard]' (tensorboardX)"]


def test_writer_checks_its_arguments(tmp_path):
    with summaries.SummaryWriter(str(tmp_path / "w")) as w:
        with pytest.raises(ValueError, match="3 steps for 2 values"):
            w.scalar("a", [1.0, 2.0], step=[1, 2, 3])
        with pytest.raises(ValueError, match="one number per step"):
            w.scalar("a", [1.0, 2.0], step=4)
        with pytest.raises(ValueError, match="NaN or infinite"):
            w.histogram("h", [1.0, np.nan], step=1)
        w.scalar("a", 2.5, step=7)
    with pytest.raises(ValueError, match="closed"):
        w.scalar("a", 1.0, step=8)
    assert series(load(str(tmp_path / "w")), "a") == [(7, 2.5)]


# --- docs/tpu.md example starts ---
def host_fn(loss, labels):                     # [steps in the loop, replicas], [steps, global batch]
    tpu.summaries.scalar("replica_loss_max", loss.max(axis=1), step=tpu.summaries.steps())
    tpu.summaries.histogram("labels", labels)  # at the loop's last global step
# --- docs/tpu.md example ends ---


@pytest.mark.parametrize("use_tpu", [True, False])
def test_the_readme_host_call(tmp_path, use_tpu):
    doc = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "tpu.md")).read()
    source = open(__file__).read().split("# --- docs/tpu.md example starts ---\n")[1].split("# ---")[0]
    assert source in doc
    assert "host_call=(host_fn, [np.reshape(loss, [1]), labels])" in doc
    model_fn = with_host_call(models.softmax_regression(4), host_fn,
                              lambda f, l, spec: [np.reshape(spec.loss, [1]), l])
    d = str(tmp_path / "m")
    cfg = tpu.RunConfig(model_dir=d, tpu_config=tpu.TPUConfig(iterations_per_loop=5, num_shards=8))
    tpu.TPUEstimator(model_fn, cfg, use_tpu=use_tpu, train_batch_size=64).train(train_input, steps=10)
    acc = load(d)
    assert [s for s, _ in series(acc, "replica_loss_max")] == list(range(1, 11))
    assert [(h.step, h.histogram_value.num) for h in acc.Histograms("labels")] == [(5, 320), (10, 320)]
    assert acc.Tags()["scalars"] == ["replica_loss_max"]  # 10 steps < save_summary_steps=100


def test_event_files_roll_over_and_read_back_in_order(tmp_path, memfs):
    url = "memory://roll/logs"
    with summaries.SummaryWriter(url, max_file_bytes=150) as w:
        for step in range(1, 13):
            w.scalar("a", step / 2, step)
            w.flush()  # a file over 150 bytes is finished; the next point starts a new one
    names = storage.glob(storage.join(url, "events.out.tfevents.*"))
    assert len(names) >= 3 and names == sorted(names)
    assert series(load(url), "a") == [(s, s / 2) for s in range(1, 13)]


def test_a_backend_that_gathers_a_whole_loop_on_the_device(tmp_path):
    """The contract another backend uses: a loop's host_call already stacked, its loss given."""
    seen = []

    def fn(x, y):
        seen.append((x.copy(), y.copy(), summaries.steps().tolist()))
        summaries.scalar("x0", x[:, 0], step=summaries.steps())

    recorder = summaries.for_training(str(tmp_path / "m"), 3)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)  # [3 steps, global batch 4]
    recorder.host_call_steps((fn, (x, x * 2)))
    recorder.on_loop(3, tpu.LoopReport(steps=3, records=12, wall_seconds=0.5), 0, loss=0.25)
    with pytest.raises(ValueError, match=r"no batch dimension \(shape \(3,\)\)"):
        recorder.host_call_steps((fn, [np.zeros(3)]))  # [steps] only: no batch dimension
    recorder.close()
    assert len(seen) == 1 and seen[0][2] == [1, 2, 3]
    np.testing.assert_array_equal(seen[0][1], x * 2)
    acc = load(str(tmp_path / "m"))
    assert series(acc, "x0") == [(1, 0.0), (2, 4.0), (3, 8.0)]
    assert series(acc, "loss") == [(3, 0.25)] and series(acc, "examples/sec") == [(3, 24.0)]
