"""interleave(map_func, use_processes=True): each file's dataset runs in a worker process."""

from __future__ import annotations

import json
import multiprocessing
import os
import time

import pytest

import tpudata
from tests.dataset.helpers import check_restore_everywhere, outputs
from tests.dataset.procpool_fns import fails_at_third, file_records
from tpudata.dataset import Dataset
from tpudata.errors import WorkerError


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("files")
    paths = []
    for s, n in enumerate([5, 9, 3, 7, 6]):
        path = str(d / f"train-{s:05d}")
        tpudata.write_records(path, [f"f{s}r{i}".encode() for i in range(n)])
        paths.append(path)
    return paths


def _records(e):
    return e["rec"]


def pipeline(paths, processes=True, deterministic=None, **kw):
    kw = dict(cycle_length=3, block_length=2, num_parallel_calls=2, **kw)
    ds = Dataset.from_tensor_slices(paths).interleave(file_records, deterministic=deterministic,
                                                      use_processes=processes, **kw)
    return ds


def _workers() -> list:
    return [p for p in multiprocessing.active_children() if p.name.startswith("tpudata-map")]


def test_order_is_the_threaded_interleaves_and_files_run_in_workers(files):
    got = outputs(pipeline(files))
    threads = outputs(pipeline(files, processes=False))
    sequential = outputs(Dataset.from_tensor_slices(files).interleave(
        file_records, cycle_length=3, block_length=2))
    assert [e["rec"] for e in got] == [e["rec"] for e in threads] == [e["rec"] for e in sequential]
    pids = {e["pid"] for e in got}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert {e["pid"] for e in threads} == {os.getpid()}


def test_restores_exactly_everywhere(files):
    out = check_restore_everywhere(lambda: pipeline(files).map(_records), stride=6)
    assert len(out) == 30


def test_completion_order_delivers_each_element_once_across_a_restore(files):
    every = sorted(e for e in outputs(pipeline(files, processes=False).map(_records)))
    assert sorted(outputs(pipeline(files, deterministic=False).map(_records))) == every
    for k in (4, 17):
        with pipeline(files, deterministic=False).map(_records).iterator() as it:
            before = [next(it) for _ in range(k)]
            state = json.loads(json.dumps(it.get_state()))
        with pipeline(files, deterministic=False).map(_records).iterator(state) as it:
            rest = list(it)
        assert sorted(before + rest) == every, k


def test_errors_carry_the_workers_traceback(files, tmp_path):
    bad = files[:2] + [str(tmp_path / "file-bad")]
    with pytest.raises(WorkerError, match="cannot open .*file-bad") as e:
        outputs(pipeline(bad))
    assert "file_records" in e.value.worker_traceback and e.value.pid != os.getpid()
    with pytest.raises(WorkerError, match="the third record is bad"):
        outputs(Dataset.from_tensor_slices(files[:1]).interleave(
            fails_at_third, cycle_length=1, num_parallel_calls=1, use_processes=True))


def test_a_killed_worker_gives_a_clear_error(files, tmp_path, timed):
    killed = files[:1] + [str(tmp_path / "file-kill")]
    start = time.monotonic()
    with pytest.raises(WorkerError, match="killed by signal SIGKILL"):
        outputs(pipeline(killed))
    if timed:
        assert time.monotonic() - start < 30
    deadline = time.monotonic() + 5
    while _workers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _workers()


def test_close_stops_the_workers(files):
    it = pipeline(files).iterator()
    next(it)
    assert len(_workers()) == 2
    it.close()
    deadline = time.monotonic() + 5
    while _workers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _workers()


@pytest.mark.parametrize("kind", ["map", "interleave"])
def test_close_from_another_thread_while_a_worker_runs_long(kind, timed):
    import threading

    from tests.dataset.procpool_fns import sleep_forever, sleepy_file

    if kind == "map":
        ds = Dataset.range(10).map(sleep_forever, num_parallel_calls=2, use_processes=True)
    else:
        ds = Dataset.range(4).interleave(sleepy_file, cycle_length=2, num_parallel_calls=2,
                                         use_processes=True)
    it = ds.iterator()
    result = {}

    def consume():
        try:
            next(it)
            result["got"] = "element"
        except StopIteration:
            result["got"] = "StopIteration"

    consumer = threading.Thread(target=consume)
    consumer.start()
    deadline = time.monotonic() + 20
    while len(_workers()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the workers are inside the minute-long calls
    t0 = time.monotonic()
    it.close()
    closed_in = time.monotonic() - t0
    consumer.join(5)
    assert result == {"got": "StopIteration"}, (closed_in, result)
    if timed:
        assert closed_in < 1.5, closed_in
    deadline = time.monotonic() + 3
    while _workers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _workers()  # no process outlives the iterator


def test_a_shuffle_after_it_names_the_records_read_in_workers(files):
    from tests.dataset.procpool_fns import plain_file

    def make():
        return Dataset.from_tensor_slices(files).interleave(
            plain_file, cycle_length=2, num_parallel_calls=2, use_processes=True).shuffle(12, seed=3)

    with make().iterator() as it:
        first = [next(it) for _ in range(10)]
        state = json.loads(json.dumps(it.get_state()))
    text = json.dumps(state)
    assert "offsets" in text and "elements" not in text  # origins came back with the blocks
    with make().iterator(state) as it:
        rest = list(it)
    assert first + rest == outputs(make())
