"""``ds.distribute(executor)``: a pipeline's work on remote workers (dask.distributed, any
``concurrent.futures.Executor``), exactly once per epoch, with the state at the consumer.

:mod:`~tpudata.dataset.remote.splits` cuts the pipeline into splits,
:mod:`~tpudata.dataset.remote.worker` runs a chunk of a split on a worker,
:mod:`~tpudata.dataset.remote.consumer` keeps chunks in flight and delivers each element once,
:mod:`~tpudata.dataset.remote.backends` adapts the executors. Guide: docs/remote.md.
"""

from tpudata.dataset.remote.dataset import CHUNK_BYTES, DistributeDataset

__all__ = ["CHUNK_BYTES", "DistributeDataset"]
