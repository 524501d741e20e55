"""elastic_hosts: a host's whole pipeline over an elastic mixture, restorable on another number
of hosts whatever the ops after the mixture hold (a packer's partial rows, a tokenizer's
blocks, a batch being filled).

``elastic_hosts(make, num_hosts, host_index)`` is ``make(num_hosts, host_index)``: a pipeline
whose one :meth:`Dataset.mix` is elastic (``num_shards=num_hosts, shard_index=host_index``),
followed by any ops. Its state is that pipeline's state (a position), so a host's own state
restores on the same host as usual. To change the number of hosts (4 -> 3 -> 5), give every new
host :func:`combine_host_states` of all the old hosts' states. The hosts' mixtures drew the same
picks but each host's packer had taken its own number of them, so their positions differ: let
``C`` be the furthest draw any old host's mixture had made. Each old host's pipeline is
*drained*: restored from its state (packing its partial batch again, as the restore of a packer
does, and skipping the rows it had delivered) and run with its mixture ending at draw ``C``,
with the configuration of the run that took the state; the drains are dealt round robin to the
new hosts, which deliver them first. Then each new host runs ``make(H', h')`` from draw ``C``,
where every old host's mixture stood at the same round boundary of every component (the new
configuration applies from there). So every element of every component is delivered exactly
once per epoch, none skipped, across any number of host changes.

State: a host's own pipeline state plus, while it drains, each drained old host's (``{"shards",
"until", "fp", "pos"}``), packed into one zlib-compressed string (``"packed"``; ~0.6 KB a host,
under 1 KB while draining 8 old hosts); the combined state of H hosts is their H states.
"""

from __future__ import annotations

import base64
import copy
import json
import zlib
from typing import Callable

from tpudata.dataset.core.base import UNKNOWN, BlockIterator, Cursor, Dataset
from tpudata.dataset.core.common import input_spec
from tpudata.dataset.core.fingerprint import describe, fingerprint
from tpudata.dataset.core.optimize import optimize
from tpudata.dataset.core.options import options_of
from tpudata.dataset.core.graph import walk
from tpudata.dataset.core.seeds import random_nodes
from tpudata.dataset.core.state import from_jsonable, jsonable
from tpudata.dataset.ops.mixture import MixDataset
from tpudata.errors import StateError

MARK = "elastic_hosts"  # the key that tells a state of this op
MAX_STATE_BYTES = 1 << 20  # a packed state larger than this unpacked is refused (not ours)


def _pack(obj) -> str:
    """A host's positions as one short string: the JSON of nested pipeline states repeats its
    keys, so zlib keeps the state small (~0.4 KB a host, ~0.2 KB more per host it drains)."""
    raw = json.dumps(jsonable(obj), separators=(",", ":"), sort_keys=True).encode()
    return base64.b85encode(zlib.compress(raw, 9)).decode("ascii")


def _unpack(text) -> dict:
    try:
        d = zlib.decompressobj()
        raw = d.decompress(base64.b85decode(str(text).encode("ascii")), MAX_STATE_BYTES)
        if d.unconsumed_tail:
            raise StateError(f"elastic_hosts: a packed state over {MAX_STATE_BYTES} bytes")
        out = from_jsonable(json.loads(raw))
    except (ValueError, zlib.error) as exc:
        raise StateError(f"elastic_hosts: the state's packed positions do not decode ({exc}): "
                         f"not a state of this op") from None
    if not isinstance(out, dict) or not isinstance(out.get("drains"), list) or \
            not isinstance(out.get("main"), dict):
        raise StateError("elastic_hosts: the state's packed positions are not {drains, main}")
    return out


def _positions(state: dict) -> dict:
    """``{"drains", "main"}`` of a host's state."""
    if not isinstance(state.get("packed"), str):
        raise StateError("elastic_hosts: the state holds no packed positions: not a state of "
                         "this op")
    return _unpack(state["packed"])


def _mix_states(obj) -> list:
    """The mixture states nested in a pipeline state (JSON), outermost first."""
    out, stack = [], [obj]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if {"count", "configs", "components", "shards"} <= set(node):
                out.append(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return out


class HostsDataset(Dataset):
    def __init__(self, make: Callable, num_hosts: int, host_index: int):
        super().__init__()
        if not callable(make):
            raise TypeError(f"elastic_hosts needs make(num_hosts, host_index) -> Dataset, got "
                            f"{type(make).__name__}")
        if int(num_hosts) < 1 or not 0 <= int(host_index) < int(num_hosts):
            raise ValueError(f"elastic_hosts: need 0 <= host_index < num_hosts, got "
                             f"{host_index} of {num_hosts}")
        self._make = make
        self._hosts = (int(num_hosts), int(host_index))
        self._probe, _ = self.build(self._hosts)

    def build(self, shards: tuple) -> tuple:
        """``make(*shards)`` and its elastic mixture, checked."""
        ds = self._make(*shards)
        if not isinstance(ds, Dataset):
            raise TypeError(f"elastic_hosts: make{tuple(shards)} returned "
                            f"{type(ds).__name__}, not a Dataset")
        mixes = [n for n in walk(ds) if isinstance(n, MixDataset) and n._shards is not None]
        if len(mixes) != 1 or mixes[0]._shards != tuple(shards):
            raise ValueError(
                f"elastic_hosts: make{tuple(shards)} must hold one Dataset.mix(..., "
                f"num_shards={shards[0]}, shard_index={shards[1]}), found "
                f"{[m._shards for m in mixes]}")
        if random_nodes(ds):
            raise ValueError("elastic_hosts: the pipeline has random ops without a seed: every "
                             "host, and a drain of it on another host, must redo them alike")
        return ds, mixes[0]

    def _make_iterator(self, ctx):
        return _HostsIterator(self, ctx)

    def _spec(self):
        return input_spec(self._probe)

    def cardinality(self):
        return UNKNOWN


class _Chain:
    """One host's pipeline read through a Cursor: this host's own (``until`` None), or an old
    host's, drained up to draw ``until`` (its mixture ends there)."""

    def __init__(self, ds: HostsDataset, ctx, shards, until: int | None = None,
                 start: tuple | None = None):
        pipeline, mix = ds.build(tuple(shards))
        mix._cap, mix._start = until, start
        self.shards, self.until = tuple(int(x) for x in shards), until
        self.fp = fingerprint(describe(pipeline))
        self.it = optimize(pipeline, options_of(pipeline))._make_iterator(ctx)
        self.cursor = Cursor(self.it)

    @classmethod
    def restored(cls, ds: HostsDataset, ctx, entry: dict) -> "_Chain":
        until = entry.get("until")
        chain = cls(ds, ctx, entry["shards"], None if until is None else int(until))
        if entry["fp"] != chain.fp:
            chain.close()
            raise StateError(
                f"elastic_hosts: the state of host {entry['shards'][1]} of {entry['shards'][0]} "
                f"was taken from another pipeline than make{chain.shards} builds now "
                f"({describe(ds.build(chain.shards)[0])[:300]})")
        chain.cursor.set_state(entry["pos"])
        return chain

    def get_state(self) -> dict:
        state = {"shards": list(self.shards), "fp": self.fp, "pos": self.cursor.get_state()}
        if self.until is not None:
            state["until"] = self.until
        return state

    def close(self) -> None:
        self.it.close()


class _HostsIterator(BlockIterator):
    exact_want = True

    def __init__(self, ds: HostsDataset, ctx):
        self.ds, self.ctx = ds, ctx
        self.drains: list = []
        self.main = _Chain(ds, ctx, ds._hosts)

    def next(self):
        while self.drains:
            block = self.drains[0].cursor.take(max(1, self.want))
            if block is not None:
                return block
            self.drains.pop(0).close()
        return self.main.cursor.take(max(1, self.want))

    def get_state(self):
        return {MARK: 1, "hosts": list(self.ds._hosts), "drains": len(self.drains),
                "packed": _pack({"drains": [d.get_state() for d in self.drains],
                                 "main": self.main.get_state()})}

    def set_state(self, state):
        self.close()
        self.drains = []
        if "combined" in state:
            return self._spread(copy.deepcopy(state["combined"]))
        if tuple(state["hosts"]) != self.ds._hosts:
            self.main = _Chain(self.ds, self.ctx, self.ds._hosts)
            raise StateError(
                f"elastic_hosts: this is host {state['hosts'][1]} of {state['hosts'][0]}'s "
                f"state; host {self.ds._hosts[1]} of {self.ds._hosts[0]} restores "
                "combine_host_states(every old host's state) instead")
        positions = _positions(state)
        self.drains = [_Chain.restored(self.ds, self.ctx, e) for e in positions["drains"]]
        self.main = _Chain.restored(self.ds, self.ctx, positions["main"])

    def _spread(self, hosts: list) -> None:
        """Restore on this host its share of the old hosts' drains, then its own pipeline from
        the furthest draw of their mixtures (see the module doc)."""
        H, h = self.ds._hosts
        hosts = [_positions(s) for s in hosts]
        mains = [s["main"] for s in hosts]
        if sorted(tuple(m["shards"]) for m in mains) != [(len(mains), k) for k in
                                                          range(len(mains))]:
            self.main = _Chain(self.ds, self.ctx, self.ds._hosts)
            raise StateError("elastic_hosts: combine_host_states needs the states of every old "
                             f"host, once each; got hosts {[m['shards'] for m in mains]}")
        mixes = [_mix_states(m["pos"]) for m in mains]
        until = max(int(s["configs"][-1]["until"]) for found in mixes for s in found)
        for found in mixes:  # the old hosts draw with their run's configuration up to there
            for s in found:
                s["configs"][-1]["until"] = until
        entries = [d for s in hosts for d in s["drains"]] + [dict(m, until=until) for m in mains]
        entries.sort(key=lambda e: (int(e["until"]), int(e["shards"][1])))
        start_main, start = max(((m, s) for m, found in zip(mains, mixes) for s in found),
                                key=lambda ms: int(ms[1]["count"]))
        start = copy.deepcopy(start)  # (restores write into the states they are given)
        try:
            self.drains = [_Chain.restored(self.ds, self.ctx, copy.deepcopy(e))
                           for e in entries[h::H]]
            self.main = _Chain(self.ds, self.ctx, self.ds._hosts,
                               start=(start, tuple(start_main["shards"]), until))
        except BaseException:
            self.close()
            self.main = _Chain(self.ds, self.ctx, self.ds._hosts)
            raise

    def close(self):
        for chain in self.drains:
            chain.close()
        self.main.close()


def elastic_hosts(make: Callable, num_hosts: int, host_index: int) -> Dataset:
    """Host ``host_index`` of ``num_hosts``'s pipeline ``make(num_hosts, host_index)``, whose
    state restores on another number of hosts through :func:`combine_host_states` (module doc).
    ``make`` must put one ``Dataset.mix(..., seed=S, num_shards=num_hosts,
    shard_index=host_index)`` in it, and give every random op a seed."""
    return HostsDataset(make, num_hosts, host_index)


def _marked_path(state, path=()):
    if isinstance(state, dict):
        if MARK in state:
            return path
        for key, value in state.items():
            found = _marked_path(value, path + (key,))
            if found is not None:
                return found
    return None


def combine_host_states(states: list) -> dict:
    """The states of every host of an :func:`elastic_hosts` pipeline (``Iterator.get_state()``
    of hosts 0..H-1, JSON) as one state that each host of another number restores."""
    states = list(states)
    if not states:
        raise ValueError("combine_host_states needs the states of every host")
    paths = [_marked_path(s) for s in states]
    if paths[0] is None or any(p != paths[0] for p in paths):
        raise StateError("combine_host_states: these are not states of one elastic_hosts "
                         "pipeline (Iterator.get_state() of each host)")
    inner = []
    for s in states:
        node = s
        for key in paths[0]:
            if isinstance(node, dict) and int(node.get("pos", 0)):
                raise StateError("combine_host_states: an op after elastic_hosts holds part of "
                                 "its output: make elastic_hosts the pipeline's last op (put "
                                 "batch and the others inside make)")
            node = node[key]
        inner.append(node)
    if any("combined" in i for i in inner):
        raise StateError("combine_host_states: restore a combined state first, then combine "
                         "the states the new hosts take")
    out = copy.deepcopy(states[0])
    node = out
    for key in paths[0][:-1]:
        node = node[key]
    node[paths[0][-1]] = {MARK: 1, "combined": copy.deepcopy(inner)}
    return out


__all__ = ["HostsDataset", "combine_host_states", "elastic_hosts"]
