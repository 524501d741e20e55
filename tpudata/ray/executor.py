"""A ``concurrent.futures.Executor`` on Ray tasks: ``ds.distribute(RayExecutor())``.

Each ``submit`` is one Ray task (``num_cpus`` CPUs, retried ``max_retries`` times when its worker
process dies), and its future is Ray's own (``ObjectRef.future()``). Ray workers on the trainer's
node hand chunks over in shared memory as local worker processes do.
"""

from __future__ import annotations

from concurrent.futures import Executor, Future

__all__ = ["RayExecutor"]


def _call(fn, args, kwargs):
    return fn(*args, **kwargs)


class RayExecutor(Executor):
    """Runs each task as a Ray task on the Ray cluster this process is connected to
    (``ray.init()`` first, or Ray starts a local one)."""

    tpudata_remote = True  # tasks run in other processes: chunks may travel in shared memory

    def __init__(self, num_cpus: float = 1, max_retries: int = 3):
        import ray

        self._ray = ray
        self._remote = ray.remote(_call).options(num_cpus=num_cpus, max_retries=max_retries)
        self._shutdown = False

    @property
    def _max_workers(self) -> int:
        """The cluster's CPUs (what ``distribute`` sizes its window by)."""
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def submit(self, fn, /, *args, **kwargs) -> Future:
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        return self._remote.remote(fn, args, kwargs).future()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._shutdown = True
