"""Input positions inside a block: what a :class:`~tpudata.dataset.core.iterator.Cursor`'s state
would be ``k`` elements further on."""

from __future__ import annotations


def state_after(state: dict, k: int) -> dict:
    """The position ``k`` elements after ``state`` (a Cursor state taken before a
    ``next_block`` call whose block holds at least ``k`` elements)."""
    return {"before": state["before"], "pos": int(state["pos"]) + int(k), "done": False}


__all__ = ["state_after"]
