"""random: an endless stream of random int64 values (tf.data's ``Dataset.random``).

>>> a = [int(x) for x in Dataset.random(seed=4).take(3)]
>>> a == [int(x) for x in Dataset.random(seed=4).take(3)]
True

Values come from numpy's PCG64, seeded by ``seed`` and the position, not TF's Philox: a seed
gives another (equally random) stream than TF's. Without a seed each process draws its own.
``rerandomize_each_iteration=True`` gives every epoch (``repeat``) and iteration a new stream;
by default each iteration repeats the same one, as TF does. State is the seed and the position.
"""

from __future__ import annotations

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import INFINITE, BlockIterator, Dataset
from tpudata.dataset.core.block import Block
from tpudata.dataset.core.nest import LEAF
from tpudata.dataset.core.seeds import ProcessSeeded

BLOCK = 4096
_I64 = np.iinfo(np.int64)


class RandomDataset(ProcessSeeded, Dataset):
    def __init__(self, seed: int | None = None, rerandomize_each_iteration: bool | None = None):
        super().__init__()
        self._init_seed(seed)
        self.rerandomize_each_iteration = bool(rerandomize_each_iteration)

    def _make_iterator(self, ctx):
        key = tuple(ctx.path) if self.rerandomize_each_iteration else ()
        return _RandomIterator(self.process_seed(), key)

    def _spec(self):
        from tpudata.dataset.core.spec import TensorSpec

        return TensorSpec((), np.dtype(np.int64))

    def cardinality(self) -> int:
        return INFINITE


class _RandomIterator(BlockIterator):
    def __init__(self, seed: int, key: tuple):
        self.seed, self.key, self.pos = seed, list(key), 0

    def _block(self, b: int) -> np.ndarray:
        seq = np.random.SeedSequence(self.seed, spawn_key=tuple(self.key) + (b,))
        return np.random.Generator(np.random.PCG64(seq)).integers(
            _I64.min, _I64.max, BLOCK, dtype=np.int64, endpoint=True)

    def next(self):
        b, offset = divmod(self.pos, BLOCK)
        values = self._block(b)[offset:]
        self.pos = (b + 1) * BLOCK
        return Block(LEAF, [values], len(values))

    def get_state(self):
        return {"seed": self.seed, "key": self.key, "pos": self.pos}

    def set_state(self, state):
        self.seed, self.key, self.pos = int(state["seed"]), list(state["key"]), int(state["pos"])


__all__ = ["RandomDataset"]

registry.provide(RandomDataset)
