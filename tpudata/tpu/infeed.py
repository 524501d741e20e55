"""Infeed: host threads fill a bounded queue with each step's per-replica batches.

One thread per host runs that host's input pipeline and enqueues, per step, the batches of its
replicas. The device loop dequeues a step at a time; the time it spends waiting is what makes
training input-bound, and :class:`LoopReport` measures it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from tpudata.dataset.core.base import Dataset
from tpudata.dataset.core.nest import flatten
from tpudata.errors import InputFnError
from tpudata.example.parse import VarLenValues
from tpudata.tpu.device import split_batch

logger = logging.getLogger(__name__)

_END = object()


def _split_element(element):
    if isinstance(element, tuple) and not hasattr(element, "_fields"):
        if len(element) != 2:
            raise ValueError("input_fn elements must be features or (features, labels)")
        return element[0], element[1]
    return element, None


_ACCEPTED = ("a tpudata Dataset, or an iterable of batches (a list, generator or iterator) whose "
             "elements are features or (features, labels) of numpy arrays")


def call_input_fn(input_fn, params: dict):
    """``input_fn(params)``, refused with :class:`InputFnError` unless it is what an infeed reads:
    a Dataset or an iterable of batches (not one batch: a dict, an array or a tuple of them)."""
    out = input_fn(params)
    if isinstance(out, Dataset):
        return out
    name = getattr(input_fn, "__qualname__", None) or repr(input_fn)
    kind = type(out).__name__
    hint = None
    if isinstance(out, (str, bytes)):
        hint = "file names are not input: return Dataset.list_files(...) or TFRecordDataset(...)"
    elif isinstance(out, (dict, np.ndarray)) or (
            isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], (dict, np.ndarray))
            and (out[1] is None or isinstance(out[1], (dict, np.ndarray)))):
        hint = ("that is one batch (TF's (features, labels) tensors), not a stream of them: return "
                "Dataset.from_tensor_slices(...).batch(params['batch_size']) or a list of batches")
    elif not hasattr(out, "__iter__"):
        hint = "return the Dataset the function builds (a missing `return`?)" if out is None else None
    else:
        return out
    message = f"input_fn {name!r} returned {kind}; TPUEstimator accepts {_ACCEPTED}"
    raise InputFnError(message + (f"; {hint}" if hint else ""), returned=kind)


def _open(h: int, src, state):
    """Host h's iterator over ``src``, positioned at a checkpoint's ``state`` if given."""
    if isinstance(src, Dataset):
        try:
            return src.iterator(state)
        except Exception as exc:
            raise ValueError(
                f"host {h}: the checkpoint's input state does not fit the Dataset that input_fn "
                f"returned ({type(exc).__name__}: {exc}); resume with the input_fn of the "
                "checkpointed run, or train(..., restore_input=False) to start the input afresh"
            ) from exc
    if state is not None:
        raise ValueError(f"the checkpoint holds an input state, but input_fn returned a "
                         f"{type(src).__name__}, not a tpudata Dataset that can resume from it; "
                         "use train(..., restore_input=False)")
    return iter(src)


def nbytes(structure) -> int:
    if structure is None:
        return 0
    total = 0
    for leaf in flatten(structure)[1]:
        if isinstance(leaf, VarLenValues):
            total += leaf.values.nbytes
        else:
            arr = np.asarray(leaf)
            total += sum(len(v) for v in arr.ravel().tolist()) if arr.dtype == object else arr.nbytes
    return total


def rows(structure) -> int:
    leaf = flatten(structure)[1][0]
    return len(leaf)


@dataclass
class LoopReport:
    """Timing of one device loop (or a whole run): was training waiting for input?

    Both backends fill it the same way: ``device_seconds`` is how long the device computed (the
    numpy replicas, or a JAX loop timed to ``block_until_ready``), ``wait_seconds`` how long the
    device side waited for the infeed. ``setup_seconds`` (compiling a JAX program before its first
    loop) is in neither, nor in ``wall_seconds``: the first loop's rates are the device's.
    """

    steps: int = 0
    device_seconds: float = 0.0
    wait_seconds: float = 0.0
    records: int = 0
    bytes: int = 0
    wall_seconds: float = 0.0
    loops: int = field(default=1)
    global_step: int = 0  # the global step when the loop ended
    loss: float = float("nan")  # mean training loss over the loop's steps (a sum: the last loop's)
    # compilation and variable creation before the loop ran (JAX backend, first loop of a
    # program): not device time, not input time, and left out of wall_seconds
    setup_seconds: float = 0.0

    @property
    def input_bound_percent(self) -> float:
        busy = self.device_seconds + self.wait_seconds
        return 100.0 * self.wait_seconds / busy if busy else 0.0

    @property
    def records_per_second(self) -> float:
        return self.records / self.wall_seconds if self.wall_seconds else 0.0

    @property
    def mb_per_second(self) -> float:
        return self.bytes / 1e6 / self.wall_seconds if self.wall_seconds else 0.0

    def __add__(self, other: "LoopReport") -> "LoopReport":
        return LoopReport(self.steps + other.steps, self.device_seconds + other.device_seconds,
                          self.wait_seconds + other.wait_seconds, self.records + other.records,
                          self.bytes + other.bytes, self.wall_seconds + other.wall_seconds,
                          self.loops + other.loops, max(self.global_step, other.global_step),
                          other.loss if other.steps else self.loss,
                          self.setup_seconds + other.setup_seconds)

    def summary(self) -> str:
        return (f"{self.steps} steps: device {self.device_seconds:.3f} s, waiting for infeed "
                f"{self.wait_seconds:.3f} s ({self.input_bound_percent:.1f}% input-bound), "
                f"{self.records_per_second:,.0f} records/s, {self.mb_per_second:.1f} MB/s")


def _moved(states: list, hosts: int) -> list:
    """Each of ``hosts`` hosts' state from a checkpoint of another number: the combined state
    of an elastic_hosts input (tpudata.dataset.elastic_hosts), else refused."""
    from tpudata.dataset import combine_host_states
    from tpudata.errors import StateError

    try:
        return [combine_host_states(states)] * hosts
    except StateError:
        raise ValueError(f"the checkpoint holds input state for {len(states)} hosts, the input "
                         f"has {hosts}: resume with the same TPUConfig.num_hosts (or make the "
                         "input elastic_hosts(...), whose state moves)") from None


class Infeed:
    """Per-step batches for ``num_replicas`` replicas from ``len(sources)`` hosts.

    ``sources[h]`` is host h's input (a Dataset or an iterable of batches). With ``split`` > 1
    each source batch is divided into that many replica batches (PER_HOST_V1 / BROADCAST);
    otherwise each replica takes the next batch (PER_HOST_V2).

    ``states[h]`` (from a checkpoint) positions host h's Dataset iterator. With ``track_state``
    each queued step carries its host's iterator state after the step's batches, and
    :attr:`consumed_state` is the state after the last step handed out by :meth:`get_step` (not
    what the threads read ahead).
    """

    def __init__(self, sources: list, replicas_per_source: int, split: bool, max_steps: int,
                 partial_final_step: bool = False, states: list | None = None,
                 track_state: bool = False):
        self.replicas_per_source = replicas_per_source
        self.split = split
        self.partial = partial_final_step
        self.track_state = track_state
        self.queues = [queue.Queue(maxsize=max(1, max_steps)) for _ in sources]
        self.stop = threading.Event()
        self.iterators = []
        if states is not None and len(states) != len(sources):
            states = _moved(states, len(sources))
        try:
            for h, src in enumerate(sources):
                self.iterators.append(_open(h, src, states[h] if states is not None else None))
        except BaseException:
            for it in self.iterators:  # stop what the hosts before started
                getattr(it, "close", lambda: None)()
            raise
        self.states = [it.get_state() if track_state and hasattr(it, "get_state") else None
                       for it in self.iterators]
        self.threads = [
            threading.Thread(target=self._run, args=(h,), name=f"tpudata-infeed-{h}", daemon=True)
            for h in range(len(sources))
        ]
        for t in self.threads:
            t.start()

    def _put(self, h: int, item) -> bool:
        while not self.stop.is_set():
            try:
                self.queues[h].put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, h: int) -> None:
        it = self.iterators[h]
        try:
            while not self.stop.is_set():
                step = []
                if self.split:
                    element = next(it, _END)
                    if element is _END:
                        break
                    features, labels = _split_element(element)
                    step = list(zip(split_batch(features, self.replicas_per_source, "features"),
                                    split_batch(labels, self.replicas_per_source, "labels")))
                else:
                    for _ in range(self.replicas_per_source):
                        element = next(it, _END)
                        if element is _END:
                            break
                        step.append(_split_element(element))
                    if len(step) < self.replicas_per_source:
                        if step and self.partial:
                            self._put(h, (step, None))
                        elif step:
                            logger.warning("host %d: the input ended in the middle of a step (%d of %d "
                                           "replica batches); dropping it", h, len(step),
                                           self.replicas_per_source)
                        break
                state = it.get_state() if self.track_state and hasattr(it, "get_state") else None
                if not self._put(h, (step, state)):
                    return
            self._put(h, _END)
        except BaseException as exc:  # surfaces in the device loop
            self._put(h, exc)

    def get_step(self):
        """``(batches for every replica, seconds waited)``; batches is None at the end of input."""
        t0 = time.perf_counter()
        step = []
        ended = False
        states = list(self.states)
        for h, q in enumerate(self.queues):
            item = q.get()
            if isinstance(item, BaseException):
                raise item
            if item is _END:
                ended = True
                continue
            step.extend(item[0])
            states[h] = item[1]
        waited = time.perf_counter() - t0
        if ended and not (self.partial and step):
            if step:
                logger.warning("some hosts ran out of input before others (the last step was "
                               "dropped); give every host the same number of batches: "
                               "batch(B, pad_remainder=True, num_batches=n) with n = "
                               "tpudata.distribute.equal_num_batches(counts, B, num_hosts), "
                               "counts = tpudata.distribute.file_record_counts(files): it counts "
                               "each host's records exactly")
            return None, waited
        self.states = states
        return step, waited

    @property
    def consumed_state(self) -> list | None:
        """Per-host input state after the last step handed out; None for plain iterables."""
        return None if any(s is None for s in self.states) else list(self.states)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()
        for q in self.queues:  # wake a consumer blocked in get_step (another thread's)
            try:
                q.put_nowait(_END)
            except queue.Full:
                pass
        for it in self.iterators:
            close = getattr(it, "close", None)
            if close is not None:
                close()
