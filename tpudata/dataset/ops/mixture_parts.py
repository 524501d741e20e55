"""The pieces of :mod:`tpudata.dataset.ops.mixture`: the picks (which component each draw
takes), a configuration of the mixture, its components (plain and elastic) and the elements a
stop carries in the state."""

from __future__ import annotations

import hashlib

import numpy as np

from tpudata import _outpool
from tpudata.dataset.core.base import Cursor, Dataset
from tpudata.dataset.core.block import Block, leaf_items
from tpudata.dataset.core.fingerprint import describe, state_tree
from tpudata.dataset.core.nest import tree_to_json
from tpudata.dataset.core.seeds import random_nodes, restore_seeds
from tpudata.errors import StateError

CHUNK = 4096  # draws made at once: draw s is chunk s // CHUNK's (s % CHUNK)-th
ROUNDS = 32  # candidate rounds before the exponential race decides
_RACE = 1 << 30  # the race's spawn-key marker (rounds are numbered from 0)
OP = "mix"


def _name_key(name: str) -> int:
    """A stable 31-bit number for a component name: its iterators' context path."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:4], "little") & 0x7FFFFFFF


class _Picks:
    """Which component each draw takes under one configuration: deterministic from the seed,
    the draw's position and the weights by name (see the module doc). Candidates are indices
    into this configuration's names; ``to_comp`` maps them to the iterator's components (its
    last entry, ``gone``, stands for a name the iterator does not have)."""

    def __init__(self, seed: int, path: tuple, weights: np.ndarray, to_comp: np.ndarray):
        self.seed, self.path = seed, tuple(path)
        self.weights, self.to_comp = weights, to_comp
        total = weights.sum()
        self.cdf = np.cumsum(weights / total) if total > 0 else None
        self.cache: dict = {}  # (chunk, round) -> candidates

    def _rng(self, *key) -> np.random.Generator:
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence(
            self.seed, spawn_key=self.path + tuple(int(k) for k in key))))

    def _round(self, chunk: int, r: int) -> np.ndarray:
        out = self.cache.get((chunk, r))
        if out is None:
            if len(self.cache) > 256:  # the windows move on: keep the current chunks' rounds
                self.cache = {k: v for k, v in self.cache.items() if k[0] >= chunk}
            u = self._rng(chunk, r).random(CHUNK)
            picks = np.minimum(np.searchsorted(self.cdf, u, side="right"), len(self.cdf) - 1)
            out = self.cache[(chunk, r)] = self.to_comp[picks]
        return out

    def _candidates(self, slots: np.ndarray, r: int) -> np.ndarray:
        chunks = slots // CHUNK
        first, last = int(chunks[0]), int(chunks[-1])
        if first == last:
            return self._round(first, r)[slots - first * CHUNK]
        out = np.empty(len(slots), dtype=np.int64)
        for c in np.unique(chunks):
            sel = chunks == c
            out[sel] = self._round(int(c), r)[slots[sel] - int(c) * CHUNK]
        return out

    def _race(self, slot: int, active: np.ndarray) -> int:
        u = self._rng(slot // CHUNK, _RACE, slot % CHUNK).random(len(self.weights))
        with np.errstate(divide="ignore"):
            keys = -np.log(u) / self.weights
        keys[~active[self.to_comp]] = np.inf
        return int(self.to_comp[np.argmin(keys)])

    def assign(self, slots: np.ndarray, active: np.ndarray) -> np.ndarray:
        """The component of each draw in ``slots`` (int64 positions). ``active`` has one entry
        per component plus a last False (``gone``); at least one active component has a weight
        > 0 here."""
        out = np.empty(len(slots), dtype=np.int64)
        todo = np.arange(len(slots))
        for r in range(ROUNDS):
            cand = self._candidates(slots[todo], r)
            ok = active[cand]
            out[todo[ok]] = cand[ok]
            todo = todo[~ok]
            if not len(todo):
                return out
        for t in todo.tolist():
            out[t] = self._race(int(slots[t]), active)
        return out


class _Config:
    """What decides the draws: weights and epochs by name, stop_on_empty_dataset, the seed.

    A state records the configuration of the run that took it (and of earlier ones still in
    force there), so that a restore into a changed mixture draws what that run drew up to where
    it had got (see ``_Horizon``) and only then switches."""

    def __init__(self, weights: dict, epochs: dict, stop: bool, seed: int, comps: list,
                 path: tuple):
        self.weights = {str(n): float(w) for n, w in weights.items()}
        self.epochs = {str(n): int(e) for n, e in epochs.items()}
        self.stop, self.seed = bool(stop), int(seed)
        names = sorted(self.weights)
        index = {c.name: k for k, c in enumerate(comps)}
        gone = len(comps)
        to_comp = np.array([index.get(n, gone) for n in names], dtype=np.int64)
        self.picks = _Picks(self.seed, path, np.array([self.weights[n] for n in names]), to_comp)
        self.weight_of = np.array([self.weights.get(c.name, 0.0) for c in comps])
        self.epochs_of = [self.epochs.get(c.name, 1) for c in comps]
        self.gone = sorted(set(names) - set(index))

    def to_json(self) -> dict:
        return {"weights": self.weights, "epochs": self.epochs, "stop": self.stop,
                "seed": self.seed}

    @classmethod
    def from_json(cls, saved: dict, comps: list, path: tuple) -> "_Config":
        return cls(saved["weights"], saved["epochs"], saved["stop"], saved["seed"], comps, path)


class _Horizon:
    """How far the mixture had delivered when a checkpoint was taken: read when the state is
    turned into JSON (``Iterator.get_state``), not when the op below took its snapshot, so it
    covers what the ops after the mixture hold or will replay at a restore."""

    def __init__(self, it):  # the mixture's iterator
        self.it = it

    def __int__(self) -> int:
        return int(self.it.count)

    __index__ = __int__

    def __jsonable__(self) -> int:
        return int(self.it.count)


class _Component:
    """One named component: its epochs read through a Cursor, and elements handed back at a
    stop (``carry``, delivered first). State: epoch, position, fingerprint, seeds."""

    even = True  # (elastic) its stream has not ended inside a round of hosts

    def __init__(self, name: str, ds: Dataset, ctx, epochs: int, fp: str):
        self.name, self.ds, self.epochs, self.fp = name, ds, epochs, fp
        self.ctx = ctx.child(_name_key(name))
        self.nodes = random_nodes(ds)  # its unseeded random ops: their seeds go in its state
        self.carry: Block | None = None
        self._open(0)

    def _open(self, epoch: int) -> None:
        self.epoch, self.n, self.ended = epoch, 0, False
        self.it = self.ds._make_iterator(self.ctx.child(epoch))
        self.cursor = Cursor(self.it)

    def _end(self) -> None:
        """The current epoch's stream ended (``_revive`` opens the next one if allowed)."""
        self.it.close()
        self.ended, self.it, self.cursor = True, None, None

    def _can_revive(self) -> bool:
        # an empty epoch ends a component for good, even one that repeats forever
        return self.ended and self.n > 0 and (self.epochs < 0 or self.epoch + 1 < self.epochs)

    def _revive(self) -> bool:
        if not self._can_revive():
            return False
        self._open(self.epoch + 1)
        return True

    def _read(self, m: int) -> list:
        parts = []
        while m > 0:
            if self.ended and not self._revive():
                break
            block = self.cursor.take(m)
            if block is not None:
                parts.append(block)
                self.n += block.n
                m -= block.n
            if m > 0:
                self._end()
        return parts

    def take(self, m: int) -> list:
        """Up to ``m`` elements as blocks; fewer only when the component ended for good."""
        parts = []
        if self.carry is not None:
            part = self.carry.slice(0, m)
            rest = self.carry.slice(part.n, self.carry.n)
            self.carry = rest if rest.n else None
            parts.append(part)
            m -= part.n
        if m > 0:
            parts += self._read(m)
        return parts

    def unread(self, block: Block) -> None:
        """Hand back ``block`` (the last elements taken): they come first next time."""
        self.carry = block if self.carry is None else Block.concat([block, self.carry])

    @property
    def active(self) -> bool:
        return not self.ended or self.carry is not None or self._can_revive()

    def restart(self) -> None:
        """From its beginning (a component the state does not name)."""
        self.close()
        self.carry = None
        self._open(0)

    # -- state ---------------------------------------------------------------------------------
    def get_state(self) -> dict:
        state = {"epoch": self.epoch, "n": self.n, "fp": self.fp,
                 "pos": None if self.ended else self.cursor.get_state()}
        if self.nodes:
            state["seeds"] = [int(node._drawn_seed()) for node in self.nodes]
        if self.carry is not None:
            state["carry"] = _carry_to_json(self.carry)
        return state

    def set_state(self, state: dict) -> None:
        if state["fp"] != self.fp:
            raise StateError(
                f"{OP}: the state's component {self.name!r} was taken from another pipeline than "
                f"this mixture's {self.name!r} ({describe(self.ds)[:300]}); restore it into the "
                "same component, or give the changed component a new name to start it from its "
                "beginning (the old name's position is then dropped)")
        reseeded = restore_seeds(self.nodes, state.get("seeds") or [])
        self.carry = _carry_from_json(state["carry"], self.ds) if "carry" in state else None
        epoch, n = int(state["epoch"]), int(state["n"])
        if state["pos"] is None:  # its last epoch had ended (the next one opens if allowed)
            self.close()
            self.epoch, self.n = epoch, n
            self.ended, self.it, self.cursor = True, None, None
            return
        if self.ended or reseeded or epoch != self.epoch:
            self.close()
            self._open(epoch)
        self.n = n
        self.cursor.set_state(state["pos"])

    def close(self) -> None:
        if self.it is not None:
            self.it.close()


class _RoundComponent(_Component):
    """Elastic reading: the ``h``-th element of each round of ``H`` consecutive elements of the
    component's stream (its epochs one after another). Reads whole rounds, so after every take
    the stream stands at a round boundary, the same on every host that took as many."""

    def __init__(self, name, ds, ctx, epochs, fp, shards: tuple):
        super().__init__(name, ds, ctx, epochs, fp)
        self.hosts, self.host = shards
        self.even = True

    def _read(self, m: int) -> list:
        H = self.hosts
        parts = super()._read(H * m)
        if not parts:
            return parts
        block = Block.concat(parts)
        if block.n < H * m and block.n % H:
            self.even = False  # the stream ended inside a round: hosts took unequal numbers
        if H == 1:
            return [block]
        return [block.take(np.arange(self.host, block.n, H))]

    def get_state(self) -> dict:
        state = super().get_state()
        if not self.even:
            state["uneven"] = True
        return state

    def set_state(self, state: dict) -> None:
        super().set_state(state)
        self.even = not state.get("uneven", False)

    def restart(self) -> None:
        super().restart()
        self.even = True


def _carry_to_json(block: Block) -> dict:
    leaves = []
    for col in block.leaves:
        if isinstance(col, np.ndarray):
            leaves.append(col)
        else:  # records, ragged rows: one object per element
            items = leaf_items(col)
            arr = np.empty(len(items), dtype=object)
            for k, v in enumerate(items):
                arr[k] = v
            leaves.append(arr)
    return {"tree": tree_to_json(block.tree), "n": block.n, "leaves": leaves}


def _carry_from_json(saved: dict, ds: Dataset) -> Block:
    tree = state_tree(saved["tree"], ds)
    leaves = [np.asarray(c) for c in saved["leaves"]]
    n = int(saved["n"])
    if len(leaves) != tree.num_leaves or any(len(c) != n for c in leaves):
        raise StateError(f"{OP}: the state's handed-back elements do not fit their structure")
    return Block(tree, leaves, n)


def _interleave(blocks: list, order: np.ndarray) -> Block:
    """The elements of ``blocks`` (one per component, in component order) put in draw order:
    draw ``order[i]`` gets element ``i`` of the blocks one after another. Array columns are
    scattered straight into the output; other columns are concatenated, then gathered."""
    first = blocks[0]
    arrays = all(b.tree == first.tree and b.origin is None for b in blocks) and all(
        type(c) is np.ndarray and c.dtype != object and c.dtype == f.dtype
        and c.shape[1:] == f.shape[1:] for b in blocks for c, f in zip(b.leaves, first.leaves))
    if not arrays:
        inverse = np.empty(len(order), dtype=np.int64)
        inverse[order] = np.arange(len(order))
        return Block.concat(blocks).take(inverse)
    leaves = []
    for k, col in enumerate(first.leaves):
        shape = (len(order),) + col.shape[1:]
        big = col.itemsize * len(order) * (col[:1].size or 1) >= _outpool.MIN_BYTES
        out = _outpool.empty(shape, col.dtype) if big else np.empty(shape, col.dtype)
        at = 0
        for b in blocks:
            out[order[at:at + b.n]] = b.leaves[k]
            at += b.n
        leaves.append(out)
    return Block(first.tree, leaves, len(order))
