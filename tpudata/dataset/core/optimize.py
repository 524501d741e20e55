"""Graph rewrites applied before iteration, as tf.data's static optimisations.

Every :class:`~tpudata.dataset.core.iterator.Iterator` runs the pipeline that :func:`optimize`
returns: the user's graph with each registered rewrite applied bottom-up. A rewrite is a function
``(node, options) -> Dataset | None`` (None: leave the node as it is) that the module defining
it registers with :func:`rewrite`; it must give the same elements in the same order, the same
iterator state (a checkpoint restores into the pipeline with or without the rewrite) and the
same errors. Rewrites are the one place where an op's configuration depends on another op:
ops themselves never look at their inputs' types. The user's Datasets are never changed: the nodes above a rewritten one are shallow
copies for this iteration, and a node that keeps data on itself across iterations
(``_keeps_state = True``, e.g. an in-memory ``cache``) is never copied, so nothing below it is
rewritten. The element spec, cardinality and checkpoint fingerprint stay those of the user's
graph.

Rewrites registered:

- ``map_and_batch_fusion`` (:mod:`tpudata.dataset.ops.map_batch`): ``map(fn).batch(n)``, where
  ``fn`` calls a function with a batch form (tpudata.image's presets), runs those calls as one
  batch call per batch. ``Options().experimental_optimization.map_and_batch_fusion = False``
  turns it off.
- ``parse_before_shuffle`` (:mod:`tpudata.dataset.ops.shuffle_parse`): ``shuffle(n).parse(spec)``
  runs as ``parse(spec).shuffle(n)`` (shuffling decides its order from element counts only, so
  the elements are the same), so the buffer holds parsed values, not read buffers. The moved
  shuffle still names its buffered elements by their records, so its checkpoints are those of
  the pipeline as written.

Required passes (:func:`rewrite` with ``optional=False``) run whatever the options say:

- ``shuffle_rebuild`` (:mod:`tpudata.dataset.ops.shuffle_parse`): a shuffle over parsed records (a
  ``parse``, then ops that only drop or pass elements) learns how to parse records again, so
  its checkpoint names its buffer by (file, offset) instead of carrying it.
"""

from __future__ import annotations

from typing import Callable

from tpudata.dataset.core.base import Dataset
from tpudata.dataset.core.graph import replaced

__all__ = ["optimize", "rewrite", "rewrites"]

_REWRITES: dict[str, Callable] = {}
_REQUIRED: set = set()  # passes that run whatever the options say


def rewrite(name: str, optional: bool = True):
    """Register ``fn(node, options) -> Dataset | None`` as the rewrite ``name`` (a decorator).
    ``optional=False``: a pass that always runs (``experimental_optimization`` has no switch
    for it)."""

    def register(fn: Callable) -> Callable:
        if _REWRITES.get(name, fn) is not fn:
            raise RuntimeError(f"two rewrites named {name!r}")
        _REWRITES[name] = fn
        if not optional:
            _REQUIRED.add(name)
        return fn

    return register


def rewrites() -> list[str]:
    """The names of the registered rewrites."""
    return sorted(_REWRITES)


def optimize(ds: Dataset, options=None) -> Dataset:
    """``ds`` with every rewrite that ``options`` (the pipeline's merged Options) allows applied;
    ``ds`` itself when none applies."""
    if options is None:
        from tpudata.dataset.core.options import options_of

        options = options_of(ds)
    active = [fn for name, fn in _REWRITES.items()
              if name in _REQUIRED or options.optimization_enabled(name)]
    if not active:
        return ds
    memo: dict[int, Dataset] = {}
    return _visit(ds, active, options, memo, 0)


def _visit(node: Dataset, active: list, options, memo: dict, depth: int) -> Dataset:
    done = memo.get(id(node))
    if done is not None:
        return done
    out = node
    if depth < 200:  # deeper graphs run as they are
        changes = {}
        for key, value in node.__dict__.items():
            new = _visit_value(value, active, options, memo, depth)
            if new is not value:
                changes[key] = new
        if changes and not getattr(node, "_keeps_state", False):
            out = replaced(node, **changes)  # a copy for this iteration
    for fn in active:
        new = fn(out, options)
        if new is not None:
            out = new
    memo[id(node)] = out
    return out


def _visit_value(value, active: list, options, memo: dict, depth: int):
    if isinstance(value, Dataset):
        return _visit(value, active, options, memo, depth + 1)
    if isinstance(value, (list, tuple)) and any(isinstance(v, Dataset) for v in value):
        new = [_visit(v, active, options, memo, depth + 1) if isinstance(v, Dataset) else v for v in value]
        if all(a is b for a, b in zip(new, value)):
            return value
        return new if isinstance(value, list) else type(value)(new) if type(value) is tuple else value
    if isinstance(value, dict) and any(isinstance(v, Dataset) for v in value.values()):
        new = {k: _visit(v, active, options, memo, depth + 1) if isinstance(v, Dataset) else v
               for k, v in value.items()}
        return value if all(new[k] is value[k] for k in value) else new
    return value

