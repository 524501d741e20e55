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

from tpudata.dataset.base import Dataset
from tpudata.dataset.nest import flatten
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
    """Timing of one device loop (or a whole run): was training waiting for input?"""

    steps: int = 0
    device_seconds: float = 0.0
    wait_seconds: float = 0.0
    records: int = 0
    bytes: int = 0
    wall_seconds: float = 0.0
    loops: int = field(default=1)

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
                          self.loops + other.loops)

    def summary(self) -> str:
        return (f"{self.steps} steps: device {self.device_seconds:.3f} s, waiting for infeed "
                f"{self.wait_seconds:.3f} s ({self.input_bound_percent:.1f}% input-bound), "
                f"{self.records_per_second:,.0f} records/s, {self.mb_per_second:.1f} MB/s")


class Infeed:
    """Per-step batches for ``num_replicas`` replicas from ``len(sources)`` hosts.

    ``sources[h]`` is host h's input (a Dataset or an iterable of batches). With ``split`` > 1
    each source batch is divided into that many replica batches (PER_HOST_V1 / BROADCAST);
    otherwise each replica takes the next batch (PER_HOST_V2).
    """

    def __init__(self, sources: list, replicas_per_source: int, split: bool, max_steps: int,
                 partial_final_step: bool = False):
        self.replicas_per_source = replicas_per_source
        self.split = split
        self.partial = partial_final_step
        self.queues = [queue.Queue(maxsize=max(1, max_steps)) for _ in sources]
        self.stop = threading.Event()
        self.iterators = []
        for src in sources:
            it = src.iterator() if isinstance(src, Dataset) else iter(src)
            self.iterators.append(it)
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
                            self._put(h, step)
                        elif step:
                            logger.warning("host %d: the input ended in the middle of a step (%d of %d "
                                           "replica batches); dropping it", h, len(step),
                                           self.replicas_per_source)
                        break
                if not self._put(h, step):
                    return
            self._put(h, _END)
        except BaseException as exc:  # surfaces in the device loop
            self._put(h, exc)

    def get_step(self):
        """``(batches for every replica, seconds waited)``; batches is None at the end of input."""
        t0 = time.perf_counter()
        step = []
        ended = False
        for q in self.queues:
            item = q.get()
            if isinstance(item, BaseException):
                raise item
            if item is _END:
                ended = True
                continue
            step.extend(item)
        waited = time.perf_counter() - t0
        if ended and not (self.partial and step):
            if step:
                logger.warning("some hosts ran out of input before others; use the same number of "
                               "batches on every host (batch(..., num_batches=...))")
            return None, waited
        return step, waited

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()
        for it in self.iterators:
            close = getattr(it, "close", None)
            if close is not None:
                close()
