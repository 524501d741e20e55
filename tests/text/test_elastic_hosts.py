"""A tokenized, packed, batched mixture of TFRecord corpora killed and restored at random steps
on 4 hosts -> 3 -> 5 with the weights changed each time: every token of every document is
delivered exactly once per epoch (tpudata.dataset.elastic_hosts, docs/text.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tpudata
from tests.text.helpers import doc_ids, ids_from_text, write_text_corpus
from tpudata.dataset import Dataset, combine_host_states, elastic_hosts
from tpudata.distribute.permutation import IndexPermutation
from tpudata.errors import StateError
from tpudata.text import pack, tokenize

SIZES = {"web": 90, "code": 151, "books": 37}
CID = {"web": 1, "code": 2, "books": 3}
EOS = 1
ROW, BATCH = 16, 2


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    write_text_corpus(root, {name: (CID[name], n) for name, n in SIZES.items()})
    return root


def shuffled_records(path: str, seed: int) -> Dataset:
    """A file's records in a seeded global order: random access through a bijective
    permutation, so the order's state is a count (a shuffle buffer's state holds its records'
    offsets: 8 bytes each)."""
    src = tpudata.TFRecordSource(path)
    order = IndexPermutation(len(src), seed=seed)
    return Dataset.range(len(src)).map(lambda i: src[int(order(np.array([i]))[0])])


def pipeline(root, weights: dict, repeat, bins: int = 4):
    def make(hosts: int, index: int) -> Dataset:
        comps = {n: shuffled_records(str(root / f"{n}.tfrecord"), CID[n]) for n in weights}
        mixed = Dataset.mix(comps, weights, seed=7, repeat=repeat, num_shards=hosts,
                            shard_index=index)
        ids = tokenize(mixed, ids_from_text, feature="text", record="example", add_eos=EOS,
                       max_length=9, num_parallel_calls=2, block_docs=8)
        rows = pack(ids, {"text": ROW}, method="best_fit", num_bins=bins, seed=3,
                    loss_mask="next_token")
        return rows.batch(BATCH)

    return make


def tokens(batch) -> list:
    real = (batch["text_segment_ids"] != 0) & (batch["text"] != EOS)
    return batch["text"][real].tolist()


def run_hosts(make, hosts: int, state: dict | None, steps: int | None):
    """Every host restores ``state`` (None: from the start) and takes ``steps`` batches (None:
    to its end); returns the tokens they delivered and each host's state (JSON)."""
    got, states = [], []
    for h in range(hosts):
        with elastic_hosts(make, hosts, h).iterator(state) as it:
            for batch in (it if steps is None else (next(it) for _ in range(steps))):
                got += tokens(batch)
            states.append(json.loads(json.dumps(it.get_state())))
    return got, states


@pytest.mark.parametrize("seed", range(6))
def test_four_three_five_hosts_with_new_weights_deliver_every_token_once(corpus, seed):
    rng = np.random.default_rng(seed)
    phases = [  # (hosts, weights, repeat, steps)
        (4, {"web": 2, "code": 1}, {"web": True}, int(rng.integers(1, 8))),
        (3, {"web": 1, "code": 3}, {"web": True}, int(rng.integers(1, 8))),   # weights changed
        (5, {"web": 1, "code": 1, "books": 2}, False, None),  # books added; to the end
    ]
    delivered, state, sizes = [], None, []
    for hosts, weights, repeat, steps in phases:
        got, states = run_hosts(pipeline(corpus, weights, repeat), hosts, state, steps)
        delivered += got
        for s in states:  # a host's position, and while it drains, the old hosts' it drains
            inner = s["cursor"]["before"]
            sizes.append((len(json.dumps(s)), inner["drains"]))
        state = combine_host_states(states) if steps is not None else None
    counts: dict = {}
    for t in delivered:
        counts[t] = counts.get(t, 0) + 1
    for name, n in SIZES.items():
        want = [t for i in range(n) for t in doc_ids(CID[name], i)]
        epochs = {counts.get(t, 0) for t in want}
        assert len(epochs) == 1 and epochs != {0}, (name, sorted(epochs))  # once per epoch
        assert sum(counts.get(t, 0) for t in want) == len(want) * epochs.pop()
    assert sum(counts.values()) == len(delivered)  # nothing but the corpora's tokens
    assert any(drains for size, drains in sizes), sizes  # hosts that drained old ones were seen
    assert all(size < 2048 for size, drains in sizes), sizes  # < 2 KB, draining or not


def test_a_hosts_own_state_restores_the_same_rows_and_stays_small(corpus):
    """On the same hosts each host's state is its pipeline's position: < 2 KB whatever the
    packer's bins, and a restore gives the rows the uninterrupted run gives."""
    for bins in (4, 512):
        make = pipeline(corpus, {"web": 1, "code": 1}, {"web": True}, bins)
        with elastic_hosts(make, 3, 1).iterator() as it:
            whole = [next(it) for _ in range(30)]
        got, sizes, state = [], [], None
        rng = np.random.default_rng(bins)
        while len(got) < 30:
            with elastic_hosts(make, 3, 1).iterator(state) as it:
                for _ in range(min(int(rng.integers(1, 7)), 30 - len(got))):
                    got.append(next(it))
                state = json.loads(json.dumps(it.get_state()))
                sizes.append(len(json.dumps(state)))
        for a, b in zip(got, whole):
            assert sorted(a) == sorted(b)
            for k in a:
                np.testing.assert_array_equal(a[k], b[k])
        assert max(sizes) < 2048, (bins, sizes)


def test_states_move_only_combined_and_whole(corpus):
    make = pipeline(corpus, {"web": 1, "code": 1}, {"web": True})
    _, states = run_hosts(make, 2, None, 2)
    with pytest.raises(StateError, match="combine_host_states"):
        elastic_hosts(make, 3, 0).iterator(states[0])
    with pytest.raises(StateError, match="every old host"):
        elastic_hosts(make, 3, 0).iterator(combine_host_states(states[:1]))
    with pytest.raises(ValueError, match="one Dataset.mix"):
        elastic_hosts(lambda n, i: Dataset.range(3), 2, 0)


def test_a_damaged_or_hostile_packed_state_is_refused(corpus):
    """The positions travel zlib-packed: a string that does not decode, decodes to something
    else, or unpacks past the bound is a StateError, never a crash or a huge allocation."""
    import base64
    import zlib

    from tpudata.dataset.ops import hosts

    make = pipeline(corpus, {"web": 1, "code": 1}, {"web": True})
    _, states = run_hosts(make, 1, None, 1)
    inner = states[0]["cursor"]["before"]
    bomb = base64.b85encode(zlib.compress(b"[" * (hosts.MAX_STATE_BYTES + 10), 9)).decode()
    for packed, match in (("not b85 ~~~", "do not decode"),
                          (base64.b85encode(b"not zlib").decode(), "do not decode"),
                          (base64.b85encode(zlib.compress(b"[1, 2]")).decode(), "drains, main"),
                          (bomb, "over")):
        bad = json.loads(json.dumps(states[0]))
        bad["cursor"]["before"]["packed"] = packed
        with pytest.raises(StateError, match=match):
            elastic_hosts(make, 1, 0).iterator(bad)
    bad = json.loads(json.dumps(states[0]))
    del bad["cursor"]["before"]["packed"]
    with pytest.raises(StateError, match="no packed positions"):
        elastic_hosts(make, 1, 0).iterator(bad)
    assert inner["drains"] == 0 and len(inner["packed"]) < 1024
