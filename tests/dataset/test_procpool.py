"""ProcessMapper: real worker processes (forkserver), shared memory, errors, shutdown."""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from tests.dataset.procpool_fns import LoadsOnlyInParent, apply, sleep_forever
from tpudata import _shm_transport as _shm
from tpudata.dataset.parallel.processes.pool import ProcessMapper
from tpudata.errors import NotPicklableError, TpuDataError, WorkerError

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="counts segments in /dev/shm")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def our_segments(prefix: str = "") -> list[str]:
    """Shared-memory segments created in this process (names start with tpd<pid>)."""
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"tpd{os.getpid()}{prefix}")]


def bounded_segments() -> bool:
    """While the 2-worker mapper lives: at most 2 reusable segments per worker for its inputs
    and 2 + LEND_SLOTS for its results."""
    from tpudata.dataset.parallel.processes.worker import LEND_SLOTS

    return len(our_segments()) <= 2 * (2 + 2 + LEND_SLOTS)


def worker_pids() -> set[int]:
    return {p.pid for p in multiprocessing.active_children() if p.name.startswith("tpudata-map")}


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] == "Z"  # a zombie has ended
    except FileNotFoundError:
        return True


def wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.fixture(scope="module")
def mapper():
    with ProcessMapper(apply, num_workers=2) as m:
        yield m
    assert not our_segments()


class Pulls:
    """An input iterator that records how many elements were taken."""

    def __init__(self, tasks):
        self.tasks = list(tasks)
        self.taken = 0

    def __iter__(self):
        for t in self.tasks:
            self.taken += 1
            yield t


def test_results_in_input_order_with_bounded_lazy_pulls(mapper):
    tasks = [("sleep", 0.3)] + [("square", i) for i in range(1, 40)]
    source = Pulls(tasks)
    got = []
    for position, value in mapper.imap(source):
        assert source.taken - len(got) <= 4  # max_in_flight defaults to 2 * num_workers
        got.append((position, value))
    assert got == [(0, 0.3)] + [(i, i * i) for i in range(1, 40)]


def test_nested_elements_round_trip_through_shared_memory(mapper):
    rng = np.random.default_rng(0)
    element = {
        "image": rng.integers(0, 255, (256, 256, 3), dtype=np.uint8),  # ~200 KB: shared memory
        "small": np.arange(5, dtype=np.float64),
        "pair": (np.float32(1.5), 7, "text", b"\x00\xff" * 40_000),
        "list": [np.zeros((0, 3), np.int16), None, True],
        "fortran": np.asfortranarray(rng.random((300, 40))),
    }
    [(position, back)] = list(mapper.imap([("echo", element)]))
    assert position == 0
    assert back["image"].dtype == np.uint8 and np.array_equal(back["image"], element["image"])
    assert back["image"].flags.writeable  # an ordinary array, not a view of a freed segment
    back["image"][0, 0, 0] ^= 1
    assert np.array_equal(back["small"], element["small"])
    assert back["pair"] == element["pair"] and type(back["pair"][0]) is np.float32
    assert back["list"][0].shape == (0, 3) and back["list"][0].dtype == np.int16
    assert back["list"][1:] == [None, True]
    assert np.array_equal(back["fortran"], element["fortran"])
    assert bounded_segments()


def test_shared_memory_slots_are_reused_grown_and_freed():
    sender, receiver = _shm.Sender(f"tpd{os.getpid()}slots_"), _shm.Receiver()
    big = {"x": np.ones(_shm.INLINE_LIMIT, np.uint8)}
    first, slot0 = sender.encode(big)
    second, slot1 = sender.encode(big)
    third, none = sender.encode(big)  # both slots busy: a one-off segment
    assert (first[0], second[0], third[0], slot0, slot1, none) == ("r", "r", "s", 0, 1, None)
    assert len(our_segments("slots_")) == 3
    assert all(receiver.decode(p)["x"].sum() == _shm.INLINE_LIMIT for p in (first, second, third))
    assert len(our_segments("slots_")) == 2  # the receiver unlinked the one-off segment
    sender.release(slot0)
    again, slot = sender.encode(big)
    assert slot == 0 and again[2] == first[2]  # same segment, reused
    grown, slot = sender.encode({"x": np.ones(1 << 20, np.uint8)})  # slot 1 is still busy
    assert grown[0] == "s"
    _shm.discard(grown)  # a payload that is never read
    sender.release(0)
    grown, slot = sender.encode({"x": np.ones(1 << 20, np.uint8)})
    assert slot == 0 and grown[2] != first[2] and len(our_segments("slots_")) == 2  # replaced, old unlinked
    assert receiver.decode(grown)["x"].size == 1 << 20
    small, none = sender.encode({"x": np.ones(16, np.uint8)})
    assert none is None and small[0] == "i"
    receiver.close()
    sender.close()
    assert not our_segments("slots_")


def test_rows_travel_as_one_stacked_array_inline_in_slots_and_in_one_off_segments():
    sender, receiver = _shm.Sender(f"tpd{os.getpid()}rows_"), _shm.Receiver()
    rng = np.random.default_rng(0)
    for n, shape, dtype in ((3, (700,), np.float64), (4, (2, 3, 300), np.int16),
                            (5, (100_000,), np.uint8), (2, (9, 1000), np.complex64)):
        rows = [rng.integers(0, 100, shape).astype(dtype) for _ in range(n)]
        rows[1] = np.asfortranarray(rows[1]) if len(shape) > 1 else rows[1][::-1]  # not C order
        packed = _shm.Rows.fit(rows)
        assert packed is not None and packed.shape == (n, *shape)
        # Rows beside pickle's own out-of-band buffers and small values, nested
        big = np.arange(10_000, dtype=np.int32)
        message = {"cols": [packed, big, _shm.Rows(rows[:2])], "n": n, "text": "t"}
        payloads = []
        for _ in range(3):  # (large ones) two slots, then a one-off segment
            payloads.append(sender.encode(message))
        kinds = {p[0] for p, _ in payloads}
        assert kinds == ({"i"} if packed.nbytes * 1.5 + big.nbytes < _shm.INLINE_LIMIT
                         else {"r", "s"}), kinds
        for payload, slot in payloads:
            back = receiver.decode(payload)
            sender.release(slot)
            stacked, other, two = back["cols"]
            assert stacked.dtype == dtype and stacked.shape == (n, *shape)
            assert np.array_equal(stacked, np.stack(rows)) and np.array_equal(two, np.stack(rows[:2]))
            assert np.array_equal(other, big) and (back["n"], back["text"]) == (n, "t")
            assert stacked.flags.writeable and stacked.flags.c_contiguous
    # inline (a small message): the rows are copied into the message's buffer
    rows = [np.arange(i, i + 600, dtype=np.int64)[::2] for i in range(4)]
    payload, slot = sender.encode(("x", _shm.Rows(rows)))
    assert payload[0] == "i" and slot is None
    back = receiver.decode(payload)[1]
    assert back.dtype == np.int64 and np.array_equal(back, np.stack(rows))
    # pickled without a Sender, Rows is the stacked array
    rows = [np.full(3, i, np.float32) for i in range(2)]
    assert np.array_equal(pickle.loads(pickle.dumps(_shm.Rows(rows))), np.stack(rows))
    # what does not fit: scalars, object arrays, shapes or dtypes that differ, few bytes
    assert _shm.Rows.fit([np.float32(1)] * 5000) is None
    assert _shm.Rows.fit([np.empty(5000, object)] * 2) is None
    assert _shm.Rows.fit([np.zeros(5000), np.zeros(5001)]) is None
    assert _shm.Rows.fit([np.zeros(5000), np.zeros(5000, np.float32)]) is None
    assert _shm.Rows.fit([np.zeros(5000), [0.0] * 5000]) is None
    assert _shm.Rows.fit([np.zeros(8)] * 2) is None
    receiver.close()
    sender.close()
    assert not our_segments("rows_")


def test_lent_slots_come_back_once_their_arrays_are_gone():
    sender, receiver = _shm.Sender(f"tpd{os.getpid()}lend_", slots=3), _shm.Receiver(lend=1)
    n = _shm.INLINE_LIMIT
    first, slot0 = sender.encode({"x": np.full(n, 1, np.uint8), "rows": _shm.Rows([np.ones(n)] * 2)})
    second, slot1 = sender.encode({"x": np.full(n, 2, np.uint8)})
    lent = receiver.decode(first)  # lent: views of slot 0, no copy
    copied = receiver.decode(second)  # one slot is lent already: copied, slot 1 free at once
    assert receiver.take_freed() == [slot1]
    sender.release(slot1)
    lent["x"][:3] = 7  # writable, and nobody else writes there until it comes back
    again, slot = sender.encode({"x": np.full(n, 3, np.uint8)})  # slot 0 is still busy
    assert slot == slot1
    assert lent["x"][:4].tolist() == [7, 7, 7, 1] and lent["x"][4:].sum() == n - 4
    assert lent["rows"].shape == (2, n) and lent["rows"].sum() == 2 * n
    assert copied["x"].sum() == 2 * n and receiver.decode(again)["x"].sum() == 3 * n
    assert receiver.take_freed() == [slot1]
    view = lent["rows"][1]  # a view of a lent array keeps the slot lent
    del lent
    gc.collect()
    assert receiver.take_freed() == []
    del view
    gc.collect()
    assert receiver.take_freed() == [slot0]
    # arrays lent when the receiver and sender close stay valid
    sender.release(slot0)
    sender.release(slot1)
    payload, _ = sender.encode({"x": np.full(n, 5, np.uint8)})
    kept = receiver.decode(payload)
    receiver.close()
    sender.close()
    assert not our_segments("lend_")  # unlinked; the pages live while `kept` does
    assert kept["x"].sum() == 5 * n
    del kept
    gc.collect()


def test_results_kept_by_the_consumer_are_never_overwritten(mapper):
    sizes = [20_000 + i for i in range(40)]
    kept = [value for _, value in mapper.imap([("array", s) for s in sizes])]
    for s, value in zip(sizes, kept):
        assert value["x"].shape == (s,) and (value["x"] == s % 251).all(), s
    assert bounded_segments()


def test_quick_elements_travel_in_chunks_within_max_in_flight():
    tasks = [("square", i) for i in range(3000)] + [("raise", 3000)] + [("square", 1)] * 50
    source = Pulls(tasks)
    got = []
    with ProcessMapper(apply, num_workers=2, max_in_flight=32) as m:
        with pytest.raises(WorkerError) as info:
            for position, value in m.imap(source):
                assert source.taken - len(got) <= 32
                got.append((position, value))
    assert got == [(i, i * i) for i in range(3000)]
    assert info.value.position == 3000 and "bad element 3000" in str(info.value)


def test_completion_order_when_not_deterministic():
    tasks = [("sleep", 0.4)] + [("square", i) for i in range(1, 8)]
    with ProcessMapper(apply, num_workers=2, deterministic=False) as m:
        positions = [p for p, _ in m.imap(tasks)]
    assert sorted(positions) == list(range(8))
    # the quick elements on the other worker overtake the slow one (a worker holds two tasks, so
    # at most one quick element waits behind it)
    assert positions.index(0) >= 5


def test_fn_error_carries_the_worker_traceback(mapper):
    tasks = [("square", 1), ("square", 2), ("raise", "x3"), ("square", 4)]
    got = []
    with pytest.raises(WorkerError) as info:
        for item in mapper.imap(tasks):
            got.append(item)
    e = info.value
    assert got == [(0, 1), (1, 4)]  # the error comes at its element's turn
    assert isinstance(e, TpuDataError) and isinstance(e, RuntimeError)
    assert e.position == 2 and e.pid in worker_pids() and e.exitcode is None
    assert "element 2" in str(e) and "apply" in str(e)
    assert 'raise ValueError(f"bad element {arg!r}")' in e.worker_traceback
    assert e.worker_traceback in str(e)
    assert isinstance(e.__cause__, ValueError) and str(e.__cause__) == "bad element 'x3'"
    copy = pickle.loads(pickle.dumps(e))
    assert (copy.pid, copy.position, copy.worker_traceback, str(copy)) == (
        e.pid, 2, e.worker_traceback, str(e))
    # the mapper stays usable, and results of the abandoned run do not leak into the next one
    assert list(mapper.imap([("square", 5)])) == [(0, 25)]
    assert bounded_segments()


def test_input_error_comes_after_the_earlier_results(mapper):
    def source():
        yield from [("sleep", 0.2), ("square", 2), ("square", 3)]
        raise OSError("input broke")

    got = []
    with pytest.raises(OSError, match="input broke"):
        for item in mapper.imap(source()):
            got.append(item)
    assert got == [(0, 0.2), (1, 4), (2, 9)]


def test_element_that_does_not_pickle_is_named(mapper):
    with pytest.raises(NotPicklableError, match="element 1 cannot be sent") as info:
        list(mapper.imap([("echo", 1), ("echo", threading.Lock()), ("echo", 3)]))
    assert isinstance(info.value, TypeError)
    assert list(mapper.imap([("echo", 4)])) == [(0, 4)]


def test_abandoned_run_does_not_leak_segments(mapper):
    for _ in range(3):
        run = mapper.imap([("array", 50_000 + i) for i in range(20)])
        assert next(run)[1]["x"].shape == (50_000,)
        run.close()  # results in flight belong to no one now
    assert [(p, v["n"]) for p, v in mapper.imap([("array", 70_000)])] == [(0, 70_000)]
    assert bounded_segments()


def test_arguments_are_checked():
    before = worker_pids()
    with pytest.raises(ValueError, match="fork"):
        ProcessMapper(apply, 2, start_method="fork")
    with pytest.raises(ValueError, match="num_workers"):
        ProcessMapper(apply, 0)
    with pytest.raises(ValueError, match="max_in_flight"):
        ProcessMapper(apply, 1, max_in_flight=0)
    with pytest.raises(TypeError):
        ProcessMapper(apply, 1, ordered=True)  # misspelt keyword
    with pytest.raises(TypeError, match="callable"):
        ProcessMapper(3, 1)
    assert worker_pids() == before


def test_lambda_without_cloudpickle_says_to_use_a_named_function(monkeypatch):
    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # as if cloudpickle were not installed
    before = worker_pids()
    with pytest.raises(NotPicklableError, match="top level of a module") as info:
        ProcessMapper(lambda x: x + 1, num_workers=2)
    assert isinstance(info.value, TypeError)
    assert worker_pids() == before


def test_fn_that_cannot_load_in_a_worker_gives_its_traceback():
    with ProcessMapper(LoadsOnlyInParent(), num_workers=1) as m:
        with pytest.raises(WorkerError, match="could not start") as info:
            next(m.imap([1]))
    assert "this function cannot be loaded in a worker" in info.value.worker_traceback
    assert "LoadsOnlyInParent object" in str(info.value)


def test_killed_worker_gives_a_clear_error():
    before, segments = worker_pids(), set(our_segments())
    m = ProcessMapper(apply, num_workers=2)
    pids = worker_pids() - before
    with pytest.raises(WorkerError) as info:
        list(m.imap([("square", 1), ("square", 2), ("sigkill", 0), ("square", 3)]))
    e = info.value
    assert e.pid in pids and e.exitcode == -signal.SIGKILL and e.position == 2
    assert f"worker process {e.pid}" in str(e) and "SIGKILL" in str(e) and "element 2" in str(e)
    with pytest.raises(WorkerError, match="unusable"):
        next(m.imap([("square", 1)]))
    m.close()
    assert all(gone(pid) for pid in pids) and set(our_segments()) <= segments


def test_close_from_another_thread_wakes_a_blocked_consumer(timed):
    threads_before = threading.active_count()
    before, segments = worker_pids(), set(our_segments())
    m = ProcessMapper(sleep_forever, num_workers=2)
    pids = worker_pids() - before
    assert len(pids) == 2
    outcome = []

    def consume():
        try:
            outcome.append(next(m.imap([np.zeros(100_000)] * 8)))  # large inputs: shared memory
        except StopIteration:
            outcome.append("StopIteration")

    consumer = threading.Thread(target=consume)
    consumer.start()
    time.sleep(0.5)  # both workers are inside sleep_forever now
    assert outcome == []
    start = time.monotonic()
    m.close()
    if timed:
        assert time.monotonic() - start < 1.5  # ~1 s (0.2 s grace, SIGTERM), not the 60 s of fn
    consumer.join(1.5)
    assert outcome == ["StopIteration"]
    assert threading.active_count() == threads_before
    assert not (worker_pids() & pids) and all(gone(pid) for pid in pids)
    assert set(our_segments()) <= segments
    m.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        m.imap([1])


def test_spawn_workers_run_a_lambda_and_garbage_collection_stops_them():
    pytest.importorskip("cloudpickle")
    before = worker_pids()
    offset = 10
    m = ProcessMapper(lambda x: x + offset, num_workers=2, start_method="spawn")
    assert list(m.imap(range(3))) == [(0, 10), (1, 11), (2, 12)]
    pids = worker_pids() - before
    assert len(pids) == 2
    del m
    gc.collect()
    assert all(gone(pid) for pid in pids) and not (worker_pids() & pids)


def test_workers_exit_when_the_parent_is_killed(tmp_path):
    script = textwrap.dedent("""
        import multiprocessing, threading, time
        from tests.dataset.procpool_fns import sleep_forever
        from tpudata.dataset.parallel.processes.pool import ProcessMapper
        if __name__ == "__main__":
            m = ProcessMapper(sleep_forever, num_workers=2)
            run = m.imap(range(4))
            threading.Thread(target=lambda: next(run), daemon=True).start()
            time.sleep(0.3)
            print(" ".join(str(p.pid) for p in multiprocessing.active_children()), flush=True)
            time.sleep(60)
    """)
    path = tmp_path / "parent.py"
    path.write_text(script)
    parent = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2 and not any(gone(p) for p in pids)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    assert wait_until(lambda: all(gone(p) for p in pids), timeout=5.0)


def test_submit_to_a_chosen_worker_and_collect():
    with ProcessMapper(apply, num_workers=2) as m:
        numbers = {m.submit(("pid", None), w): w for w in (0, 1, 0, 1)}
        numbers[m.submit(("raise", 7), 1)] = 1
        got = {}
        while len(got) < len(numbers):
            for number, error, value in m.collect(timeout=None):
                got[number] = (error, value)
        pids = {numbers[n]: v for n, (e, v) in got.items() if e is None}
        assert len(set(pids.values())) == 2 and os.getpid() not in pids.values()
        (error,) = [e for e, _ in got.values() if e is not None]
        assert "bad element 7" in str(error) and error.pid == pids[1]  # it ran on worker 1
        assert m.collect(timeout=0) == []  # nothing pending: returns at once
        with pytest.raises(ValueError, match="imap"):
            list(m.imap([("echo", 1)]))
