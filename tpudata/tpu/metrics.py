"""Streaming evaluation metrics for metric_fn (numpy versions of tf.metrics).

Each returns a :class:`Metric` holding a weighted sum and the sum of weights for one step;
the estimator adds them up over the evaluation and reports ``total / count``. Padding rows (weight
0) therefore never count.

>>> m = accuracy(np.array([1, 2, 3]), np.array([1, 0, 3]), weights=np.array([1.0, 1.0, 0.0]))
>>> m.total, m.count, float(m.result())
(1.0, 2.0, 0.5)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Metric:
    total: float
    count: float

    def __add__(self, other: "Metric") -> "Metric":
        return Metric(self.total + other.total, self.count + other.count)

    def result(self) -> float:
        return self.total / self.count if self.count else float("nan")


def _weights(weights, n: int) -> np.ndarray:
    if weights is None:
        return np.ones(n, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if len(w) != n:
        raise ValueError(f"weights have {len(w)} entries for {n} values")
    return w


def mean(values, weights=None) -> Metric:
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    w = _weights(weights, len(v))
    return Metric(float((v * w).sum()), float(w.sum()))


def accuracy(labels, predictions, weights=None) -> Metric:
    labels = np.asarray(labels).reshape(-1)
    predictions = np.asarray(predictions).reshape(-1)
    return mean((labels == predictions).astype(np.float64), weights)


class Sum(Metric):
    """A total (no averaging): ``result()`` is the sum over the evaluation."""

    def __add__(self, other: "Metric") -> "Sum":
        return Sum(self.total + other.total, self.count + other.count)

    def result(self) -> float:
        return self.total


def count(weights) -> Sum:
    """Number of (real) examples: the sum of the weights."""
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    return Sum(float(w.sum()), float(len(w)))
