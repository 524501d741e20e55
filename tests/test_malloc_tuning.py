"""tpudata.tune_malloc(): later epochs of a pipeline whose batches of large byte strings are made
in pipeline threads reuse the memory of earlier ones instead of faulting it in afresh (counted as
the process's minor page faults; no timing)."""

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
      .shuffle(10_000, seed=0).parse(spec).batch(32, drop_remainder=True).prefetch(2))
faults = []
for epoch in range(4):
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    n = sum(len(b["img"]) for b in ds)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
print(json.dumps({"n": n, "faults": faults}))
"""


def _epochs(directory: str, tune: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TPUDATA_", "MALLOC_"))}
    out = subprocess.run([sys.executable, "-c", EPOCHS, directory, "1" if tune else "0"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_tuned_epochs_reuse_the_memory_of_earlier_ones(tmp_path):
    # 4 files, 64 MB of ~110 KB records: more than one 64 MB heap of a glibc thread arena
    record = tpudata.encode_example({"img": bytes(range(256)) * 440, "y": 1})
    per_file = (64 << 20) // len(record) // 4
    for s in range(4):
        with tpudata.TFRecordWriter(str(tmp_path / f"f{s}")) as w:
            for _ in range(per_file):
                w.write(record)
    plain, tuned = _epochs(str(tmp_path), False), _epochs(str(tmp_path), True)
    assert plain["n"] == tuned["n"] == 4 * per_file // 32 * 32
    pages = 64 << 20 >> 12
    # untuned, each epoch faults in a good part of its 64 MB again (glibc unmaps what is freed)
    assert sum(plain["faults"][2:]) > pages // 2, plain
    # tuned, the third and fourth epochs fault in under a tenth of what the untuned ones do
    assert sum(tuned["faults"][2:]) * 10 < sum(plain["faults"][2:]), (plain, tuned)
