"""TPUEstimator in numpy: replicated steps, CrossShardOptimizer, infeed loops, checkpoints.

The contract is TensorFlow's: ``input_fn(params)`` (``params["batch_size"]`` is the per-replica
batch size on TPU, the global one with ``use_tpu=False``) returns a tpudata Dataset (or any
iterable of numpy batches) of ``features`` or ``(features, labels)``; ``model_fn(features,
labels, mode, params)`` returns a :class:`TPUEstimatorSpec`. See docs/tpu.md for a complete
model_fn.
"""

from __future__ import annotations

import io
import json
import logging
import time
from typing import Callable, Iterator

import numpy as np

from tpudata import storage
from tpudata.dataset.core.nest import flatten, unflatten
from tpudata.tpu import progress, summaries
from tpudata.tpu.config import InputPipelineConfig, RunConfig, TPUContext
from tpudata.tpu.device import Signature
from tpudata.tpu.infeed import Infeed, LoopReport, call_input_fn, nbytes, rows
from tpudata.tpu.metrics import Metric
from tpudata.tpu.optimizers import CrossShardOptimizer, Optimizer, TrainOp
from tpudata.tpu.spec import ModeKeys, TPUEstimatorSpec
from tpudata.tpu.variables import VariableStore

logger = logging.getLogger(__name__)

_INDEX = "checkpoint"


class TPUEstimator:
    """Train, evaluate and predict with a numpy model_fn under TPUEstimator's rules.

    With ``use_tpu=True`` every step runs ``num_shards`` replicas on their own slices, gradients
    are all-reduced by :class:`CrossShardOptimizer`, and inputs must have static shapes and
    TPU dtypes (float32/int32/...). ``use_tpu=False`` runs one replica on the global batch
    without those rules.

    ``backend="numpy"`` (default) runs the replicas in numpy: model_fn returns its gradients.
    ``backend="jax"`` runs them on ``jax.devices()[:num_shards]``: model_fn is written with
    ``jax.numpy``, gradients come from ``jax.grad``, and each loop of ``iterations_per_loop`` steps
    is one compiled call (see :mod:`tpudata.tpu.jax_backend`; needs the ``[jax]`` extra).

    ``verbose=True`` (default): one line per training loop (loss, infeed report), checkpoints
    and evaluation results are logged at INFO on this module's logger and shown even when the
    program configured no logging, as TPUEstimator's are (see :mod:`tpudata.tpu.progress`);
    ``verbose=False`` logs them at DEBUG.
    """

    def __init__(self, model_fn: Callable, config: RunConfig | None = None, params: dict | None = None,
                 use_tpu: bool = True, train_batch_size: int | None = None,
                 eval_batch_size: int | None = None, predict_batch_size: int | None = None,
                 optimizer: Optimizer | None = None, weight_key: str = "weight",
                 backend: str = "numpy", verbose: bool = True):
        if backend not in ("numpy", "jax"):
            raise ValueError(f"backend must be 'numpy' or 'jax', not {backend!r}")
        self.model_fn = model_fn
        self.backend = backend
        self.config = config or RunConfig()
        self.params = dict(params or {})
        self.use_tpu = use_tpu
        self.optimizer = optimizer
        self.weight_key = weight_key
        self.verbose = verbose
        tpu = self.config.tpu_config
        self.num_replicas = tpu.num_shards if use_tpu else 1
        self.batch_sizes = {ModeKeys.TRAIN: train_batch_size, ModeKeys.EVAL: eval_batch_size,
                            ModeKeys.PREDICT: predict_batch_size}
        for mode, size in self.batch_sizes.items():
            if size is not None and use_tpu and size % tpu.num_shards:
                raise ValueError(f"{mode} batch size {size} must be divisible by the number of "
                                 f"replicas {tpu.num_shards}")
        self.store = VariableStore(self.num_replicas, self.config.tf_random_seed)
        self.slots: list[dict] = [{} for _ in range(self.num_replicas)]
        self.global_step = 0
        self._recorder: summaries.Recorder | None = None  # summaries of the running train/evaluate
        self.signature: dict[str, Signature] = {}
        self.infeed_reports: list[LoopReport] = []
        self._restored_from: str | None = None
        self._input_state: list | None = None  # per-host input state after the last step trained
        self._jax = None
        if backend == "jax":
            from tpudata.tpu.jax_backend import JaxBackend

            self._jax = JaxBackend(self)

    def _log(self, msg: str, *args) -> None:
        """A progress line: shown by default, off with verbose=False (tpudata.tpu.progress)."""
        progress.log(logger, self.verbose, msg, *args, stacklevel=3)

    # -- inputs ----------------------------------------------------------------------------------
    def _input(self, input_fn: Callable, mode: str, partial: bool = False,
               states: list | None = None) -> Infeed:
        tpu = self.config.tpu_config
        track = mode == ModeKeys.TRAIN and bool(self.config.model_dir)
        global_batch = self.batch_sizes[mode]
        if global_batch is None:
            raise ValueError(f"give TPUEstimator a {mode}_batch_size".replace("infer", "predict"))
        if not self.use_tpu:
            params = dict(self.params, batch_size=global_batch,
                          context=TPUContext(1, 1, 0, mode))
            return Infeed([call_input_fn(input_fn, params)], 1, False, tpu.iterations_per_loop,
                          partial, states, track)
        deployment = tpu.per_host_input_for_training if mode == ModeKeys.TRAIN else \
            InputPipelineConfig.PER_HOST_V2
        if deployment == InputPipelineConfig.BROADCAST:
            params = dict(self.params, batch_size=global_batch,
                          context=TPUContext(self.num_replicas, tpu.num_hosts, 0, mode, deployment))
            return Infeed([call_input_fn(input_fn, params)], self.num_replicas, True,
                          tpu.iterations_per_loop, False, states, track)
        sources = []
        for host in range(tpu.num_hosts):
            per_host = deployment == InputPipelineConfig.PER_HOST_V1
            size = global_batch // tpu.num_hosts if per_host else global_batch // self.num_replicas
            params = dict(self.params, batch_size=size,
                          context=TPUContext(self.num_replicas, tpu.num_hosts, host, mode,
                                             deployment))
            sources.append(call_input_fn(input_fn, params))
        return Infeed(sources, tpu.replicas_per_host, deployment == InputPipelineConfig.PER_HOST_V1,
                      tpu.iterations_per_loop * tpu.infeed_queue_loops, partial, states, track)

    def _model_params(self, mode: str) -> dict:
        size = self.batch_sizes[mode]
        if size is not None and self.use_tpu:
            size //= self.num_replicas
        return dict(self.params, batch_size=size)

    def _compile_check(self, mode: str, features, labels) -> None:
        if not self.use_tpu and self._jax is None:  # XLA compiles for static shapes on any device
            return
        sig = self.signature.get(mode)
        if sig is None:
            self.signature[mode] = Signature.compile(features, labels)
        else:
            sig.check(features, labels)

    def _run_replicas(self, mode: str, batches: list) -> list[TPUEstimatorSpec]:
        if self._jax is not None:
            return self._jax.run_replicas(mode, batches)
        params = self._model_params(mode)
        specs = []
        for r, (features, labels) in enumerate(batches):
            self._compile_check(mode, features, labels)
            with self.store.replica(r):
                spec = self.model_fn(features, labels, mode, params)
            if not isinstance(spec, TPUEstimatorSpec):
                raise TypeError("model_fn must return a TPUEstimatorSpec")
            specs.append(spec)
        self.store.frozen = True
        if self._recorder is not None:  # train()/evaluate() summaries: loss and host_call
            self._recorder.step(specs)
        return specs

    def _simulate_device(self, started: float) -> None:
        extra = self.config.tpu_config.simulated_step_seconds
        if extra:
            left = started + extra - time.perf_counter()
            if left > 0:
                time.sleep(left)

    # -- training --------------------------------------------------------------------------------
    def _apply(self, specs: list[TPUEstimatorSpec]) -> float:
        grads, optimizer = [], None
        for spec in specs:
            if isinstance(spec.train_op, TrainOp):
                optimizer = spec.train_op.optimizer
                grads.append(spec.train_op.gradients)
            elif spec.gradients is not None:
                optimizer = self.optimizer
                grads.append(spec.gradients)
            else:
                raise ValueError("in TRAIN mode model_fn must return train_op=optimizer.minimize("
                                 "loss, gradients) or gradients= (with TPUEstimator(optimizer=...))")
        if optimizer is None:
            raise ValueError("no optimizer: use train_op=optimizer.minimize(...) or pass "
                             "TPUEstimator(optimizer=...)")
        if isinstance(optimizer, CrossShardOptimizer):
            reduced = optimizer.all_reduce(grads)
            per_replica = [reduced] * len(specs)
        elif len(specs) == 1:
            per_replica = grads
        else:
            raise ValueError("CrossShardOptimizer must be used for model training on TPUs: wrap "
                             "the optimizer (tpudata.tpu.CrossShardOptimizer(SGD(...)))")
        for r, g in enumerate(per_replica):
            optimizer.apply(self.store.values[r], g, self.slots[r], self.global_step)
        return float(np.mean([float(s.loss) for s in specs]))

    def _numpy_loop(self, infeed: Infeed, n: int) -> tuple[LoopReport, bool]:
        """Up to ``n`` steps on the numpy replicas, one step at a time; ``(report, input ended)``."""
        report = LoopReport()
        loop_start = time.perf_counter()
        losses = []
        ended = False
        for _ in range(n):
            batches, waited = infeed.get_step()
            report.wait_seconds += waited
            if batches is None:
                ended = True
                break
            t0 = time.perf_counter()
            losses.append(self._apply(self._run_replicas(ModeKeys.TRAIN, batches)))
            self._simulate_device(t0)
            report.device_seconds += time.perf_counter() - t0
            report.steps += 1
            report.records += sum(rows(f) for f, _ in batches)
            report.bytes += sum(nbytes(f) + nbytes(lab) for f, lab in batches)
            self.global_step += 1
            self._input_state = infeed.consumed_state
        report.wall_seconds = time.perf_counter() - loop_start
        report.global_step = self.global_step
        report.loss = float(np.mean(losses)) if losses else float("nan")
        return report, ended

    def train(self, input_fn: Callable, steps: int | None = None, max_steps: int | None = None,
              hooks=None, restore_input: bool = True) -> "TPUEstimator":
        """Train for ``steps`` more steps or up to global step ``max_steps`` (or until the input
        ends). Resumes from the latest checkpoint in ``model_dir``, variables and input: when the
        checkpoint holds the input pipeline's state (a tpudata Dataset's, saved with every
        checkpoint), the input continues after the last batch trained on (``restore_input=False``
        starts it afresh). Checkpoints are written only at loop boundaries, every
        ``save_checkpoints_steps`` and at the end."""
        if steps is None and max_steps is None:
            raise ValueError("train() needs steps or max_steps")
        if steps is not None and steps < 0:
            raise ValueError("steps must be >= 0")
        self._restore_latest()
        target = self.global_step + steps if steps is not None else max_steps
        if self.global_step >= target:
            self._log("already at global step %d >= %d: nothing to train", self.global_step, target)
            return self
        every = self.config.save_checkpoints_steps
        loop_size = self.config.tpu_config.iterations_per_loop
        self.signature.pop(ModeKeys.TRAIN, None)  # every call compiles a new program
        if not restore_input:
            self._input_state = None
        if self._input_state is not None:
            self._log("input resumes where step %d left it", self.global_step)
        infeed = self._input(input_fn, ModeKeys.TRAIN, states=self._input_state)
        loops = None  # the JAX backend's loop stacker
        total = LoopReport(loops=0)
        recorder = self._recorder = summaries.for_training(self.config.model_dir,
                                                           self.config.save_summary_steps)
        try:
            if self._jax is not None:
                loops = self._jax.train_loops(infeed, target - self.global_step)
            ended = False
            while self.global_step < target and not ended:
                start_step = self.global_step
                n = min(loop_size, target - self.global_step)
                if loops is not None:
                    report, ended = loops.run_loop(n)
                else:
                    report, ended = self._numpy_loop(infeed, n)
                # back on the host: replicas must agree, then log and checkpoint
                self.store.check_identical()
                if report.steps:
                    total = total + report
                    self.infeed_reports.append(report)
                    compiled = (f"; compiled in {report.setup_seconds:.2f} s before the loop "
                                "(not counted)" if report.setup_seconds else "")
                    rate = report.steps / report.wall_seconds if report.wall_seconds else 0.0
                    self._log("step %d: loss %.5f, %.4g global_step/sec; infeed %s%s",
                              self.global_step, report.loss, rate, report.summary(), compiled)
                if every and self.global_step // every > start_step // every:
                    self.save_checkpoint()
                recorder.on_loop(self.global_step, report, start_step)
                if ended:
                    logger.warning("input ended at global step %d, before %d", self.global_step, target)
        finally:
            if loops is not None:
                loops.close()
            infeed.close()
            self._recorder = None
            recorder.close()
        if self.config.model_dir:
            self.save_checkpoint()
        self.last_train_report = total
        self._log("training done at step %d: %s", self.global_step, total.summary())
        return self

    # -- evaluation and prediction ---------------------------------------------------------------
    def _real_rows(self, features) -> float:
        if isinstance(features, dict) and self.weight_key in features:
            return float(np.asarray(features[self.weight_key], dtype=np.float64).sum())
        return float(rows(features))

    def evaluate(self, input_fn: Callable, steps: int | None = None, name: str | None = None) -> dict:
        """Metrics over ``steps`` steps, or the whole input when None (an exact epoch when the
        input pads its last batch with a zero-weight ``weight_key`` mask)."""
        self._restore_latest()
        self.signature.pop(ModeKeys.EVAL, None)
        infeed = self._input(input_fn, ModeKeys.EVAL, partial=True)
        recorder = self._recorder = summaries.for_eval(self.config.model_dir, name)
        metrics: dict[str, Metric] = {}
        loss_total, examples, done = 0.0, 0.0, 0
        try:
            while steps is None or done < steps:
                batches, _ = infeed.get_step()
                if batches is None:
                    break
                if len(batches) < self.num_replicas:
                    batches = self._pad_missing_replicas(batches)
                specs = self._run_replicas(ModeKeys.EVAL, batches)
                real = [self._real_rows(f) for f, _ in batches]
                examples += sum(real)
                loss_total += sum(float(s.loss) * w for s, w in zip(specs, real) if w)
                if specs[0].eval_metrics is not None:
                    metric_fn = specs[0].eval_metrics[0]
                    joined = _concat([s.eval_metrics[1] for s in specs])
                    if isinstance(joined, dict):
                        out = metric_fn(**joined)
                    else:
                        out = metric_fn(*(joined if isinstance(joined, list) else [joined]))
                    for key, value in out.items():
                        metrics[key] = metrics[key] + value if key in metrics else value
                done += 1
        finally:
            infeed.close()
            self._recorder = None
        result = {k: m.result() for k, m in metrics.items()}
        result.update(loss=loss_total / examples if examples else float("nan"),
                      examples=int(round(examples)), global_step=self.global_step, steps=done)
        self._log("evaluation%s at step %d: %s", f" {name}" if name else "", self.global_step, result)
        recorder.on_eval(result, self.global_step)
        return result

    def _pad_missing_replicas(self, batches: list) -> list:
        """The input ended mid-step: give the idle replicas all-padding (zero-weight) batches."""
        features, labels = batches[0]
        if not (isinstance(features, dict) and self.weight_key in features):
            raise ValueError(
                f"the evaluation input ended with {len(batches)} of {self.num_replicas} replica "
                f"batches in the last step and its features have no {self.weight_key!r} mask to pad "
                "with; use batch(..., pad_remainder=True, num_batches=...) so every step is full")
        filler = (_zeros_like(features, rows(features)), _zeros_like(labels, rows(features)))
        return batches + [filler] * (self.num_replicas - len(batches))

    def predict(self, input_fn: Callable, yield_single_examples: bool = True) -> Iterator[dict]:
        """Predictions for every real input row: partial final batches are padded to the compiled
        shape and the padding (and zero-weight rows) sliced off again."""
        self._restore_latest()
        self.signature.pop(ModeKeys.PREDICT, None)
        infeed = self._input(input_fn, ModeKeys.PREDICT, partial=True)
        try:
            while True:
                batches, _ = infeed.get_step()
                if batches is None:
                    return
                padded, keep = self._pad_for_predict(batches)
                specs = self._run_replicas(ModeKeys.PREDICT, padded)
                for spec, rows_kept in zip(specs, keep):
                    if spec.predictions is None:
                        raise ValueError("in PREDICT mode model_fn must return predictions=")
                    preds = {k: np.asarray(v)[rows_kept] for k, v in spec.predictions.items()}
                    if yield_single_examples:
                        for i in range(len(rows_kept)):
                            yield {k: v[i] for k, v in preds.items()}
                    elif len(rows_kept):
                        yield preds
        finally:
            infeed.close()

    def _pad_for_predict(self, batches: list):
        per_replica = self.batch_sizes[ModeKeys.PREDICT] // self.num_replicas
        template = batches[0]
        padded, keep = [], []
        for r in range(self.num_replicas):
            features, labels = batches[r] if r < len(batches) else (
                _zeros_like(template[0], 0), _zeros_like(template[1], 0))
            n = rows(features)
            mask = np.ones(n, dtype=bool)
            if isinstance(features, dict) and self.weight_key in features:
                mask &= np.asarray(features[self.weight_key]) > 0
            if n < per_replica and self.use_tpu:
                features = _pad_rows(features, per_replica)
                labels = _pad_rows(labels, per_replica)
            padded.append((features, labels))
            keep.append(np.flatnonzero(mask))
        return padded, keep

    # -- checkpoints -----------------------------------------------------------------------------
    def _ckpt_url(self, name: str) -> str:
        return storage.join(self.config.model_dir, name)

    def latest_checkpoint(self) -> str | None:
        if not self.config.model_dir or not storage.exists(self._ckpt_url(_INDEX)):
            return None
        return json.loads(storage.read_bytes(self._ckpt_url(_INDEX)))["latest"]

    def save_checkpoint(self) -> str | None:
        if not self.config.model_dir:
            return None
        storage.makedirs(self.config.model_dir)
        name = f"model.ckpt-{self.global_step:08d}.npz"
        arrays = {f"var/{k}": v for k, v in self.store.values[0].items()}
        arrays.update({f"slot/{k}": v for k, v in self.slots[0].items()})
        arrays["global_step"] = np.array(self.global_step, dtype=np.int64)
        if self._input_state is not None:  # where the input continues (per host)
            arrays["input_state"] = np.array(json.dumps(self._input_state))
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        with storage.open_atomic(self._ckpt_url(name)) as f:
            f.write(buf.getvalue())
        index = {"latest": name, "all": []}
        if storage.exists(self._ckpt_url(_INDEX)):
            index = json.loads(storage.read_bytes(self._ckpt_url(_INDEX)))
        kept = [n for n in index.get("all", []) if n != name] + [name]
        for old in kept[: -self.config.keep_checkpoint_max]:
            storage.remove(self._ckpt_url(old))
        index = {"latest": name, "all": kept[-self.config.keep_checkpoint_max:]}
        with storage.open_atomic(self._ckpt_url(_INDEX)) as f:
            f.write(json.dumps(index).encode())
        self._restored_from = name
        self._log("saved checkpoint %s", self._ckpt_url(name))
        return self._ckpt_url(name)

    def _restore_latest(self) -> None:
        name = self.latest_checkpoint()
        if name is None or name == self._restored_from:
            return
        with np.load(io.BytesIO(storage.read_bytes(self._ckpt_url(name)))) as data:
            variables = {k[4:]: data[k] for k in data.files if k.startswith("var/")}
            slots = {k[5:]: data[k] for k in data.files if k.startswith("slot/")}
            self.global_step = int(data["global_step"])
            self._input_state = (json.loads(str(data["input_state"])) if "input_state" in data.files
                                 else None)
        self.store.load(variables)
        self.slots = [{k: v.copy() for k, v in slots.items()} for _ in range(self.num_replicas)]
        self._restored_from = name
        self._log("restored %s (global step %d)", self._ckpt_url(name), self.global_step)

    @property
    def input_state(self) -> list | None:
        """Per-host state of the training input after the last step trained (what checkpoints
        save); None when the input is not a tpudata Dataset or nothing was trained."""
        return self._input_state

    def get_variable_value(self, name: str) -> np.ndarray:
        return self.store.values[0][name].copy()

    def get_variable_names(self) -> list[str]:
        return self.store.names()


def _concat(per_replica: list):
    """Join the replicas' metric tensors (a list, tuple or dict) along axis 0, on the host."""
    first = per_replica[0]
    if isinstance(first, dict):
        return {k: np.concatenate([np.asarray(t[k]) for t in per_replica]) for k in first}
    if isinstance(first, (list, tuple)):
        return [np.concatenate([np.asarray(t[i]) for t in per_replica]) for i in range(len(first))]
    return np.concatenate([np.asarray(t) for t in per_replica])


def _zeros_like(structure, n: int):
    if structure is None:
        return None
    tree, leaves = flatten(structure)
    return unflatten(tree, [np.zeros((n,) + np.asarray(v).shape[1:], np.asarray(v).dtype)
                            for v in leaves])


def _pad_rows(structure, n: int):
    if structure is None:
        return None
    tree, leaves = flatten(structure)
    out = []
    for v in leaves:
        arr = np.asarray(v)
        out.append(np.concatenate([arr, np.zeros((n - len(arr),) + arr.shape[1:], arr.dtype)]))
    return unflatten(tree, out)
