"""The built-in models (softmax regression, MLP) in jax.numpy, for ``backend="jax"``.

:mod:`tpudata.tpu.models` returns model_fns that run these when TPUEstimator traces them under
the JAX backend: same variable names, initializers and loss, gradients from ``jax.grad``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tpudata.tpu import metrics
from tpudata.tpu.optimizers import Optimizer
from tpudata.tpu.spec import ModeKeys, TPUEstimatorSpec
from tpudata.tpu.variables import get_variable, glorot_uniform, zeros


def softmax_cross_entropy(logits, labels, weights=None):
    """Weighted mean cross-entropy of integer labels; zero-weight (padding) rows never count."""
    n = logits.shape[0]
    labels = jnp.reshape(labels, (-1,)).astype(jnp.int32)
    w = jnp.ones((n,), jnp.float32) if weights is None else jnp.reshape(weights, (-1,)).astype(jnp.float32)
    labels = jnp.where(w > 0, labels, 0)
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=1)
    picked = jnp.take_along_axis(logp, labels[:, None], axis=1)[:, 0]
    total = w.sum()
    return jnp.where(total > 0, -(w * picked).sum() / jnp.maximum(total, 1e-30), 0.0)


def inputs(features, labels, feature_key, label_key):
    x = jnp.asarray(features[feature_key], jnp.float32)
    x = x.reshape(x.shape[0], -1)
    if labels is None and label_key is not None:
        labels = features[label_key]
    weights = features.get("weight") if isinstance(features, dict) else None
    return x, labels, weights


def _metric_fn(labels, classes, w):
    return {"accuracy": metrics.accuracy(labels, classes, w)}


def spec(mode, logits, labels, weights, optimizer: Optimizer) -> TPUEstimatorSpec:
    if mode == ModeKeys.TRAIN:
        loss = softmax_cross_entropy(logits, labels, weights)
        return TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss))
    classes = jnp.argmax(logits, axis=1).astype(jnp.int32)
    if mode == ModeKeys.EVAL:
        loss = softmax_cross_entropy(logits, labels, weights)
        w = jnp.ones(classes.shape, jnp.float32) if weights is None else jnp.asarray(weights, jnp.float32)
        return TPUEstimatorSpec(mode, loss=loss, eval_metrics=(_metric_fn, [labels, classes, w]))
    probs = jax.nn.softmax(logits, axis=1).astype(jnp.float32)
    return TPUEstimatorSpec(mode, predictions={"classes": classes, "probabilities": probs})


def softmax_regression(features, labels, mode, num_classes, feature_key, label_key, optimizer):
    x, labels, weights = inputs(features, labels, feature_key, label_key)
    W = get_variable("softmax/W", (x.shape[1], num_classes), np.float32, glorot_uniform)
    b = get_variable("softmax/b", (num_classes,), np.float32, zeros)
    return spec(mode, x @ W + b, labels, weights, optimizer)


def mlp(features, labels, mode, hidden_units, num_classes, feature_key, label_key, optimizer):
    x, labels, weights = inputs(features, labels, feature_key, label_key)
    W1 = get_variable("mlp/W1", (x.shape[1], hidden_units), np.float32, glorot_uniform)
    b1 = get_variable("mlp/b1", (hidden_units,), np.float32, zeros)
    W2 = get_variable("mlp/W2", (hidden_units, num_classes), np.float32, glorot_uniform)
    b2 = get_variable("mlp/b2", (num_classes,), np.float32, zeros)
    h = jax.nn.relu(x @ W1 + b1)
    return spec(mode, h @ W2 + b2, labels, weights, optimizer)
