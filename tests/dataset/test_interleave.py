"""Parallel interleave: a bounded reader pool for many files, files opened ahead,
deterministic=False, element-exact state."""

from __future__ import annotations

import json
import time

import pytest

from tpudata.dataset import Dataset, TFRecordDataset
from tests.dataset.helpers import (SPEC, check_restore_everywhere, outputs,
                                   tf_interleave_reference, tpudata_threads, write_shards)


def test_many_files_use_a_bounded_pool(tmp_path):
    paths = write_shards(tmp_path, 64, 3)
    ds = (Dataset.from_tensor_slices(paths)
          .interleave(lambda f: TFRecordDataset(f), cycle_length=4, num_parallel_calls=4)
          .parse(SPEC))
    deadline = time.time() + 5
    while tpudata_threads() and time.time() < deadline:  # threads of earlier tests ending
        time.sleep(0.01)
    most = 0
    ids = []
    with ds.iterator() as it:
        for e in it:
            ids.append(int(e["id"]))
            most = max(most, len(tpudata_threads()))
    expected = tf_interleave_reference([list(range(3 * i, 3 * i + 3)) for i in range(64)], iter, 4, 1)
    assert ids == expected
    assert 1 <= most <= 4  # never a thread per file


def test_restore_with_files_opened_ahead(tmp_path):
    paths = write_shards(tmp_path, 9, [2, 5, 1, 4, 3, 6, 2, 2, 7])
    check_restore_everywhere(lambda: Dataset.from_tensor_slices(paths).interleave(
        lambda f: TFRecordDataset(f), cycle_length=3, block_length=2, num_parallel_calls=2)
        .parse(SPEC).map(lambda e: e["id"]))


class SlowFile:
    """Sub-datasets whose first element is slow for one input (one slow file among many)."""

    def __init__(self, slow_index):
        self.slow_index = slow_index

    def __call__(self, i):
        def delay(x, i=int(i)):
            if i == self.slow_index and x == i * 100:
                time.sleep(0.4)
            return x

        return Dataset.range(int(i) * 100, int(i) * 100 + 3).map(delay)


def test_deterministic_false_reads_whichever_slot_is_ready():
    ordered = outputs(Dataset.range(4).interleave(SlowFile(0), cycle_length=4, num_parallel_calls=4))
    assert ordered == tf_interleave_reference(
        [list(range(100 * i, 100 * i + 3)) for i in range(4)], iter, 4, 1)
    free = outputs(Dataset.range(4).interleave(SlowFile(0), cycle_length=4, num_parallel_calls=4,
                                               deterministic=False))
    assert sorted(free) == sorted(ordered) and free[0] != 0  # the slow file did not hold the rest
    assert free.index(0) > 3


def test_deterministic_false_restores_exactly_once():
    def make():
        return Dataset.range(6).interleave(SlowFile(2), cycle_length=3, num_parallel_calls=3,
                                           deterministic=False)

    it = make().iterator()
    out, states = [], []
    for e in it:
        states.append(json.loads(json.dumps(it.get_state())))
        out.append(int(e))
    everything = sorted(out)
    assert everything == sorted(100 * i + j for i in range(6) for j in range(3))
    for k in range(0, len(states), 3):
        with make().iterator(states[k]) as resumed:
            rest = [int(e) for e in resumed]
        assert sorted(out[: k + 1] + rest) == everything, k


def test_bad_parallelism():
    with pytest.raises(ValueError, match="num_parallel_calls"):
        Dataset.range(3).interleave(lambda x: Dataset.range(2), num_parallel_calls=-5)
