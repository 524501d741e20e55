"""The graph passes where ``shuffle`` and ``parse`` meet (:mod:`tpudata.dataset.core.optimize`):
neither op looks at the other; these rewrites, run per iteration on a copy of the graph, do.

- ``parse_before_shuffle``: ``shuffle(n).parse(spec)`` runs as ``parse(spec).shuffle(n)``.
- ``shuffle_rebuild`` (required): each shuffle learns what the records its checkpoint names
  become on restore (parsed again, or the records as they are).
"""

from __future__ import annotations

from tpudata.dataset.core.base import Dataset
from tpudata.dataset.core.graph import inputs, replaced
from tpudata.dataset.core.optimize import rewrite
from tpudata.dataset.ops.parse import ParseDataset
from tpudata.dataset.ops.shuffle import ShuffleDataset, _as_records

__all__ = ["parse_before_shuffle", "shuffle_rebuild"]


@rewrite("parse_before_shuffle")
def parse_before_shuffle(node, options) -> Dataset | None:
    """``shuffle(n).parse(spec)`` runs as ``parse(spec).shuffle(n)``: the same elements in the
    same order (a shuffle orders by element counts only), with parsed values in the buffer
    instead of records (an image feature stays in the read buffers, which the shuffle's store
    compacts). The moved parse's rows keep the origin kind "records", so the shuffle's
    checkpoints stay those of the graph as written; the shuffle parses named records again on
    restore. A stack of shuffles is passed whole."""
    if type(node) is not ParseDataset or type(node.input) is not ShuffleDataset:
        return None
    shuffle = node.input
    moved = replaced(node, input=shuffle.input, _origin_kind="records")
    deeper = parse_before_shuffle(moved, options)
    if deeper is not None:  # shuffles stacked: the parse goes under all of them
        return replaced(shuffle, input=deeper)
    return replaced(shuffle, input=moved, _rebuild=_parse_again(moved))


def _parse_again(parse):
    """``parse``'s block function, held without the graph under it (a template sent to remote
    workers carries the shuffle, not the parse's input again)."""
    return replaced(parse, input=None)._parse_block


@rewrite("shuffle_rebuild", optional=False)
def shuffle_rebuild(node, options) -> Dataset | None:
    """Tell each shuffle what its named records become: the block function of a ``parse``
    written before it (``parse(spec).filter(f).shuffle(n)``), or the records as they are. Ops
    between them that change elements drop the records' origins, so a shuffle only names
    elements that came through ops that drop or pass them; a shuffle over parsed elements
    whose parse is not found (inside an interleave's function) carries its buffer."""
    if type(node) is not ShuffleDataset or node._rebuild is not None:
        return None
    below = node.input
    for _ in range(64):
        if type(below) is ParseDataset:
            return replaced(node, _rebuild=_parse_again(below))
        under = inputs(below)
        if isinstance(below, ShuffleDataset) or len(under) != 1:
            break  # a shuffle's output carries no origins
        below = under[0]
    return replaced(node, _rebuild=_as_records)
