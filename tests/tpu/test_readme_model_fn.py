"""The custom model_fns shown in docs/tpu.md, run for real (keep the two in sync)."""

from __future__ import annotations

import numpy as np

from tpudata import Dataset, tpu


# --- docs/tpu.md example starts ---
def model_fn(features, labels, mode, params):
    x = features["x"]                                          # [per-replica batch, 64] float32
    W = tpu.get_variable("W", (x.shape[1], 10), initializer=tpu.initializers.glorot_uniform)
    b = tpu.get_variable("b", (10,), initializer=tpu.initializers.zeros)
    logits = x @ W + b
    if mode == tpu.ModeKeys.PREDICT:
        return tpu.TPUEstimatorSpec(mode, predictions={"classes": logits.argmax(1)})
    weights = features.get("weight")                          # padding rows weigh 0 in eval
    loss, dlogits = tpu.models.softmax_cross_entropy(logits, labels, weights)
    if mode == tpu.ModeKeys.EVAL:
        def metric_fn(labels, logits, weights):               # runs on the host, all replicas
            return {"accuracy": tpu.metrics.accuracy(labels, logits.argmax(1), weights)}
        w = np.ones(len(x)) if weights is None else weights
        return tpu.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits, w]))
    # numpy has no autodiff: return d(loss)/d(variable) for every variable used
    gradients = {"W": x.T @ dlogits, "b": dlogits.sum(axis=0)}
    optimizer = tpu.CrossShardOptimizer(tpu.Momentum(0.1, momentum=0.9))   # all-reduce (mean)
    return tpu.TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, gradients))
# --- docs/tpu.md example ends ---


def test_readme_model_fn_trains_and_evaluates():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4160, 64)).astype(np.float32)
    y = (x @ rng.standard_normal((64, 10))).argmax(1).astype(np.int32)

    def train_input(params):
        return (Dataset.from_tensor_slices(({"x": x[:4000]}, y[:4000])).repeat().shuffle(4000)
                .batch(params["batch_size"], drop_remainder=True))

    def eval_input(params):
        return Dataset.from_tensor_slices(({"x": x[4000:]}, y[4000:])).batch(
            params["batch_size"], pad_remainder=True)

    est = tpu.TPUEstimator(
        model_fn,
        config=tpu.RunConfig(tpu_config=tpu.TPUConfig(iterations_per_loop=10, num_shards=8)),
        train_batch_size=128, eval_batch_size=64, predict_batch_size=64)
    est.train(train_input, steps=200)
    result = est.evaluate(eval_input)
    assert result["examples"] == 160 and result["accuracy"] > 0.8
    preds = list(est.predict(lambda p: Dataset.from_tensor_slices({"x": x[:50]}).batch(p["batch_size"])))
    assert len(preds) == 50


def test_readme_jax_model_fn_trains_and_evaluates():
    pytest = __import__("pytest")
    pytest.importorskip("jax")
    # --- docs/tpu.md JAX example starts ---
    import jax
    import jax.numpy as jnp

    def model_fn(features, labels, mode, params):              # the same contract, in jax.numpy
        x = features["x"]
        W = tpu.get_variable("W", (x.shape[1], 10), initializer=tpu.initializers.glorot_uniform)
        b = tpu.get_variable("b", (10,), initializer=tpu.initializers.zeros)
        logits = x @ W + b
        if mode == tpu.ModeKeys.PREDICT:
            return tpu.TPUEstimatorSpec(mode, predictions={"classes": logits.argmax(1)})
        w = features.get("weight", jnp.ones(x.shape[0]))      # padding rows weigh 0 in eval
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1)[:, 0]
        loss = -(w * logp).sum() / jnp.maximum(w.sum(), 1)
        if mode == tpu.ModeKeys.EVAL:
            def metric_fn(labels, classes, weights):            # on the host, numpy, all replicas
                return {"accuracy": tpu.metrics.accuracy(labels, classes, weights)}
            return tpu.TPUEstimatorSpec(mode, loss=loss,
                                        eval_metrics=(metric_fn, [labels, logits.argmax(1), w]))
        optimizer = tpu.CrossShardOptimizer(tpu.Momentum(0.1, momentum=0.9))  # lax.pmean
        return tpu.TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss))  # jax.grad
    # --- docs/tpu.md JAX example ends ---

    rng = np.random.default_rng(0)
    x = rng.standard_normal((4160, 64)).astype(np.float32)
    y = (x @ rng.standard_normal((64, 10))).argmax(1).astype(np.int32)
    est = tpu.TPUEstimator(
        model_fn,
        config=tpu.RunConfig(tpu_config=tpu.TPUConfig(iterations_per_loop=10, num_shards=8)),
        train_batch_size=128, eval_batch_size=64, predict_batch_size=64, backend="jax")
    est.train(lambda p: Dataset.from_tensor_slices(({"x": x[:4000]}, y[:4000])).repeat().shuffle(4000)
              .batch(p["batch_size"], drop_remainder=True), steps=200)
    result = est.evaluate(lambda p: Dataset.from_tensor_slices(({"x": x[4000:]}, y[4000:])).batch(
        p["batch_size"], pad_remainder=True))
    assert result["examples"] == 160 and result["accuracy"] > 0.8
    preds = list(est.predict(lambda p: Dataset.from_tensor_slices({"x": x[:50]}).batch(p["batch_size"])))
    assert len(preds) == 50


def test_the_doc_shows_these_model_fns():
    import os
    import textwrap

    here = open(__file__).read()
    doc = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "tpu.md")).read()
    for marker in ("example", "JAX example"):
        source = here.split(f"# --- docs/tpu.md {marker} starts ---\n")[1].split("# --- docs/tpu.md")[0]
        source = textwrap.dedent(source).rstrip(" ")
        assert source[source.index("def model_fn"):] in doc, marker  # the doc imports on one line
