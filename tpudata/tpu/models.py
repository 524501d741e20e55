"""Built-in numpy models with analytic gradients: softmax regression and a one-hidden-layer MLP.

Both are ready-made model_fns for TPUEstimator on either backend (under ``backend="jax"`` they run
their :mod:`tpudata.tpu.jax_models` twins, with gradients from ``jax.grad``), and examples of the
numpy backend's gradient convention:
``model_fn`` reads variables with :func:`get_variable`, computes the loss and the gradient of the
loss for each variable it used, and returns ``optimizer.minimize(loss, gradients)``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tpudata.tpu import metrics
from tpudata.tpu.optimizers import SGD, CrossShardOptimizer, Optimizer
from tpudata.tpu.spec import ModeKeys, TPUEstimatorSpec
from tpudata.tpu.variables import current_backend, get_variable, glorot_uniform, zeros


def softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray, weights=None):
    """``(loss, dloss/dlogits)``: weighted mean cross-entropy of integer labels."""
    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels).reshape(-1).astype(np.int64)
    n, k = logits.shape
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1)
    real = labels[w > 0]  # zero-weight (padding) rows may hold anything
    if real.size and (real.min() < 0 or real.max() >= k):
        raise ValueError(f"labels must be in [0, {k}), got range [{real.min()}, {real.max()}]")
    labels = np.where(w > 0, labels, 0)
    total = w.sum()
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    if total == 0:
        return 0.0, np.zeros_like(logits)
    loss = float(-(w * logp[np.arange(n), labels]).sum() / total)
    grad = np.exp(logp)
    grad[np.arange(n), labels] -= 1.0
    grad *= (w / total)[:, None]
    return loss, grad


def _inputs(features, labels, feature_key, label_key):
    x = np.asarray(features[feature_key], dtype=np.float64)
    x = x.reshape(len(x), -1)
    if labels is None and label_key is not None:
        labels = features[label_key]
    weights = features.get("weight") if isinstance(features, dict) else None
    return x, labels, weights


def _spec(mode, loss, grads, logits, labels, weights, optimizer: Optimizer) -> TPUEstimatorSpec:
    if mode == ModeKeys.TRAIN:
        return TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, grads))
    classes = logits.argmax(axis=1).astype(np.int32)
    if mode == ModeKeys.EVAL:
        w = np.ones(len(classes)) if weights is None else np.asarray(weights, dtype=np.float64)

        def metric_fn(labels, classes, w):
            return {"accuracy": metrics.accuracy(labels, classes, w)}

        return TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [np.asarray(labels), classes, w]))
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    return TPUEstimatorSpec(mode, predictions={"classes": classes,
                                               "probabilities": probs.astype(np.float32)})


def _default_optimizer(optimizer: Optimizer | None, learning_rate: float) -> Optimizer:
    opt = optimizer if optimizer is not None else SGD(learning_rate)
    return opt if isinstance(opt, CrossShardOptimizer) else CrossShardOptimizer(opt)


def softmax_regression(num_classes: int, feature_key: str = "x", label_key: str | None = None,
                       learning_rate: float = 0.1, optimizer: Optimizer | None = None) -> Callable:
    """model_fn for ``logits = x @ W + b`` trained with softmax cross-entropy."""
    opt = _default_optimizer(optimizer, learning_rate)

    def model_fn(features, labels, mode, params):
        if current_backend() == "jax":
            from tpudata.tpu import jax_models

            return jax_models.softmax_regression(features, labels, mode, num_classes, feature_key,
                                                 label_key, opt)
        x, labels, weights = _inputs(features, labels, feature_key, label_key)
        W = get_variable("softmax/W", (x.shape[1], num_classes), np.float32, glorot_uniform)
        b = get_variable("softmax/b", (num_classes,), np.float32, zeros)
        logits = x @ W + b
        loss, grads = 0.0, None
        if labels is not None:
            loss, dlogits = softmax_cross_entropy(logits, labels, weights)
            grads = {"softmax/W": x.T @ dlogits, "softmax/b": dlogits.sum(axis=0)}
        return _spec(mode, loss, grads, logits, labels, weights, opt)

    return model_fn


def mlp(hidden_units: int, num_classes: int, feature_key: str = "x", label_key: str | None = None,
        learning_rate: float = 0.1, optimizer: Optimizer | None = None) -> Callable:
    """model_fn for one ReLU hidden layer then softmax (the guides' iris example shape)."""
    opt = _default_optimizer(optimizer, learning_rate)

    def model_fn(features, labels, mode, params):
        if current_backend() == "jax":
            from tpudata.tpu import jax_models

            return jax_models.mlp(features, labels, mode, hidden_units, num_classes, feature_key,
                                  label_key, opt)
        x, labels, weights = _inputs(features, labels, feature_key, label_key)
        W1 = get_variable("mlp/W1", (x.shape[1], hidden_units), np.float32, glorot_uniform)
        b1 = get_variable("mlp/b1", (hidden_units,), np.float32, zeros)
        W2 = get_variable("mlp/W2", (hidden_units, num_classes), np.float32, glorot_uniform)
        b2 = get_variable("mlp/b2", (num_classes,), np.float32, zeros)
        pre = x @ W1 + b1
        h = np.maximum(pre, 0.0)
        logits = h @ W2 + b2
        loss, grads = 0.0, None
        if labels is not None:
            loss, dlogits = softmax_cross_entropy(logits, labels, weights)
            dh = (dlogits @ W2.T) * (pre > 0)
            grads = {"mlp/W2": h.T @ dlogits, "mlp/b2": dlogits.sum(axis=0),
                     "mlp/W1": x.T @ dh, "mlp/b1": dh.sum(axis=0)}
        return _spec(mode, loss, grads, logits, labels, weights, opt)

    return model_fn
