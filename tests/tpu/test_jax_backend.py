"""TPUEstimator(backend="jax") on 8 CPU devices: same contract, results and errors as numpy."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

from tpudata import Dataset, tpu
from tpudata.errors import StaticShapeError, UnsupportedDtypeError
from tpudata.tpu import models

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

RNG = np.random.default_rng(0)
X = RNG.standard_normal((600, 12)).astype(np.float32)
Y = (X @ RNG.standard_normal((12, 4))).argmax(axis=1).astype(np.int32)


@pytest.fixture(autouse=True, scope="module")
def eight_devices():
    # tests/conftest.py sets XLA_FLAGS before JAX is imported; without it this would be 1
    assert jax.device_count() >= 8, "run with XLA_FLAGS=--xla_force_host_platform_device_count=8"


def train_input(params):
    return (Dataset.from_tensor_slices(({"x": X[:480]}, Y[:480])).repeat()
            .shuffle(480, seed=1).batch(params["batch_size"], drop_remainder=True))


def eval_input(params):
    return Dataset.from_tensor_slices(({"x": X[480:]}, Y[480:])).batch(params["batch_size"],
                                                                       pad_remainder=True)


def estimator(model_fn=None, backend="jax", use_tpu=True, shards=8, loop=10, **kw):
    cfg = tpu.RunConfig(model_dir=kw.pop("model_dir", None),
                        tpu_config=tpu.TPUConfig(iterations_per_loop=loop, num_shards=shards))
    kw.setdefault("train_batch_size", 64)
    kw.setdefault("eval_batch_size", 32)
    kw.setdefault("predict_batch_size", 32)
    return tpu.TPUEstimator(model_fn or models.softmax_regression(4, learning_rate=0.3), cfg,
                            use_tpu=use_tpu, backend=backend, **kw)


# -- equivalence with the numpy reference -----------------------------------------------------------
OPTIMIZERS = {"sgd": lambda: tpu.SGD(0.3), "momentum": lambda: tpu.Momentum(0.1, 0.9),
              "adam": lambda: tpu.Adam(0.01)}


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("model", ["softmax", "mlp"])
def test_same_weights_as_numpy_after_50_steps(model, optimizer):
    def make():
        opt = OPTIMIZERS[optimizer]()
        return models.softmax_regression(4, optimizer=opt) if model == "softmax" else \
            models.mlp(16, 4, optimizer=opt)

    on_jax = estimator(make()).train(train_input, steps=50)
    on_numpy = estimator(make(), backend="numpy").train(train_input, steps=50)
    assert on_jax.global_step == on_numpy.global_step == 50
    assert on_jax.get_variable_names() == on_numpy.get_variable_names()
    # numpy computes in float64, the devices in float32; Adam divides by sqrt(v), which turns
    # float32 rounding of the MLP's near-zero gradients into visible steps: a looser bound there
    atol = 5e-3 if (model, optimizer) == ("mlp", "adam") else 1e-5
    for name in on_numpy.get_variable_names():
        np.testing.assert_allclose(on_jax.get_variable_value(name), on_numpy.get_variable_value(name),
                                   atol=atol, err_msg=name)
    for key, value in on_numpy.slots[0].items():  # optimizer slots too, under the same names
        np.testing.assert_allclose(on_jax.slots[0][key], value, atol=max(atol, 1e-5), err_msg=key)


def test_evaluate_and_predict_match_numpy():
    a = estimator(models.mlp(16, 4, learning_rate=0.5)).train(train_input, steps=60)
    b = estimator(models.mlp(16, 4, learning_rate=0.5), backend="numpy").train(train_input, steps=60)
    ra, rb = a.evaluate(eval_input), b.evaluate(eval_input)
    assert ra["examples"] == rb["examples"] == 120  # exact epoch: the padding never counts
    # float32 on the devices vs float64 in numpy: a near-tie may go the other way, one at most
    assert rb["accuracy"] > 0.85 and abs(ra["accuracy"] - rb["accuracy"]) <= 1 / 120
    assert ra["loss"] == pytest.approx(rb["loss"], abs=1e-5)
    inp = lambda p: Dataset.from_tensor_slices({"x": X[:37]}).batch(p["batch_size"])  # noqa: E731
    pa, pb = list(a.predict(inp)), list(b.predict(inp))
    assert len(pa) == len(pb) == 37
    assert sum(int(p["classes"]) != int(q["classes"]) for p, q in zip(pa, pb)) <= 1
    np.testing.assert_allclose(np.stack([p["probabilities"] for p in pa]),
                               np.stack([p["probabilities"] for p in pb]), atol=1e-5)


def test_one_replica_without_tpu_rules():
    a = estimator(use_tpu=False).train(train_input, steps=20)
    b = estimator().train(train_input, steps=20)  # 8 replicas of 8 rows == 1 of 64 rows
    np.testing.assert_allclose(a.get_variable_value("softmax/W"), b.get_variable_value("softmax/W"),
                               atol=1e-5)


# -- replication ---------------------------------------------------------------------------------
def test_replicas_are_devices_and_stay_bit_identical():
    est = estimator(models.mlp(16, 4, optimizer=tpu.Adam(0.01))).train(train_input, steps=20)
    backend = est._jax
    assert backend.devices == jax.devices()[:8]
    for name, value in backend._params.items():  # one copy of every parameter per device
        assert value.shape[0] == 8 and value.sharding.device_set == set(jax.devices()[:8])
        host = np.asarray(value)
        for r in range(8):
            assert np.array_equal(host[r], host[0]), name
            assert np.array_equal(est.store.values[r][name], host[r])


def test_a_diverged_device_copy_is_caught_at_the_loop_end():
    est = estimator().train(train_input, steps=10)
    est.store.values[3]["softmax/W"] = est.store.values[3]["softmax/W"] + 1.0
    est.store.version += 1  # as if a device had computed something else
    with pytest.raises(RuntimeError, match="replica 3 diverged from replica 0 in variable 'softmax/W'"):
        est.train(train_input, steps=10)


def test_sum_reduction_is_psum():
    summed = estimator(models.softmax_regression(4, optimizer=tpu.CrossShardOptimizer(tpu.SGD(0.04), "sum")))
    mean = estimator(models.softmax_regression(4, learning_rate=0.32))
    summed.train(train_input, steps=5)
    mean.train(train_input, steps=5)
    np.testing.assert_allclose(summed.get_variable_value("softmax/W"), mean.get_variable_value("softmax/W"),
                               atol=1e-5)


def test_custom_jax_model_fn_uses_jax_grad():
    def model_fn(features, labels, mode, params):
        w = tpu.get_variable("w", (12, 4), initializer=tpu.initializers.zeros)
        logits = features["x"] @ w
        loss = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], 1))
        opt = tpu.CrossShardOptimizer(tpu.SGD(0.5))
        return tpu.TPUEstimatorSpec(mode, loss=loss, train_op=opt.minimize(loss))

    est = estimator(model_fn).train(train_input, steps=30)
    w = est.get_variable_value("w")
    assert np.abs(w).max() > 0.1
    assert ((X[480:] @ w).argmax(1) == Y[480:]).mean() > 0.8


def test_contract_errors_on_jax():
    def plain(features, labels, mode, params):
        w = tpu.get_variable("w", (12, 4))
        loss = jnp.sum(features["x"] @ w)
        return tpu.TPUEstimatorSpec(mode, loss=loss, train_op=tpu.SGD(0.1).minimize(loss))

    with pytest.raises(ValueError, match="CrossShardOptimizer must be used"):
        estimator(plain).train(train_input, steps=1)

    def hand_made(features, labels, mode, params):
        w = tpu.get_variable("w", (12, 4))
        loss = jnp.sum(features["x"] @ w)
        opt = tpu.CrossShardOptimizer(tpu.SGD(0.1))
        return tpu.TPUEstimatorSpec(mode, loss=loss, train_op=opt.minimize(loss, {"w": w}))

    with pytest.raises(ValueError, match="gradients come from jax.grad"):
        estimator(hand_made).train(train_input, steps=1)
    with pytest.raises(ValueError, match="backend must be 'numpy' or 'jax'"):
        estimator(backend="torch")
    with pytest.raises(ValueError, match="need 16 JAX devices"):
        estimator(shards=16, train_batch_size=64)


# -- TPU rules: the same errors on both backends ---------------------------------------------------
def _error(backend, input_fn, **kw):
    with pytest.raises((StaticShapeError, UnsupportedDtypeError)) as info:
        estimator(backend=backend, **kw).train(input_fn, steps=10)
    return type(info.value), str(info.value)


@pytest.mark.parametrize("case", ["shape", "uint64", "float64", "float16", "strings", "uint16 labels"])
def test_tpu_rules_raise_the_same_errors(case):
    if case == "shape":
        def inp(params):  # 22 rows: the last per-replica batch has 2
            return Dataset.from_tensor_slices(({"x": X[:22]}, Y[:22])).batch(params["batch_size"])
        kw = dict(shards=2, train_batch_size=8)
    else:
        xs, ys = X[:64], Y[:64]
        if case == "strings":
            xs = np.array([b"a"] * 64, dtype=object)
        elif case == "uint16 labels":
            ys = ys.astype(np.uint16)
        else:
            xs = xs.astype(case)

        def inp(params):
            return Dataset.from_tensor_slices(({"x": xs}, ys)).batch(params["batch_size"])
        kw = {}
    numpy_error = _error("numpy", inp, **kw)
    assert _error("jax", inp, **kw) == numpy_error
    assert "TPU" in numpy_error[1]


def test_int64_inputs_accepted_on_both_backends():
    # TPUEstimator infeeds int64 as it is; JAX without jax_enable_x64 holds it as int32
    seen = {}
    base = models.softmax_regression(4, learning_rate=0.3)

    def model_fn(features, labels, mode, params):
        seen.setdefault(mode, set()).add(str(labels.dtype))
        return base(features, labels, mode, params)

    def inp(params):
        return (Dataset.from_tensor_slices(({"x": X[:480]}, Y[:480].astype(np.int64))).repeat()
                .batch(params["batch_size"], drop_remainder=True))

    results = {}
    for backend in ("numpy", "jax"):
        seen.clear()
        est = estimator(model_fn, backend=backend).train(inp, steps=20)
        results[backend] = (est.get_variable_value("softmax/W"), est.evaluate(inp, steps=2)["loss"])
        expected = "int64" if backend == "numpy" or jax.config.jax_enable_x64 else "int32"
        assert seen == {"train": {expected}, "eval": {expected}}
    np.testing.assert_allclose(results["jax"][0], results["numpy"][0], rtol=1e-5, atol=1e-6)
    assert results["jax"][1] == pytest.approx(results["numpy"][1], rel=1e-5)

    def huge(params):  # a value JAX would wrap silently as int32
        ys = Y[:64].astype(np.int64)
        ys[5] = 2**40
        return Dataset.from_tensor_slices(({"x": X[:64]}, ys)).batch(params["batch_size"])

    if not jax.config.jax_enable_x64:
        with pytest.raises(UnsupportedDtypeError, match=r"labels has int64 values outside int32's "
                           r"range \(0\.\.1099511627776\).*jax_enable_x64"):
            estimator().train(huge, steps=1)


def _one_batch(params):
    return {"x": X[:64]}, Y[:64]


@pytest.mark.parametrize("returned,kind,hint", [
    (lambda p: None, "NoneType", "missing `return`"),
    (lambda p: {"x": X[:64]}, "dict", "one batch"),
    (_one_batch, "tuple", "one batch"),
    (lambda p: X[:64], "ndarray", "one batch"),
    (lambda p: "gs://bucket/train-*", "str", "list_files"),
    (lambda p: 3, "int", None),
])
@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_input_fn_must_return_a_dataset_or_batches(backend, returned, kind, hint):
    from tpudata.errors import InputFnError

    with pytest.raises(InputFnError) as info:
        estimator(backend=backend).train(returned, steps=1)
    msg = str(info.value)
    name = returned.__qualname__
    assert msg.startswith(f"input_fn {name!r} returned {kind}; TPUEstimator accepts a tpudata Dataset, "
                          "or an iterable of batches")
    assert info.value.returned == kind and isinstance(info.value, TypeError)
    if hint:
        assert hint in msg
    with pytest.raises(InputFnError, match=f"returned {kind}"):
        estimator(backend=backend).evaluate(returned, steps=1)
    # an iterable of batches is fine
    batches = [({"x": X[i:i + 8]}, Y[i:i + 8]) for i in range(0, 160, 8)]
    est = estimator(backend=backend).train(lambda p: list(batches), steps=2)
    assert est.global_step == 2


def test_jax_needs_static_shapes_even_without_tpu_rules():
    def uneven(params):  # 22 rows in batches of 8: the last has 6
        return Dataset.from_tensor_slices(({"x": X[:22]}, Y[:22])).batch(params["batch_size"])

    estimator(backend="numpy", use_tpu=False, train_batch_size=8).train(uneven, steps=10)
    with pytest.raises(StaticShapeError, match="has shape"):
        estimator(use_tpu=False, train_batch_size=8, loop=4).train(uneven, steps=10)


def test_batch_must_divide_across_replicas_on_both():
    for backend in ("numpy", "jax"):
        with pytest.raises(ValueError, match="divisible by the number of replicas 8"):
            estimator(backend=backend, train_batch_size=100)


# -- one compiled call per loop --------------------------------------------------------------------
def test_one_compilation_per_loop_shape(caplog):
    est = estimator(models.mlp(16, 4), loop=10)
    with jax.log_compiles(), caplog.at_level(logging.WARNING, logger="jax"):
        est.train(train_input, steps=25)  # loops of 10, 10, 5: the 5 runs the same program
        assert est._jax.compilations == 1
        est.train(train_input, steps=33)  # loops of 10 and 3: nothing new
        assert est._jax.compilations == 1
    assert est._jax._traces == 1  # model_fn traced once, not per step or loop
    compiled = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Compiling")
                and "loop" in r.getMessage()]
    assert len(compiled) == 1, compiled  # what XLA itself compiled
    assert est.global_step == 58
    assert [r.steps for r in est.infeed_reports] == [10, 10, 5, 10, 10, 10, 3]


def test_the_first_loop_compiles_the_loop_program_and_nothing_else(caplog):
    """Shapes come from the stacked batch's metadata: no eager XLA op (indexing a device array
    compiles a gather, a broadcast, ...) runs before the first loop; the compile is timed apart."""
    x = RNG.standard_normal((7 * 24, 5)).astype(np.float32)  # shapes no other test compiles
    y = (x[:, 0] > 0).astype(np.int32)

    def inp(params):
        return Dataset.from_tensor_slices(({"x": x}, y)).repeat().batch(params["batch_size"],
                                                                         drop_remainder=True)

    est = estimator(models.softmax_regression(2, learning_rate=0.3), loop=7, train_batch_size=24)
    with jax.log_compiles(), caplog.at_level(logging.WARNING, logger="jax"):
        est.train(inp, steps=14)
    compiled = [r.getMessage().split(" with ")[0] for r in caplog.records
                if r.getMessage().startswith("Compiling")]
    assert compiled == ["Compiling jit(loop)"]
    assert est._jax.compilations == 1
    first, second = est.infeed_reports
    assert first.setup_seconds > 0 and second.setup_seconds == 0  # left out of wall_seconds
    assert est.last_train_report.setup_seconds == first.setup_seconds


def test_loop_is_one_device_call(monkeypatch):
    est = estimator(loop=10)
    calls = []
    original = est._jax._compile

    def counting(key, fn, *args):
        compiled = original(key, fn, *args)

        def call(*a):
            calls.append(a[4]["x"].shape)  # the stacked infeed: [replicas, steps, batch, 12]
            return compiled(*a)
        return call

    monkeypatch.setattr(est._jax, "_compile", counting)
    est.train(train_input, steps=27)
    assert calls == [(8, 10, 8, 12)] * 3  # the last loop (7 steps) is padded to the same shape


# -- the infeed report -----------------------------------------------------------------------------
def test_infeed_report_measures_device_time_and_input_wait():
    def slow(params):
        return train_input(params).map(lambda f, y: (time.sleep(0.004), (f, y))[1])

    est = estimator(shards=2, train_batch_size=8, loop=4)
    est.train(train_input, steps=4)  # compile first: the input would be read ahead meanwhile
    assert est._jax.compilations == 1
    est.train(slow, steps=12)
    report = est.last_train_report
    assert est._jax.compilations == 1
    assert report.steps == 12 and report.records == 96 and report.loops == 3
    assert all(r.device_seconds > 0 for r in est.infeed_reports)
    assert report.input_bound_percent > 50  # 8 ms of input per step, well under 1 ms of device

    def heavy(features, labels, mode, params):  # real device work: 40 chained 256x256 matmuls
        w = tpu.get_variable("w", (12, 256), initializer=tpu.initializers.glorot_uniform)
        m = tpu.get_variable("m", (256, 256), initializer=tpu.initializers.glorot_uniform)
        h = features["x"] @ w
        for _ in range(40):
            h = jnp.tanh(h @ m)
        loss = jnp.mean(h ** 2)
        return tpu.TPUEstimatorSpec(mode, loss=loss,
                                    train_op=tpu.CrossShardOptimizer(tpu.SGD(0.01)).minimize(loss))

    busy = estimator(heavy, shards=2, train_batch_size=512, loop=4).train(train_input, steps=12)
    report = busy.last_train_report
    assert report.device_seconds > 10 * report.wait_seconds
    assert report.input_bound_percent < 10
    assert report.records_per_second > 0 and report.mb_per_second > 0
    assert report.global_step == 12 and np.isfinite(report.loss)


@pytest.mark.parametrize("deployment,hosts", [(tpu.InputPipelineConfig.PER_HOST_V1, 1),
                                              (tpu.InputPipelineConfig.BROADCAST, 1),
                                              (tpu.InputPipelineConfig.PER_HOST_V2, 2)])
def test_input_deployments_give_the_numpy_results(deployment, hosts):
    def inp(params):
        ctx = params["context"]
        return train_input(params).shard(ctx.num_hosts, ctx.current_host)

    cfg = tpu.RunConfig(tpu_config=tpu.TPUConfig(iterations_per_loop=4, num_shards=8, num_hosts=hosts,
                                                 per_host_input_for_training=deployment))
    results = [tpu.TPUEstimator(models.softmax_regression(4, learning_rate=0.3), cfg, train_batch_size=64,
                                backend=b).train(inp, steps=8).get_variable_value("softmax/W")
               for b in ("numpy", "jax")]
    np.testing.assert_allclose(results[1], results[0], atol=1e-5)


def test_input_errors_and_early_end_surface_in_train():
    def bad(params):
        return Dataset.range(100).map(lambda i: (_ for _ in ()).throw(OSError("disk on fire")) if i == 9
                                      else ({"x": X[0]}, Y[0])).batch(params["batch_size"])

    with pytest.raises(OSError, match="disk on fire"):
        estimator(shards=2, train_batch_size=2, loop=3).train(bad, steps=50)

    def short(params):  # 9 steps of input for 8 replicas, loops of 4: 4, 4, then 1
        return Dataset.from_tensor_slices(({"x": X[:9 * 64]}, Y[:9 * 64])).batch(params["batch_size"])

    est = estimator(loop=4).train(short, steps=40)
    assert est.global_step == 9 and [r.steps for r in est.infeed_reports] == [4, 4, 1]
    ref = estimator(loop=4, backend="numpy").train(short, steps=40)
    np.testing.assert_allclose(est.get_variable_value("softmax/W"), ref.get_variable_value("softmax/W"),
                               atol=1e-5)


def test_device_side_check_compares_bits():
    from jax.sharding import Mesh, PartitionSpec

    from tpudata.tpu import jax_backend, jax_step

    mesh = Mesh(np.array(jax.devices()[:8]), (jax_step.AXIS,))
    check = jax.jit(jax_backend._shard_map_fn(
        lambda p: jax_step.diverged(jax.tree_util.tree_map(lambda a: a[0], p)), mesh,
        in_specs=(PartitionSpec(jax_step.AXIS),), out_specs=PartitionSpec()))
    same = np.tile(np.array([1.5, np.nan, -0.0], np.float32), (8, 1))  # NaN == NaN bit for bit
    signed_zero = same.copy()
    signed_zero[5, 2] = 0.0  # equal as floats, different bits
    ulp = same.copy()
    ulp[7, 0] = np.nextafter(np.float32(1.5), np.float32(2))
    out = jax.device_get(check({"same": same, "zero": signed_zero, "ulp": ulp,
                                "ints": np.arange(8, dtype=np.int32)[:, None]}))
    assert out == {"same": False, "zero": True, "ulp": True, "ints": True}
