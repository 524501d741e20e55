"""zip: tuples (or dicts) of the datasets' elements, until the shortest ends.

>>> [tuple(int(v) for v in e) for e in Dataset.zip((Dataset.range(2), Dataset.range(10, 20)))]
[(0, 10), (1, 11)]
"""

from __future__ import annotations

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import INFINITE, UNKNOWN, BlockIterator, Cursor, Dataset
from tpudata.dataset.core.block import Block
from tpudata.dataset.core.nest import Tree, flatten


class ZipDataset(Dataset):
    def __init__(self, datasets):
        super().__init__()
        self.tree, self.datasets = flatten(datasets)
        if not self.datasets or not all(isinstance(d, Dataset) for d in self.datasets):
            raise TypeError("zip() needs a (nested) tuple or dict of Datasets")

    def _make_iterator(self, ctx):
        return _ZipIterator([d._make_iterator(ctx.child(k)) for k, d in enumerate(self.datasets)],
                            self.tree)

    def _spec(self):
        from tpudata.dataset.core.nest import unflatten
        from tpudata.dataset.core.spec import _static

        parts = [_static(d) for d in self.datasets]
        return None if any(p is None for p in parts) else unflatten(self.tree, parts)

    def cardinality(self):
        cards = [d.cardinality() for d in self.datasets]
        finite = [c for c in cards if c >= 0]
        if finite:
            return min(finite)
        return UNKNOWN if UNKNOWN in cards else INFINITE


class _ZipIterator(BlockIterator):
    def __init__(self, its, tree):
        self.its = its
        self.cursors = [Cursor(it) for it in its]
        self.tree = tree

    def next(self):
        n = min(c.available(max(1, self.want)) for c in self.cursors)
        if n == 0:
            return None
        parts = [c.next_block(n) for c in self.cursors]
        leaves = []
        trees = []
        for p in parts:
            trees.append(p.tree)
            leaves.extend(p.leaves)
        return Block(_graft(self.tree, trees), leaves, n)

    def get_state(self):
        return {"cursors": [c.get_state() for c in self.cursors]}

    def set_state(self, state):
        for c, s in zip(self.cursors, state["cursors"]):
            c.set_state(s)

    def close(self):
        for it in self.its:
            it.close()


def _graft(tree: Tree, subtrees: list) -> Tree:
    """Replace the leaves of ``tree`` by ``subtrees`` in order."""
    it = iter(subtrees)

    def go(t):
        if t.kind == "leaf":
            return next(it)
        return Tree(t.kind, t.keys, [go(c) for c in t.children])

    return go(tree)


__all__ = ["ZipDataset"]

registry.provide(ZipDataset)
