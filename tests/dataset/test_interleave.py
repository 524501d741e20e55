"""Parallel interleave: a bounded reader pool for many files, files opened ahead,
deterministic=False, element-exact state."""

from __future__ import annotations

import contextlib
import json
import time

import numpy as np
import pytest

import tpudata
from tpudata.dataset import Dataset, TFRecordDataset
from tpudata.dataset.core.iterator import IterContext
from tpudata.errors import CorruptRecordError
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


# -- many small files: gathered blocks, open-ahead, read-through (issue 9, item 7) --------------
def _tiny_shards(tmp_path, lengths):
    paths = write_shards(tmp_path, len(lengths), lengths)
    starts = np.cumsum([0] + list(lengths))
    return paths, [list(range(starts[i], starts[i + 1])) for i in range(len(lengths))]


TINY = [3, 1, 0, 4, 2, 5, 1, 1, 0, 3, 2, 2, 6, 1, 4, 3, 0, 2, 1, 3, 5, 2, 1, 1, 4, 2, 3, 1]


@pytest.mark.parametrize("cycle,block,parallel", [(4, 1, 4), (3, 2, 2), (4, 1, None),
                                                  (2, 3, None), (5, 2, 1)])
def test_many_tiny_files_keep_tensorflows_order(tmp_path, cycle, block, parallel):
    paths, ids = _tiny_shards(tmp_path, TINY * 3)
    ds = (Dataset.from_tensor_slices(paths)
          .interleave(lambda f: TFRecordDataset(f), cycle_length=cycle, block_length=block,
                      num_parallel_calls=parallel)
          .parse(SPEC).map(lambda e: e["id"]))
    assert outputs(ds) == tf_interleave_reference(range(len(paths)), lambda i: ids[i], cycle, block)


def test_small_files_are_gathered_into_few_blocks(tmp_path):
    # 120 files of 2 records: a consumer asking for 64 elements gets blocks of many files'
    # records (one gather), not a block per round or per file
    paths, ids = _tiny_shards(tmp_path, [2] * 120)
    for parallel in (None, 4):
        ds = Dataset.from_tensor_slices(paths).interleave(
            lambda f: TFRecordDataset(f), cycle_length=4, num_parallel_calls=parallel)
        it = ds._make_iterator(IterContext())
        sizes, records = [], []
        try:
            while True:
                it.want = 64
                block = it.next()
                if block is None:
                    break
                sizes.append(block.n)
                records += list(block.elements())
        finally:
            it.close()
        expected = tf_interleave_reference(range(120), lambda i: ids[i], 4, 1)
        assert tpudata.parse_examples(records, SPEC)["id"].tolist() == expected
        assert sum(sizes) == 240
        assert len(sizes) <= 240 // 8, (parallel, sizes)  # at least 8 elements per block on average
        assert max(sizes) <= 64


def test_restore_everywhere_over_many_tiny_files(tmp_path):
    paths, _ = _tiny_shards(tmp_path, TINY)
    for parallel in (3, None):
        check_restore_everywhere(lambda: Dataset.from_tensor_slices(paths).interleave(
            lambda f: TFRecordDataset(f), cycle_length=3, block_length=2,
            num_parallel_calls=parallel).parse(SPEC).map(lambda e: e["id"]))
        check_restore_everywhere(lambda: Dataset.from_tensor_slices(paths).interleave(
            lambda f: TFRecordDataset(f), cycle_length=4, num_parallel_calls=parallel)
            .batch(5).map(lambda b: b[-1]), stride=1)


def test_gathering_never_mixes_dtypes():
    # sub-datasets of ints and of floats: each element keeps its own dtype, although a
    # consumer asking for many elements gets several sub-datasets' elements at once
    def sub(i):
        i = int(i)
        ds = Dataset.range(10 * i, 10 * i + 1 + i % 3)
        return ds.map(lambda x: np.float32(x) + 0.5) if i % 2 else ds

    for parallel in (None, 3):
        ds = Dataset.range(12).interleave(sub, cycle_length=3, num_parallel_calls=parallel)
        got = outputs(ds.prefetch(4))
        expected = tf_interleave_reference(
            range(12), lambda i: [10 * i + j + (0.5 if i % 2 else 0) for j in range(1 + i % 3)],
            3, 1)
        assert got == expected
        assert all(isinstance(v, float) == (v != int(v)) for v in got)


def test_small_file_end_comes_in_one_hand_off(tmp_path):
    from tpudata.dataset.parallel.reader_pool import READ_THROUGH_BYTES, PooledReader, ReaderPool

    small = write_shards(tmp_path / "small", 1, 3)[0]
    ctx = IterContext()
    pool = ReaderPool(1, ctx)
    try:
        reader = PooledReader(TFRecordDataset(small)._make_iterator(ctx), pool, max_blocks=1)
        reader.start()
        with pool.cond:
            pool.cond.wait_for(lambda: reader.producer_done, 5)
        assert len(reader.items) == 2 and not reader.scheduled  # the block and the end, one task
        block = reader.next()
        assert block.n == 3 and reader.ready()  # the end is taken with it: no wait for it
        after_block = reader.get_state()
        assert reader.next() is None and reader.next() is None
        assert reader.get_state() != after_block  # now past the end
        # a big file is not read through: at most one block beyond max_blocks, under 1 MiB
        big = str(tmp_path / "big.tfrecord")
        tpudata.write_records(big, [bytes(300_000)] * 12)
        reader = PooledReader(TFRecordDataset(big, buffer_size=1 << 20)._make_iterator(ctx), pool,
                              max_blocks=1)
        reader.start()
        deadline = time.time() + 5
        while (reader.scheduled or not reader.items) and time.time() < deadline:
            time.sleep(0.01)
        assert len(reader.items) == 2 and not reader.producer_done
        assert reader.bytes - reader.items[-1][2] < READ_THROUGH_BYTES
        assert sum(reader.next().n for _ in range(4)) == 12 and reader.next() is None
        reader.close()
    finally:
        pool.close()


def test_errors_among_many_files_name_the_file(tmp_path):
    paths, _ = _tiny_shards(tmp_path, [2] * 40)
    data = bytearray(open(paths[23], "rb").read())
    data[-5] ^= 0xFF  # the second record's data
    open(paths[23], "wb").write(bytes(data))
    for parallel in (None, 4):
        ds = Dataset.from_tensor_slices(paths).interleave(
            lambda f: TFRecordDataset(f), cycle_length=4, num_parallel_calls=parallel).parse(SPEC)
        with pytest.raises(CorruptRecordError) as info:
            list(ds)
        assert info.value.path == paths[23] and str(paths[23]) in str(info.value)
        at = len(data) // 2 + 12  # the second record's data, after its 12-byte header (as TF)
        assert info.value.offset == at and f"corrupted record at {at}" in str(info.value)
    # a record that does not fit the spec, in a block gathered from many files
    bad = str(tmp_path / "zz-bad")
    tpudata.write_records(bad, [tpudata.encode_example({"id": 7, "x": np.zeros(3, np.float32)})])
    ds = Dataset.from_tensor_slices(paths[:20] + [bad] + paths[20:23]).interleave(
        lambda f: TFRecordDataset(f), cycle_length=4, num_parallel_calls=4).parse(SPEC)
    with pytest.raises(tpudata.SpecError, match=rf"{bad}: record 0 of the file.*'tag' is required"):
        list(ds)


def _open_fds() -> int:
    import os

    return len(os.listdir("/proc/self/fd"))


def test_small_local_files_are_read_whole_in_groups(tmp_path, monkeypatch):
    # 96 small files: read whole, many per pool task (one native call each), in TF's order,
    # deterministic or not; the parallel order matches the sequential one
    from tpudata.dataset.parallel import reader_pool

    paths, ids = _tiny_shards(tmp_path, [3] * 96)
    calls = []
    real = reader_pool.read_whole
    monkeypatch.setattr(reader_pool, "read_whole", lambda jobs: (calls.append(len(jobs)),
                                                                 real(jobs)))
    expected = tf_interleave_reference(range(96), lambda i: ids[i], 4, 1)
    for parallel in (1, 2, 4):
        calls.clear()
        ds = Dataset.from_tensor_slices(paths).interleave(
            lambda f: TFRecordDataset(f), cycle_length=4, num_parallel_calls=parallel).parse(SPEC)
        assert [int(e["id"]) for e in ds] == expected
        assert sum(calls) == 96 and len(calls) <= 96 // 4, calls
    ds = Dataset.from_tensor_slices(paths).interleave(
        lambda f: TFRecordDataset(f), cycle_length=4, num_parallel_calls=2,
        deterministic=False).parse(SPEC)
    assert sorted(int(e["id"]) for e in ds) == sorted(expected)
    # files that do not qualify (here: over the read buffer) are read as before: the first
    # file's size tells
    calls.clear()
    ds = Dataset.from_tensor_slices(paths).interleave(
        lambda f: TFRecordDataset(f, buffer_size=64), cycle_length=4, num_parallel_calls=2)
    assert tpudata.parse_examples(list(ds), SPEC)["id"].tolist() == expected and not calls
    # small files, then large ones (over a 4 KiB read buffer): the runs read whole decline the
    # large ones, which are read in blocks; once a run is mostly declined no more are tried
    big = []
    for i in range(100):
        big.append(str(tmp_path / f"big-{i}"))
        tpudata.write_records(big[-1], [tpudata.encode_example(
            {"id": 1000 + i, "x": np.zeros(3, np.float32), "tag": b"big" * 2000})])
    calls.clear()
    ds = Dataset.from_tensor_slices(paths[:40] + big).interleave(
        lambda f: TFRecordDataset(f, buffer_size=4096), cycle_length=4,
        num_parallel_calls=2).parse(SPEC)
    order = tf_interleave_reference(range(140), lambda i: ids[i] if i < 40 else [960 + i], 4, 1)
    assert [int(e["id"]) for e in ds] == order
    assert 40 <= sum(calls) <= 100, str(calls)
    for kw in ({"compression_type": "GZIP"}, {"use_mmap": True}):  # never tried
        calls.clear()
        ds = Dataset.from_tensor_slices(paths[:8]).interleave(
            lambda f, kw=kw: TFRecordDataset(f, **kw), cycle_length=4, num_parallel_calls=2)
        with pytest.raises(tpudata.errors.DataLossError) if kw.get("compression_type") else \
                contextlib.nullcontext():
            list(ds)
        assert not calls


def test_files_opened_ahead_are_closed_with_the_iterator(tmp_path):
    paths, _ = _tiny_shards(tmp_path, [3] * 80)
    before = _open_fds()
    for stop_after in (0, 1, 7, 100):
        ds = Dataset.from_tensor_slices(paths).interleave(
            lambda f: TFRecordDataset(f), cycle_length=4, num_parallel_calls=2)
        with ds.iterator() as it:
            for _, _ in zip(range(stop_after), it):
                pass
        deadline = time.time() + 5
        while _open_fds() != before and time.time() < deadline:
            time.sleep(0.01)
        assert _open_fds() == before, stop_after
        # restored mid-way: the files opened ahead before the restore are closed too
        with ds.iterator() as it:
            for _, _ in zip(range(5), it):
                pass
            state = it.get_state()
        with ds.iterator() as it:
            it.set_state(state)
            next(it)
        assert _open_fds() == before


def test_whole_file_reads_held_sent_and_declined(tmp_path):
    from tpudata.dataset.parallel.reader_pool import PooledReader, ReaderPool, WholeFileReader

    paths, _ = _tiny_shards(tmp_path, [3] * 4)
    big = str(tmp_path / "big.tfrecord")
    tpudata.write_records(big, [bytes(300_000)] * 5)  # over MAX_WHOLE_BYTES
    ctx = IterContext()
    pool = ReaderPool(2, ctx)
    try:
        readers = []
        for p in paths + [big]:
            it = TFRecordDataset(p)._make_iterator(ctx.child(0, in_background=True))
            readers.append(WholeFileReader(it, it.prepare_whole(), pool))
        assert len(pool.unsent) == 5 and not pool.tasks
        readers[0].close()  # closed before its read was sent: dropped
        assert len(pool.unsent) == 4
        assert readers[1].next().n == 3  # the read it needs is sent, with the others held
        assert readers[2].ready() and readers[3].ready() and not pool.unsent
        assert sum(b.n for b in iter(readers[2].next, None)) == 3
        # the large file is declined and read in blocks by a PooledReader instead
        with pool.cond:
            pool.cond.wait_for(lambda: readers[4].job is None or readers[4].job.done, 5)
        first = readers[4].next().n
        assert isinstance(readers[4].inner, PooledReader)
        assert first + sum(b.n for b in iter(readers[4].next, None)) == 5
        for r in readers:
            r.close()
    finally:
        pool.close()


def test_assemble_order_small_and_large_paths_agree(monkeypatch):
    """The gather order built with Python ints (small) equals the numpy one (large)."""
    from tpudata.dataset.ops import interleave as il

    rng = np.random.default_rng(5)
    for _ in range(300):
        blocks = [object() for _ in range(int(rng.integers(1, 6)))]
        base = {id(b): int(rng.integers(0, 1000)) for b in blocks}
        steps = []
        for _ in range(int(rng.integers(1, 5))):
            k = int(rng.integers(1, len(blocks) + 1))
            entries = tuple((b, int(rng.integers(0, 50))) for b in blocks[:k])
            steps.append((entries, int(rng.integers(1, 5)), int(rng.integers(1, 4))))
        small = il._order(steps, base)
        monkeypatch.setattr(il, "SMALL_ORDER", -1)
        large = il._order(steps, base)
        monkeypatch.undo()
        assert small.dtype == large.dtype == np.int64 and small.tolist() == large.tolist()
        # round by round, bl elements from each slot in turn
        want = []
        for entries, rounds, bl in steps:
            for r in range(rounds):
                for b, start in entries:
                    want.extend(base[id(b)] + start + r * bl + j for j in range(bl))
        assert small.tolist() == want
