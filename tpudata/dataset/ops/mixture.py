"""mix: a weighted mixture of NAMED datasets whose state is keyed by name.

``Dataset.mix({"web": a, "code": b}, weights={"web": 0.7, "code": 0.3}, seed=1)`` gives each
element from a component drawn at random with the weights (tf.data's ``sample_from_datasets``,
seqio's ``Mixture``, grain's ``IterDataset.mix``). Its state names the components, so a
checkpoint restores into a mixture with other weights, another seed, components added (they
start from their beginning) or removed (their position is dropped, logged): every component
that stays goes on exactly where it was, none of its elements skipped or repeated.

>>> from tpudata.dataset import Dataset
>>> ds = Dataset.mix({"a": Dataset.range(3), "b": Dataset.range(10, 13)}, seed=0)
>>> sorted(int(x) for x in ds)
[0, 1, 2, 10, 11, 12]

Picks. Draw ``s`` (the ``s``-th element of the mixture) has candidates ``c_0, c_1, ...``: each an
independent inverse-CDF draw over all the components with their weights, from numpy's PCG64
seeded by ``(seed, s // CHUNK, round)``; the element comes from the first candidate that is
still active (not ended for good, weight > 0), i.e. with the active components' weights
re-normalised. After 32 rounds (the active weight is tiny) an exponential race over the active
components decides. So a pick depends on the seed, the position and the configuration (names,
weights) only, never on the dict's order, and a component's end changes only the draws that
picked it: a whole window of draws is resolved with numpy and every component is read in one
block per window (``Cursor.take``), never more elements than the window delivers.

Epochs are per component (``repeat=True`` forever, an int for that many, False once); with
``stop_on_empty_dataset=True`` the mixture ends at the first pick of a component that has
ended for good, else (tf.data's default) that component drops out and the others go on.

Elastic (``num_shards=H, shard_index=h``): every host mixes the whole of each component with the
same seed, and host ``h`` takes the ``h``-th element of each round of ``H`` consecutive elements
of a component's (repeated) stream. Hosts that take the same number of elements are at the same
round boundary of every component, so any host's state restores on any host of any host count
(see docs/mixtures.md for exactly what holds).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import INFINITE, UNKNOWN, BlockIterator, Dataset
from tpudata.dataset.core.block import Block
from tpudata.dataset.core.common import input_spec
from tpudata.dataset.core.fingerprint import describe, fingerprint
from tpudata.dataset.core.seeds import random_nodes
from tpudata.dataset.ops.concatenate import _merge_specs
from tpudata.dataset.ops.mixture_parts import (OP, _Component, _Config, _Horizon, _interleave,
                                                _name_key, _RoundComponent)
from tpudata.errors import StateError

logger = logging.getLogger(__name__)


def _epochs(value, name: str) -> int:
    """``repeat`` for one component as a number of epochs (-1: forever)."""
    if value is True or value is None:
        return -1
    if value is False:
        return 1
    if isinstance(value, (int, np.integer)) and int(value) >= 1:
        return int(value)
    raise ValueError(f"{OP}: repeat for {name!r} must be True (forever), False (once) or a "
                     f"number of epochs >= 1, not {value!r}")


class MixDataset(Dataset):
    """A weighted mixture of named datasets (see the module doc)."""

    def __init__(self, datasets, weights=None, seed: int | None = None,
                 stop_on_empty_dataset: bool = False, repeat=False,
                 rerandomize_each_iteration: bool | None = None,
                 num_shards: int | None = None, shard_index: int | None = None):
        super().__init__()
        if not isinstance(datasets, Mapping) or not datasets:
            raise TypeError(f"{OP}: `datasets` must be a non-empty dict of name -> Dataset, not "
                            f"{type(datasets).__name__}; for a list use sample_from_datasets")
        for name, d in datasets.items():
            if not isinstance(name, str) or not name:
                raise TypeError(f"{OP}: component names must be non-empty strings, not {name!r}")
            if not isinstance(d, Dataset):
                raise TypeError(f"{OP}: component {name!r} must be a Dataset, not "
                                f"{type(d).__name__}")
        names = sorted(datasets)
        keys = [_name_key(n) for n in names]
        if len(set(keys)) != len(keys):
            raise ValueError(f"{OP}: two component names hash alike; rename one of {names}")
        w = self._weights_of(names, weights)
        if isinstance(repeat, Mapping):
            unknown = sorted(set(repeat) - set(names))
            if unknown:
                raise ValueError(f"{OP}: repeat names {unknown}, which are not components "
                                 f"({names})")
            epochs = [_epochs(repeat.get(n, False), n) for n in names]
        else:
            epochs = [_epochs(repeat, "every component")] * len(names)
        # everything that may change at a restore is private: the pipeline fingerprint
        # (core/fingerprint.py) leaves it out, and each component's own is checked by name
        self._components = {n: datasets[n] for n in names}
        self._names, self._weights, self._epochs = names, w, epochs
        self._stop = bool(stop_on_empty_dataset)
        self._rerandomize = bool(rerandomize_each_iteration)
        self._seed = int(seed) if seed is not None else secrets.randbits(63)
        self._unseeded = seed is None
        # each component's pipeline as built here, which its state must match (computed now:
        # graph rewrites made for an iteration copy this node and keep it)
        self._fingerprints = {n: fingerprint(describe(d)) for n, d in self._components.items()}
        self._shards = self._shards_of(num_shards, shard_index)
        if self._shards is not None:
            self._check_elastic()
        # set by elastic_hosts (ops/hosts.py) on the graphs it builds: the draw where this
        # mixture ends (an old host's view, drained), and (state, shards, draw) to start from
        self._cap: int | None = None
        self._start: tuple | None = None
        specs = [input_spec(d) for d in self._components.values()]
        if all(s is not None for s in specs):  # incompatible components are refused now
            self._spec()

    @staticmethod
    def _weights_of(names: list, weights) -> np.ndarray:
        if weights is None:
            return np.ones(len(names))
        if not isinstance(weights, Mapping):
            raise TypeError(f"{OP}: `weights` must be a dict of name -> weight (the components' "
                            f"names), not {type(weights).__name__}")
        if set(weights) != set(names):
            raise ValueError(f"{OP}: `weights` must name every component once: missing "
                             f"{sorted(set(names) - set(weights))}, unknown "
                             f"{sorted(set(weights) - set(names), key=str)}")
        w = np.array([float(weights[n]) for n in names])
        if np.any(w < 0) or not np.all(np.isfinite(w)):
            raise ValueError(f"{OP}: weights must be finite and >= 0, not {dict(weights)}")
        return w

    @staticmethod
    def _shards_of(num_shards, shard_index):
        if num_shards is None and shard_index is None:
            return None
        if num_shards is None or shard_index is None:
            raise ValueError(f"{OP}: give both num_shards and shard_index (or neither)")
        num_shards, shard_index = int(num_shards), int(shard_index)
        if num_shards < 1 or not 0 <= shard_index < num_shards:
            raise ValueError(f"{OP}: need 0 <= shard_index < num_shards, got {shard_index} of "
                             f"{num_shards}")
        return num_shards, shard_index

    def _check_elastic(self) -> None:
        """Every host must see the same components in the same order and draw the same picks."""
        if self._unseeded:
            raise ValueError(f"{OP}: num_shards= needs seed= (every host must draw the same "
                             "picks)")
        for name, d in self._components.items():
            if random_nodes(d):
                raise ValueError(
                    f"{OP}: component {name!r} has random ops without a seed (e.g. shuffle or "
                    "list_files): with num_shards= every host reads the whole component and "
                    "must order it alike; give them seeds")

    # -- Dataset -------------------------------------------------------------------------------
    @property
    def datasets(self) -> list:
        """The components, in name order (for code that walks a pipeline's inputs)."""
        return list(self._components.values())

    @property
    def components(self) -> dict:
        """``{name: Dataset}``."""
        return dict(self._components)

    def _drawn_seed(self) -> int | None:
        return self._seed if self._unseeded else None

    def _set_drawn_seed(self, seed: int) -> None:
        self._seed = int(seed)

    def _describe(self) -> str:
        parts = [f"{n}={w:g}" for n, w in zip(self._names, self._weights)]
        if self._shards is not None:
            parts.append(f"shard={self._shards[1]}/{self._shards[0]}")
        return f"mix({', '.join(parts)})"

    def _make_iterator(self, ctx):
        return _MixIterator(self, ctx)

    def _spec(self):
        specs = [input_spec(d) for d in self._components.values()]
        if any(s is None for s in specs):
            return None
        spec = specs[0]
        for s in specs[1:]:
            spec = _merge_specs(spec, s, OP)
        return spec

    def cardinality(self):
        totals = []
        for d, w, e in zip(self._components.values(), self._weights, self._epochs):
            if w <= 0:
                continue
            c = d.cardinality()
            if c == INFINITE or (e < 0 and c != 0):
                totals.append(INFINITE)
            else:
                totals.append(c * e if c >= 0 else UNKNOWN)
        if not totals:
            return 0
        if self._stop:
            return INFINITE if all(t == INFINITE for t in totals) else UNKNOWN
        if INFINITE in totals:
            return INFINITE
        if UNKNOWN in totals or self._shards is not None:
            return UNKNOWN
        return int(sum(totals))


class _MixIterator(BlockIterator):
    exact_want = True  # never more elements than asked for

    def __init__(self, ds: MixDataset, ctx):
        self.ds = ds
        make = (lambda *a: _RoundComponent(*a, ds._shards)) if ds._shards else _Component
        self.comps = [make(n, ds._components[n], ctx, e, ds._fingerprints[n])
                      for n, e in zip(ds._names, ds._epochs)]
        self.path = ctx.path if ds._rerandomize else ()
        self.current = _Config(dict(zip(ds._names, ds._weights)), dict(zip(ds._names, ds._epochs)),
                               ds._stop, ds._seed, self.comps, self.path)
        self.segments: list = []  # [(until, _Config)]: a restored state's draws before ``until``
        self.count = 0  # draws made = elements delivered
        if ds._start is not None:
            self._advance(*ds._start)

    def _config(self):
        """The configuration of the next draw, and the draw where it gives way (None: never)."""
        for until, config in self.segments:
            if self.count < until:
                return config, until
        return self.current, None

    def _active(self, config: _Config) -> np.ndarray:
        """One entry per component (active: not ended, weight > 0), then a False for ``gone``."""
        return np.array([c.active and w > 0 for c, w in zip(self.comps, config.weight_of)]
                        + [False])

    def _finished(self, config: _Config, active: np.ndarray) -> bool:
        comps = zip(self.comps, config.weight_of)
        if config.stop and any(not c.active and w > 0 for c, w in comps):
            return True  # a component that may be picked has ended: a stop at its next pick
        return not active.any()

    def next(self):
        while True:
            config, until = self._config()
            for comp, epochs in zip(self.comps, config.epochs_of):
                comp.epochs = epochs
            active = self._active(config)
            if not self._finished(config, active):
                break
            if until is None:
                return None
            self.segments = [(u, c) for u, c in self.segments if u > until]  # (it diverged)
        n = max(1, self.want) if until is None else min(max(1, self.want), until - self.count)
        if self.ds._cap is not None:
            if self.count >= self.ds._cap:
                return None
            n = min(n, self.ds._cap - self.count)
        slots = np.arange(self.count, self.count + n, dtype=np.int64)
        assign = config.picks.assign(slots, active)
        parts: list = [[] for _ in self.comps]
        taken = np.zeros(len(self.comps), dtype=np.int64)
        end = n
        while True:
            need = np.bincount(assign[:end], minlength=len(self.comps))
            short = None  # (draw, component) of the earliest pick of a component that ended
            for k in np.flatnonzero(need > taken).tolist():
                for block in self.comps[k].take(int(need[k] - taken[k])):
                    parts[k].append(block)
                    taken[k] += block.n
                if taken[k] < need[k]:
                    j = int(np.flatnonzero(assign[:end] == k)[taken[k]])
                    if short is None or j < short[0]:
                        short = (j, k)
            if short is None:
                break
            j, k = short  # component k ended for good at draw j
            active[k] = False
            if config.stop or not active.any():
                end = j
                break
            redo = j + np.flatnonzero(assign[j:end] == k)
            assign[redo] = config.picks.assign(slots[redo], active)
        self.count += end
        return self._assemble(assign[:end], parts, taken)

    def _assemble(self, assign: np.ndarray, parts: list, taken: np.ndarray) -> Block | None:
        keep = np.bincount(assign, minlength=len(self.comps))
        blocks = []
        for k, comp in enumerate(self.comps):
            if not parts[k]:
                continue
            block = Block.concat(parts[k])
            if taken[k] > keep[k]:  # a stop left these undelivered: handed back
                comp.unread(block.slice(int(keep[k]), block.n))
                block = block.slice(0, int(keep[k]))
            if block.n:
                blocks.append(block)
        if not len(assign):
            return None
        if len(blocks) == 1:
            return blocks[0]
        return _interleave(blocks, np.argsort(assign, kind="stable"))

    # -- state ---------------------------------------------------------------------------------
    def get_state(self):
        configs = [{"until": u, **c.to_json()} for u, c in self.segments if u > self.count]
        configs.append({"until": _Horizon(self), **self.current.to_json()})
        state = {"count": self.count, "configs": configs,
                 "components": {c.name: c.get_state() for c in self.comps}}
        if self.ds._shards is not None:
            state["shards"] = list(self.ds._shards)
            state["lockstep"] = all(c.even and c.carry is None for c in self.comps)
        return state

    def set_state(self, state, check: bool = True):
        if check:
            self._check_shards(state)
        saved = state["components"]
        ours = {c.name for c in self.comps}
        for comp in self.comps:
            if comp.name in saved:
                comp.set_state(saved[comp.name])
            else:
                comp.restart()
        self.count = int(state["count"])
        mine = self.current.to_json()
        self.segments = []
        for saved_config in state["configs"]:
            until = int(saved_config["until"])
            config = {k: v for k, v in saved_config.items() if k != "until"}
            if until > self.count and config != mine:
                self.segments.append((until, _Config.from_json(config, self.comps, self.path)))
        self._log_changes(sorted(set(saved) - ours), sorted(ours - set(saved)))
        # The op above keeps this dict as its snapshot of our position until it reads on (a
        # Cursor's ``before``): make it this mixture's own, so that a checkpoint taken before
        # then records this run's components and configuration (and how far it got), not the
        # restored run's. (The dict is the restore's own copy: Iterator.set_state decodes it.)
        fresh = self.get_state()
        state.clear()
        state.update(fresh)

    def _log_changes(self, dropped: list, added: list) -> None:
        if added:
            logger.info("%s: components %s are new to the state: they start from their "
                        "beginning", OP, added)
        if not dropped:
            return
        logger.warning("%s: the state's components %s are not in this mixture: their positions "
                       "are dropped", OP, dropped)
        # Draws the saving run made beyond the state's position, under configurations that
        # gave a dropped component a weight: if the ops after the mixture replay them, the
        # dropped component's draws there are drawn again among the others
        replayed, weighted = 0, set()
        for until, config in self.segments:
            live = {n for n in dropped if config.weights.get(n, 0) > 0}
            if not live:
                continue
            weighted |= live
            lo = max(self.count, until - (1 << 20))
            gone = config.picks._candidates(np.arange(lo, until, dtype=np.int64), 0)
            replayed += int((gone == len(self.comps)).sum())
        if weighted:
            logger.warning(
                "%s: %s had a weight in the draws the saving run made after this state's "
                "position (about %d of them took it); if the ops after the mixture replay those "
                "draws at this restore (unbatch of a partly used batch, a packer's partial "
                "rows), about as many elements of the other components are skipped. To remove "
                "a component exactly, give it weight 0 and remove it at a checkpoint taken after "
                "the run with weight 0 has drawn (see docs/mixtures.md)", OP, sorted(weighted),
                replayed)

    def _advance(self, state: dict, shards: tuple, until: int) -> None:
        """Start at draw ``until`` of the hosts ``shards`` (an elastic host change): restore
        ``state`` (a host's of ``shards``, drawing with its configurations up to ``until``), draw
        up to there, then read as this mixture's host. At a draw every host of ``shards`` has
        reached, their components stand at the same round boundary: the new hosts go on from it."""
        mine = self.ds._shards
        for comp in self.comps:
            comp.hosts, comp.host = shards
        self.set_state(dict(state, shards=list(shards)), check=False)
        while self.count < until:
            self.want = until - self.count
            if self.next() is None:
                break
        self.want = 1
        if not all(c.even and c.carry is None for c in self.comps):
            raise StateError(f"{OP}: a component's stream ended inside a round of the "
                             f"{shards[0]} hosts: their states cannot move to other hosts")
        for comp in self.comps:
            comp.hosts, comp.host = mine
        self.segments = [(u, c) for u, c in self.segments if u > self.count]

    def _check_shards(self, state) -> None:
        shards = self.ds._shards
        saved = state.get("shards")
        if (saved is None) != (shards is None):
            without = "without" if saved is None else "with"
            raise StateError(f"{OP}: the state was taken from a mixture {without} num_shards=; "
                             f"restore it into one {without} num_shards=")
        if saved is not None and tuple(saved) != tuple(shards) and not state.get("lockstep"):
            raise StateError(
                f"{OP}: this state (host {saved[1]} of {saved[0]}) cannot move to host "
                f"{shards[1]} of {shards[0]}: a component's stream ended inside a round of "
                "hosts (or a stop handed elements back), so the hosts' positions differ; "
                "restore each host's own state on the same number of hosts")

    def close(self):
        for comp in self.comps:
            comp.close()


def mix(datasets, weights=None, seed: int | None = None, stop_on_empty_dataset: bool = False,
        *, repeat=False, rerandomize_each_iteration: bool | None = None,
        num_shards: int | None = None, shard_index: int | None = None) -> Dataset:
    return MixDataset(datasets, weights, seed, stop_on_empty_dataset, repeat,
                      rerandomize_each_iteration, num_shards, shard_index)


__all__ = ["MixDataset", "mix"]

registry.provide(mix)
