"""JAX bridge (optional extra ``tpudata[jax]``): imports jax; tpudata itself never does.

- :func:`tfrecord_batches` / :func:`source_batches`: this process's input
  (``jax.process_index()`` of ``jax.process_count()``), equal step counts on every process.
- :func:`global_batch`: each process's rows -> global ``jax.Array`` s on a ``Mesh``.
- :class:`DeviceIterator`: prefetch to device (depth 2), checkpoint state in step with the
  batches consumed.

Nothing here forks: a process that has started JAX must not fork (use spawn or forkserver for
worker processes, as tpudata's own process pools do).
"""

from tpudata.jax.arrays import batch_sharding, global_batch, process_split
from tpudata.jax.inputs import source_batches, tfrecord_batches
from tpudata.jax.prefetch import DeviceIterator

__all__ = [
    "DeviceIterator",
    "batch_sharding",
    "global_batch",
    "process_split",
    "source_batches",
    "tfrecord_batches",
]
