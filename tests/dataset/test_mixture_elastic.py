"""Dataset.mix(..., num_shards=H, shard_index=h): a mixture whose hosts' states restore on another
number of hosts (4 -> 3 -> 5), each component's elements delivered exactly once per epoch.

Host h takes the h-th element of each round of H consecutive elements of a component's stream
(its epochs one after another) and every host draws the same picks; so after the hosts took the
same number of batches, all of them stand at the same round boundary of every component and any
host's state restores on any host of any host count (docs/mixtures.md).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.dataset.helpers import plain
from tpudata.dataset import Dataset
from tpudata.errors import StateError

SIZES = {"web": 90, "code": 151, "books": 37}  # code outlasts the first two phases
IDS = {"books": 0, "code": 1, "web": 2}
B = 4  # each host's batch


def component(name: str) -> Dataset:
    n = SIZES[name]
    ds = Dataset.from_tensor_slices({"src": np.full(n, IDS[name], np.int64), "x": np.arange(n)})
    return ds.shuffle(8, seed=IDS[name])  # seeded: every host orders it alike


def host(hosts: int, index: int, weights: dict, repeat, prefetch: bool = False) -> Dataset:
    ds = Dataset.mix({n: component(n) for n in weights}, weights, seed=5, repeat=repeat,
                     num_shards=hosts, shard_index=index).batch(B)
    return ds.prefetch(2) if prefetch else ds


def stream(name: str, length: int) -> list:
    """The component's whole stream (what all the hosts share out), epochs one after another."""
    with Dataset.mix({name: component(name)}, seed=0, repeat=True).take(length).iterator() as it:
        return [int(plain(e)["x"]) for e in it]


def rows(batch) -> list:
    return [(int(s), int(x)) for s, x in zip(batch["src"], batch["x"])]


def run_hosts(hosts: int, states: list | None, weights, repeat, steps: int | None,
              prefetch: bool = False):
    """Each host restores ``states[h]`` (None: from the start) and takes ``steps`` batches (None:
    to its end); returns every host's per-component elements and its state."""
    per_host, new_states = [], []
    for h in range(hosts):
        ds = host(hosts, h, weights, repeat, prefetch)
        with (ds.iterator(states[h]) if states else ds.iterator()) as it:
            got = [r for b in (it if steps is None else (next(it) for _ in range(steps)))
                   for r in rows(b)]
            new_states.append(json.loads(json.dumps(it.get_state())))
        per = {name: [x for s, x in got if s == IDS[name]] for name in IDS}
        per_host.append(per)
    return per_host, new_states


@pytest.mark.parametrize("prefetch,restore_from", [(False, "own"), (True, "host 0")])
@pytest.mark.parametrize("seed", range(4))
def test_four_three_five_hosts_deliver_every_element_once(seed, prefetch, restore_from):
    """With prefetch the mixture has run ahead of the consumer by a host-dependent amount,
    and a changed configuration applies from there: every host restores host 0's state, so
    that all switch at the same draw (docs/mixtures.md)."""
    rng = np.random.default_rng(seed)
    phases = [  # (hosts, weights, repeat, steps); each restores from the previous hosts' states
        (4, {"web": 2, "code": 1}, {"web": True}, int(rng.integers(1, 6))),
        (3, {"web": 1, "code": 2}, {"web": True}, int(rng.integers(1, 6))),   # weights changed
        (5, {"web": 1, "code": 1, "books": 1}, False, None),  # books added; to the end, once
    ]
    position = {name: 0 for name in IDS}  # each component's global position (all hosts)
    delivered = {name: [] for name in IDS}
    states = None
    for hosts, weights, repeat, steps in phases:
        if states is not None:  # host h restores old host h's state (or host 0's)
            states = [states[0 if restore_from == "host 0" else min(h, len(states) - 1)]
                      for h in range(hosts)]
        per_host, states = run_hosts(hosts, states, weights, repeat, steps, prefetch)
        for name in IDS:
            counts = [len(p[name]) for p in per_host]
            ref = stream(name, position[name] + hosts * (max(counts) + 1))
            for h, p in enumerate(per_host):  # host h: every hosts-th element from position
                assert p[name] == ref[position[name] + h::hosts][:len(p[name])], (name, h)
                delivered[name] += p[name]
            if steps is not None:
                assert len(set(counts)) == 1, (name, counts)  # lockstep: the same picks
                position[name] += hosts * counts[0]
    for name, xs in delivered.items():  # exactly once per epoch, none skipped
        epochs = len(xs) // SIZES[name]
        assert len(xs) == epochs * SIZES[name] and epochs >= 1, (name, len(xs))
        assert sorted(xs) == sorted(stream(name, len(xs)))


def test_any_hosts_state_serves_any_host_and_they_are_the_same_but_for_the_index():
    _, states = run_hosts(4, None, {"web": 1, "code": 1}, {"web": True}, 3)
    strip = [json.dumps({k: v for k, v in s.items() if k != "cursor"}) for s in states]
    assert len(set(strip)) == 1
    inner = [json.dumps(s["cursor"]).replace('"shards": [4, %d]' % h, '"shards": [4, "h"]')
             for h, s in enumerate(states)]
    assert len(set(inner)) == 1
    per_a, _ = run_hosts(4, [states[0]] * 4, {"web": 1, "code": 1}, {"web": True}, 2)
    per_b, _ = run_hosts(4, states, {"web": 1, "code": 1}, {"web": True}, 2)
    assert per_a == per_b


def test_a_stream_that_ended_inside_a_round_cannot_move_hosts():
    weights = {"books": 1, "code": 1}  # 37 and 151 elements: neither divides by 4
    _, states = run_hosts(4, None, weights, False, None)
    with pytest.raises(StateError, match="cannot move to host 0 of 3"):
        host(3, 0, weights, False).iterator(states[0])
    for h in range(4):  # on the same hosts each host's own state restores (at its end)
        with host(4, h, weights, False).iterator(states[h]) as it:
            assert list(it) == []


def test_a_component_sharded_with_shard_cannot_move_hosts():
    """The per-host alternative, each component ``.shard(n, i)``: its state names its shard
    (the component's pipeline differs per host count), so another host count is refused by
    name; only the elastic mixture re-shards."""
    def per_host(hosts, index):
        return Dataset.mix({n: component(n).shard(hosts, index) for n in ("web", "code")},
                           seed=5)

    with per_host(4, 0).iterator() as it:
        [next(it) for _ in range(10)]
        state = it.get_state()
    with pytest.raises(StateError, match="component 'code'"):
        per_host(3, 0).iterator(state)


def test_elastic_needs_seeds_and_both_numbers():
    comps = {"web": component("web")}
    with pytest.raises(ValueError, match="needs seed="):
        Dataset.mix(comps, num_shards=2, shard_index=0)
    with pytest.raises(ValueError, match="without a seed"):
        Dataset.mix({"web": Dataset.range(5).shuffle(3)}, seed=1, num_shards=2, shard_index=0)
    with pytest.raises(ValueError, match="both num_shards and shard_index"):
        Dataset.mix(comps, seed=1, num_shards=2)
    with pytest.raises(ValueError, match="shard_index < num_shards"):
        Dataset.mix(comps, seed=1, num_shards=2, shard_index=2)
    with Dataset.mix(comps, seed=1, num_shards=2, shard_index=0).iterator() as it:
        state = it.get_state()
    with pytest.raises(StateError, match="taken from a mixture with num_shards="):
        Dataset.mix(comps, seed=1).iterator(state)
