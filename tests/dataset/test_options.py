"""Options / with_options: the knobs tpudata honours, merged over the pipeline."""

from __future__ import annotations

import threading
import time

import pytest

from tpudata.dataset import Dataset, Options
from tests.dataset.helpers import outputs


def _slow_first(x):
    time.sleep(0.3 if int(x) == 0 else 0.0)
    return x


def test_deterministic_false_lets_results_overtake():
    ds = Dataset.range(6).map(_slow_first, num_parallel_calls=3)
    assert outputs(ds) == [0, 1, 2, 3, 4, 5]
    opts = Options()
    opts.deterministic = False
    free = outputs(ds.with_options(opts))
    assert sorted(free) == [0, 1, 2, 3, 4, 5] and free[0] != 0
    pinned = Dataset.range(6).map(_slow_first, num_parallel_calls=3, deterministic=True)
    assert outputs(pinned.with_options(opts)) == [0, 1, 2, 3, 4, 5]  # the op's own argument wins


def _thread_count(x):
    """Threads of the pool running this call (named ``<pool>_<k>``)."""
    time.sleep(0.002)
    pool = threading.current_thread().name.rsplit("_", 1)[0]
    return len({t.name for t in threading.enumerate() if t.name.rsplit("_", 1)[0] == pool})


def test_cpu_budget_and_threadpool_size_bound_threads():
    def peak(ds):
        return max(int(v) for v in ds)

    base = Dataset.range(64).map(_thread_count, num_parallel_calls=-1)
    assert peak(Dataset.range(64).map(_thread_count, num_parallel_calls=3)) >= 2  # it counts
    budget = Options()
    budget.autotune.cpu_budget = 1
    assert peak(base.with_options(budget)) <= 1
    cap = Options()
    cap.threading.private_threadpool_size = 2
    assert peak(Dataset.range(64).map(_thread_count, num_parallel_calls=8).with_options(cap)) <= 2


def test_options_merge_outermost_wins_and_refuse_unknown_knobs():
    a, b = Options(), Options()
    a.deterministic, a.autotune.cpu_budget = False, 3
    b.autotune.cpu_budget = 5
    ds = Dataset.range(3).with_options(a).map(lambda x: x).with_options(b)
    merged = ds.options()
    assert (merged.deterministic, merged.autotune.cpu_budget) == (False, 5)
    assert Dataset.zip((Dataset.range(2).with_options(a), Dataset.range(2))).options() \
        .autotune.cpu_budget == 3
    assert Dataset.range(2).options() == Options()
    with pytest.raises(AttributeError, match="honours"):
        a.experimental_optimization = 1
    with pytest.raises(AttributeError, match="cpu_budget"):
        a.autotune.ram_budget = 1
    with pytest.raises(ValueError, match="positive integer"):
        a.threading.private_threadpool_size = 0
    with pytest.raises(TypeError, match="needs an Options"):
        Dataset.range(2).with_options({"deterministic": False})
    assert outputs(Dataset.range(3).with_options(a)) == [0, 1, 2]
