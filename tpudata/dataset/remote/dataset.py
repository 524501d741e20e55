"""``ds.distribute(executor)``: the pipeline before it runs on remote workers, split by split.

tf.data's ``ds.apply(tf.data.experimental.service.distribute("distributed_epoch", service))``
without a dispatcher or a journal: the executor is a dask.distributed ``Client`` (or its
``get_executor()``), any ``concurrent.futures.Executor`` (a local process pool gives the same
semantics on one machine), or None (the splits run in the consumer's thread: the reference
output). See docs/remote.md.
"""

from __future__ import annotations

import weakref

from tpudata._keywords import strict_keywords
from tpudata._pickling import dumps_function
from tpudata.dataset.core import registry
from tpudata.dataset.core.base import UNKNOWN, Dataset
from tpudata.dataset.core.common import input_spec
from tpudata.dataset.core.graph import inputs
from tpudata.dataset.remote.backends import backend_of, dask_client
from tpudata.dataset.remote.consumer import DistributedIterator, template_bytes
from tpudata.dataset.remote.splits import Plan, SplitSource, cut
from tpudata.dataset.remote.transport import Parked
from tpudata.errors import NotPicklableError

__all__ = ["CHUNK_BYTES", "DistributeDataset"]

CHUNK_BYTES = 16 << 20  # a chunk holds about this many bytes of output (at least one element)


def _check_executor(executor) -> None:
    from concurrent.futures import Executor

    if executor is not None and dask_client(executor) is None and not isinstance(executor, Executor):
        raise TypeError(
            f"distribute() needs a dask.distributed Client (or client.get_executor()), a "
            f"concurrent.futures.Executor or None, not {type(executor).__name__}")


def _unpicklable(template: Dataset, exc: Exception) -> NotPicklableError:
    """The error naming the function (or op) that keeps the template from pickling."""
    node = template
    while not isinstance(node, SplitSource):
        for name in node._functions:
            fn = node.__dict__.get(name)
            if fn is not None:
                dumps_function(fn, f"distribute() (in {node._describe()})")  # raises, naming fn
        (node,) = inputs(node)
    return NotPicklableError(
        f"distribute() sends the pipeline before it to the workers, so it must pickle, but it "
        f"does not ({type(exc).__name__}: {exc}); keep locks, files, sockets and clients out "
        f"of its ops (create them inside the functions, once per worker)")


class DistributeDataset(Dataset):
    """The elements of ``input_ds``, computed on an executor's workers split by split.

    - ``executor``: a dask ``Client`` or ``client.get_executor()``, any
      ``concurrent.futures.Executor`` (``tpudata.ray.RayExecutor``), or None (the splits run in
      the consumer's thread).
    - ``split`` / ``split_size``: ``"files"`` cuts the source into splits of ``split_size``
      files (default 1), or rows of a range / tensor slices (default 1,024); ``"records"`` cuts
      TFRecord files into splits of ``split_size`` records (default 1,024).
    - ``deterministic``: True (default, unless ``Options.deterministic`` says False) delivers
      the splits in order; False whichever split has a chunk first.
    - ``num_consumers`` / ``consumer_index``: this trainer's share of the splits.
    - ``max_in_flight`` (chunks; default 4 x workers + 2, at most 64), ``chunk_bytes`` (16 MiB):
      the consumer holds at most ``(max_in_flight + 2) x (chunk_bytes + one element)``.
    - ``speculate_after``: seconds before the chunk waited for is run again on a free worker
      (default 4 x the median chunk time, at least 2 s; 0: never).
    - ``lost_after``: seconds without the scheduler (or without any worker) before
      :class:`~tpudata.errors.ExecutorLostError`.
    - ``shared_memory``: co-located workers hand chunks over in shared memory (default True).
    """

    @strict_keywords
    def __init__(self, input_ds: Dataset, executor=None, *, deterministic: bool | None = None,
                 split_size: int | None = None, num_consumers: int = 1,
                 consumer_index: int = 0, max_in_flight: int | None = None,
                 chunk_bytes: int | None = None, speculate_after: float | None = None,
                 lost_after: float = 60.0, shared_memory: bool = True, split: str = "files"):
        super().__init__()
        _check_executor(executor)
        if int(num_consumers) < 1 or not 0 <= int(consumer_index) < int(num_consumers):
            raise ValueError(f"need 0 <= consumer_index < num_consumers, got {consumer_index} "
                             f"of {num_consumers}")
        if max_in_flight is not None and int(max_in_flight) < 1:
            raise ValueError(f"max_in_flight must be >= 1 or None, not {max_in_flight}")
        chunk_bytes = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
        if int(chunk_bytes) < 1:
            raise ValueError(f"chunk_bytes must be >= 1, not {chunk_bytes}")
        if split_size is not None and int(split_size) < 1:
            raise ValueError(f"split_size must be >= 1 or None, not {split_size}")
        if split not in ("files", "records"):
            raise ValueError(f"split must be 'files' or 'records', not {split!r}")
        self.input = input_ds
        self.split = split
        self.split_size = None if split_size is None else int(split_size)
        self._sources: dict = {}  # split="records": the files' indexes, loaded once
        self.num_consumers, self.consumer_index = int(num_consumers), int(consumer_index)
        self.deterministic = None if deterministic is None else bool(deterministic)
        # how, not what: left out of the state's pipeline fingerprint (a restore may change them)
        self._executor = executor
        self._max_in_flight = None if max_in_flight is None else int(max_in_flight)
        self._chunk_bytes = int(chunk_bytes)
        self._speculate_after = None if speculate_after is None else float(speculate_after)
        self._lost_after = float(lost_after)
        self._shared_memory = bool(shared_memory)
        self._parked = Parked()  # a finished iteration's shared-memory slots, for the next
        weakref.finalize(self, self._parked.close)
        self._template()  # refuses, now, a pipeline that cannot be cut or pickled

    def _template(self) -> tuple:
        c = cut(self.input)
        template = c.template()
        try:
            data, seeds = template_bytes(template)
        except Exception as exc:
            raise _unpicklable(template, exc) from None
        return c, data, seeds

    def __getstate__(self):
        raise TypeError("a distribute()d Dataset holds its executor and does not pickle: call "
                        "distribute() in the process that iterates (the pipeline before it is "
                        "what travels to the workers)")

    def _make_iterator(self, ctx):
        c, data, seeds = self._template()
        plan = Plan.of(c, self.split_size, ctx, self.split, self._sources)
        backend = backend_of(self._executor, self._lost_after)
        return DistributedIterator(self, ctx, backend, data, seeds, plan)

    def num_splits(self) -> int:
        """How many splits an epoch has (before ``num_consumers`` shares them out)."""
        from tpudata.dataset.core.iterator import IterContext

        return Plan.of(cut(self.input), self.split_size, IterContext((0,)), self.split,
                       self._sources).num_splits

    def cardinality(self) -> int:
        return UNKNOWN

    def _spec(self):
        return input_spec(self.input)


registry.provide(DistributeDataset)
