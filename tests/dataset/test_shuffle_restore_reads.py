"""A shuffle restore re-reads only the buffered records (random access), never the input since
an old snapshot: measured with the process's own read counter (Linux /proc/self/io)."""

from __future__ import annotations

import json
import os

import pytest

import tpudata
from tpudata.dataset import TFRecordDataset

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs /proc/self/io")

RECORD = 2048


def _bytes_read() -> int:
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def test_restore_reads_about_the_buffer_not_the_input(tmp_path, monkeypatch):
    from tpudata.dataset.ops import shuffle

    # one read per buffered frame (by default frames closer than 4 MB share one request, which
    # for these small files would read them whole)
    monkeypatch.setattr(shuffle, "GAP_BYTES", 0)
    monkeypatch.setattr(shuffle, "TAIL_BYTES", 4096)
    paths = []
    for s in range(4):
        path = str(tmp_path / f"train-{s:05d}")
        tpudata.write_records(path, [bytes([s]) * RECORD + b"%06d" % i for i in range(500)])
        paths.append(path)  # 4 x ~1 MB

    def make():
        return TFRecordDataset(paths, buffer_size=16 << 10).shuffle(100, seed=5)

    it = make().iterator()
    first = [next(it) for _ in range(1500)]  # 1,600 records read: ~3.2 MB of input so far
    state = json.loads(json.dumps(it.get_state()))
    it.close()
    assert len(json.dumps(state)) < 100 * 64 + 2000  # the buffer is named, not carried
    before = _bytes_read()
    resumed = make().iterator(state)
    nxt = next(resumed)
    read = _bytes_read() - before
    buffered = 100 * (RECORD + 22)
    assert read < 2 * buffered + (64 << 10), f"the restore read {read} bytes"
    rest = [nxt] + list(resumed)
    assert first + rest == list(make())
