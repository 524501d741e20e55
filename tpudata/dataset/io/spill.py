"""Spilled shuffle buffers: files beside a checkpoint that hold a shuffle's buffered elements.

When a shuffle's buffered elements cannot be named by (file, offset) and weigh more than
``spill_bytes``, a checkpoint (``Iterator.get_state()``) writes them to
``<spill_url>/shuffle-buffer-<random>.pkl`` and the state names that file instead of carrying
the bytes. The files belong to the states that name them:

- a state taken twice without the iterator moving writes its files once;
- ``shuffle(..., spill_keep=N)`` removes the files of older states once the iterator has
  written those of N newer ones ("keep the last N checkpoints");
- :func:`spilled_files` lists the files a (JSON) state names, and :func:`remove_spilled`
  removes them: call it when you delete the checkpoint that holds the state;
- :func:`prune_spilled` removes every spill file under a directory that none of the given
  states names (e.g. after a crash between writing a state and saving it).

>>> spilled_files({"cursor": {"buffer": {"elements": {"spilled": "/ckpt/shuffle-buffer-1.pkl"}}}})
['/ckpt/shuffle-buffer-1.pkl']
"""

from __future__ import annotations

import collections
import logging
import pickle
import secrets

from tpudata import storage

logger = logging.getLogger(__name__)

PREFIX = "shuffle-buffer-"

__all__ = ["PREFIX", "Spills", "prune_spilled", "remove_spilled", "spilled_files"]


class Spills:
    """One shuffle iterator's spill files: where, from what size, how many states to keep."""

    def __init__(self, url: str | None, min_bytes: int, keep: int | None):
        self.url, self.min_bytes, self.keep = url, min_bytes, keep
        self.history: collections.deque = collections.deque()  # url lists, one per state

    def write(self, leaves: list, group: list) -> str:
        """Write ``leaves`` for the state whose files are ``group``; returns the file's URL."""
        url = storage.join(self.url, f"{PREFIX}{secrets.token_hex(8)}.pkl")
        storage.makedirs(self.url)
        with storage.open_atomic(url) as f:
            f.write(pickle.dumps(leaves, protocol=pickle.HIGHEST_PROTOCOL))
        if not any(g is group for g in self.history):
            self.history.append(group)
        group.append(url)
        while self.keep is not None and len(self.history) > self.keep:
            for old in self.history.popleft():
                storage.remove(old)
                logger.debug("removed the superseded shuffle spill file %s", old)
        return url


def spilled_files(state) -> list[str]:
    """The spill files a state (``Iterator.get_state()``, or its JSON) names, in order."""
    found: list[str] = []

    def walk(obj) -> None:
        if isinstance(obj, dict):
            url = obj.get("spilled")
            if isinstance(url, str):
                found.append(url)
            for value in obj.values():
                walk(value)
        elif isinstance(obj, (list, tuple)):
            for value in obj:
                walk(value)

    walk(state)
    return found


def remove_spilled(state, **storage_options) -> list[str]:
    """Remove the spill files ``state`` names (when its checkpoint is deleted); returns them."""
    urls = spilled_files(state)
    for url in urls:
        storage.remove(url, **storage_options)
    return urls


def prune_spilled(spill_url: str, keep=(), **storage_options) -> list[str]:
    """Remove the spill files under ``spill_url`` that no state in ``keep`` names; returns them.

    Only call it while no iterator is writing a checkpoint there.
    """
    named = {url.rsplit("/", 1)[-1] for state in keep for url in spilled_files(state)}
    pattern = storage.join(str(spill_url).rstrip("/"), PREFIX + "*.pkl")
    removed = []
    for url in storage.glob(pattern, **storage_options):
        if url.rsplit("/", 1)[-1] not in named:
            storage.remove(url, **storage_options)
            removed.append(url)
    return removed
