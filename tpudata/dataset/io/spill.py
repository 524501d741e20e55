"""Spilled shuffle buffers: files beside a checkpoint that hold a shuffle's buffered elements.

When a shuffle's buffered elements cannot be named by (file, offset) and weigh more than
``spill_bytes``, a checkpoint (``Iterator.get_state()``) writes them to
``<spill_url>/shuffle-buffer-<random>.pkl`` and the state names that file - by its name only: a
restore looks for it in the shuffle's own ``spill_url``, so a state cannot make the pipeline read
a file elsewhere (a name with a directory, ``..`` or another form is refused). Each file has a
format header and a CRC32C (:mod:`tpudata.dataset.io.checked`), checked when it is read. The files
belong to the states that name them:

- a state taken twice without the iterator moving writes its files once;
- ``shuffle(..., spill_keep=N)`` removes the files of older states once the iterator has
  written those of N newer ones ("keep the last N checkpoints");
- :func:`spilled_files` lists the files a (JSON) state names, and :func:`remove_spilled`
  removes them: call it when you delete the checkpoint that holds the state;
- :func:`prune_spilled` removes every spill file under a directory that none of the given
  states names (e.g. after a crash between writing a state and saving it);
- the first spill of a run removes the temporaries that a run killed while writing one left
  (once they are an hour old: a younger one may be another live writer's).

>>> spilled_files({"cursor": {"buffer": {"elements": {"spilled": "shuffle-buffer-1.pkl"}}}},
...               "/ckpt")
['/ckpt/shuffle-buffer-1.pkl']
"""

from __future__ import annotations

import collections
import logging
import re
import secrets
from typing import Mapping

from tpudata import storage
from tpudata._keywords import storage_options_dict, strict_keywords
from tpudata.dataset.io import checked
from tpudata.errors import StateError

logger = logging.getLogger(__name__)

PREFIX = "shuffle-buffer-"
NAME = re.compile(r"shuffle-buffer-[0-9a-f]{1,64}\.pkl")
KIND = "spill"

__all__ = ["PREFIX", "Spills", "prune_spilled", "remove_spilled", "spilled_files"]


class Spills:
    """One shuffle iterator's spill files: where, from what size, how many states to keep."""

    def __init__(self, url: str | None, min_bytes: int, keep: int | None):
        self.url, self.min_bytes, self.keep = url, min_bytes, keep
        self.history: collections.deque = collections.deque()  # url lists, one per state
        self._cleaned = False

    def write(self, leaves: list, group: list) -> str:
        """Write ``leaves`` for the state whose files are ``group``; returns the name the state
        records (relative to ``url``)."""
        name = f"{PREFIX}{secrets.token_hex(8)}.pkl"
        url = storage.join(self.url, name)
        storage.makedirs(self.url)
        if not self._cleaned:  # once per iterator: what killed runs left
            self._cleaned = True
            checked.remove_leftovers(self.url, (PREFIX,))
        with storage.open_atomic(url) as f:
            checked.write(f, leaves, KIND)
        if not any(g is group for g in self.history):
            self.history.append(group)
        group.append(url)
        while self.keep is not None and len(self.history) > self.keep:
            for old in self.history.popleft():
                storage.remove(old)
                logger.debug("removed the superseded shuffle spill file %s", old)
        return name

    def locate(self, recorded) -> str:
        """The URL of the spill file a state names, in this shuffle's ``spill_url``; a state that
        names anything else raises :class:`~tpudata.errors.StateError`."""
        if not self.url:
            raise StateError(
                f"the state names the spill file {str(recorded)[:200]!r}, but this shuffle has no "
                "spill_url: restore it into the pipeline that took it (with its spill_url)")
        return locate(recorded, self.url)

    def read(self, recorded) -> list:
        """The buffered columns in the spill file a state names (checked)."""
        url = self.locate(recorded)
        return checked.unpack(storage.read_bytes(url), url, KIND)


def locate(recorded, spill_url: str) -> str:
    """``recorded`` (a spill file's name; or, from a state of tpudata < the header, a URL in
    ``spill_url``) as a URL in ``spill_url``."""
    spill_url = str(spill_url).rstrip("/")
    name = recorded
    if isinstance(recorded, str) and "/" in recorded:  # an older state: the file's whole URL
        where, name = recorded.rsplit("/", 1)
        if where.rstrip("/") != spill_url:
            raise StateError(f"the state names the spill file {recorded[:200]!r}, outside the "
                             f"shuffle's spill_url {spill_url!r}: refused")
    try:
        checked.check_name(name, NAME, "shuffle spill file")
    except ValueError as exc:
        raise StateError(f"the state names a spill file that is not one: {exc}") from None
    return storage.join(spill_url, name)


def spilled_files(state, spill_url: str | None = None) -> list[str]:
    """The spill files a state (``Iterator.get_state()``, or its JSON) names, in order: URLs in
    ``spill_url`` when given, else as the state records them (names)."""
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
    if spill_url is None:
        return found
    return [locate(name.rsplit("/", 1)[-1], spill_url) for name in found]


@strict_keywords
def remove_spilled(state, spill_url: str | None = None, *,
                   storage_options: Mapping | None = None) -> list[str]:
    """Remove the spill files ``state`` names from ``spill_url`` (the shuffle's; needed for the
    states of this tpudata, which name files only) when its checkpoint is deleted; returns
    them. Only spill files are removed: a state naming another file raises StateError.
    ``storage_options``: fsspec's."""
    so = storage_options_dict("remove_spilled", storage_options)
    urls = []
    for recorded in spilled_files(state):
        if spill_url is not None:
            urls.append(locate(recorded.rsplit("/", 1)[-1], spill_url))
        elif "/" in recorded:  # an older state's URL
            urls.append(locate(recorded, recorded.rsplit("/", 1)[0]))
        else:
            raise TypeError("remove_spilled(state, spill_url): the state names its spill files "
                            "relative to the shuffle's spill_url; pass it")
    for url in urls:
        storage.remove(url, **so)
    return urls


@strict_keywords
def prune_spilled(spill_url: str, keep=(), *, storage_options: Mapping | None = None) -> list[str]:
    """Remove the spill files under ``spill_url`` that no state in ``keep`` names; returns them
    (``storage_options``: fsspec's).

    Only call it while no iterator is writing a checkpoint there.
    """
    so = storage_options_dict("prune_spilled", storage_options)
    named = {url.rsplit("/", 1)[-1] for state in keep for url in spilled_files(state)}
    pattern = storage.join(str(spill_url).rstrip("/"), PREFIX + "*.pkl")
    removed = []
    for url in storage.glob(pattern, **so):
        if url.rsplit("/", 1)[-1] not in named:
            storage.remove(url, **so)
            removed.append(url)
    return removed
