"""Later epochs reuse the memory of earlier ones instead of faulting it in afresh (counted as the
process's minor page faults; no timing): untuned where tpudata holds the bytes (a shuffle over
~110 KB records keeps them in its store, in the read buffers), and with tpudata.tune_malloc()
where the user's code makes them as Python ``bytes`` in pipeline threads."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

import tpudata

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")

EPOCHS = """
import json, os, resource, sys
import numpy as np
import tpudata
from tpudata import Dataset, FixedLenFeature, TFRecordDataset
if sys.argv[2] == "1":
    assert tpudata.tune_malloc()
spec = {"img": FixedLenFeature([], bytes), "y": FixedLenFeature([], np.int64)}
ds = (Dataset.list_files(os.path.join(sys.argv[1], "f*"), shuffle=False)
      .interleave(lambda f: TFRecordDataset(f), cycle_length=4, num_parallel_calls=4)
      .shuffle(10_000, seed=0).parse(spec))
if sys.argv[3] == "bytes":  # the user's function makes a bytes object per value, on 2 threads
    ds = ds.map(lambda e: {"img": bytes(e["img"]) + b"!", "y": e["y"]}, num_parallel_calls=2)
ds = ds.batch(32, drop_remainder=True).prefetch(2)
faults = []
for epoch in range(4):
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    n = sum(len(b["img"]) for b in ds)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
print(json.dumps({"n": n, "faults": faults}))
"""


def _epochs(directory: str, tune: bool, kind: str = "bytes") -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TPUDATA_", "MALLOC_"))}
    out = subprocess.run([sys.executable, "-c", EPOCHS, directory, "1" if tune else "0", kind],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    # 4 files, 64 MB of ~110 KB records: more than one 64 MB heap of a glibc thread arena
    directory = tmp_path_factory.mktemp("records")
    record = tpudata.encode_example({"img": bytes(range(256)) * 440, "y": 1})
    per_file = (64 << 20) // len(record) // 4
    for s in range(4):
        with tpudata.TFRecordWriter(str(directory / f"f{s}")) as w:
            for _ in range(per_file):
                w.write(record)
    return str(directory), 4 * per_file // 32 * 32


PAGES = 64 << 20 >> 12  # of one epoch's data


def test_tuned_epochs_reuse_the_memory_of_earlier_ones(records):
    directory, n = records
    plain, tuned = _epochs(directory, False), _epochs(directory, True)
    assert plain["n"] == tuned["n"] == n
    # untuned, each epoch faults in a good part of its 64 MB again (glibc unmaps what is freed:
    # measured 3,700-6,700 of its 16,384 pages per epoch)
    assert sum(plain["faults"][2:]) > PAGES // 4, plain
    # tuned, the third and fourth epochs fault in under a tenth of what the untuned ones do
    assert sum(tuned["faults"][2:]) * 10 < sum(plain["faults"][2:]), (plain, tuned)


def test_a_shuffle_of_large_records_needs_no_tuning(records):
    directory, n = records
    plain = _epochs(directory, False, "store")
    assert plain["n"] == n
    # the shuffle's store keeps the values in recycled read buffers: later epochs fault in
    # almost nothing (measured 40-70 pages; before the store, more than half their data)
    assert sum(plain["faults"][2:]) < PAGES // 20, plain
