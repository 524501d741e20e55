"""Dataset.map(fn, use_processes=True): the process pool behind the element-granular map."""

from __future__ import annotations

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
