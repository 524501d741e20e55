"""Time to first batch from gs:// as the number of shards grows, at 50 ms per request.

Against fake_gcs (latency paid by every request), for 16, 256 and 1,024 shards: the README's
pipeline (``list_files -> interleave(TFRecordDataset, 8 parallel) -> parse -> batch(128)``), the
random-access ``TFRecordSource`` (record counts from the manifest) and ``read_records``; each
row gives the time to the first batch (or record) and the requests the server saw by kind.
Start-up should not grow with the number of shards: one listing (1,000 objects a page), no
metadata request per shard.

    python benchmarks/bench_gcs_startup.py [--shards 16 256 1024] [--latency-ms 50]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import tpudata
from fake_gcs import FakeGCSServer, Knobs
from fake_gcs.env import clear_fsspec_cache, pointed_at
from tpudata import storage

BUCKET = "startup-bench"


def _make(n: int, records_per_shard: int = 128) -> str:
    rec = tpudata.encode_example({"label": np.int64(1), "x": np.zeros(64, np.float32)})
    out = f"gs://{BUCKET}/n{n}"
    tpudata.build_shards(list(range(n * records_per_shard)), lambda i: rec, out, "train",
                         num_shards=n, workers=1, progress=False)
    return out


def _timed(server, fn) -> tuple[float, dict]:
    clear_fsspec_cache()
    from tpudata import _objects

    _objects.TABLE.clear()  # what an earlier row listed is not known to a new process
    server.reset_stats()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t, server.stats()["requests"]["by_kind"]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, nargs="+", default=[16, 256, 1024])
    ap.add_argument("--latency-ms", type=float, default=50.0)
    args = ap.parse_args(argv)
    spec = {"label": tpudata.FixedLenFeature([], np.int64),
            "x": tpudata.FixedLenFeature([64], np.float32)}
    with FakeGCSServer(port=0) as server, pointed_at(server):
        storage.gcs_filesystem().mkdir(BUCKET)
        outs = {n: _make(n) for n in args.shards}
        server.knobs = Knobs(latency_ms=args.latency_ms)
        print(f"fake_gcs at {args.latency_ms:g} ms per request; requests by kind as the server saw them")
        print(f"{'shards':>6}  {'what':<42} {'first batch':>11}  requests")
        for n, out in outs.items():
            pattern = f"{out}/train-*"

            def pipeline():
                ds = (tpudata.Dataset.list_files(pattern, shuffle=True, seed=1)
                      .interleave(tpudata.TFRecordDataset, cycle_length=8, num_parallel_calls=8)
                      .parse(spec).batch(128).prefetch(2))
                it = iter(ds)
                next(it)
                it.close()

            rows = [
                ("list_files -> interleave(8) -> parse -> batch", pipeline),
                ("TFRecordSource (manifest) [0..127]",
                 lambda: tpudata.TFRecordSource(pattern, progress=False).__getitems__(range(128))),
                ("read_records: first record", lambda: next(iter(tpudata.read_records(pattern)))),
            ]
            for what, fn in rows:
                dt, kinds = _timed(server, fn)
                shown = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
                print(f"{n:>6}  {what:<42} {dt:>9.3f} s  {shown}")


if __name__ == "__main__":
    main()
