"""Global shuffle without a buffer: epochs of index permutations, split over hosts.

Epoch ``e`` is the permutation ``IndexPermutation(N, derive_seed(seed, e))`` of all ``N`` records
(or the identity without ``shuffle``). Host ``h`` of ``H`` reads the epoch's positions
``P + h, P + h + H, ...`` from the resume point ``P``, ``batch_size`` at a time, so after every
host took ``j`` batches the first ``P + j * batch_size * H`` positions are consumed exactly once.
The whole state is ``{"epoch", "position"}``: it restores on any number of hosts, and every host
runs the same number of steps (``ceil((N - P) / (batch_size * H))``; short batches are padded,
with mask 0).

>>> s = IndexSampler(10, seed=1, shard_index=1, shard_count=2)
>>> idx, mask = next(s.batches(4))
>>> idx.shape, mask.tolist(), s.get_state()
((4,), [1.0, 1.0, 1.0, 1.0], {'epoch': 0, 'position': 8})
"""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from tpudata.distribute.permutation import IndexPermutation, derive_seed

PAD = -1


class IndexSampler:
    """Record indices for one host (``shard_index`` of ``shard_count``), epoch after epoch.

    ``num_epochs=None`` runs forever. :meth:`batches` yields ``(indices, mask)``: ``indices`` is
    int64 of length ``batch_size`` with :data:`PAD` (-1) for padding rows, ``mask`` float32.
    """

    def __init__(self, num_records: int, *, seed: int = 0, shuffle: bool = True,
                 num_epochs: int | None = 1, shard_index: int = 0, shard_count: int = 1):
        if num_records < 0:
            raise ValueError(f"num_records must be >= 0, not {num_records}")
        if shard_count < 1 or not 0 <= shard_index < shard_count:
            raise ValueError(f"need 0 <= shard_index < shard_count, got {shard_index} of {shard_count}")
        if num_epochs is not None and num_epochs < 0:
            raise ValueError(f"num_epochs must be >= 0 or None, not {num_epochs}")
        self.n = int(num_records)
        self.seed = int(seed)
        self.shuffle = shuffle
        self.num_epochs = num_epochs
        self.shard_index = int(shard_index)
        self.shard_count = int(shard_count)
        self.epoch = 0
        self.position = 0
        self._perm: tuple[int, IndexPermutation] | None = None

    # -- the permutation -----------------------------------------------------------------------
    def indices(self, epoch: int, positions) -> np.ndarray:
        """Record indices at global ``positions`` of ``epoch``."""
        pos = np.asarray(positions, dtype=np.int64)
        if not self.shuffle:
            return pos.copy()
        if self._perm is None or self._perm[0] != epoch:
            self._perm = (epoch, IndexPermutation(self.n, derive_seed(self.seed, epoch)))
        return self._perm[1](pos)

    def steps_left(self, batch_size: int) -> int:
        """Batches every host still runs in the current epoch."""
        return math.ceil((self.n - self.position) / (batch_size * self.shard_count))

    # -- iteration -----------------------------------------------------------------------------
    def batches(self, batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(indices, mask)`` batches from the current state on; the state follows each batch."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, not {batch_size}")
        step = np.arange(batch_size, dtype=np.int64) * self.shard_count + self.shard_index
        while self.num_epochs is None or self.epoch < self.num_epochs:
            if self.n == 0:
                return
            if self.position >= self.n:
                self.epoch, self.position = self.epoch + 1, 0
                continue
            while self.position < self.n:
                pos = self.position + step
                valid = pos < self.n
                idx = np.full(batch_size, PAD, dtype=np.int64)
                idx[valid] = self.indices(self.epoch, pos[valid])
                self.position = min(self.n, self.position + batch_size * self.shard_count)
                if self.position >= self.n:
                    self.epoch, self.position = self.epoch + 1, 0
                    yield idx, valid.astype(np.float32)
                    break
                yield idx, valid.astype(np.float32)

    # -- state ---------------------------------------------------------------------------------
    def get_state(self) -> dict:
        """``{"epoch", "position"}``: valid on any number of hosts when taken in lockstep."""
        return {"epoch": self.epoch, "position": self.position}

    def set_state(self, state: dict) -> None:
        epoch, position = int(state["epoch"]), int(state["position"])
        if not 0 <= position <= self.n or epoch < 0:
            raise ValueError(f"state {state} does not fit a source of {self.n} records")
        self.epoch, self.position = epoch, position


__all__ = ["PAD", "IndexSampler"]
