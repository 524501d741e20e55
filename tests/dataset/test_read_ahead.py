"""TFRecordDataset reads ahead in a background thread, except for local files that one read
buffer holds (the thread would cost more than the single read it overlaps)."""

from __future__ import annotations

import tpudata
from tpudata.dataset import TFRecordDataset


def _write(path, n, size=1000):
    with tpudata.TFRecordWriter(str(path)) as w:
        for i in range(n):
            w.write(bytes([i % 256]) * size)
    return str(path)


def _first_then_threads(ds):
    """Whether the records came through a read-ahead thread, and the records."""
    from tpudata.dataset.parallel.prefetch import PrefetchIterator

    it = iter(ds)
    first = next(it)
    threaded = isinstance(it._it, PrefetchIterator)
    if threaded:
        assert it._it.thread is None or it._it.thread.name == "tpudata-readahead"
    rest = list(it)
    it.close()
    return threaded, [first] + rest


def test_small_local_files_are_read_in_the_callers_thread(tmp_path):
    small = [_write(tmp_path / f"s{k}", 20) for k in range(3)]  # 60 KB in all
    threaded, records = _first_then_threads(TFRecordDataset(small))
    assert not threaded
    assert records == [bytes([i % 256]) * 1000 for i in range(20)] * 3


def test_files_larger_than_one_buffer_are_read_ahead(tmp_path):
    big = _write(tmp_path / "big", 200)  # 200 KB, buffers of 64 KB
    threaded, records = _first_then_threads(TFRecordDataset(big, buffer_size=64 << 10))
    assert threaded
    assert records == [bytes([i % 256]) * 1000 for i in range(200)]
    # the small-file path restores exactly like the threaded one
    ds = TFRecordDataset([big, big], buffer_size=1 << 20)  # 400 KB: fits one 1 MiB buffer
    it = iter(ds)
    for _ in range(250):
        next(it)
    state = it.get_state()
    rest = list(it)
    assert list(ds.iterator(state)) == rest and len(rest) == 150
