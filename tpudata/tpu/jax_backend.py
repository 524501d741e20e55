"""TPUEstimator on JAX devices: ``TPUEstimator(..., backend="jax")``.

- The ``num_shards`` replicas are ``jax.devices()[:num_shards]`` (8 CPU devices with
  ``XLA_FLAGS=--xla_force_host_platform_device_count=8``, or a GPU/TPU host's chips); every
  parameter is held once per device (a ``[num_replicas, ...]`` array sharded over them), and each
  step runs under ``shard_map`` with CrossShardOptimizer as ``lax.pmean``/``psum`` of gradients.
- Training stacks ``iterations_per_loop`` steps of per-replica batches on the host (a thread
  prepares the next loop's stack while the device runs the current one) and runs them as one
  compiled call, a device-side loop whose trip count is a runtime value as in TPUEstimator: a
  shorter final loop (padded to the same shape) runs the same program. Programs are compiled
  ahead of time per input shape and counted (:attr:`JaxBackend.compilations`); nothing else is
  compiled (shapes come from the stacked arrays' metadata, never by indexing device arrays).
  Device time is measured to ``block_until_ready``; compiling and creating the variables before
  the first loop are in neither it nor the loop's wall time (``LoopReport.setup_seconds``).
- ``host_call`` tensors of every step come out of the same compiled loop (``[replicas, L,
  batch, ...]``); the host keeps the loop's real steps, concatenates the replicas on the batch
  dimension and hands them to the estimator's summaries recorder, which runs ``fn`` once per loop
  as on the numpy backend. Evaluation steps pass their specs (host_call included) to it too.
- After every loop the devices compare their parameter copies bit for bit (``pmax``/``pmin`` of
  the bits); one copy comes back to the host for checkpoints and ``get_variable_value`` (all of
  them when the copies differ, so that the estimator's check names the replica and variable).
"""

from __future__ import annotations

import logging
import queue
import threading
import time

import numpy as np

try:
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError("TPUEstimator(backend='jax') needs JAX: pip install 'tpudata[jax]'") from exc

from tpudata.tpu import jax_step
from tpudata.tpu.device import int64_as_int32
from tpudata.tpu.infeed import Infeed, LoopReport, nbytes, rows
from tpudata.tpu.spec import ModeKeys, TPUEstimatorSpec

logger = logging.getLogger(__name__)

_shard_map = getattr(jax, "shard_map", None)
if _shard_map is None:  # pragma: no cover - JAX < 0.6
    from jax.experimental.shard_map import shard_map as _shard_map


def _shard_map_fn(fn, mesh, in_specs, out_specs):
    try:
        return _shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    except TypeError:  # pragma: no cover - older spelling
        return _shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_rep=False)


def _struct(a) -> "jax.ShapeDtypeStruct":
    """A leaf's shape and dtype, read from its metadata (never from a device array's values)."""
    if isinstance(a, jax.ShapeDtypeStruct):
        return a
    dtype = a.dtype if hasattr(a, "dtype") else np.asarray(a).dtype
    return jax.ShapeDtypeStruct(np.shape(a), dtype)


def _signature(tree) -> tuple:
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return (treedef, tuple((np.shape(x), np.asarray(x).dtype if not hasattr(x, "dtype") else x.dtype)
                           for x in leaves))


def stack_replicas(steps: list) -> tuple:
    """``steps[s][r] = (features, labels)`` of replica r at step s -> one ``(features, labels)``
    whose leaves are ``[replicas, len(steps), ...]`` (one copy of the data)."""
    treedef = jax.tree_util.tree_structure(steps[0][0])
    flat = [[jax.tree_util.tree_leaves(batch) for batch in step] for step in steps]
    out = []
    for i, first in enumerate(flat[0][0]):
        first = np.asarray(first)
        buf = np.empty((len(steps[0]), len(steps)) + first.shape, first.dtype)
        for s, step in enumerate(flat):
            for r, leaves in enumerate(step):
                buf[r, s] = leaves[i]
        out.append(buf)
    return jax.tree_util.tree_unflatten(treedef, out)


class JaxBackend:
    """The device side of a :class:`~tpudata.tpu.TPUEstimator` built with ``backend="jax"``."""

    def __init__(self, estimator):
        self.est = estimator
        n = estimator.num_replicas
        devices = jax.devices()
        if len(devices) < n:
            raise ValueError(
                f"num_shards={n} replicas need {n} JAX devices, but only {len(devices)} "
                f"({devices[0].platform}) are visible; on a CPU set XLA_FLAGS="
                f"--xla_force_host_platform_device_count={n} before JAX is imported, or lower "
                "TPUConfig.num_shards")
        self.devices = devices[:n]
        if estimator.config.tpu_config.simulated_step_seconds:
            logger.warning("TPUConfig.simulated_step_seconds is ignored by backend='jax': device "
                           "time is measured")
        self.mesh = Mesh(np.array(self.devices), (jax_step.AXIS,))
        self.sharded = NamedSharding(self.mesh, PartitionSpec(jax_step.AXIS))
        self.replicated = NamedSharding(self.mesh, PartitionSpec())
        self.compilations = 0  # programs compiled (train loops and eval/predict steps)
        self.compile_seconds = 0.0
        self._compiled: dict = {}
        self._captured: dict = {}
        self._optimizer = None
        self._params = None  # {name: [R, ...]} on the devices
        self._slots = None
        self._version = -1  # the store version the device copies were made from
        self._traces = 0
        self._step = None  # (global step, the same on the devices)
        self._counts: dict = {}  # loop lengths on the devices
        self.last_setup_seconds = 0.0  # the last train loop's compilation and variable creation

    # -- parameters --------------------------------------------------------------------------------
    def _on_trace(self) -> None:
        self._traces += 1

    def _init_variables(self, mode: str, features, labels) -> None:
        """Create model_fn's variables (numpy initial values) by tracing it once abstractly.

        ``features`` and ``labels`` are one replica's batch, or only its shapes and dtypes
        (``jax.ShapeDtypeStruct`` leaves): nothing is computed on them."""
        store = self.est.store
        structs = jax.tree_util.tree_map(_struct, (features, labels))
        params = self.est._model_params(mode)

        def init(f, l):  # noqa: E741
            spec = jax_step.call_model(self.est.model_fn, jax_step.TracedVariables(store, None), f, l,
                                       mode, params)
            if mode == ModeKeys.TRAIN:
                self._optimizer = jax_step.train_optimizer(spec, self.est.optimizer,
                                                           self.est.num_replicas)
            return 0

        jax.eval_shape(init, *structs)
        store.frozen = True

    def _device_params(self):
        store = self.est.store
        if self._params is None or self._version != store.version:
            names = store.names()
            copies = range(len(self.devices))
            self._params = {k: jax.device_put(np.stack([store.values[r][k] for r in copies]),
                                              self.sharded) for k in names}
            self._slots = None
            self._version = store.version
        return self._params

    def _device_slots(self):
        if self._slots is None:
            values = self.est.store.values[0]
            saved = self.est.slots[0]
            slots = jax_step.init_slots(self._optimizer, values, saved)
            self._slots = {k: jax.device_put(np.stack([v] * len(self.devices)), self.sharded)
                           for k, v in slots.items()}
        return self._slots

    def _to_host(self, params, slots, every_copy: bool = True) -> None:
        """The device copies back into the estimator's per-replica store (checked, saved); with
        ``every_copy=False`` only the first device's, shared by every replica entry (the devices
        found them bit-identical)."""
        store = self.est.store
        if every_copy:
            host = jax.device_get((params, slots))
            for r in range(len(self.devices)):
                store.values[r] = {k: np.array(v[r]) for k, v in host[0].items()}
                self.est.slots[r] = {k: np.array(v[r]) for k, v in host[1].items()}
        else:
            first = jax.tree_util.tree_map(lambda a: a.addressable_shards[0].data, (params, slots))
            host = jax.device_get(first)
            values = {k: np.asarray(v)[0] for k, v in host[0].items()}
            slot_values = {k: np.asarray(v)[0] for k, v in host[1].items()}
            for r in range(len(self.devices)):
                store.values[r] = dict(values)
                self.est.slots[r] = dict(slot_values)
        store.version += 1
        self._version = store.version
        self._params, self._slots = params, slots

    def _compile(self, key, fn, *args):
        compiled = self._compiled.get(key)
        if compiled is None:
            t0 = time.perf_counter()
            compiled = jax.jit(fn).lower(*args).compile()
            self.compile_seconds += time.perf_counter() - t0
            self.compilations += 1
            self._compiled[key] = compiled
            logger.info("compiled the %s program (%d so far) in %.2f s", key[0], self.compilations,
                        time.perf_counter() - t0)
        return compiled

    @staticmethod
    def device_dtypes(batches: list) -> list:
        """int64 inputs (a TPU infeed type, passed through by TPUEstimator) as JAX holds them:
        int64 with ``jax_enable_x64``, else int32 (values outside its range are refused)."""
        if jax.config.jax_enable_x64:
            return batches
        return [int64_as_int32(features, labels) for features, labels in batches]

    # -- eval / predict: one step at a time ----------------------------------------------------------
    def run_replicas(self, mode: str, batches: list) -> list[TPUEstimatorSpec]:
        """One EVAL/PREDICT step on the devices; per-replica specs with numpy values."""
        for features, labels in batches:
            self.est._compile_check(mode, features, labels)
        batches = self.device_dtypes(batches)
        features, labels = batches[0]
        if not self.est.store.values[0]:
            self._init_variables(mode, features, labels)
        stacked = jax.tree_util.tree_map(lambda a: a[:, 0], stack_replicas([batches]))
        sig = _signature(stacked)
        args = (self._device_params(), jax.device_put(stacked[0], self.sharded),
                jax.device_put(stacked[1], self.sharded))
        captured = self._captured.setdefault(mode, {})
        fn = jax_step.make_forward(self.est.model_fn, self.est.store, self.est._model_params(mode),
                                   mode, captured, self._on_trace)
        sm = _shard_map_fn(fn, self.mesh, in_specs=(PartitionSpec(jax_step.AXIS),) * 3,
                           out_specs=PartitionSpec(jax_step.AXIS))
        out = jax.device_get(self._compile((mode, sig), sm, *args)(*args))
        specs = []
        for r in range(len(batches)):
            mine = jax.tree_util.tree_map(lambda a: a[r], out)
            if mode == ModeKeys.EVAL:
                metrics = host_call = None
                if "metrics" in mine:
                    metrics = (captured["metric_fn"], mine["metrics"])
                if "host_call" in mine:
                    host_call = (captured["host_fn"], mine["host_call"])
                specs.append(TPUEstimatorSpec(mode, loss=float(mine["loss"]), eval_metrics=metrics,
                                              host_call=host_call))
            else:
                specs.append(TPUEstimatorSpec(mode, predictions=mine["predictions"]))
        if self.est._recorder is not None:  # evaluate()'s summaries: host_call, as on numpy
            self.est._recorder.step(specs)
        return specs

    # -- training: one compiled call per loop --------------------------------------------------------
    def train_loops(self, infeed: Infeed, steps: int) -> "TrainLoops":
        return TrainLoops(self, infeed, steps)

    def run_train_loop(self, features, labels, n: int, state, records: int, nbytes_: int,
                       waited: float) -> LoopReport:
        est = self.est
        initialised = 0.0
        if not est.store.frozen or self._optimizer is None:
            setup = time.perf_counter()
            # one replica's batch as shapes and dtypes, from the stacked arrays' metadata:
            # indexing the device arrays (a[0, 0]) would run (and compile) eager XLA ops
            one = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape[2:], a.dtype),
                                         (features, labels))
            self._init_variables(ModeKeys.TRAIN, *one)
            initialised = time.perf_counter() - setup
        params, slots = self._device_params(), self._device_slots()
        if self._step is None or self._step[0] != est.global_step:
            self._step = (est.global_step,
                          jax.device_put(np.asarray(est.global_step, np.int32), self.replicated))
        step = self._step[1]
        if n not in self._counts:
            self._counts[n] = jax.device_put(np.asarray(n, np.int32), self.replicated)
        args = (params, slots, step, self._counts[n], features, labels)
        captured = self._captured.setdefault(ModeKeys.TRAIN, {})
        fn = jax_step.make_train_loop(est.model_fn, est.store, est._model_params(ModeKeys.TRAIN),
                                      self._optimizer, self._on_trace, captured)
        spec = PartitionSpec(jax_step.AXIS)
        sm = _shard_map_fn(fn, self.mesh, in_specs=(spec, spec, PartitionSpec(), PartitionSpec(),
                                                    spec, spec),
                           out_specs=(spec, spec, PartitionSpec(), spec, PartitionSpec(), spec))
        compiling = self.compile_seconds
        compiled = self._compile((ModeKeys.TRAIN, _signature(args)), sm, *args)
        # compiled ahead, before the device timer starts: neither device nor input time
        self.last_setup_seconds = self.compile_seconds - compiling + initialised
        t0 = time.perf_counter()
        new_params, new_slots, new_step, losses, diverged, host = compiled(*args)
        jax.block_until_ready((new_params, new_slots, losses, diverged, host))
        device = time.perf_counter() - t0
        if host is not None and est._recorder is not None:
            est._recorder.host_call_steps((captured["host_fn"], _host_call_rows(host, n)))
        diverged = jax.device_get(diverged)
        self._to_host(new_params, new_slots, every_copy=any(bool(v) for v in diverged.values()))
        est.global_step += n
        self._step = (est.global_step, new_step)  # the next loop's step, already on the devices
        est._input_state = state
        losses = np.asarray(jax.device_get(losses))[:, :n]
        return LoopReport(steps=n, device_seconds=device, wait_seconds=waited, records=records,
                          bytes=nbytes_, global_step=est.global_step, loss=float(losses.mean()),
                          setup_seconds=self.last_setup_seconds)


def _host_call_rows(host, n: int):
    """The loop's host_call tensors from the devices, ``[replicas, L, batch, ...]`` each, as the
    host wants them: the first ``n`` (real) steps, replicas concatenated on the batch dimension."""
    def rows(a):
        a = np.asarray(a)[:, :n]
        return np.moveaxis(a, 0, 1).reshape((n, a.shape[0] * a.shape[2]) + a.shape[3:])

    return jax.tree_util.tree_map(rows, jax.device_get(host))


class TrainLoops:
    """Stacks each loop's batches in a thread (one loop ahead) and runs them on the devices."""

    def __init__(self, backend: JaxBackend, infeed: Infeed, steps: int):
        self.backend = backend
        self.infeed = infeed
        loop = backend.est.config.tpu_config.iterations_per_loop
        self.length = loop  # every stack has this many steps; a shorter loop is padded
        self.sizes = [loop] * (steps // loop) + ([steps % loop] if steps % loop else [])
        ahead = backend.est.config.tpu_config.infeed_queue_loops - 1  # loops stacked in advance
        self.queue: queue.Queue = queue.Queue(maxsize=max(1, ahead))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="tpudata-jax-infeed", daemon=True)
        self.thread.start()

    def _put(self, item) -> bool:
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        est = self.backend.est
        try:
            for size in self.sizes:
                steps, waited, records, total_bytes = [], 0.0, 0, 0
                for _ in range(size):
                    if self.stop.is_set():
                        return
                    batches, w = self.infeed.get_step()
                    waited += w
                    if batches is None:
                        break
                    for features, labels in batches:
                        est._compile_check(ModeKeys.TRAIN, features, labels)
                    steps.append(self.backend.device_dtypes(batches))
                    records += sum(rows(f) for f, _ in batches)
                    total_bytes += sum(nbytes(f) + nbytes(lab) for f, lab in batches)
                state = self.infeed.consumed_state
                if not steps:
                    self._put(None)
                    return
                padding = [jax.tree_util.tree_map(np.zeros_like, steps[0])] * (self.length - len(steps))
                features, labels = stack_replicas(steps + padding)  # the padding never runs
                features = jax.device_put(features, self.backend.sharded)
                labels = jax.device_put(labels, self.backend.sharded)
                if not self._put((features, labels, len(steps), state, records, total_bytes)):
                    return
                if len(steps) < size:
                    self._put(None)
                    return
        except BaseException as exc:  # surfaces in run_loop
            self._put(exc)

    def run_loop(self, n: int) -> tuple[LoopReport, bool]:
        """The next loop (``n`` steps unless the input ends first): ``(report, input ended)``."""
        t0 = time.perf_counter()
        item = self.queue.get()
        waited = time.perf_counter() - t0
        if isinstance(item, BaseException):
            raise item
        if item is None:
            return LoopReport(wait_seconds=waited, wall_seconds=waited,
                              global_step=self.backend.est.global_step), True
        features, labels, steps, state, records, total_bytes = item
        report = self.backend.run_train_loop(features, labels, steps, state, records, total_bytes,
                                             waited)
        # compiling is neither device time nor input time: leave it out of the loop's wall time
        report.wall_seconds = time.perf_counter() - t0 - self.backend.last_setup_seconds
        return report, steps < n

    def close(self) -> None:
        """Stop the stacking thread (closing the infeed wakes it if it waits for input)."""
        self.stop.set()
        self.infeed.close()
        self.thread.join()
