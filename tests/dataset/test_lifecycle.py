"""Pickling Dataset descriptions into spawned workers, and prompt close() from any thread."""

from __future__ import annotations

import gc
import logging
import multiprocessing
import pickle
import sys
import threading
import time

import numpy as np
import pytest

from tpudata.dataset import Dataset, TFRecordDataset
from tpudata.errors import NotPicklableError
from tests.dataset.helpers import SPEC, outputs, plain, tpudata_threads, write_shards


def double(x):
    return x * 2


def is_even(x):
    return x % 2 == 0


def _pipeline(paths):
    return (TFRecordDataset(paths).parse(SPEC).map(lambda_free_id)
            .filter(is_even).shuffle(8, seed=1).batch(4).prefetch(2))


def lambda_free_id(e):
    return e["id"]


def _iterate_in_worker(payload, queue):
    ds = pickle.loads(payload)
    queue.put([plain(e) for e in ds])


def test_descriptions_pickle_into_a_spawned_worker(tmp_path):
    paths = write_shards(tmp_path, 2, 10)
    assert outputs(pickle.loads(pickle.dumps(Dataset.range(10)))) == list(range(10))
    ds = _pipeline(paths)
    expected = outputs(_pipeline(paths))
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_iterate_in_worker, args=(pickle.dumps(ds), queue))
    proc.start()
    got = queue.get(timeout=120)
    proc.join(30)
    assert got == expected and proc.exitcode == 0


def test_a_running_iterator_does_not_pickle_but_its_dataset_does():
    ds = Dataset.range(5).map(double, num_parallel_calls=2)
    it = ds.iterator()
    next(it)
    assert outputs(pickle.loads(pickle.dumps(ds))) == [0, 2, 4, 6, 8]
    with pytest.raises(Exception):
        pickle.dumps(it)
    it.close()


def test_lambda_gives_a_clear_error_without_cloudpickle(monkeypatch):
    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # as if not installed
    name = r"test_lifecycle\.test_lambda_gives_a_clear_error_without_cloudpickle\.<locals>\.<lambda> "
    with pytest.raises(pickle.PicklingError,
                       match=name + r".*define it with `def` at the top level of a module") as info:
        pickle.dumps(Dataset.range(3).map(lambda x: x + 1))
    assert isinstance(info.value, NotPicklableError)


def test_lambda_travels_with_cloudpickle():
    pytest.importorskip("cloudpickle")
    k = 7
    ds = pickle.loads(pickle.dumps(Dataset.range(3).map(lambda x: x + k).filter(lambda x: x > 7)))
    assert outputs(ds) == [8, 9]


def _wait_no_threads(timeout=5.0, ignore=()):
    """tpudata threads still alive after ``timeout`` (``ignore``: names that were there before
    the test, e.g. of an earlier test's iterator that garbage collection has not reached)."""
    deadline = time.time() + timeout
    while [t for t in tpudata_threads() if t not in ignore] and time.time() < deadline:
        time.sleep(0.02)
    return [t for t in tpudata_threads() if t not in ignore]


def _slow(x):
    time.sleep(2.0)
    return x


@pytest.mark.parametrize("build", [
    lambda: Dataset.range(10).map(_slow, num_parallel_calls=2),
    lambda: Dataset.range(10).map(_slow).prefetch(2),
    lambda: Dataset.range(4).interleave(lambda i: Dataset.range(5).map(_slow), cycle_length=2,
                                        num_parallel_calls=2),
], ids=["parallel_map", "prefetch", "parallel_interleave"])
def test_close_from_another_thread_wakes_a_blocked_consumer(build, timed):
    gc.collect()  # earlier tests' dropped iterators stop their threads now
    before = set(_wait_no_threads(timeout=2.0))
    it = build().iterator()
    result = {}

    def consume():
        t0 = time.perf_counter()
        try:
            next(it)
            result["got"] = "element"
        except StopIteration:
            result["got"] = "StopIteration"
        result["woke_after"] = time.perf_counter() - t0

    consumer = threading.Thread(target=consume)
    consumer.start()
    time.sleep(0.3)  # the consumer is blocked while the user function sleeps
    t0 = time.perf_counter()
    it.close()
    closed_in = time.perf_counter() - t0
    consumer.join(5)
    assert result["got"] == "StopIteration", result
    if timed:
        assert closed_in < 1.5 and result["woke_after"] < 1.5, (closed_in, result)
    with pytest.raises(StopIteration):
        next(it)
    assert _wait_no_threads(ignore=before) == []  # none outlives its last user call


def test_close_twice_and_after_the_end():
    it = Dataset.range(3).prefetch(2).iterator()
    assert [int(e) for e in it] == [0, 1, 2]
    it.close()
    it.close()
    assert _wait_no_threads() == []
    assert np.array_equal(outputs(Dataset.range(3)), [0, 1, 2])


def test_close_while_the_producer_is_inside_a_generator_closes_it_afterwards(caplog, timed):
    # close() returns within its budget while the read-ahead thread is still inside the user's
    # generator; the generator is closed by that thread on its way out ("generator already
    # executing" if this thread closed it), and nothing is raised anywhere
    import threading as _threading

    from tpudata.dataset import TensorSpec

    entered, closed, errors = _threading.Event(), _threading.Event(), []
    hook = _threading.excepthook
    _threading.excepthook = lambda args: errors.append(args.exc_value)

    def slow():
        try:
            yield 1
            entered.set()
            time.sleep(1.5)
            yield 2
            yield 3
        finally:
            closed.set()

    caplog.set_level(logging.DEBUG, logger="tpudata.dataset.sources.generator")
    try:
        it = iter(Dataset.from_generator(slow, output_signature=TensorSpec((), np.int64)).prefetch(1))
        assert int(next(it)) == 1
        assert entered.wait(5)
        start = time.monotonic()
        it.close()
        if timed:
            assert time.monotonic() - start < 1.4  # did not wait for the generator
        assert closed.wait(5)  # closed once the producer left it
    finally:
        _threading.excepthook = hook
    assert errors == []
    assert "failed" not in caplog.text  # not closed from this thread while it was executing
