"""Shard plans: which items go into which shard, what the shards are called, and fingerprints.

A plan is a list of ``(start, stop)`` slices of the item sequence, contiguous and in order. By
count the slices are balanced (sizes differ by at most one, larger ones first, like
``numpy.array_split``); by size the shard count is ``ceil(total / target)`` and the cuts fall
where the running byte total is closest to an equal share, so ``-of-N`` is right from the start.

>>> plan_by_count(10, 4)
[(0, 3), (3, 6), (6, 8), (8, 10)]
>>> plan_by_size([10, 90, 30, 30, 30, 10], target_bytes=100)
[(0, 2), (2, 6)]
>>> shard_name("train", 0, 1024)
'train-00000-of-01024'
"""

from __future__ import annotations

import hashlib
import inspect
import math
import re
from typing import Any, Callable, Sequence

import numpy as np

DEFAULT_TARGET_SHARD_BYTES = 100 * 1000 * 1000  # "on the order of 100MB" (Cloud TPU guide)
RECORD_OVERHEAD = 16  # TFRecord framing: length (8) + length CRC (4) + data CRC (4)
PLAN_VERSION = "tpudata-shards-1"  # part of every fingerprint: bump when shard bytes change


def shard_name(prefix: str, index: int, count: int) -> str:
    """``{prefix}-{index:05d}-of-{count:05d}``, the name TensorFlow's tools give shards."""
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} is outside 0..{count - 1}")
    return f"{prefix}-{index:05d}-of-{count:05d}"


def shard_name_pattern(prefix: str) -> re.Pattern:
    """A regex matching any ``{prefix}-NNNNN-of-NNNNN`` name (groups: index, count)."""
    return re.compile(re.escape(prefix) + r"-(\d{5,})-of-(\d{5,})")


def check_prefix(prefix: str) -> str:
    if not isinstance(prefix, str) or not prefix or "/" in prefix or prefix.startswith("."):
        raise ValueError(
            f"shard prefix must be a non-empty file name without '/' or a leading '.', "
            f"not {prefix!r}"
        )
    return prefix


def plan_by_count(num_items: int, num_shards: int) -> list[tuple[int, int]]:
    """``num_shards`` contiguous slices of ``num_items`` whose sizes differ by at most one."""
    if num_items < 0:
        raise ValueError(f"num_items must be >= 0, not {num_items}")
    if not isinstance(num_shards, (int, np.integer)) or num_shards < 1:
        raise ValueError(f"num_shards must be a positive integer, not {num_shards!r}")
    q, r = divmod(int(num_items), int(num_shards))
    starts = [i * q + min(i, r) for i in range(num_shards + 1)]
    return list(zip(starts[:-1], starts[1:]))


def plan_by_size(sizes: Sequence[int], target_bytes: int) -> list[tuple[int, int]]:
    """Contiguous slices of items with the given byte ``sizes``, each close to ``total / N``.

    ``N = ceil(total / target_bytes)`` (at least one, at most one shard per item). Each cut falls
    at the item boundary nearest to an equal share of the running total, and no shard is empty.
    """
    if target_bytes is None or target_bytes <= 0:
        raise ValueError(f"target_shard_bytes must be positive, not {target_bytes!r}")
    arr = np.asarray(sizes, dtype=np.int64).reshape(-1)
    n = int(arr.size)
    if n and int(arr.min()) < 0:
        raise ValueError("item sizes must be >= 0")
    total = int(arr.sum())
    count = max(1, math.ceil(total / target_bytes))
    count = min(count, max(n, 1))
    if count == 1:
        return [(0, n)]
    cum = np.cumsum(arr)
    cuts = [0]
    for i in range(1, count):
        goal = total * i / count
        j = int(np.searchsorted(cum, goal, side="left"))  # item j crosses the goal
        before = int(cum[j - 1]) if j > 0 else 0
        cut = j if goal - before <= int(cum[j]) - goal else j + 1
        cut = max(cut, cuts[-1] + 1)  # no empty shard ...
        cut = min(cut, n - (count - i))  # ... and leave at least one item per later shard
        cuts.append(cut)
    cuts.append(n)
    return list(zip(cuts[:-1], cuts[1:]))


def plan_shards(
    num_items: int,
    *,
    num_shards: int | None = None,
    target_shard_bytes: int | None = None,
    item_sizes: Sequence[int] | None = None,
) -> list[tuple[int, int]]:
    """Plan by ``num_shards`` or else by ``target_shard_bytes`` (default 100 MB) and item sizes.

    Item sizes are the serialized record sizes (or a good estimate); the TFRecord framing
    overhead is added here.
    """
    if num_shards is not None:
        if target_shard_bytes is not None:
            raise ValueError("give num_shards or target_shard_bytes, not both")
        return plan_by_count(num_items, num_shards)
    if item_sizes is None:
        raise ValueError(
            "planning by target_shard_bytes needs the item sizes up front (item_sizes=...); "
            "give num_shards instead, or use write_shards() on a stream of records"
        )
    sizes = np.asarray(item_sizes, dtype=np.int64).reshape(-1)
    if sizes.size != num_items:
        raise ValueError(f"item_sizes has {sizes.size} entries for {num_items} items")
    return plan_by_size(sizes + RECORD_OVERHEAD, target_shard_bytes or DEFAULT_TARGET_SHARD_BYTES)


def describe_callable(fn: Callable) -> str:
    """A stable description of an encoder for fingerprints (no memory addresses).

    An object's ``fingerprint`` attribute wins; functions are named by module and qualified
    name; other objects by their ``repr`` when it is stable, else by their type.
    """
    fp = getattr(fn, "fingerprint", None)
    if fp is not None:
        return str(fp() if callable(fp) else fp)
    if inspect.isfunction(fn) or inspect.isbuiltin(fn) or inspect.ismethod(fn):
        return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    text = repr(fn)
    if " at 0x" in text or " object at " in text:
        cls = type(fn)
        return f"{cls.__module__}.{cls.__qualname__}"
    return text


def shard_fingerprint(
    name: str,
    items: Sequence[Any],
    encoder_description: str,
    compression: str | None,
    item_key: Callable[[Any], str] = repr,
) -> str:
    """A digest of everything that decides a shard's bytes: its name, items, encoder, codec."""
    h = hashlib.sha256()
    header = f"{PLAN_VERSION}\0{name}\0{compression or ''}\0{encoder_description}\0{len(items)}\0"
    h.update(header.encode("utf-8"))
    for item in items:
        h.update(item_key(item).encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()[:32]


__all__ = [
    "DEFAULT_TARGET_SHARD_BYTES",
    "RECORD_OVERHEAD",
    "check_prefix",
    "describe_callable",
    "plan_by_count",
    "plan_by_size",
    "plan_shards",
    "shard_fingerprint",
    "shard_name",
    "shard_name_pattern",
]
