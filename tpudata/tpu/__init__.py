"""TPUEstimator's contract (replicated steps, infeed loops, TPU rules, checkpoints with input
state) on a compact numpy "TPU" or, with ``backend="jax"``, on JAX devices (the ``[jax]`` extra,
imported only then).

See docs/tpu.md for complete custom model_fns.
"""

from tpudata.tpu import initializers, metrics, models, summaries
from tpudata.tpu.config import InputPipelineConfig, RunConfig, TPUConfig, TPUContext
from tpudata.tpu.device import make_tpu_ready
from tpudata.tpu.estimator import TPUEstimator
from tpudata.tpu.infeed import LoopReport
from tpudata.tpu.optimizers import SGD, Adam, CrossShardOptimizer, Momentum, Optimizer, TrainOp
from tpudata.tpu.spec import ModeKeys, TPUEstimatorSpec
from tpudata.tpu.variables import get_variable

__all__ = [
    "Adam",
    "CrossShardOptimizer",
    "InputPipelineConfig",
    "LoopReport",
    "ModeKeys",
    "Momentum",
    "Optimizer",
    "RunConfig",
    "SGD",
    "TPUConfig",
    "TPUContext",
    "TPUEstimator",
    "TPUEstimatorSpec",
    "TrainOp",
    "get_variable",
    "initializers",
    "make_tpu_ready",
    "metrics",
    "models",
    "summaries",
]
