"""shuffle: TF's buffer algorithm (vectorised) - exactness, determinism, reshuffling."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpudata
from tpudata.dataset import Dataset, TFRecordDataset
from tpudata.dataset.sources import files as sources
from tests.dataset.helpers import SPEC, outputs, write_shards


def reference_shuffle(elements, size, seed, path):
    """TensorFlow's ShuffleDataset loop, one element at a time, with our random stream."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=path)))
    buf, out = [], []
    for x in elements:
        if len(buf) < size:
            buf.append(x)
            continue
        j = int(rng.integers(0, size))
        out.append(buf[j])
        buf[j] = x
    perm = rng.permutation(len(buf))
    return out + [buf[p] for p in perm]


@given(st.integers(0, 300), st.integers(1, 64), st.integers(1, 50), st.integers(0, 2**32))
@settings(max_examples=120, deadline=None)
def test_vectorised_shuffle_is_exactly_the_sequential_algorithm(n, size, block, seed):
    old = sources.BLOCK_ELEMENTS
    sources.BLOCK_ELEMENTS = block  # many input blocks of odd sizes
    try:
        got = outputs(Dataset.range(n).shuffle(size, seed=seed))
    finally:
        sources.BLOCK_ELEMENTS = old
    assert got == reference_shuffle(range(n), size, seed, (0,))


def test_every_element_exactly_once_and_a_real_shuffle():
    got = outputs(Dataset.range(10_000).shuffle(1000, seed=1))
    assert sorted(got) == list(range(10_000))
    assert got != list(range(10_000))
    # a small buffer only moves elements locally (TF's semantics), a full one anywhere
    displacement = np.abs(np.array(got) - np.arange(10_000))
    assert np.median(displacement) < 2000
    assert outputs(Dataset.range(50).shuffle(1)) == list(range(50))


def test_seeded_determinism_and_reshuffling():
    a = Dataset.range(100).shuffle(30, seed=7)
    b = Dataset.range(100).shuffle(30, seed=7)
    first, second = outputs(a), outputs(a)
    assert first == outputs(b)  # same seed, same first pass
    assert first != second and sorted(second) == list(range(100))  # reshuffled next iteration
    fixed = Dataset.range(100).shuffle(30, seed=7, reshuffle_each_iteration=False)
    assert outputs(fixed) == outputs(fixed)
    unseeded = Dataset.range(100).shuffle(100)
    assert outputs(unseeded) != outputs(Dataset.range(100).shuffle(100))  # random seeds differ


def test_reshuffle_across_repeat_epochs():
    got = outputs(Dataset.range(20).shuffle(20, seed=3).repeat(3))
    epochs = [got[0:20], got[20:40], got[40:60]]
    assert all(sorted(e) == list(range(20)) for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2]
    same = outputs(Dataset.range(20).shuffle(20, seed=3, reshuffle_each_iteration=False).repeat(2))
    assert same[:20] == same[20:]


def test_shuffle_structured_and_raw_records(tmp_path):
    paths = write_shards(tmp_path, 2, 40)
    raw = outputs(TFRecordDataset(paths).shuffle(16, seed=2))
    parsed = [tpudata.decode_example(r)["id"].tolist()[0] for r in raw]
    assert sorted(parsed) == list(range(80))
    features = outputs(TFRecordDataset(paths).parse(SPEC).shuffle(16, seed=2))
    assert [f["id"] for f in features] == parsed  # parse commutes with shuffle exactly
    assert all(f["x"] == [float(f["id"])] * 3 and f["tag"] == f"t{f['id']}".encode() for f in features)


def test_shuffle_of_varlen_features(tmp_path):
    paths = write_shards(tmp_path, 1, 30, lambda i: {"v": np.arange(i % 4, dtype=np.int64), "id": i})
    spec = {"v": tpudata.VarLenFeature(np.int64), "id": tpudata.FixedLenFeature([], np.int64)}
    got = outputs(TFRecordDataset(paths).parse(spec).shuffle(8, seed=1).batch(5))
    rows = [(i, v) for b in got for i, v in zip(b["id"], b["v"])]
    assert sorted(i for i, _ in rows) == list(range(30))
    assert all(v == list(range(i % 4)) for i, v in rows)


def test_bad_buffer_size():
    with pytest.raises(ValueError):
        Dataset.range(3).shuffle(0)


# -- checkpoints ----------------------------------------------------------------------------------
class RandomKeep:
    """A filter that is not deterministic: a different choice on every run."""

    def __call__(self, x):
        return bool(np.random.random() < 0.6)


def test_restore_never_duplicates_or_loses_with_a_random_filter_upstream():
    import json

    def make():
        return Dataset.range(400).filter(RandomKeep()).shuffle(50, seed=1)

    it = make().iterator()
    out, states = [], []
    for e in it:
        states.append(json.loads(json.dumps(it.get_state())))
        out.append(int(e))
    assert len(set(out)) == len(out)
    for k in range(0, len(out), 23):
        buffered = states[k]["cursor"]["before"]
        with make().iterator(states[k]) as resumed:
            rest = [int(e) for e in resumed]
        seen = out[: k + 1] + rest
        assert len(set(seen)) == len(seen), f"an element came twice after restoring at {k}"
        held = buffered.get("buffer", {}).get("elements", {}).get("cols", [{"__array__": []}])
        held = held[0]["__array__"]
        assert set(held) <= set(seen), f"buffered elements were lost restoring at {k}"


def test_tfrecord_state_is_small_and_names_records(tmp_path):
    import json

    paths = write_shards(tmp_path, 4, 300)
    it = TFRecordDataset(paths).shuffle(1000, seed=3).parse(SPEC).iterator()
    first = [int(next(it)["id"]) for _ in range(150)]
    state = it.get_state()
    size = len(json.dumps(state))
    assert size / 1000 <= 64, f"{size / 1000:.1f} bytes per buffered element"
    rest = [int(e["id"]) for e in TFRecordDataset(paths).shuffle(1000, seed=3).parse(SPEC)
            .iterator(state)]
    assert sorted(first + rest) == list(range(1200))
    uninterrupted = [int(e["id"]) for e in TFRecordDataset(paths).shuffle(1000, seed=3).parse(SPEC)]
    assert first + rest == uninterrupted


def test_compressed_records_are_carried_in_the_state(tmp_path):
    import json

    plain = write_shards(tmp_path / "p", 1, 40)
    gz = str(tmp_path / "x.gz")
    tpudata.write_records(gz, outputs(TFRecordDataset(plain)), compression="GZIP")
    it = TFRecordDataset(gz).shuffle(10, seed=1).iterator()
    first = [next(it) for _ in range(5)]
    state = json.loads(json.dumps(it.get_state()))
    assert "elements" in json.dumps(state)
    rest = list(TFRecordDataset(gz).shuffle(10, seed=1).iterator(state))
    assert first + rest == outputs(TFRecordDataset(gz).shuffle(10, seed=1))


def test_large_carried_buffers_spill_beside_the_checkpoint(tmp_path):
    import json

    def big(x):
        return np.full(4096, x, np.float64)  # 32 KB per element

    def make():
        return Dataset.range(300).map(big).shuffle(100, seed=4, spill_url=str(tmp_path / "ckpt"),
                                                   spill_bytes=1 << 20)

    it = make().iterator()
    first = [int(next(it)[0]) for _ in range(10)]
    text = json.dumps(it.get_state())
    assert len(text) < 10_000 and "spilled" in text  # 3.2 MB of elements went to a file
    assert 1 <= len(list((tmp_path / "ckpt").iterdir())) <= 2  # the buffer (and pending output)
    rest = [int(e[0]) for e in make().iterator(json.loads(text))]
    assert first + rest == [int(e[0]) for e in make()]


def test_shuffle_under_repeat_hands_out_blocks_not_single_elements():
    # the consumer's demand travels through repeat: batching after shuffle().repeat() must not
    # pull one element at a time (that made shuffle(1000).repeat(2).batch(1000) 100x slower)
    it = Dataset.range(5000).shuffle(100, seed=1).repeat(2).iterator()
    sizes = []
    while (block := it._next_block()) is not None:
        sizes.append(block.n)
    assert sum(sizes) == 10_000 and len(sizes) < 10_000 / 32
