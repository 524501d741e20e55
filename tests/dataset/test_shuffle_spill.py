"""Shuffle checkpoints: the lifecycle of spilled buffers, and restores that need storage_options."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tpudata
from tests.dataset.helpers import outputs
from tests.lockedfs import OPTIONS, PASSWORD, locked  # noqa: F401 (a fixture)
from tpudata.dataset import Dataset, TFRecordDataset
from tpudata.dataset.io.spill import prune_spilled, remove_spilled, spilled_files


def big(x):
    return np.full(4096, x, np.float64)  # 32 KB per element


def _make(spill_dir, keep=None):
    return Dataset.range(300).map(big).shuffle(100, seed=4, spill_url=str(spill_dir),
                                               spill_bytes=1 << 20, spill_keep=keep)


def _files(spill_dir) -> set:
    return {p.name for p in spill_dir.iterdir()} if spill_dir.exists() else set()


def test_a_state_taken_twice_writes_its_spill_files_once(tmp_path):
    spill = tmp_path / "ckpt"
    with _make(spill).iterator() as it:
        next(it)
        a = json.loads(json.dumps(it.get_state()))
        b = json.loads(json.dumps(it.get_state()))
    assert spilled_files(a) == spilled_files(b) and spilled_files(a)
    assert _files(spill) == set(spilled_files(a))  # states name their files (in spill_url)
    assert spilled_files(a, str(spill)) == [str(spill / n) for n in spilled_files(a)]


def test_spill_keep_removes_the_files_of_superseded_states(tmp_path):
    spill = tmp_path / "ckpt"
    states = []
    with _make(spill, keep=2).iterator() as it:
        for _ in range(4):
            for _ in range(30):
                next(it)
            states.append(json.loads(json.dumps(it.get_state())))
    names = [{u.rsplit("/", 1)[-1] for u in spilled_files(s)} for s in states]
    assert all(names)
    assert _files(spill) == names[2] | names[3]  # the last two states' files only
    # the kept states still restore exactly; an old one says what is missing
    expected = [int(e[0]) for e in _make(spill)]
    rest = [int(e[0]) for e in _make(spill).iterator(states[3])]
    assert rest == expected[120:]
    with pytest.raises(FileNotFoundError):
        list(_make(spill).iterator(states[0]))


def test_remove_and_prune_spilled(tmp_path):
    spill = tmp_path / "ckpt"
    states = []
    with _make(spill).iterator() as it:
        for _ in range(3):
            for _ in range(20):
                next(it)
            states.append(json.loads(json.dumps(it.get_state())))
    assert len(_files(spill)) == sum(len(spilled_files(s)) for s in states)
    removed = remove_spilled(states[0], str(spill))  # its checkpoint was deleted
    assert removed == spilled_files(states[0], str(spill))
    assert not any((spill / u.rsplit("/", 1)[-1]).exists() for u in removed)
    (spill / "unrelated.txt").write_text("kept")
    pruned = prune_spilled(str(spill), keep=[states[2]])
    assert {u.rsplit("/", 1)[-1] for u in pruned} == {
        u.rsplit("/", 1)[-1] for u in spilled_files(states[1])}
    assert _files(spill) == {u.rsplit("/", 1)[-1] for u in spilled_files(states[2])} | {
        "unrelated.txt"}
    rest = [int(e[0]) for e in _make(spill).iterator(states[2])]
    assert rest == [int(e[0]) for e in _make(spill)][60:]


# -- restores over a filesystem that needs storage_options ------------------------------------------
@pytest.fixture
def locked_files(locked):
    urls = []
    ident = 0
    for s in range(3):
        url = f"locked://bucket/shuffle/train-{s:05d}"
        tpudata.write_records(url, [f"record-{ident + i}".encode() for i in range(200)],
                              storage_options={"password": PASSWORD})
        ident += 200
        urls.append(url)
    return urls


def open_locked(path):
    return TFRecordDataset(path, storage_options=OPTIONS)


@pytest.mark.parametrize("how", ["files", "interleave"])
def test_shuffle_restore_rereads_records_with_the_sources_storage_options(locked_files, how):
    def make():
        if how == "files":
            ds = TFRecordDataset(locked_files, storage_options=OPTIONS)
        else:
            ds = Dataset.from_tensor_slices(locked_files).interleave(open_locked, cycle_length=2)
        return ds.shuffle(250, seed=7)

    it = make().iterator()
    first = [next(it) for _ in range(100)]
    state = json.loads(json.dumps(it.get_state()))
    it.close()
    text = json.dumps(state)
    assert "offsets" in text and "elements" not in text  # records named, not carried
    assert PASSWORD not in text  # credentials never go into a state
    rest = list(make().iterator(state))
    assert first + rest == outputs(make())
    assert sorted(first + rest) == sorted(f"record-{i}".encode() for i in range(600))
