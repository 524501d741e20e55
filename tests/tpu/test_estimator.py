"""TPUEstimator's contract in numpy: replicas, all-reduce, TPU rules, loops, checkpoints."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

from tpudata import Dataset
from tpudata import tpu
from tpudata.errors import StaticShapeError, UnsupportedDtypeError
from tpudata.tpu import models
from tpudata.tpu.variables import VariableStore

RNG = np.random.default_rng(0)
X = RNG.standard_normal((600, 12)).astype(np.float32)
TRUE_W = RNG.standard_normal((12, 4))
Y = (X @ TRUE_W).argmax(axis=1).astype(np.int32)


def train_input(params):
    return (Dataset.from_tensor_slices(({"x": X[:480]}, Y[:480])).repeat()
            .shuffle(480, seed=1).batch(params["batch_size"], drop_remainder=True))


def eval_input(n=None):
    xs, ys = X[480:480 + n] if n is not None else X[480:], Y[480:480 + n] if n is not None else Y[480:]

    def fn(params):
        return Dataset.from_tensor_slices(({"x": xs}, ys)).batch(params["batch_size"], pad_remainder=True)

    return fn


def estimator(model_fn=None, use_tpu=True, shards=8, loop=5, model_dir=None, **kw):
    cfg = tpu.RunConfig(model_dir=model_dir, tpu_config=tpu.TPUConfig(iterations_per_loop=loop,
                                                                      num_shards=shards))
    kw.setdefault("train_batch_size", 64)
    kw.setdefault("eval_batch_size", 32)
    kw.setdefault("predict_batch_size", 32)
    return tpu.TPUEstimator(model_fn or models.softmax_regression(4, learning_rate=0.3), cfg,
                            use_tpu=use_tpu, **kw)


# -- gradients ------------------------------------------------------------------------------------
def _numeric_check(model_fn, names):
    x = RNG.standard_normal((7, 12))
    y = RNG.integers(0, 4, 7).astype(np.int32)
    store = VariableStore(1, seed=3)
    with store.replica(0):
        spec = model_fn({"x": x}, y, tpu.ModeKeys.TRAIN, {})
    grads = spec.train_op.gradients
    eps = 1e-3
    for name in names:
        var = store.values[0][name]
        store.values[0][name] = var.astype(np.float64)
        flat = store.values[0][name].reshape(-1)
        for i in RNG.choice(flat.size, min(flat.size, 12), replace=False):
            old = flat[i]
            flat[i] = old + eps
            with store.replica(0):
                up = model_fn({"x": x}, y, tpu.ModeKeys.TRAIN, {}).loss
            flat[i] = old - eps
            with store.replica(0):
                down = model_fn({"x": x}, y, tpu.ModeKeys.TRAIN, {}).loss
            flat[i] = old
            numeric = (up - down) / (2 * eps)
            assert abs(numeric - np.asarray(grads[name]).reshape(-1)[i]) < 1e-5 * max(1, abs(numeric))


def test_softmax_regression_gradients_are_right():
    _numeric_check(models.softmax_regression(4), ["softmax/W", "softmax/b"])


def test_mlp_gradients_are_right():
    _numeric_check(models.mlp(9, 4), ["mlp/W1", "mlp/b1", "mlp/W2", "mlp/b2"])


# -- replication ----------------------------------------------------------------------------------
@pytest.mark.parametrize("optimizer", [tpu.SGD(0.3), tpu.Momentum(0.1, 0.9), tpu.Adam(0.01)],
                         ids=["sgd", "momentum", "adam"])
@pytest.mark.parametrize("model", ["softmax", "mlp"])
def test_eight_replicas_equal_one_on_the_same_global_batches(optimizer, model):
    make = (lambda: models.softmax_regression(4, optimizer=optimizer)) if model == "softmax" else (
        lambda: models.mlp(16, 4, optimizer=optimizer))
    a = estimator(make()).train(train_input, steps=25)
    b = estimator(make(), use_tpu=False).train(train_input, steps=25)
    for name in a.get_variable_names():
        np.testing.assert_allclose(a.get_variable_value(name), b.get_variable_value(name), atol=1e-6)
    for r in range(8):  # every replica holds the same weights
        for name in a.get_variable_names():
            assert np.array_equal(a.store.values[r][name], a.store.values[0][name])


def test_sum_reduction_scales_the_update():
    mean = estimator(models.softmax_regression(4, optimizer=tpu.CrossShardOptimizer(tpu.SGD(0.08), "sum")))
    one = estimator(models.softmax_regression(4, learning_rate=0.64), use_tpu=False)
    mean.train(train_input, steps=3)
    one.train(train_input, steps=3)  # sum over 8 replicas == 8x the mean gradient
    np.testing.assert_allclose(mean.get_variable_value("softmax/W"), one.get_variable_value("softmax/W"),
                               atol=1e-6)


def test_plain_optimizer_on_replicas_is_refused():
    def model_fn(features, labels, mode, params):
        w = tpu.get_variable("w", (12, 4), initializer=tpu.initializers.zeros)
        return tpu.TPUEstimatorSpec(mode, loss=0.0, train_op=tpu.SGD(0.1).minimize(0.0, {"w": np.ones_like(w)}))

    with pytest.raises(ValueError, match="CrossShardOptimizer must be used"):
        estimator(model_fn).train(train_input, steps=1)


def test_training_learns():
    est = estimator(models.mlp(32, 4, learning_rate=0.5)).train(train_input, steps=150)
    assert est.evaluate(eval_input())["accuracy"] > 0.9


# -- TPU rules ------------------------------------------------------------------------------------
def test_static_shapes_are_enforced():
    def uneven(params):  # 22 rows: the last per-replica batch has 2
        return Dataset.from_tensor_slices(({"x": X[:22]}, Y[:22])).batch(params["batch_size"])

    est = estimator(shards=2, train_batch_size=8, loop=10)
    with pytest.raises(StaticShapeError) as info:
        est.train(uneven, steps=10)
    msg = str(info.value)
    assert "features 'x' has shape (2, 12)" in msg and "compiled for shape (4, 12)" in msg
    assert "drop_remainder=True" in msg and "pad_remainder=True" in msg
    ok = estimator(shards=2, train_batch_size=8, use_tpu=False)
    ok.train(uneven, steps=10)  # no TPU rules on the CPU


@pytest.mark.parametrize("dtype,hint", [(np.uint64, "int32"), (np.float64, "float32"),
                                        (np.int16, "int32"), (np.float16, "bfloat16"),
                                        (object, "strings")])
def test_unsupported_dtypes(dtype, hint):
    xs = X[:64].astype(dtype) if dtype is not object else np.array([b"a"] * 64, dtype=object)

    def inp(params):
        return Dataset.from_tensor_slices(({"x": xs}, Y[:64])).batch(params["batch_size"])

    with pytest.raises(UnsupportedDtypeError, match=hint) as info:
        estimator().train(inp, steps=1)
    assert "features 'x'" in str(info.value)


def test_int64_labels_pass_through_as_in_tpu_estimator():
    # TF's TPU infeed takes int64 (tpu_ops._SUPPORTED_INFEED_DTYPES) and TPUEstimator does not cast
    seen = []
    base = models.softmax_regression(4, learning_rate=0.3)

    def model_fn(features, labels, mode, params):
        seen.append(labels.dtype)
        return base(features, labels, mode, params)

    def raw(params):
        return Dataset.from_tensor_slices(({"x": X}, Y.astype(np.int64))).batch(
            params["batch_size"], drop_remainder=True)

    def int32(params):
        return Dataset.from_tensor_slices(({"x": X}, Y)).batch(params["batch_size"], drop_remainder=True)

    est = estimator(model_fn).train(raw, steps=2)
    assert est.global_step == 2 and set(seen) == {np.dtype(np.int64)}
    np.testing.assert_array_equal(est.get_variable_value("softmax/W"),
                                  estimator().train(int32, steps=2).get_variable_value("softmax/W"))
    seen.clear()
    ready = lambda params: raw(params).map(tpu.make_tpu_ready)  # noqa: E731
    estimator(model_fn).train(ready, steps=2)  # make_tpu_ready still narrows to int32
    assert set(seen) == {np.dtype(np.int32)}


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.bool_])
def test_tpu_infeed_small_types_pass_through(dtype):
    # uint8 / int8 / bool are TPU infeed types (tpu_ops._SUPPORTED_INFEED_DTYPES): uint8 images go
    # to the device as they are, nothing widens them
    seen = []
    base = models.softmax_regression(4, learning_rate=0.3)
    xs = (np.abs(X) * 20).astype(dtype)

    def model_fn(features, labels, mode, params):
        seen.append(features["x"].dtype)
        return base({"x": features["x"].astype(np.float32)}, labels, mode, params)

    def inp(params):
        return Dataset.from_tensor_slices(({"x": xs}, Y)).batch(params["batch_size"], drop_remainder=True)

    est = estimator(model_fn).train(inp, steps=2)
    assert est.global_step == 2 and set(seen) == {np.dtype(dtype)}


def test_make_tpu_ready_casts_only_what_tpus_refuse():
    out = tpu.make_tpu_ready({"img": np.zeros((2, 3), np.uint8), "h": np.zeros(2, np.float16),
                              "d": np.zeros(2), "i": np.zeros(2, np.int16), "b": np.zeros(2, bool)})
    assert {k: v.dtype.name for k, v in out.items()} == {
        "img": "uint8", "h": "float32", "d": "float32", "i": "int32", "b": "bool"}
    with pytest.raises(UnsupportedDtypeError, match="do not fit in int32"):
        tpu.make_tpu_ready({"big": np.array([2**40])})


def test_bfloat16_features_are_tpu_inputs():
    ml_dtypes = pytest.importorskip("ml_dtypes")  # the [bfloat16] extra
    seen = []
    base = models.softmax_regression(4, learning_rate=0.3)

    def model_fn(features, labels, mode, params):
        seen.append(features["x"].dtype)
        return base(features, labels, mode, params)

    def inp(params):
        return Dataset.from_tensor_slices(({"x": X.astype(ml_dtypes.bfloat16)}, Y)).batch(
            params["batch_size"], drop_remainder=True)

    assert estimator(model_fn).train(inp, steps=2).global_step == 2
    assert set(seen) == {np.dtype(ml_dtypes.bfloat16)}


def test_hosts_running_out_at_different_steps_name_the_count_helper(caplog):
    def uneven(params):  # host 1 has half the batches of host 0
        ctx = params["context"]
        n = 8 * params["batch_size"] * 4 // (ctx.current_host + 1)
        return Dataset.from_tensor_slices(({"x": X[:n]}, Y[:n])).batch(params["batch_size"])

    cfg = tpu.RunConfig(tpu_config=tpu.TPUConfig(iterations_per_loop=2, num_shards=8, num_hosts=2))
    with caplog.at_level(logging.WARNING, logger="tpudata.tpu.infeed"):
        est = tpu.TPUEstimator(models.softmax_regression(4), cfg, train_batch_size=64)
        est.train(uneven, steps=10)
    assert est.global_step == 4  # host 1 had 16 batches: 4 steps of its 4 replicas
    warned = [r.getMessage() for r in caplog.records if "ran out of input" in r.getMessage()]
    assert len(warned) == 1
    assert "tpudata.distribute.equal_num_batches(counts, B, num_hosts)" in warned[0]
    assert "pad_remainder=True, num_batches=n" in warned[0]


@pytest.mark.parametrize("use_tpu,deployment,expected", [
    (True, tpu.InputPipelineConfig.PER_HOST_V2,
     [(8, ("/job:tpu_worker/task:0/device:CPU:0", 0, 2, 4)),
      (8, ("/job:tpu_worker/task:1/device:CPU:0", 1, 2, 4))]),
    (True, tpu.InputPipelineConfig.PER_HOST_V1,
     [(32, ("/job:tpu_worker/task:0/device:CPU:0", 0, 2, 4)),
      (32, ("/job:tpu_worker/task:1/device:CPU:0", 1, 2, 4))]),
    (True, tpu.InputPipelineConfig.BROADCAST, [(64, ("/job:tpu_worker/task:0/device:CPU:0", 0, 1, 8))]),
    (False, tpu.InputPipelineConfig.PER_HOST_V2, [(64, ("/replica:0/task:0/device:CPU:0", 0, 1, 1))]),
])
def test_current_input_fn_deployment(use_tpu, deployment, expected):
    seen = []

    def inp(params):
        ctx = params["context"]
        seen.append((params["batch_size"], ctx.current_input_fn_deployment()))
        _, index, count, _ = ctx.current_input_fn_deployment()
        return train_input(params).shard(count, index)

    cfg = tpu.RunConfig(tpu_config=tpu.TPUConfig(iterations_per_loop=2, num_shards=8, num_hosts=2,
                                                 per_host_input_for_training=deployment))
    est = tpu.TPUEstimator(models.softmax_regression(4), cfg, train_batch_size=64, use_tpu=use_tpu)
    est.train(inp, steps=2)
    assert sorted(seen) == expected
    if use_tpu and deployment != tpu.InputPipelineConfig.PER_HOST_V2:
        seen.clear()  # evaluation always calls input_fn per host with the per-replica batch
        est = tpu.TPUEstimator(models.softmax_regression(4), cfg, train_batch_size=64,
                               eval_batch_size=64)
        est.evaluate(inp, steps=1)
        assert [s[1] for s in sorted(seen)] == [(f"/job:tpu_worker/task:{h}/device:CPU:0", h, 2, 4)
                                                for h in range(2)]


def test_argument_errors():
    with pytest.raises(ValueError, match="divisible by the number of replicas 8"):
        estimator(train_batch_size=100)
    with pytest.raises(ValueError, match="steps or max_steps"):
        estimator().train(train_input)
    with pytest.raises(ValueError, match="multiple of num_hosts"):
        tpu.TPUConfig(num_shards=8, num_hosts=3)


# -- loops, checkpoints, input deployment ---------------------------------------------------------
def test_checkpoints_at_loop_boundaries_and_resume(memfs):
    d = "memory://ckpt/model"
    cfg = tpu.RunConfig(model_dir=d, save_checkpoints_steps=7, keep_checkpoint_max=2,
                        tpu_config=tpu.TPUConfig(iterations_per_loop=5, num_shards=8))
    est = tpu.TPUEstimator(models.softmax_regression(4), cfg, train_batch_size=64)
    est.train(train_input, steps=23)
    # loops end at steps 5, 10, 15, 20, 23; a multiple of 7 is passed in the loops ending at
    # 10, 15 and 23, so those are saved (at loop boundaries only); two are kept
    names = sorted(p.rsplit("/", 1)[-1] for p in memfs.ls("/ckpt/model", detail=False))
    assert names == ["checkpoint", "model.ckpt-00000015.npz", "model.ckpt-00000023.npz"]
    again = tpu.TPUEstimator(models.softmax_regression(4), cfg, train_batch_size=64)
    again.train(train_input, max_steps=30)
    assert again.global_step == 30
    assert again.latest_checkpoint() == "model.ckpt-00000030.npz"
    fresh = tpu.TPUEstimator(models.softmax_regression(4), cfg, eval_batch_size=32)
    result = fresh.evaluate(eval_input())  # evaluates the latest checkpoint
    assert result["global_step"] == 30
    np.testing.assert_array_equal(fresh.get_variable_value("softmax/W"), again.get_variable_value("softmax/W"))
    again.train(train_input, max_steps=30)  # nothing left to do
    assert again.global_step == 30


def test_per_host_input_and_context():
    seen = []

    def inp(params):
        ctx = params["context"]
        seen.append((params["batch_size"], ctx.current_host, ctx.num_hosts, ctx.num_replicas))
        return train_input(params).shard(ctx.num_hosts, ctx.current_host)

    cfg = tpu.RunConfig(tpu_config=tpu.TPUConfig(iterations_per_loop=2, num_shards=8, num_hosts=2))
    tpu.TPUEstimator(models.softmax_regression(4), cfg, train_batch_size=64).train(inp, steps=4)
    assert sorted(seen) == [(8, 0, 2, 8), (8, 1, 2, 8)]


@pytest.mark.parametrize("deployment", [tpu.InputPipelineConfig.PER_HOST_V1,
                                        tpu.InputPipelineConfig.BROADCAST])
def test_other_deployments_give_the_same_global_batches(deployment):
    cfg = tpu.RunConfig(tpu_config=tpu.TPUConfig(iterations_per_loop=4, num_shards=8,
                                                 per_host_input_for_training=deployment))
    other = tpu.TPUEstimator(models.softmax_regression(4, learning_rate=0.3), cfg,
                             train_batch_size=64).train(train_input, steps=8)
    v2 = estimator(loop=4).train(train_input, steps=8)
    np.testing.assert_allclose(other.get_variable_value("softmax/W"), v2.get_variable_value("softmax/W"),
                               atol=1e-6)


def test_input_errors_surface_in_train():
    def bad(params):
        return Dataset.range(100).map(lambda i: (_ for _ in ()).throw(OSError("disk on fire")) if i == 9
                                      else ({"x": X[0]}, Y[0])).batch(params["batch_size"])

    with pytest.raises(OSError, match="disk on fire"):
        estimator(shards=2, train_batch_size=2).train(bad, steps=50)


# -- evaluation and prediction --------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 3, 31, 32, 33, 100, 120])
def test_exact_epoch_evaluation(n):
    est = estimator().train(train_input, steps=30)
    result = est.evaluate(eval_input(n))
    W, b = est.get_variable_value("softmax/W"), est.get_variable_value("softmax/b")
    direct = ((X[480:480 + n] @ W + b).argmax(axis=1) == Y[480:480 + n]).mean()
    assert result["examples"] == n  # every real example once, padding never
    assert result["accuracy"] == pytest.approx(direct, abs=1e-12)


def test_evaluation_without_mask_cannot_silently_drop():
    def no_mask(params):
        return Dataset.from_tensor_slices(({"x": X[:40]}, Y[:40])).batch(params["batch_size"],
                                                                        drop_remainder=True)

    est = estimator().train(train_input, steps=2)
    with pytest.raises(ValueError, match="no 'weight' mask"):
        est.evaluate(no_mask)


def test_predict_pads_and_slices():
    est = estimator().train(train_input, steps=30)
    preds = list(est.predict(lambda p: Dataset.from_tensor_slices({"x": X[:37]}).batch(p["batch_size"])))
    W, b = est.get_variable_value("softmax/W"), est.get_variable_value("softmax/b")
    assert len(preds) == 37
    assert [int(p["classes"]) for p in preds] == (X[:37] @ W + b).argmax(axis=1).tolist()
    masked = list(est.predict(lambda p: Dataset.from_tensor_slices({"x": X[:37]}).batch(
        p["batch_size"], pad_remainder=True)))
    assert len(masked) == 37


# -- infeed report --------------------------------------------------------------------------------
def test_infeed_report_tells_input_bound_from_compute_bound(caplog):
    def slow(params):
        return train_input(params).map(lambda f, y: (time.sleep(0.004), (f, y))[1])

    with caplog.at_level(logging.INFO, logger="tpudata.tpu"):
        est = estimator(shards=2, train_batch_size=8, loop=4).train(slow, steps=8)
    assert est.last_train_report.input_bound_percent > 50
    assert "input-bound" in caplog.text
    cfg = tpu.RunConfig(tpu_config=tpu.TPUConfig(iterations_per_loop=4, num_shards=2,
                                                 simulated_step_seconds=0.02))
    fast = tpu.TPUEstimator(models.softmax_regression(4), cfg, train_batch_size=8).train(train_input, steps=8)
    report = fast.last_train_report
    assert report.input_bound_percent < 20 and report.steps == 8
    assert report.records == 64 and report.records_per_second > 0 and report.mb_per_second > 0


def test_loss_ignores_padding_rows():
    logits = np.array([[2.0, 0.0], [0.0, 2.0], [5.0, 5.0]])
    full, g_full = models.softmax_cross_entropy(logits[:2], [0, 1])
    padded, g_pad = models.softmax_cross_entropy(logits, [0, 1, -1], weights=[1, 1, 0])
    assert padded == pytest.approx(full)
    np.testing.assert_allclose(g_pad[:2], g_full)
    assert not g_pad[2].any()
    with pytest.raises(ValueError, match="labels must be in"):
        models.softmax_cross_entropy(logits, [0, 1, -1])


def test_numpy_backend_needs_no_jax():
    import subprocess
    import sys

    code = ("import sys, tpudata, tpudata.tpu\n"
            "from tpudata.tpu import models\n"
            "assert not any(m == 'jax' or m.startswith('jax.') for m in sys.modules), 'jax imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- progress lines: shown by default, as TPUEstimator's -------------------------------------------
_PROGRAM = """
import logging, sys
import numpy as np
from tpudata import Dataset, tpu
from tpudata.tpu import models

X = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)

def train(**kw):  # 6 steps in loops of 2: three loop lines and a closing one
    cfg = tpu.RunConfig(tpu_config=tpu.TPUConfig(iterations_per_loop=2, num_shards=2))
    est = tpu.TPUEstimator(models.softmax_regression(2), cfg, train_batch_size=8, **kw)
    est.train(lambda p: Dataset.from_tensor_slices(({"x": X}, (X[:, 0] > 0).astype(np.int32)))
              .repeat().batch(p["batch_size"]), steps=6)

def case(name):
    sys.stderr.write(f"== {name}\\n")

case("nothing configured")
train()
case("verbose=False")
train(verbose=False)
case("a level on tpudata")
logging.getLogger("tpudata").setLevel(logging.WARNING)
train()
logging.getLogger("tpudata").setLevel(logging.NOTSET)
case("basicConfig at WARNING")
logging.basicConfig(format="configured: %(name)s: %(message)s")
train()
case("basicConfig at INFO")
logging.getLogger().setLevel(logging.INFO)
train()
case("end")
"""


def test_one_line_per_loop_by_default_and_off_by_verbose_or_levels():
    """TPUEstimator's loss / global_step/sec lines show without any logging set-up (tf.logging
    INFO does); here one line per loop, through the logger, never twice, and hidden by
    ``verbose=False`` or by the program's logging levels."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _PROGRAM], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout == ""  # the library prints nothing: these are log records, on stderr
    cases = {}
    for chunk in out.stderr.split("== ")[1:]:
        name, _, body = chunk.partition("\n")
        cases[name] = [line for line in body.splitlines() if line]
    loops = [f"step {s}: loss" for s in (2, 4, 6)] + ["training done at step 6"]

    def shown(lines):
        return [next((m for m in loops if m in line), line) for line in lines]

    assert shown(cases["nothing configured"]) == loops
    assert all(line.startswith("INFO:tpudata.tpu.estimator:") for line in cases["nothing configured"])
    assert cases["verbose=False"] == []
    assert cases["a level on tpudata"] == []
    assert cases["basicConfig at WARNING"] == []
    assert shown(cases["basicConfig at INFO"]) == loops  # the program's handler, once
    assert all(line.startswith("configured: tpudata.tpu.estimator: ")
               for line in cases["basicConfig at INFO"])
