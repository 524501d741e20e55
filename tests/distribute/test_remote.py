"""ds.distribute() on local executors (the consumer's thread, threads, a spawn process pool):
splits, order, exactly-once, element-exact state, back-pressure, speculation and errors."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pytest

from tests.distribute import remote_fns as fns
from tpudata import Dataset, TFRecordDataset
from tpudata.errors import NotPicklableError, RemoteSplitError, StateError


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return fns.make_files(tmp_path_factory.mktemp("remote"))


@pytest.fixture(scope="module")
def pool():
    with ThreadPoolExecutor(3) as ex:
        yield ex


def test_distributed_output_equals_the_local_pipeline(files, pool):
    local = list(fns.pipeline(files))
    for executor in (None, pool):
        out = list(fns.pipeline(files).distribute(executor, chunk_bytes=20_000))
        assert fns.ids(out) == fns.ids(local) == list(range(sum(fns.SIZES)))
        assert all((a["big"] == b["big"]).all() and (a["x"] == b["x"]).all()
                   for a, b in zip(out, local))
    # a range cut in splits of whole batches: the batches are the local ones
    ds = Dataset.range(100).map(lambda x: x * 3).batch(8)
    got = [b.tolist() for b in ds.distribute(pool, split_size=16)]
    assert got == [b.tolist() for b in ds]


def test_record_ranges_that_hold_whole_batches_give_the_local_batches(files, pool):
    ds = TFRecordDataset(files).parse(fns.SPEC).batch(8).map(lambda f: f["i"])
    local = [b.tolist() for b in ds]
    distributed = ds.distribute(pool, split="records", split_size=16)  # splits span files
    assert distributed.num_splits() == 9
    assert [b.tolist() for b in distributed] == local
    with distributed.iterator() as it:
        head = [next(it).tolist() for _ in range(5)]
        state = it.get_state()
    again = ds.distribute(None, split="records", split_size=16).iterator(state)
    assert head + [b.tolist() for b in again] == local
    with pytest.raises(ValueError, match="cuts TFRecordDataset files, not range"):
        Dataset.range(4).distribute(None, split="records").num_splits()


def test_a_seeded_file_list_is_ordered_as_locally_every_epoch(files, pool):
    def make():
        return (Dataset.list_files(files, shuffle=True, seed=3).flat_map(TFRecordDataset)
                .parse(fns.SPEC).map(lambda f: f["i"]))

    local = [int(x) for x in make().repeat(2)]
    distributed = [int(x) for x in make().distribute(pool).repeat(2)]
    assert distributed == local
    n = sum(fns.SIZES)
    assert local[:n] != local[n:] and sorted(local[:n]) == sorted(local[n:])  # reshuffled


def test_state_restores_element_exact_with_another_executor(files, pool):
    ds = fns.pipeline(files).distribute(pool, chunk_bytes=30_000)
    full = fns.ids(ds)
    for k in range(0, len(full) + 1, 7):
        it = ds.iterator()
        head = [int(next(it)["i"]) for _ in range(k)]
        state = json.loads(json.dumps(it.get_state()))  # JSON, as saved with the model
        it.close()
        assert len(json.dumps(state["cursor"])) < 600, state
        # restored on another number of workers: the consumer's thread alone
        rest = fns.ids(fns.pipeline(files).distribute(None).iterator(state))
        assert head + rest == full, k


def test_a_state_of_other_splits_is_refused(files, pool):
    it = fns.pipeline(files).distribute(pool).iterator()
    next(it)
    state = it.get_state()
    it.close()
    with pytest.raises(StateError, match="split_size=2"):
        fns.pipeline(files).distribute(pool, split_size=2).iterator(state)


def test_nondeterministic_delivers_every_element_once(pool):
    ds = Dataset.range(300).map(fns.jitter).distribute(pool, split_size=10, deterministic=False)
    out = [int(x) for x in ds]
    assert sorted(out) == list(range(300))
    for cut_at in (7, 61, 123, 199, 288):  # any order may come first after a restore
        it = ds.iterator()
        head = [int(next(it)) for _ in range(cut_at)]
        state = it.get_state()
        it.close()
        rest = [int(x) for x in ds.iterator(state)]
        assert Counter(head + rest) == Counter(range(300)), cut_at


def test_consumers_share_the_splits(pool):
    ds = Dataset.range(250)
    parts = [[int(x) for x in ds.distribute(pool, split_size=9, num_consumers=3, consumer_index=i)]
             for i in range(3)]
    assert sorted(sum(parts, [])) == list(range(250))
    assert all(parts)


def test_back_pressure_bounds_the_chunks_in_flight():
    submitted = []

    class Counting(ThreadPoolExecutor):
        def submit(self, fn, /, *args, **kwargs):
            submitted.append(time.monotonic())
            return super().submit(fn, *args, **kwargs)

    with Counting(2) as ex:
        ds = Dataset.range(10_000).distribute(ex, split_size=100, max_in_flight=3)
        it = ds.iterator()
        next(it)
        time.sleep(0.3)  # a slow trainer: the workers must not run ahead
        assert len(submitted) <= 3 + 2
        assert sum(1 for _ in it) == 9_999
        it.close()


def test_a_straggling_chunk_is_run_again_elsewhere():
    fns.STUCK.clear()
    fns._SEEN.clear()
    with ThreadPoolExecutor(2) as ex:
        try:
            t0 = time.monotonic()
            ds = Dataset.range(80).map(fns.straggle_once).distribute(
                ex, split_size=20, speculate_after=0.3)
            assert [int(x) for x in ds] == list(range(80))
            assert time.monotonic() - t0 < 20
        finally:
            fns.STUCK.set()


def test_an_unpicklable_function_names_itself(files):
    lock = threading.Lock()

    def holds_a_lock(f):
        with lock:
            return f

    with pytest.raises(NotPicklableError, match=r"holds_a_lock.*closure variable 'lock'"):
        TFRecordDataset(files).map(holds_a_lock).distribute(None)


def test_a_bad_record_names_file_and_offset_and_keeps_what_was_delivered(tmp_path):
    files = fns.make_files(tmp_path, (20, 20, 20))
    data = bytearray(open(files[1], "rb").read())
    data[300] ^= 0xFF  # a damaged record in the second file
    open(files[1], "wb").write(bytes(data))
    it = fns.pipeline(files).distribute(None).iterator()
    got = []
    with pytest.raises(RemoteSplitError) as info:
        for e in it:
            got.append(int(e["i"]))
    err = info.value
    assert err.split == 1 and err.path == files[1] and err.offset is not None
    assert files[1] in str(err) and "Traceback" in err.worker_traceback
    assert got == list(range(20))  # the first file's elements, each once
    state = it.get_state()
    with pytest.raises(RemoteSplitError):  # restored: the same split fails again, nothing lost
        list(fns.pipeline(files).distribute(None).iterator(state))


def test_a_failing_function_reports_split_and_worker_traceback(pool):
    with pytest.raises(RemoteSplitError) as info:
        list(Dataset.range(50).map(fns.fail_at).distribute(pool, split_size=10))
    err = info.value
    assert err.split == 1 and "fail_at" in err.worker_traceback
    assert "ValueError: cannot handle element 17" in str(err)


def test_pipelines_that_cannot_be_cut_say_why(files):
    with pytest.raises(ValueError, match="reads 2 datasets"):
        Dataset.zip((Dataset.range(3), Dataset.range(3))).distribute(None)
    with pytest.raises(ValueError, match="put repeat\\(\\) after distribute"):
        Dataset.range(3).map(abs).repeat().distribute(None)
    with pytest.raises(ValueError, match="within every split"):
        TFRecordDataset(files).shard(2, 0).distribute(None)
    with pytest.raises(ValueError, match="cannot be cut"):
        Dataset.random(seed=1).distribute(None)
    with pytest.raises(TypeError, match="concurrent.futures.Executor"):
        Dataset.range(3).distribute("tcp://scheduler:8786")
    with pytest.raises(TypeError, match="max_in_fligt"):
        Dataset.range(3).distribute(None, max_in_fligt=2)


def test_a_spawned_process_pool_hands_chunks_over_in_shared_memory(files):
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=ctx) as ex:
        out = list(fns.pipeline(files).distribute(ex, chunk_bytes=50_000))
    assert fns.ids(out) == list(range(sum(fns.SIZES)))
    assert out[0]["big"].flags.writeable and (out[-1]["big"] == out[-1]["i"]).all()
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"tpd_x{os.getpid()}_")]


@pytest.mark.parametrize("repeat", [800, 100])
def test_columns_of_large_values_travel_from_a_process_pool_as_their_values(tmp_path, repeat):
    """800: a batch whose bytes feature is a column over a shuffle's read buffers; the process
    pool hands on the values (packed in one array), not the buffers. 100: object arrays only,
    a chunk in shared memory with no numpy buffer in it (it failed to decode)."""
    files = fns.make_image_files(tmp_path, repeat=repeat)
    here = list(fns.image_pipeline(files).distribute(None))
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=ctx) as ex:
        there = list(fns.image_pipeline(files).distribute(ex))
    assert [b["i"].tolist() for b in there] == [b["i"].tolist() for b in here]
    for b in there:
        assert [bytes(v) for v in b["img"]] == [fns.image(int(i), repeat) for i in b["i"]]
    assert sorted(int(i) for b in there for i in b["i"]) == list(range(360))
