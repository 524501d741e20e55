"""The one walker over a pipeline's graph, and the one way to copy an op with other inputs.

An op holds its inputs as attributes: a Dataset, or lists, tuples and dicts of them (a
mixture's named components). :func:`inputs` lists them in constructor order (the same for the
same pipeline), :func:`walk` visits every op once, depth first, top first; :func:`replaced` is
a shallow copy of an op with some attributes changed (another input), every other setting kept
(what a rewrite or a split cut builds; the user's op is never changed).

>>> from tpudata.dataset import Dataset
>>> ds = Dataset.range(4).map(lambda x: x).concatenate(Dataset.range(2))
>>> [type(op).__name__ for op in walk(ds)]
['ConcatenateDataset', 'MapDataset', 'RangeDataset', 'RangeDataset']
"""

from __future__ import annotations

import threading
from typing import Iterator

__all__ = ["inputs", "replaced", "walk"]


def _is_dataset(value) -> bool:
    from tpudata.dataset.core.base import Dataset

    return isinstance(value, Dataset)


def inputs(node, dicts: bool = True) -> list:
    """The Datasets the op ``node`` holds, in constructor order (``dicts=False``: not those in
    dicts, i.e. a mixture's components, which keep their own seeds)."""
    out = []
    for value in node.__dict__.values():
        if isinstance(value, dict):
            values = value.values() if dicts else ()
        elif isinstance(value, (list, tuple)):
            values = value
        else:
            values = (value,)
        out.extend(v for v in values if _is_dataset(v))
    return out


def walk(ds, dicts: bool = True) -> Iterator:
    """Every op of the pipeline ``ds`` once, depth first, top first."""
    seen, stack = set(), [ds]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(reversed(inputs(node, dicts)))


def replaced(node, **changes):
    """A shallow copy of the op ``node`` with ``changes`` to its attributes (e.g. another
    ``input``): every other setting of the op kept, whatever it is. An unseeded random op draws
    its process's seed on the original first, so the copy orders elements alike."""
    drawn = getattr(node, "_drawn_seed", None)
    if drawn is not None:
        drawn()
    new = object.__new__(type(node))
    new.__dict__.update(node.__dict__)
    new.__dict__.update(changes)
    new.__dict__["_lock"] = threading.Lock()
    return new
