"""RunConfig / TPUConfig and the context input_fn receives, as in TPUEstimator.

>>> cfg = RunConfig(model_dir="memory://m", tpu_config=TPUConfig(iterations_per_loop=10, num_shards=8))
>>> cfg.tpu_config.replicas_per_host
8
"""

from __future__ import annotations

from dataclasses import dataclass, field


class InputPipelineConfig:
    """How input_fn is deployed (tf.estimator.tpu.InputPipelineConfig)."""

    PER_SHARD_V1 = 1
    PER_HOST_V1 = 2  # input_fn once per host with the host's batch, split across its replicas
    PER_HOST_V2 = 3  # input_fn once per host with the per-replica batch, one batch per replica
    BROADCAST = 4  # input_fn once with the global batch, split across all replicas


@dataclass(frozen=True)
class TPUConfig:
    """``iterations_per_loop`` steps run on the "device" before the host regains control.

    ``simulated_step_seconds`` adds that much device time to every step (to model a real
    accelerator's step time in infeed benchmarks); 0 runs the numpy model only.
    """

    iterations_per_loop: int = 2
    num_shards: int = 8
    per_host_input_for_training: int = InputPipelineConfig.PER_HOST_V2
    num_hosts: int = 1
    simulated_step_seconds: float = 0.0
    infeed_queue_loops: int = 2

    def __post_init__(self):
        for name in ("iterations_per_loop", "num_shards", "num_hosts", "infeed_queue_loops"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"TPUConfig.{name} must be >= 1, not {getattr(self, name)}")
        if self.num_shards % self.num_hosts:
            raise ValueError(f"num_shards={self.num_shards} must be a multiple of "
                             f"num_hosts={self.num_hosts}")
        if self.per_host_input_for_training not in (InputPipelineConfig.PER_HOST_V1,
                                                    InputPipelineConfig.PER_HOST_V2,
                                                    InputPipelineConfig.BROADCAST):
            raise ValueError("per_host_input_for_training must be PER_HOST_V1, PER_HOST_V2 or "
                             "BROADCAST")
        if self.simulated_step_seconds < 0:
            raise ValueError("simulated_step_seconds must be >= 0")

    @property
    def replicas_per_host(self) -> int:
        return self.num_shards // self.num_hosts


@dataclass(frozen=True)
class RunConfig:
    """Where checkpoints and TensorBoard summaries go (any fsspec URL), how often, the TPU layout.

    ``save_summary_steps``: the automatic scalars (loss, global_step/sec, examples/sec, infeed/*)
    are written at the first loop boundary at or after every multiple; None or 0: never.
    """

    model_dir: str | None = None
    save_checkpoints_steps: int | None = None
    save_summary_steps: int | None = 100
    keep_checkpoint_max: int = 5
    tpu_config: TPUConfig = field(default_factory=TPUConfig)
    tf_random_seed: int = 0
    log_step_count_steps: int | None = None

    def __post_init__(self):
        if self.save_checkpoints_steps is not None and self.save_checkpoints_steps < 1:
            raise ValueError("save_checkpoints_steps must be >= 1")
        if self.save_summary_steps is not None and self.save_summary_steps < 0:
            raise ValueError("save_summary_steps must be >= 0 (0 or None: no automatic summaries)")
        if self.keep_checkpoint_max < 1:
            raise ValueError("keep_checkpoint_max must be >= 1")


CPU_DEVICE = "/replica:0/task:0/device:CPU:0"  # TF's host device when no TPU job is named


def host_device(host: int) -> str:
    """Host ``host``'s input device as TPUEstimator names it on a Cloud TPU (job ``tpu_worker``)."""
    return f"/job:tpu_worker/task:{host}/device:CPU:0"


@dataclass(frozen=True)
class TPUContext:
    """``params["context"]`` for input_fn: the replica layout and which host is asking.

    ``deployment`` is the :class:`InputPipelineConfig` this input_fn call serves (None: one
    replica, ``use_tpu=False``).

    >>> ctx = TPUContext(8, 2, 1, "train", InputPipelineConfig.PER_HOST_V2)
    >>> ctx.current_input_fn_deployment()
    ('/job:tpu_worker/task:1/device:CPU:0', 1, 2, 4)
    """

    num_replicas: int
    num_hosts: int
    current_host: int
    mode: str
    deployment: int | None = None

    @property
    def replicas_per_host(self) -> int:
        return self.num_replicas // self.num_hosts

    def current_input_fn_deployment(self) -> tuple[str, int, int, int]:
        """``(input device, invocation index, total invocations, replicas fed by this call)``, as
        tf.estimator.tpu.TPUContext's: PER_HOST_V1/V2 call input_fn once per host (index = host,
        ``num_hosts`` calls, ``replicas_per_host`` replicas each); BROADCAST once on host 0 for
        all ``num_replicas``; ``use_tpu=False`` once on the CPU for its one replica."""
        if self.deployment is None:
            return (CPU_DEVICE, 0, 1, 1)
        if self.deployment == InputPipelineConfig.BROADCAST:
            return (host_device(0), 0, 1, self.num_replicas)
        return (host_device(self.current_host), self.current_host, self.num_hosts,
                self.replicas_per_host)
