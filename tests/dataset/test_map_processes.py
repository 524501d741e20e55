"""Dataset.map(fn, use_processes=True): the process pool behind the element-granular map."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests.dataset.helpers import check_restore_everywhere, outputs
from tests.dataset.procpool_fns import fail_on_five, tokens
from tpudata.dataset import Dataset
from tpudata.errors import WorkerError


def pipeline():
    return (Dataset.range(40).shuffle(8, seed=3).map(tokens, num_parallel_calls=2, use_processes=True)
            .filter(_even).map(_drop_pid).batch(3))


def _drop_pid(e):
    return {"id": e["id"], "feat": e["feat"]}


def _even(e):
    return e["id"] % 2 == 0


def test_process_map_runs_in_workers_in_order():
    out = outputs(Dataset.range(50).map(tokens, num_parallel_calls=2, use_processes=True))
    assert [int(e["id"]) for e in out] == list(range(50))
    pids = {int(e["pid"]) for e in out}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert all(e["feat"] == [e["id"] % 7] * 3 for e in out)
    with Dataset.range(3).map(tokens, num_parallel_calls=2, use_processes=True).iterator() as it:
        assert next(it)["feat"].dtype == np.float32


def test_process_map_restores_exactly_everywhere():
    out = check_restore_everywhere(pipeline, stride=3)
    ids = sorted(int(i) for b in out for i in b["id"])
    assert ids == list(range(0, 40, 2))


def test_process_map_error_names_the_worker_and_element():
    with Dataset.range(10).map(fail_on_five, num_parallel_calls=2, use_processes=True).iterator() as it:
        got = []
        with pytest.raises(WorkerError, match="no token for 5") as e:
            for x in it:
                got.append(int(x))
    assert got == [0, 1, 2, 3, 4]
    assert isinstance(e.value.__cause__, KeyError) and e.value.pid not in (None, os.getpid())


def _ragged_pipeline(deterministic=True):
    from tests.dataset.procpool_fns import ragged

    return (Dataset.range(60).map(ragged, num_parallel_calls=2, use_processes=True,
                                  deterministic=deterministic).map(_drop_pid2))


def _drop_pid2(e):
    return {"ids": e["ids"], "tag": e["tag"]}


def test_process_map_sends_chunks_and_keeps_order():
    from tests.dataset.procpool_fns import ragged

    out = outputs(Dataset.range(200).map(ragged, num_parallel_calls=2, use_processes=True))
    assert [e["tag"] for e in out] == [f"t{i}".encode() for i in range(200)]
    assert all(e["ids"] == list(range(i % 5)) for i, e in enumerate(out))
    # a chunk is mapped by one worker: after the first one-element chunks, runs of consecutive
    # elements come from the same process
    pids = [e["pid"] for e in out]
    runs = sum(1 for a, b in zip(pids, pids[1:]) if a != b) + 1
    assert runs < 200 // 2, runs


def test_process_map_restores_exactly_with_chunks_and_completion_order():
    check_restore_everywhere(_ragged_pipeline, stride=23)
    out = outputs(_ragged_pipeline(deterministic=False))
    assert sorted(e["tag"] for e in out) == sorted(f"t{i}".encode() for i in range(60))
    # completion order: a restore delivers exactly the elements not delivered before it
    for k in (5, 41):
        with _ragged_pipeline(False).map(_tag_only).iterator() as it:
            before = [next(it) for _ in range(k)]
            state = json.loads(json.dumps(it.get_state()))
        with _ragged_pipeline(False).map(_tag_only).iterator(state) as it:
            rest = list(it)
        assert sorted(before + rest) == sorted(f"t{i}".encode() for i in range(60)), k


def _tag_only(e):
    return e["tag"]


def test_process_map_bounds_the_elements_in_flight():
    from tpudata.dataset import procmap

    pulled = []

    def count(x):  # runs in this process, upstream of the process map
        pulled.append(int(x))
        return x

    ds = Dataset.range(100_000).map(count).map(tokens, num_parallel_calls=2, use_processes=True)
    with ds.iterator() as it:
        for k in range(1, 300):
            next(it)
            assert len(pulled) - k <= procmap.WINDOW + procmap.CHUNK_MAX, (k, len(pulled))


def test_process_map_dtype_or_structure_change_inside_a_chunk_raises():
    from tests.dataset.procpool_fns import half_after_four, pair_after_four
    from tpudata.errors import SpecError

    for fn, what in ((half_after_four, "dtype float64"), (pair_after_four, "structure")):
        got = []
        with pytest.raises(SpecError, match=f"element 4 has.*{what}|element 4 has the {what}"):
            with Dataset.range(40).map(fn, num_parallel_calls=2, use_processes=True).iterator() as it:
                for x in it:
                    got.append(int(x))
        assert got == [0, 1, 2, 3]
