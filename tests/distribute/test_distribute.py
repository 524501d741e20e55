"""Global shuffle, host splits that restore on another number of hosts, exact equal step counts."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpudata
from tpudata import Dataset, TFRecordDataset
from tpudata.distribute import (
    IndexPermutation,
    IndexSampler,
    SourceBatches,
    batches_per_split,
    equal_num_batches,
    file_record_counts,
    records_per_split,
)
from tpudata.source import TFRecordSource
from tpudata.tfrecord import write_records


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 3000), st.integers(0, 2**63))
def test_permutation_is_a_bijection(n, seed):
    out = IndexPermutation(n, seed)(np.arange(n))
    assert np.array_equal(np.sort(out), np.arange(n))


def test_permutation_depends_on_the_seed_and_rejects_bad_positions():
    a, b = IndexPermutation(1000, 1)(np.arange(1000)), IndexPermutation(1000, 2)(np.arange(1000))
    assert not np.array_equal(a, b) and not np.array_equal(a, np.arange(1000))
    assert np.array_equal(IndexPermutation(1000, 1)(np.arange(1000)[::-1]), a[::-1])
    with pytest.raises(IndexError):
        IndexPermutation(10, 1)([10])


def _run_hosts(n, hosts, batch, state=None, stop_after=None, num_epochs=1, seed=9):
    """Run ``hosts`` samplers in lockstep; returns (delivered indices, steps per host, state)."""
    samplers = [IndexSampler(n, seed=seed, shard_index=h, shard_count=hosts, num_epochs=num_epochs)
                for h in range(hosts)]
    for s in samplers:
        if state is not None:
            s.set_state(state)
    gens = [s.batches(batch) for s in samplers]
    delivered, steps = [], [0] * hosts
    while True:
        if stop_after is not None and steps[0] == stop_after:
            states = [s.get_state() for s in samplers]
            assert all(st_ == states[0] for st_ in states)  # lockstep: one global state
            return delivered, steps, states[0]
        outs = [next(g, None) for g in gens]
        if all(o is None for o in outs):
            return delivered, steps, None
        assert all(o is not None for o in outs), "a host ran out before the others"
        for h, (idx, mask) in enumerate(outs):
            assert len(idx) == batch and np.array_equal(mask > 0, idx >= 0)
            delivered += idx[idx >= 0].tolist()
            steps[h] += 1


@pytest.mark.parametrize("n,batch", [(1000, 7), (97, 4), (5, 8), (64, 16)])
def test_every_record_once_per_epoch_and_equal_steps(n, batch):
    delivered, steps, _ = _run_hosts(n, 4, batch, num_epochs=2)
    counts = Counter(delivered)
    assert set(counts) == set(range(n)) and set(counts.values()) == {2}
    assert len(set(steps)) == 1 and steps[0] == 2 * math.ceil(n / (4 * batch))
    first = _run_hosts(n, 1, n, seed=9)[0]
    assert first != sorted(first) or n < 3  # shuffled


def test_state_saved_on_4_hosts_restores_on_3_mid_epoch():
    n, batch = 1003, 8
    before, _, state = _run_hosts(n, 4, batch, stop_after=13)
    assert state == {"epoch": 0, "position": 13 * 8 * 4}
    after, steps, _ = _run_hosts(n, 3, batch, state=state)
    assert Counter(before + after) == Counter(range(n))  # the multiset is every record once
    assert len(set(steps)) == 1
    # and the order is the same epoch permutation as an uninterrupted single-host run
    whole = IndexSampler(n, seed=9).indices(0, np.arange(n))
    assert sorted(before) == sorted(whole[: 13 * 32].tolist())


def test_epochs_reshuffle_and_state_past_the_end_moves_on():
    s = IndexSampler(50, seed=3, num_epochs=3)
    e0, e1 = s.indices(0, np.arange(50)), s.indices(1, np.arange(50))
    assert not np.array_equal(e0, e1)
    s.set_state({"epoch": 0, "position": 50})
    idx, _ = next(s.batches(50))
    assert np.array_equal(idx, e1)
    with pytest.raises(ValueError):
        s.set_state({"epoch": 0, "position": 51})


def test_source_batches_parse_pad_and_resume(tmp_path):
    n = 53
    recs = [tpudata.encode_example({"id": i, "x": [float(i)] * 3}) for i in range(n)]
    write_records(str(tmp_path / "a.tfrecord"), recs[:30])
    write_records(str(tmp_path / "b.tfrecord"), recs[30:])
    src = TFRecordSource(str(tmp_path / "*.tfrecord"), progress=False)
    spec = {"id": tpudata.FixedLenFeature([], np.int64), "x": tpudata.FixedLenFeature([3], np.float32)}
    make = lambda h, H: SourceBatches(src, 4, seed=1, shard_index=h, shard_count=H,  # noqa: E731
                                      transform=lambda r: tpudata.parse_examples(r, spec))
    it = make(0, 2)
    first = [next(it) for _ in range(3)]
    state = it.get_state()
    rest = list(make(0, 2))  # uninterrupted
    resumed = make(0, 2)
    resumed.set_state(state)
    tail = list(resumed)
    assert [b["id"].tolist() for b in first + tail] == [b["id"].tolist() for b in rest]
    other = list(make(1, 2))
    ids = [i for b in first + tail + other for i, w in zip(b["id"].tolist(), b["weight"]) if w]
    assert sorted(ids) == list(range(n))
    assert len(first + tail) == len(other) == math.ceil(n / 8)
    last = other[-1]
    pad = last["weight"] == 0
    assert pad.any() and (last["id"][pad] == 0).all() and (last["x"][pad] == 0).all()
    assert last["x"].shape == (4, 3) and last["weight"].dtype == np.float32


def test_counts_helper_fixes_the_uneven_file_split(tmp_path):
    """Files of 10 and 2 records on 2 hosts with B = 4: the README's old formula gives 2 steps,
    host 0 needs 3; the helper computes 3 and both hosts run 3 full, masked batches."""
    write_records(str(tmp_path / "u-00000-of-00002"), [b"a%d" % i for i in range(10)])
    write_records(str(tmp_path / "u-00001-of-00002"), [b"b%d" % i for i in range(2)])
    files = [str(tmp_path / f"u-0000{k}-of-00002") for k in range(2)]
    counts = file_record_counts(files, progress=False)  # no manifest: counted by a scan
    assert counts == [10, 2]
    assert records_per_split(counts, 2, "files") == [10, 2]
    assert batches_per_split(counts, 4, 2, "files") == [3, 1]
    assert math.ceil(math.ceil(12 / 2) / 4) == 2  # the old formula
    steps = equal_num_batches(counts, 4, 2, "files")
    assert steps == 3
    totals = []
    for h in range(2):
        ds = (Dataset.from_tensor_slices(files).shard(2, h)
              .interleave(lambda f: TFRecordDataset(f), cycle_length=1)
              .map(lambda r: {"r": r})
              .batch(4, pad_remainder=True, mask_key="w", num_batches=steps))
        batches = list(ds)
        assert len(batches) == steps
        totals.append(sum(float(b["w"].sum()) for b in batches))
    assert totals == [10.0, 2.0]
    # record-level splitting of the same files is even
    assert records_per_split(counts, 2, "records") == [6, 6]
    assert equal_num_batches(counts, 4, 2, "records") == 2
    assert equal_num_batches(counts, 4, 2, "files", drop_remainder=True) == 0


def test_counts_from_a_manifest(tmp_path):
    tpudata.write_shards([b"x"] * 25, str(tmp_path), "m", num_shards=3, progress=False)
    files = sorted(str(p) for p in tmp_path.glob("m-*-of-*"))
    assert sum(file_record_counts(files)) == 25
    with pytest.raises(ValueError, match="split must be"):
        records_per_split([1], 1, "rows")


def test_an_uneven_file_split_is_a_split_error_saying_what_to_do():
    from tpudata.distribute.pipeline import split_mode
    from tpudata.errors import SplitError

    with pytest.raises(SplitError, match="4 files cannot be split evenly over 3 readers") as info:
        split_mode("files", 4, 3)
    assert isinstance(info.value, ValueError) and "split='records'" in str(info.value)
    assert split_mode("auto", 4, 3) == "records" and split_mode("files", 4, 2) == "files"
