"""choose_from_datasets and sample_from_datasets: tf.data's directed interleave.

A selector stream of input indices says which dataset gives the next element. As in TF's
``DirectedInterleaveDataset``: the output ends when the selector ends; an index out of range is
an error; when the chosen dataset is exhausted the output ends with
``stop_on_empty_dataset=True``, else that dataset is dropped (later picks of it are skipped)
and the output ends once every dataset is exhausted.

>>> from tpudata.dataset import Dataset
>>> choice = Dataset.from_tensor_slices([0, 1, 1, 0, 2])
>>> ds = Dataset.choose_from_datasets([Dataset.range(3), Dataset.range(10, 13),
...                                    Dataset.range(20, 23)], choice)
>>> [int(x) for x in ds]
[0, 10, 11, 1, 20]

``sample_from_datasets`` picks each index at random with the given ``weights`` (uniform by
default) from a seeded numpy generator. tf.data draws with Philox and ``stateless_multinomial``,
so its picks for a seed differ; the semantics (zero weights drop a dataset, one dataset is
returned as is, ``stop_on_empty_dataset=False`` by default, the same picks every iteration
unless ``rerandomize_each_iteration=True``) are TF's. State is the selector's position (a count
of draws) and each input's position: element-exact.
"""

from __future__ import annotations

import secrets

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import INFINITE, UNKNOWN, BlockIterator, Cursor, Dataset
from tpudata.dataset.core.block import Block
from tpudata.dataset.ops.concatenate import _merge_specs
from tpudata.dataset.core.common import input_spec
from tpudata.dataset.core.nest import LEAF

CHUNK = 1024  # draws made at once; draw i is chunk i // CHUNK's (i % CHUNK)-th


class DirectedInterleaveDataset(Dataset):
    def __init__(self, selector: Dataset, datasets, stop_on_empty_dataset: bool, op: str):
        super().__init__()
        datasets = list(datasets)
        if not datasets:
            raise ValueError(f"{op}: `datasets` should not be empty")
        for d in datasets:
            if not isinstance(d, Dataset):
                raise TypeError(f"{op}: `datasets` must be Datasets, not {type(d).__name__}")
        self.selector = selector
        self.datasets = datasets
        self.stop_on_empty = bool(stop_on_empty_dataset)
        self.op = op
        specs = [input_spec(d) for d in datasets]
        if all(s is not None for s in specs):  # incompatible datasets are refused now, as in TF
            spec = specs[0]
            for s in specs[1:]:
                spec = _merge_specs(spec, s, op)

    def _make_iterator(self, ctx):
        return _DirectedIterator(self, ctx)

    def _spec(self):
        specs = [input_spec(d) for d in self.datasets]
        if any(s is None for s in specs):
            return None
        spec = specs[0]
        for s in specs[1:]:
            spec = _merge_specs(spec, s, self.op)
        return spec

    def cardinality(self):
        # TF: infinite as soon as one input is infinite, else unknown
        if any(d.cardinality() == INFINITE for d in self.datasets):
            return INFINITE
        return UNKNOWN


class _DirectedIterator(BlockIterator):
    exact_want = True  # never more elements than asked for

    def __init__(self, ds: DirectedInterleaveDataset, ctx):
        self.ds = ds
        self.selector_it = ds.selector._make_iterator(ctx.child(0))
        self.selector = Cursor(self.selector_it)
        self.its = [d._make_iterator(ctx.child(k + 1)) for k, d in enumerate(ds.datasets)]
        self.inputs = [Cursor(it) for it in self.its]
        self.active = [True] * len(self.its)
        self.done = False

    def _choice(self) -> int | None:
        block = self.selector.next_block(1)
        if block is None:
            return None
        value = np.asarray(next(block.elements()))
        if value.shape != () or value.dtype.kind not in "iu":
            raise TypeError(f"{self.ds.op}: selector elements must be scalar integers, got "
                            f"shape {value.shape} dtype {value.dtype}")
        k = int(value)
        if not 0 <= k < len(self.inputs):
            raise ValueError(f"{self.ds.op}: selector index out of range: {k} (there are "
                             f"{len(self.inputs)} datasets)")
        return k

    def next(self):
        parts = []
        want = max(1, self.want)
        while not self.done and len(parts) < want:
            k = self._choice()
            if k is None:
                self.done = True
                break
            if not self.active[k]:
                continue  # TF skips picks of an exhausted input
            block = self.inputs[k].next_block(1)
            if block is not None:
                parts.append(block)
                continue
            if self.ds.stop_on_empty:
                self.done = True
                break
            self.active[k] = False
            self.its[k].close()
            if not any(self.active):
                self.done = True
        return Block.concat(parts) if parts else None

    def get_state(self):
        return {"selector": self.selector.get_state(), "done": self.done,
                "active": list(self.active),
                "inputs": [c.get_state() if a else None for c, a in zip(self.inputs, self.active)]}

    def set_state(self, state):
        self.selector.set_state(state["selector"])
        self.done = bool(state["done"])
        self.active = [bool(a) for a in state["active"]]
        for c, a, s in zip(self.inputs, self.active, state["inputs"]):
            if a:
                c.set_state(s)

    def close(self):
        self.selector_it.close()
        for it in self.its:
            it.close()


class _CategoricalDataset(Dataset):
    """Infinite int64 draws from ``probs`` with a seeded generator (the sampling selector)."""

    def __init__(self, probs: np.ndarray, seed: int | None, rerandomize: bool):
        super().__init__()
        self.cdf = np.cumsum(probs / probs.sum())
        self.seed = int(seed) if seed is not None else secrets.randbits(63)
        self.unseeded = seed is None
        self.rerandomize = rerandomize

    def _drawn_seed(self) -> int | None:
        return self.seed if self.unseeded else None

    def _set_drawn_seed(self, seed: int) -> None:
        self.seed = int(seed)

    def _make_iterator(self, ctx):
        return _CategoricalIterator(self, ctx.path if self.rerandomize else ())

    def _spec(self):
        from tpudata.dataset.core.spec import TensorSpec

        return TensorSpec((), np.dtype(np.int64))

    def cardinality(self):
        return INFINITE


class _CategoricalIterator(BlockIterator):
    def __init__(self, ds: _CategoricalDataset, path: tuple):
        self.ds, self.path = ds, tuple(path)
        self.count = 0
        self.chunk_index, self.chunk = -1, None

    def _draws(self, c: int) -> np.ndarray:
        if c != self.chunk_index:
            rng = np.random.Generator(np.random.PCG64(
                np.random.SeedSequence(self.ds.seed, spawn_key=self.path + (c,))))
            u = rng.random(CHUNK)
            picks = np.searchsorted(self.ds.cdf, u, side="right")
            self.chunk = np.minimum(picks, len(self.ds.cdf) - 1).astype(np.int64)
            self.chunk_index = c
        return self.chunk

    def next(self):
        c, i = divmod(self.count, CHUNK)
        n = min(max(1, self.want), CHUNK - i)
        values = self._draws(c)[i:i + n]
        self.count += n
        return Block(LEAF, [values], n)

    def get_state(self):
        return {"count": self.count, "seed": self.ds.seed}

    def set_state(self, state):
        if int(state["seed"]) != self.ds.seed:
            raise ValueError("sample_from_datasets: the checkpoint was taken with seed "
                             f"{state['seed']}, this dataset has {self.ds.seed}; pass seed= "
                             "to sample_from_datasets to resume an unseeded run")
        self.count = int(state["count"])


def choose_from_datasets(datasets, choice_dataset, stop_on_empty_dataset: bool = True):
    op = "choose_from_datasets"
    if not isinstance(choice_dataset, Dataset):
        raise TypeError(f"{op}: `choice_dataset` should be a Dataset, not "
                        f"{type(choice_dataset).__name__}")
    spec = input_spec(choice_dataset)
    if spec is not None and (getattr(spec, "shape", None) != () or
                             np.dtype(spec.dtype) != np.int64):
        raise TypeError(f"{op}: elements of `choice_dataset` must be scalar int64, not {spec}")
    return DirectedInterleaveDataset(choice_dataset, datasets, stop_on_empty_dataset, op)


def sample_from_datasets(datasets, weights=None, seed: int | None = None,
                         stop_on_empty_dataset: bool = False,
                         rerandomize_each_iteration: bool | None = None):
    op = "sample_from_datasets"
    datasets = list(datasets)
    if not datasets:
        raise ValueError(f"{op}: `datasets` should not be empty")
    if isinstance(weights, Dataset):
        raise TypeError(f"{op}: weights given as a Dataset are not supported; give a list")
    if weights is None:
        probs = np.ones(len(datasets))
    else:
        probs = np.asarray(weights, dtype=np.float64)
        if probs.shape != (len(datasets),):
            raise ValueError(f"{op}: `weights` should have the same length as `datasets`, got "
                             f"len(weights)={probs.size} vs len(datasets)={len(datasets)}")
        if np.any(probs < 0) or not np.all(np.isfinite(probs)):
            raise ValueError(f"{op}: `weights` must be finite and >= 0, not {probs.tolist()}")
        keep = probs > 0  # TF drops zero-weight datasets
        if not keep.any():
            datasets, probs = [datasets[0].take(0)], np.ones(1)
        else:
            datasets = [d for d, k in zip(datasets, keep) if k]
            probs = probs[keep]
    if len(datasets) == 1:
        return datasets[0]
    selector = _CategoricalDataset(probs, seed, bool(rerandomize_each_iteration))
    return DirectedInterleaveDataset(selector, datasets, stop_on_empty_dataset, op)


__all__ = ["DirectedInterleaveDataset", "choose_from_datasets", "sample_from_datasets"]

registry.provide(choose_from_datasets, sample_from_datasets)
