"""``tpudata.info()``: what tpudata has loaded, changed, holds and runs in this process.

tpudata changes nothing process-wide on its own: glibc malloc is tuned only by
``tpudata.tune_malloc()`` (or ``TPUDATA_MALLOC_TUNING=1``), and worker processes start from
contexts that leave multiprocessing's globals alone (:mod:`tpudata._processes`). What it does
hold - C extensions, memory kept for reuse, worker threads and processes - :func:`info` lists.
It starts, loads and allocates nothing itself: the gs:// read pool is asked only where its module
was imported already.

>>> import tpudata
>>> report = tpudata.info()
>>> sorted(report.extensions)
['tpudata._native', 'tpudata.image._imgkernel']
>>> report.malloc_tuned in (None, True, False)
True
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field

from tpudata import _accel, _outpool, _processes

__all__ = ["Info", "info"]


@dataclass(frozen=True)
class Info:
    """What :func:`info` found. ``str()`` gives a few readable lines.

    - ``extensions``: each C extension's state (``on``, ``off``, ``NOT BUILT`` or
      ``not loaded yet``); ``accelerated``: which native paths run (those of
      ``tpudata.accelerated()`` that are known without loading anything).
    - ``malloc_tuned``: True/False after ``tpudata.tune_malloc()`` ran (or
      ``TPUDATA_MALLOC_TUNING=1`` had the first reader run it), None when it never did;
      ``malloc_settings``: glibc's environment-variable names for what it set.
    - ``pooled_bytes``: memory tpudata keeps for reuse, by pool: ``batch_memory`` (freed batch
      arrays, ``tpudata.release_batch_memory()`` drops it) and, once gs:// reads ran,
      ``gcs_read_held`` (bytes read ahead and not yet consumed) and, where the torch bridge
      moved batches out of DataLoader workers, ``dataloader_shared_memory`` (the slots a worker
      writes into, or those the main process keeps mapped).
    - ``threads``: names of tpudata's live threads; ``processes``: ``(name, pid)`` of its live
      worker processes and fork server.
    """

    pid: int
    extensions: dict = field(default_factory=dict)
    accelerated: dict = field(default_factory=dict)
    malloc_tuned: bool | None = None
    malloc_settings: dict = field(default_factory=dict)
    pooled_bytes: dict = field(default_factory=dict)
    threads: tuple = ()
    processes: tuple = ()

    def __str__(self) -> str:
        ext = ", ".join(f"{name} {state}" for name, state in self.extensions.items())
        if self.malloc_tuned is None:
            tuning = "not tuned (tpudata.tune_malloc() was not called)"
        else:
            settings = " ".join(f"{k}={v}" for k, v in self.malloc_settings.items())
            tuning = f"tuned ({settings})" if self.malloc_tuned else "tuning turned off"
        pooled = ", ".join(f"{name} {_size(n)}" for name, n in self.pooled_bytes.items())
        procs = ", ".join(f"{name} (pid {pid})" for name, pid in self.processes)
        return "\n".join([
            f"tpudata in process {self.pid}",
            f"  C extensions: {ext}",
            f"  glibc malloc: {tuning}",
            f"  pooled memory: {pooled}",
            f"  threads: {', '.join(self.threads) or 'none'}",
            f"  worker processes: {procs or 'none'}",
        ])


def _size(n: int) -> str:
    return f"{n} B" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


def info() -> Info:
    """What tpudata has loaded, changed, holds and runs in this process right now (see
    :class:`Info`); loads, starts and allocates nothing."""
    extensions = _accel.extensions()
    accelerated = _accel.native_paths()
    if extensions[_accel.IMAGE_KERNEL] != "not loaded yet":
        accelerated["image_kernel"] = extensions[_accel.IMAGE_KERNEL] == "on"
    pooled = {"batch_memory": _outpool.free_bytes()}
    ranged = sys.modules.get("tpudata._ranged")
    pool = getattr(ranged, "_pool", None) if ranged is not None else None
    if pool is not None and getattr(ranged, "_pool_pid", None) == os.getpid():
        pooled["gcs_read_held"] = int(pool.stats()["held_bytes"])
    shared = sys.modules.get("tpudata.torch.shared")
    held = shared.held_bytes() if shared is not None else 0
    if held:
        pooled["dataloader_shared_memory"] = held
    threads = tuple(sorted(t.name for t in threading.enumerate() if t.name.startswith("tpudata")))
    return Info(pid=os.getpid(), extensions=extensions, accelerated=accelerated,
                malloc_tuned=_accel.allocator_tuned(), malloc_settings=_accel.allocator_environ(),
                pooled_bytes=pooled, threads=threads,
                processes=tuple(_processes.live_processes()))
