"""Who am I: the (rank, world size) x (DataLoader worker, workers) split of this reader.

Rank and world size come from explicit arguments, else an initialised ``torch.distributed``
process group, else the ``RANK`` / ``WORLD_SIZE`` environment variables (torchrun), else 0 / 1.
The worker comes from ``torch.utils.data.get_worker_info()``. Reader ``rank * workers + worker``
of ``world_size * workers`` reads its part, so every record is read exactly once per epoch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tpudata.errors import SplitError


@dataclass(frozen=True)
class Split:
    """One reader's place: ``index`` of ``count`` readers (= ranks x workers), and the epoch."""

    rank: int
    world_size: int
    worker: int
    num_workers: int
    epoch: int = 0

    @property
    def index(self) -> int:
        return self.rank * self.num_workers + self.worker

    @property
    def count(self) -> int:
        return self.world_size * self.num_workers


def rank_and_world(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """This process's (rank, world size): arguments, torch.distributed, RANK/WORLD_SIZE, (0, 1)."""
    if rank is None or world_size is None:
        import torch.distributed as dist  # noqa: PLC0415

        if dist.is_available() and dist.is_initialized():
            r, w = dist.get_rank(), dist.get_world_size()
        else:
            r, w = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        rank = r if rank is None else rank
        world_size = w if world_size is None else world_size
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank {rank} of {world_size}")
    return int(rank), int(world_size)


def current_split(rank: int, world_size: int, num_workers: int | None, epoch: int) -> Split:
    """The split of the calling DataLoader worker (or the main process, without workers)."""
    from torch.utils.data import get_worker_info  # noqa: PLC0415

    info = get_worker_info()
    worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
    declared = num_workers or 1
    if num_workers is not None and declared != workers:
        raise SplitError(
            f"this dataset was made for DataLoader(num_workers={num_workers}) but runs in a "
            f"DataLoader with {workers if info else 0} workers: pass the same num_workers to both "
            f"(the split and the equal step count depend on it)")
    return Split(rank, world_size, worker, workers, epoch)


__all__ = ["Split", "current_split", "rank_and_world"]
