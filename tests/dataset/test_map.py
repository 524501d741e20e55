"""map / filter / flat_map: user code runs element by element, on demand, bounded in flight."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from tpudata.dataset import AUTOTUNE, Dataset, TensorSpec
from tpudata.errors import SpecError
from tests.dataset.helpers import check_restore_everywhere, outputs, plain, tpudata_threads


class Counter:
    def __init__(self):
        self.calls = []
        self.lock = threading.Lock()

    def __call__(self, x):
        with self.lock:
            self.calls.append(int(x))
        return x * 2


@pytest.mark.parametrize("n", [None, 1, 2, 4, 8])
def test_take_three_calls_the_function_on_demand(n):
    f = Counter()
    got = outputs(Dataset.range(100_000).map(f, num_parallel_calls=n).take(3))
    assert got == [0, 2, 4]
    # documented bound: k elements taken -> at most k + num_parallel_calls - 1 calls
    assert len(f.calls) <= 3 + max(0, (n or 1) - 1), f.calls
    if n is None:
        assert f.calls == [0, 1, 2]


def test_filter_and_flat_map_are_on_demand():
    seen = []

    def keep(x):
        seen.append(int(x))
        return x % 2 == 0

    assert outputs(Dataset.range(100_000).filter(keep).take(3)) == [0, 2, 4]
    assert seen == [0, 1, 2, 3, 4]
    opened = []

    def sub(x):
        opened.append(int(x))
        return Dataset.range(int(x), int(x) + 2)

    assert outputs(Dataset.range(1000).flat_map(sub).take(5)) == [0, 1, 1, 2, 2]
    assert opened == [0, 1, 2]


def test_map_then_batch_calls_once_per_element():
    f = Counter()
    got = outputs(Dataset.range(10).map(f).batch(4))
    assert got == [[0, 2, 4, 6], [8, 10, 12, 14], [16, 18]] and f.calls == list(range(10))


@pytest.mark.parametrize("n", [2, 4])
def test_parallel_calls_really_overlap_on_an_in_memory_source(n):
    barrier = threading.Barrier(n, timeout=10)

    def meet(x):
        barrier.wait()  # only returns once n calls run at the same time
        return x + 1

    ds = Dataset.from_tensor_slices(np.arange(4 * n)).map(meet, num_parallel_calls=n)
    assert outputs(ds) == list(range(1, 4 * n + 1))


def test_autotune_uses_the_cores():
    names = set()

    def who(x):
        names.add(threading.current_thread().name)
        time.sleep(0.01)
        return x

    ds = Dataset.range(40).map(who, num_parallel_calls=AUTOTUNE)
    assert outputs(ds) == list(range(40))
    assert 1 <= len(names) <= (os.cpu_count() or 2) and all(n.startswith("tpudata-map") for n in names)


def _slow_first(x):
    time.sleep(0.5 if x == 0 else 0.01)
    return x


def test_deterministic_false_yields_in_completion_order():
    ordered = outputs(Dataset.range(6).map(_slow_first, num_parallel_calls=3))
    assert ordered == list(range(6))
    free = outputs(Dataset.range(6).map(_slow_first, num_parallel_calls=3, deterministic=False))
    assert sorted(free) == list(range(6)) and free[0] != 0 and free[-1] == 0


def test_nondeterministic_map_restores_every_element_exactly_once():
    def jitter(x):
        time.sleep(0.002 * ((int(x) * 7) % 5))
        return x

    def make():
        return Dataset.range(30).map(jitter, num_parallel_calls=3, deterministic=False)

    it = make().iterator()
    states, out = [], []
    for e in it:
        states.append(json.loads(json.dumps(it.get_state())))
        out.append(int(e))
    assert sorted(out) == list(range(30))
    for k in range(0, len(states), 3):
        with make().iterator(states[k]) as resumed:
            rest = [int(e) for e in resumed]
        assert sorted(out[: k + 1] + rest) == list(range(30)), k  # none lost, none twice


def test_errors_keep_the_worker_traceback():
    def bad(x):
        if x == 5:
            raise ZeroDivisionError("element five")
        return x

    import traceback

    with pytest.raises(ZeroDivisionError, match="element five") as info:
        outputs(Dataset.range(20).map(bad, num_parallel_calls=2))
    assert "in bad" in "".join(traceback.format_tb(info.value.__traceback__))


def test_dtype_drift_raises_naming_op_and_element():
    ds = Dataset.range(12).map(lambda x: x if x < 4 else x + 0.5).shuffle(4)
    with pytest.raises(SpecError, match=r"map\(.*lambda.*\): element 4 has dtype float64"):
        outputs(ds)
    structure = Dataset.range(5).map(lambda x: (x, x) if x < 2 else x)
    with pytest.raises(SpecError, match="element 2 has the structure"):
        outputs(structure)


def test_output_signature_declares_and_checks():
    sig = {"y": TensorSpec((None,), np.dtype(np.float32))}
    ds = Dataset.range(4).map(lambda x: {"y": np.zeros(int(x), np.float32)}, output_signature=sig)
    assert ds.element_spec == sig
    assert [len(e["y"]) for e in outputs(ds)] == [0, 1, 2, 3]
    wrong = Dataset.range(4).map(lambda x: {"y": np.zeros(2, np.float64)}, output_signature=sig)
    with pytest.raises(SpecError, match="element 0 has dtype float64"):
        outputs(wrong)


def test_element_spec_is_declared_without_running():
    calls = []

    def f(x):
        calls.append(x)
        return {"a": np.full(int(x) + 1, x, np.float32), "b": x}

    ds = Dataset.range(1, 20).map(f).shuffle(5)
    first = outputs(ds)
    ds2 = Dataset.range(1, 20).map(f).shuffle(5, seed=3)
    before = outputs(ds2)
    spec = ds2.element_spec  # traced on two dummy elements: no pipeline element is read
    assert spec["a"] == TensorSpec((None,), np.dtype(np.float32)) and spec["b"].dtype == np.int64
    ds3 = Dataset.range(1, 20).map(f).shuffle(5, seed=3)
    spec3 = ds3.element_spec
    assert spec3 == spec and outputs(ds3) == before  # reading it changed nothing
    assert len(first) == 19


def test_use_processes_names_the_missing_module():
    import importlib.util

    if importlib.util.find_spec("tpudata.dataset.parallel.processes.pool") is None:
        with pytest.raises(NotImplementedError, match="tpudata.dataset.parallel.processes.pool"):
            outputs(Dataset.range(3).map(abs, use_processes=True, num_parallel_calls=2))
    else:  # the process pool is there: it must give the same elements
        assert outputs(Dataset.range(3).map(abs, use_processes=True, num_parallel_calls=2)) == [0, 1, 2]


PEAK = textwrap.dedent("""
    import json
    import numpy as np
    from tpudata.dataset import Dataset

    def hwm():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))

    def to_4kb(x):
        return np.full(512, x, np.float64)

    base = hwm()
    it = Dataset.from_tensor_slices(np.arange(200_000)).map(to_4kb, num_parallel_calls=4).prefetch(1).iterator()
    first = next(it)
    print(json.dumps({"base_kb": base, "peak_kb": hwm(), "first": float(first[0])}))
    it.close()
""")


def test_first_element_memory_stays_small():
    out = subprocess.run([sys.executable, "-c", PEAK], capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    assert r["first"] == 0.0
    assert (r["peak_kb"] - r["base_kb"]) / 1024 < 50, r


def test_map_threads_end_with_the_iterator():
    it = Dataset.range(100).map(lambda x: x, num_parallel_calls=3).iterator()
    next(it)
    assert any(n.startswith("tpudata-map") for n in tpudata_threads())
    it.close()
    deadline = time.time() + 5
    while tpudata_threads() and time.time() < deadline:
        time.sleep(0.01)
    assert tpudata_threads() == []


def test_map_tuples_and_plain_values():
    ds = Dataset.from_tensor_slices((np.arange(3), np.arange(3) * 10)).map(
        lambda a, b: (b, a), num_parallel_calls=2)
    assert [plain(e) for e in ds] == [[0, 0], [10, 1], [20, 2]]


def _input_block_sizes(ds):
    """The block sizes the shuffle under ``ds`` hands out in one epoch."""
    from tpudata.dataset.ops import shuffle as shuffle_mod

    sizes = []
    depth = [0]
    original = shuffle_mod._ShuffleIterator.next

    def spy(self):  # the outermost call (next may call itself)
        depth[0] += 1
        try:
            block = original(self)
        finally:
            depth[0] -= 1
        if block is not None and depth[0] == 0:
            sizes.append(block.n)
        return block

    shuffle_mod._ShuffleIterator.next = spy
    try:
        outputs(ds)
    finally:
        shuffle_mod._ShuffleIterator.next = original
    return sizes


@pytest.mark.parametrize("zipped", [False, True])
def test_a_sequential_map_under_batch_takes_its_input_a_batch_at_a_time(zipped):
    # batch(16) asks the map for 16 elements: the map (and a zip under it) ask their input for
    # 16 at once instead of one block per element
    src = Dataset.range(64).shuffle(8, seed=1)
    if zipped:
        ds = Dataset.zip((src, Dataset.range(64))).map(lambda x, i: x + i).batch(16)
    else:
        ds = src.map(lambda x: x * 2).batch(16)
    sizes = _input_block_sizes(ds)
    assert sum(sizes) == 64
    assert max(sizes) == 16 and len(sizes) <= 6, sizes
    threaded = _input_block_sizes(src.map(lambda x: x * 2, num_parallel_calls=2).batch(16))
    assert sum(threaded) == 64


@pytest.mark.parametrize("make", [
    lambda: Dataset.zip((Dataset.range(40).shuffle(40, seed=1),
                         Dataset.range(80).filter(lambda x: x % 3 != 1))).batch(8),
    lambda: Dataset.zip((Dataset.range(40).filter(lambda x: x % 3 != 1),
                         Dataset.range(40).shuffle(40, seed=2))).map(lambda a, b: a * 100 + b).batch(5),
    lambda: Dataset.range(40).shuffle(16, seed=3).map(lambda x: x + 1).map(lambda x: x * 2).batch(6),
], ids=["zip-filter", "filter-zip-map", "map-map"])
def test_inputs_asked_for_several_elements_restore_everywhere(make):
    # an exact input (the shuffle) asked for several elements may be left inside a block (a zip
    # takes what its other input has): its position there restores exactly
    check_restore_everywhere(make)


@pytest.mark.parametrize("need, chunk", [(None, 1), (64, 32), (5, 3)])
def test_the_thread_executor_hands_out_chunks_of_what_the_consumer_needs(need, chunk):
    # need 64 on 2 threads: tasks of up to 32 elements; no need given: one element per task
    from tpudata.dataset.parallel.executor import ThreadMapper

    mapper = ThreadMapper(lambda x: x * 2, 2)
    submitted = []
    submit = mapper._pool.submit
    mapper._pool.submit = lambda fn, items: (submitted.append(len(items)), submit(fn, items))[1]
    try:
        out = list(mapper.imap(range(128), need=None if need is None else (lambda: need)))
    finally:
        mapper.close()
    assert out == [(x, 2 * x) for x in range(128)]
    assert max(submitted) == chunk and sum(submitted) == 128
    assert len(submitted) <= 4 * 128 // chunk + 4


def test_an_error_inside_a_chunk_comes_after_the_results_before_it():
    def f(x):
        if int(x) == 21:
            raise ValueError("element 21")
        return x

    it = Dataset.range(64).map(f, num_parallel_calls=2).iterator()
    seen = []
    with pytest.raises(ValueError, match="element 21"):
        for v in it:
            seen.append(int(v))
    assert seen == list(range(21))
