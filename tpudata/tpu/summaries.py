"""TensorBoard summaries of the executor: TPUEstimator's automatic scalars, evaluation metrics
and ``host_call``.

What a training run records under ``model_dir`` (any fsspec URL), every ``save_summary_steps``
(at the first loop boundary at or after each multiple, as TPUEstimator's hooks do):

- ``loss`` (the mean step loss since the previous point), ``global_step/sec``, ``examples/sec``;
- ``infeed/device_seconds``, ``infeed/wait_seconds``, ``infeed/input_bound_percent``,
  ``infeed/records_per_sec``, ``infeed/MB_per_sec`` (the :class:`~tpudata.tpu.infeed.LoopReport`
  figures over the same window).

``evaluate()`` writes its metrics under ``model_dir/eval`` (``eval_<name>``) at the evaluated step.

The backend contract: a train loop makes a :class:`Recorder` with :func:`for_training`, calls
:meth:`Recorder.host_call_step` once per step with the replicas' ``host_call`` tensors (numpy),
or :meth:`Recorder.host_call_steps` once per loop with the loop's stacked tensors (JAX, gathered
from the devices), :meth:`Recorder.on_loop` once per loop with the loop's
global step, mean loss and :class:`~tpudata.tpu.infeed.LoopReport`, and :meth:`Recorder.close`
at the end; evaluation uses :func:`for_eval` and :meth:`Recorder.on_eval`.

Event files are written by tensorboardX (the ``tpudata[tensorboard]`` extra: it needs only
protobuf); without it training works and logs once that summaries are off. Remote logdirs are
written to a local staging file that is uploaded whole (atomically) at every flush, so readers
never see a partial object; files roll over at ``max_file_bytes`` to bound each upload.

Inside a ``host_call`` function, :func:`scalar` and :func:`histogram` write through the writer
tpudata hands it (like ``tf.summary`` under a default writer), and :func:`steps` gives the global
step of each stacked row:

>>> def host_fn(lr, gnorm):                       # each [steps in the loop, replicas]
...     summaries.scalar("lr", lr[:, 0], step=summaries.steps())
...     summaries.histogram("grad_norm", gnorm)   # at the loop's last step
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import os
import shutil
import socket
import tempfile
import time
from typing import Any, Callable

import numpy as np

from tpudata import storage
from tpudata.errors import HostCallError
from tpudata.tpu.infeed import LoopReport

logger = logging.getLogger(__name__)

__all__ = ["Recorder", "SummaryWriter", "for_eval", "for_training", "histogram", "scalar", "steps",
           "writer"]

_current: contextvars.ContextVar["SummaryWriter | None"] = contextvars.ContextVar(
    "tpudata_summary_writer", default=None)
_warned_off = False
_sequence = itertools.count()


def _tensorboardx():
    """tensorboardX's event writer and protos, or None (logged once) when it is not installed."""
    global _warned_off
    try:
        from tensorboardX import summary as tbx_summary
        from tensorboardX.proto import event_pb2
        from tensorboardX.record_writer import RecordWriter
    except ImportError:
        if not _warned_off:
            _warned_off = True
            logger.warning("TensorBoard summaries are off: install the writer with "
                           "pip install 'tpudata[tensorboard]' (tensorboardX)")
        return None
    return tbx_summary, event_pb2, RecordWriter


class SummaryWriter:
    """Event files in ``logdir`` (a local path or any fsspec URL); with ``logdir=None`` (or
    without tensorboardX) everything written is discarded.

    ``scalar``/``histogram`` take a ``step``; with a sequence of steps (and as many values, or
    histogram rows) they write one point per step.
    """

    def __init__(self, logdir: str | None, max_file_bytes: int = 4 << 20):
        self.logdir = logdir
        self.max_file_bytes = max_file_bytes
        self.default_step = 0
        self.steps = np.zeros(0, np.int64)
        self._tbx = _tensorboardx() if logdir else None
        self._local = not logdir or storage.is_local(logdir)
        self._stage: str | None = None
        self._file: Any = None
        self._name = ""
        self._dirty = False
        self.closed = False

    @property
    def enabled(self) -> bool:
        return self._tbx is not None

    def _open(self) -> None:
        _, event_pb2, RecordWriter = self._tbx
        self._name = (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
                      f"{os.getpid()}.{next(_sequence):04d}.tpudata")
        if not self._local and self._stage is None:
            self._stage = tempfile.mkdtemp(prefix=f"tpudata-events-{os.getpid()}-")
        directory = storage.local_path(self.logdir) if self._local else self._stage
        os.makedirs(directory, exist_ok=True)
        self._path = os.path.join(directory, self._name)
        self._file = RecordWriter(self._path)
        self._write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def _write(self, event) -> None:
        self._file.write(event.SerializeToString())
        self._dirty = True

    def _summary(self, summary, step: int) -> None:
        if self.closed:
            raise ValueError(f"the summary writer for {self.logdir} is closed")
        if self._file is None:
            self._open()
        _, event_pb2, _ = self._tbx
        self._write(event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary))

    def _points(self, value, step):
        if step is None:
            return [(self.default_step, value)]
        if np.ndim(step) == 0:
            return [(int(step), value)]
        step = np.asarray(step).reshape(-1)
        if len(value) != len(step):
            raise ValueError(f"{len(step)} steps for {len(value)} values: give one value (or one "
                             "histogram row) per step")
        return list(zip(step.tolist(), value))

    def scalar(self, tag: str, value, step=None) -> None:
        """Write ``value`` (a number) at ``step``; or one value per step of a sequence of steps."""
        points = self._points(np.asarray(value) if np.ndim(step) else value, step)
        for s, v in points:
            if np.size(v) != 1:
                raise ValueError(f"scalar {tag!r} needs one number per step, got shape "
                                 f"{np.shape(v)}")
            if self.enabled:
                self._summary(self._tbx[0].scalar(tag, float(np.asarray(v).reshape(()))), s)

    def histogram(self, tag: str, values, step=None, bins: int = 30) -> None:
        """Write the distribution of ``values`` at ``step``; or of each row at each of ``step``."""
        for s, v in self._points(np.asarray(values), step):
            v = np.asarray(v, np.float64).reshape(-1)
            if v.size == 0:
                raise ValueError(f"histogram {tag!r} at step {s} has no values")
            if not np.isfinite(v).all():
                raise ValueError(f"histogram {tag!r} at step {s} has NaN or infinite values")
            if self.enabled:
                self._summary(self._histogram(tag, v, bins), s)

    def _histogram(self, tag: str, v: np.ndarray, bins: int):
        """TensorBoard's HistogramProto: right bucket limits, an empty bucket before the first
        (as tensorboardX does); the sums without BLAS (whose threads are slow to wake)."""
        counts, edges = np.histogram(v, bins=bins)
        return self._tbx[0].histogram_raw(
            tag, min=float(v.min()), max=float(v.max()), num=int(v.size), sum=float(v.sum()),
            sum_squares=float(np.einsum("i,i->", v, v)), bucket_limits=edges.tolist(),
            bucket_counts=[0] + counts.tolist())

    def flush(self) -> None:
        """Make everything written so far visible under ``logdir`` (uploaded whole if remote)."""
        if self._file is None or not self._dirty:
            return
        self._file.flush()
        if self._stage is not None:
            storage.makedirs(self.logdir)
            with open(self._path, "rb") as f, storage.open_atomic(
                    storage.join(self.logdir, self._name)) as out:
                shutil.copyfileobj(f, out)
        self._dirty = False
        if os.path.getsize(self._path) >= self.max_file_bytes:  # roll: bounded uploads
            self._file.close()
            self._file = None
            if self._stage is not None:
                os.remove(self._path)

    def close(self) -> None:
        if self.closed:
            return
        try:
            self.flush()
        finally:
            self.closed = True
            if self._file is not None:
                self._file.close()
                self._file = None
            if self._stage is not None:
                shutil.rmtree(self._stage, ignore_errors=True)

    def __enter__(self) -> "SummaryWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- the default writer of a host_call ------------------------------------------------------------
def writer() -> SummaryWriter:
    """The writer tpudata hands the running ``host_call`` function."""
    current = _current.get()
    if current is None:
        raise RuntimeError("tpudata.tpu.summaries.scalar/histogram/steps/writer are for use "
                           "inside a host_call function, while tpudata runs it")
    return current


def steps() -> np.ndarray:
    """The global step of each stacked row (axis 0) of the running host_call's tensors."""
    return writer().steps.copy()


def scalar(name: str, data, step=None) -> None:
    """``tf.summary.scalar`` inside a host_call: ``step`` defaults to the loop's last step."""
    writer().scalar(name, data, step)


def histogram(name: str, data, step=None, buckets: int = 30) -> None:
    """``tf.summary.histogram`` inside a host_call: ``step`` defaults to the loop's last step."""
    writer().histogram(name, data, step, bins=buckets)


# -- what a backend's loop drives -----------------------------------------------------------------
def _host_call_fn(host_call) -> Callable:
    if not (isinstance(host_call, (tuple, list)) and len(host_call) == 2 and callable(host_call[0])):
        raise TypeError("host_call must be (fn, tensors) with tensors a list, tuple or dict of "
                        "arrays, as in TPUEstimatorSpec")
    return host_call[0]


def _gather(per_replica: list, fn_name: str, stacked: bool = False):
    """One step's host_call tensors: every replica's, concatenated on the batch dimension (or,
    ``stacked``, one loop's already gathered tensors)."""
    first = per_replica[0]
    if isinstance(first, dict):
        keys, values = list(first), [[np.asarray(t[k]) for k in first] for t in per_replica]
    elif isinstance(first, (list, tuple)):
        keys, values = None, [[np.asarray(x) for x in t] for t in per_replica]
    else:
        keys, values = None, [[np.asarray(t)] for t in per_replica]
    out = []
    for i in range(len(values[0])):
        parts = [v[i] for v in values]
        if parts[0].ndim < 1 + stacked:
            name = keys[i] if keys else i
            raise ValueError(
                f"host_call {fn_name}: tensor {name!r} has no batch dimension (shape "
                f"{parts[0].shape}); all tensors sent to the host keep one (reshape scalars to [1])")
        out.append(np.concatenate(parts))
    return keys, isinstance(first, (list, tuple)) or isinstance(first, dict), out


class Recorder:
    """Summaries of one train() or evaluate() call: automatic scalars and the host_call."""

    def __init__(self, logdir: str | None, every: int | None):
        self.writer = SummaryWriter(logdir)
        self.every = every or 0
        self._window = LoopReport(loops=0)
        self._loss_sum = 0.0
        self._step_losses: list[float] = []
        self._host_fn: Callable | None = None
        self._host_rows: list = []
        self._host_structure: tuple = (None, False)

    def step(self, specs: list) -> None:
        """One step's replica specs (TPUEstimatorSpec): their mean loss and host_call."""
        if all(s.loss is not None for s in specs):
            self._step_losses.append(float(np.mean([float(s.loss) for s in specs])))
        self.host_call_step([s.host_call for s in specs])

    # host_call ----------------------------------------------------------------------------------
    def host_call_step(self, per_replica: list) -> None:
        """Record one step's ``host_call`` (each replica's ``(fn, tensors)``, or None)."""
        calls = [c for c in per_replica if c is not None]
        if not calls:
            return
        if len(calls) != len(per_replica):
            raise ValueError("host_call must be returned by every replica or by none")
        fn = self._host_fn = _host_call_fn(calls[0])  # the latest step's function runs
        keys, many, tensors = _gather([c[1] for c in calls], _name(fn))
        self._host_structure = (keys, many)
        self._host_rows.append(tensors)

    def run_host_call(self, global_step: int, row_steps=None) -> None:
        """Run the host_call once over the stacked steps; ``row_steps`` are their global steps
        (the ``len(rows)`` steps ending at ``global_step`` by default)."""
        if self._host_fn is None or not self._host_rows:
            return
        fn, rows = self._host_fn, self._host_rows
        self._host_rows = []
        keys, many = self._host_structure
        stacked = []
        for i in range(len(rows[0])):
            shapes = {r[i].shape for r in rows}
            if len(shapes) > 1:
                raise ValueError(f"host_call {_name(fn)}: tensor {keys[i] if keys else i!r} changes "
                                 f"shape between steps ({sorted(shapes)}); give it a fixed shape")
            stacked.append(np.stack([r[i] for r in rows]))
        self.writer.default_step = global_step
        self.writer.steps = np.arange(global_step - len(rows) + 1, global_step + 1, dtype=np.int64) \
            if row_steps is None else np.asarray(row_steps, np.int64)
        token = _current.set(self.writer)
        try:
            if keys is not None:
                fn(**dict(zip(keys, stacked)))
            elif many:
                fn(*stacked)
            else:
                fn(stacked[0])
        except Exception as exc:
            raise HostCallError(
                f"host_call {_name(fn)} failed on the host at global step {global_step} "
                f"({type(exc).__name__}: {exc}); its traceback is above", fn_name=_name(fn),
                step=global_step) from exc
        finally:
            _current.reset(token)

    # the automatic scalars --------------------------------------------------------------------
    def host_call_steps(self, host_call) -> None:
        """A whole loop's ``host_call`` at once, from a backend that gathers it on the device:
        ``(fn, tensors)`` with every tensor already ``[steps, global batch, ...]``."""
        fn = self._host_fn = _host_call_fn(host_call)
        keys, many, stacked = _gather([host_call[1]], _name(fn), stacked=True)
        self._host_structure = (keys, many)
        self._host_rows.extend([list(row) for row in zip(*stacked)])

    def on_loop(self, global_step: int, report: LoopReport, first_step: int,
                loss: float | None = None) -> None:
        """A loop that started at ``first_step`` ended at ``global_step``: run the host_call,
        write the automatic scalars when due, flush. The loop's mean step loss is ``loss``, else
        ``report.loss`` where the backend fills it, else the mean of the steps seen by
        :meth:`step`."""
        if loss is None:
            loss = getattr(report, "loss", None)
        if loss is None or np.isnan(loss):
            loss = float(np.mean(self._step_losses)) if self._step_losses else float("nan")
        self._step_losses = []
        self.run_host_call(global_step)
        if report.steps:
            self._window = self._window + report
            self._loss_sum += loss * report.steps
        if self.every and self._window.steps and global_step // self.every > first_step // self.every:
            self._write_window(global_step)
        self.writer.flush()

    def _write_window(self, global_step: int) -> None:
        w = self._window
        point = {
            "loss": self._loss_sum / w.steps,
            "global_step/sec": w.steps / w.wall_seconds if w.wall_seconds else 0.0,
            "examples/sec": w.records / w.wall_seconds if w.wall_seconds else 0.0,
            "infeed/device_seconds": w.device_seconds,
            "infeed/wait_seconds": w.wait_seconds,
            "infeed/input_bound_percent": w.input_bound_percent,
            "infeed/records_per_sec": w.records_per_second,
            "infeed/MB_per_sec": w.mb_per_second,
        }
        for tag, value in point.items():
            self.writer.scalar(tag, value, global_step)
        self._window, self._loss_sum = LoopReport(loops=0), 0.0

    def on_eval(self, result: dict, global_step: int) -> None:
        """Evaluation at ``global_step`` finished: run the host_call once over all its steps
        (every row at ``global_step``), write every numeric metric but global_step, close."""
        try:
            self.run_host_call(global_step, [global_step] * len(self._host_rows))
            for key, value in result.items():
                if key != "global_step" and isinstance(value, (int, float, np.number)) and \
                        not isinstance(value, bool):
                    self.writer.scalar(key, float(value), global_step)
        finally:
            self.close()

    def close(self) -> None:
        self.writer.close()


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def for_training(model_dir: str | None, save_summary_steps: int | None) -> Recorder:
    """The recorder of a train() call: event files directly in ``model_dir``."""
    return Recorder(model_dir, save_summary_steps)


def for_eval(model_dir: str | None, name: str | None = None) -> Recorder:
    """The recorder of an evaluate() call: ``model_dir/eval`` or ``model_dir/eval_<name>``."""
    return Recorder(storage.join(model_dir, f"eval_{name}" if name else "eval") if model_dir else None,
                    None)
