"""What model_fn returns (TPUEstimatorSpec) and the mode keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


class ModeKeys:
    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


@dataclass
class TPUEstimatorSpec:
    """model_fn's result.

    - ``loss``: scalar loss of this replica's batch (float).
    - ``train_op``: ``optimizer.minimize(loss, gradients)`` (TRAIN), or pass ``gradients``
      (``{variable name: gradient}``) and give TPUEstimator an ``optimizer``.
    - ``eval_metrics``: ``(metric_fn, tensors)``; ``metric_fn(*tensors)`` runs on the host with the
      replicas' tensors concatenated and returns ``{name: Metric}`` (see :mod:`tpudata.tpu.metrics`).
    - ``predictions``: dict of per-example arrays (PREDICT).
    - ``host_call``: ``(fn, tensors)`` (TRAIN, EVAL): every step the replicas' tensors (a list,
      tuple or dict of arrays with a batch dimension) are concatenated on that dimension; once
      per loop ``fn`` runs on the host over the steps stacked on a new axis 0 and may write
      summaries (see :mod:`tpudata.tpu.summaries`).
    """

    mode: str
    loss: Any = None
    train_op: Any = None
    gradients: dict | None = None
    eval_metrics: tuple[Callable, Any] | None = None
    predictions: dict | None = None
    host_call: tuple[Callable, Any] | None = None
