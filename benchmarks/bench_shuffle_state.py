"""Shuffle checkpoints: state size and restore time of shuffle(10,000) over ~110 KB records.

TFRecordDataset(4 shards of workload A, repeated to > 10,000 records) -> shuffle(10,000) ->
parse(label); the iterator is checkpointed once the buffer is full, and restored into a new
pipeline (which re-reads just the 10,000 buffered records by random access). Local files, then
the same files in fake_gcs (in-process server, through gcsfs).

    python benchmarks/bench_shuffle_state.py [--dir /tmp/tpudata-bench]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_read  # noqa: E402
import numpy as np  # noqa: E402

import tpudata  # noqa: E402
from tpudata.dataset import TFRecordDataset  # noqa: E402

BUFFER = 10_000
SPEC = {"image/class/label": tpudata.FixedLenFeature([], np.int64)}


def shards(directory: str) -> list[str]:
    d = os.path.join(directory, "pipeline_a")
    os.makedirs(d, exist_ok=True)
    paths = []
    for s in range(4):
        path = os.path.join(d, f"a-{s:05d}-of-00004")
        if not os.path.exists(path):
            print(f"writing {path} ...", flush=True)
            bench_read.make_a(path, seed=100 + s)
        paths.append(path)
    return paths


def measure(paths: list[str], where: str) -> dict:
    def make():
        return TFRecordDataset(paths).repeat(3).shuffle(BUFFER, seed=0).parse(SPEC)

    it = make().iterator()
    t0 = time.perf_counter()
    head = [int(next(it)["image/class/label"]) for _ in range(100)]
    fill = time.perf_counter() - t0
    state = it.get_state()
    expected = [int(next(it)["image/class/label"]) for _ in range(50)]
    it.close()
    text = json.dumps(state)
    t0 = time.perf_counter()
    resumed = make().iterator(json.loads(text))
    got = [int(next(resumed)["image/class/label"]) for _ in range(50)]
    restore = time.perf_counter() - t0
    resumed.close()
    assert got == expected and len(head) == 100, "the restored pipeline diverged"
    avg_record = sum(os.path.getsize(p) for p in paths if os.path.exists(p)) / 3700 or 110_000
    row = {"state_bytes": len(text), "bytes_per_element": len(text) / BUFFER,
           "restore_s": restore, "fill_s": fill,
           "carried_records_MB": BUFFER * avg_record / 1e6}
    print(f"shuffle({BUFFER}) {where}: state {len(text) / 1e3:.0f} KB "
          f"({len(text) / BUFFER:.1f} bytes per buffered element; carrying the records would be "
          f"~{row['carried_records_MB']:.0f} MB) | restore + 50 elements {restore:.2f} s "
          f"(first fill + 100 elements {fill:.2f} s)", flush=True)
    return row


def bench_shuffle(args) -> dict:
    paths = shards(args.dir)
    out = {"local": measure(paths, "local files")}
    try:
        from fake_gcs import FakeGCSServer, pointed_at
    except ImportError:
        return out
    with FakeGCSServer(port=0) as server, pointed_at(server):
        import fsspec

        fs = fsspec.filesystem("gs")
        fs.mkdir("bench-shuffle")
        urls = []
        for p in paths:
            url = f"gs://bench-shuffle/{os.path.basename(p)}"
            fs.put_file(p, url)
            urls.append(url)
        out["fake_gcs"] = measure(urls, "fake_gcs")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "tpudata-bench"))
    args = ap.parse_args(argv)
    print(json.dumps(bench_shuffle(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
