"""cache(url): streams parts while the first pass runs, finalises atomically, never partial."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

from tpudata.dataset import Dataset
from tests.dataset.helpers import outputs


def _block(x):
    return np.full(1 << 17, x, np.float64)  # 1 MiB per element


def test_parts_are_written_during_the_pass_and_removed_when_it_stops(tmp_path):
    url = str(tmp_path / "c")
    ds = Dataset.range(40).map(_block).cache(url)
    it = ds.iterator()
    for _ in range(30):
        next(it)
    parts = [n for n in os.listdir(url) if n.startswith("part-")]
    assert parts and "_complete.json" not in os.listdir(url)  # streamed, not yet a cache
    it.close()  # an interrupted first pass leaves no cache behind
    assert [n for n in os.listdir(url) if not n.startswith(".")] == []
    assert outputs(Dataset.range(3).cache(url)) == [0, 1, 2]  # not the partial one


def test_complete_pass_is_reused_and_replays_in_order(tmp_path):
    url = str(tmp_path / "c")
    first = outputs(Dataset.range(50).shuffle(50).map(_block).cache(url).map(lambda a: a[0]))
    marker = json.loads((tmp_path / "c" / "_complete.json").read_text())
    assert sum(marker["counts"]) == 50 and len(marker["counts"]) >= 5  # ~8 MiB parts
    again = outputs(Dataset.range(50).map(_block).cache(url).map(lambda a: a[0]))  # reused
    assert again == first and sorted(first) == list(range(50))


def test_in_memory_checkpoint_restores_in_a_new_dataset():
    def make():
        return Dataset.range(12).shuffle(12, seed=3).cache().repeat(2)

    ds = make()
    it = ds.iterator()
    out = [int(next(it)) for _ in range(17)]  # into the replayed second epoch
    state = it.get_state()
    rest = [int(e) for e in it]
    assert out[12:] + rest == out[:12] and sorted(out[:12]) == list(range(12))
    assert [int(e) for e in make().iterator(state)] == rest  # the cache is gone: re-run


PEAK = textwrap.dedent("""
    import json, sys
    import numpy as np
    from tpudata.dataset import Dataset

    def hwm():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))

    def block(x):
        return np.full(1 << 17, x, np.float64)

    base = hwm()
    n = sum(1 for _ in Dataset.range(320).map(block).cache(sys.argv[1]))
    print(json.dumps({"n": n, "base_kb": base, "peak_kb": hwm()}))
""")


def test_caching_320_mib_stays_within_64_mib(tmp_path):
    out = subprocess.run([sys.executable, "-c", PEAK, str(tmp_path / "c")], capture_output=True,
                         text=True, check=True)
    r = json.loads(out.stdout)
    assert r["n"] == 320 and (tmp_path / "c" / "_complete.json").exists()
    assert (r["peak_kb"] - r["base_kb"]) / 1024 < 64, r
