"""Seeds drawn for unseeded random ops, carried in the iterator's state.

An unseeded ``shuffle`` (or ``list_files``, ``Dataset.random``, ``sample_from_datasets``) draws
its seed when the Dataset is built. A checkpoint restored into a freshly built pipeline must go on
with the seeds of the run that saved it, not the new ones, or every epoch after the restore would
be ordered differently from the uninterrupted run (tf.data saves its seed generators' seeds in
the iterator checkpoint too). ``Iterator.get_state`` records them; ``set_state`` puts them back.

A random op takes part by defining ``_drawn_seed()`` (``None`` when the user gave a seed) and
``_set_drawn_seed(seed)``; :class:`ProcessSeeded` gives both to ops that draw per process.
"""

from __future__ import annotations

import os
import secrets


class ProcessSeeded:
    """An op with an optional ``seed``: unseeded, it draws one when built and again in each
    process that holds a copy (forked or spawned workers must not all draw alike)."""

    def _init_seed(self, seed: int | None) -> None:
        self.seed = None if seed is None else int(seed)
        self._seed = self.seed if self.seed is not None else secrets.randbits(63)
        self._pid = os.getpid()

    def process_seed(self) -> int:
        """``seed``, or the one drawn in this process."""
        if self.seed is None and self._pid != os.getpid():
            self._seed, self._pid = secrets.randbits(63), os.getpid()
        return self._seed

    def _drawn_seed(self) -> int | None:
        return None if self.seed is not None else self.process_seed()

    def _set_drawn_seed(self, seed: int) -> None:
        self._seed, self._pid = int(seed), os.getpid()


def random_nodes(ds) -> list:
    """The unseeded random ops of the pipeline ``ds``, in a fixed depth-first order (not those
    inside a mixture's named components: a mixture keeps its components' seeds in its own
    state, so components may come and go at a restore)."""
    from tpudata.dataset.core.graph import walk

    found = []
    for node in walk(ds, dicts=False):
        drawn = getattr(node, "_drawn_seed", None)
        if drawn is not None and drawn() is not None:
            found.append(node)
    return found


def restore_seeds(nodes: list, seeds: list) -> bool:
    """Give the unseeded random ops ``nodes`` (from :func:`random_nodes`) the saved ``seeds``;
    True if any changed. A list of another length (the state belongs to another pipeline) is
    left to the state check."""
    if len(nodes) != len(seeds):
        return False
    changed = False
    for node, seed in zip(nodes, seeds):
        if int(node._drawn_seed()) != int(seed):
            node._set_drawn_seed(int(seed))
            changed = True
    return changed


__all__ = ["ProcessSeeded", "random_nodes", "restore_seeds"]
