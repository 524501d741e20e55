"""Records/s into a PyTorch DataLoader (2 workers): tpudata.torch against the ``tfrecord`` package,
same files, same run; and TFRecordSource.__getitems__ random reads/s, local and via fake_gcs.

Workloads (as in bench_read.py, written once into --dir as 4 shards with index files):
  A: ~110 KB records (image/encoded 80-140 KB + label ...), 4 x --a-shard-mb MB (default 100, as
     bench_read.py: an epoch of ~3,800 records, ~30 batches), batches of 128; parse encoded + label.
  B: 105-byte Examples (x: 16 floats, y: int64), 4 x 100,000, batches of 1024; parse x + y.

What each side hands the training loop, per batch, in the main process:
  tfrecord ``TFRecordDataset`` (one per shard, chained, each split over the workers through its
  index) and ``MultiTFRecordDataset`` (all shards, ``infinite=False``) in
  ``DataLoader(batch_size=B, num_workers=2)``: on A (variable-length images cannot be stacked)
  a list of B dicts {"image/encoded": bytes, "image/class/label": int64 array}; on B
  default_collate's tensors. tfrecord does not check CRCs.
  tpudata ``TFRecordIterable(files, B, pipeline=parse, num_workers=2)`` in
  ``DataLoader(batch_size=None, num_workers=2)``: {"image/encoded": list of B bytes (or with
  ``bytes_as="tensor"`` one ByteStrings: a uint8 tensor + offsets), "image/class/label": int64
  tensor, "weight": float32 tensor}; on B tensors. CRCs checked. Batches leave the workers through
  reused shared memory (tpudata/torch/shared.py) and arrive owned by the main process.
  And, for reference, tpudata in the main process (``num_workers=0``: no inter-process copies).

All worker processes use the fork start method (Linux's default) and start afresh every epoch
(the DataLoader default); one warm-up epoch each, best of --repeat epochs (worker start-up
included). Besides wall-clock records/s it prints records per CPU-second (main process + joined
workers): on a shared machine that is the steadier comparison. Never run this in a process that
imports TensorFlow.

    python benchmarks/bench_torch.py                   # A, B and random access
    python benchmarks/bench_torch.py --workload A --repeat 3 --skip-random
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

import tpudata  # noqa: E402
from bench_read import make_a, make_b  # noqa: E402

SHARDS = 4
BATCH = {"A": 128, "B": 1024}
PEER_DESC = {"A": {"image/encoded": "byte", "image/class/label": "int"},
             "B": {"x": "float", "y": "int"}}


def spec(workload: str) -> dict:
    if workload == "A":
        return {"image/encoded": tpudata.FixedLenFeature([], bytes),
                "image/class/label": tpudata.FixedLenFeature([], np.int64)}
    return {"x": tpudata.FixedLenFeature([16], np.float32), "y": tpudata.FixedLenFeature([], np.int64)}


def make_files(directory: str, workload: str, a_shard_mb: int = 100) -> list[str]:
    os.makedirs(directory, exist_ok=True)
    files = []
    name = f"a{a_shard_mb}m" if workload == "A" else "b"
    for k in range(SHARDS):
        path = os.path.join(directory, f"{name}-{k:05d}-of-{SHARDS:05d}")
        if not os.path.exists(path + ".idx"):
            if workload == "A":
                make_a(path, target_bytes=a_shard_mb << 20, seed=k)
            else:
                make_b(path, n=100_000, seed=k)
            tpudata.build_index(path, path + ".idx")
        files.append(path)
    return files


class Parse:
    """Picklable pipeline: parse the workload's features (batch-level inside tpudata)."""

    def __init__(self, workload: str):
        self.workload = workload

    def __call__(self, ds, split):
        return ds.parse(spec(self.workload))


def keep_list(batch):
    return batch  # workload A's variable-length images cannot be stacked


def count_rows(batch, key: str) -> int:
    if isinstance(batch, list):
        return len(batch)
    value = batch[key]
    return len(value)


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the DataLoader's joined workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run_loader(make, key: str, repeat: int, weight: str | None = None):
    """``(records/s wall, records per CPU-second, records)``, best of ``repeat`` epochs."""
    from torch.utils.data import DataLoader  # noqa: PLC0415

    best, best_cpu = float("inf"), float("inf")
    rows = 0
    for r in range(repeat + 1):
        loader = make(DataLoader)
        c0, t0 = cpu_seconds(), time.perf_counter()
        n = 0
        for batch in loader:
            n += int(batch[weight].sum()) if weight else count_rows(batch, key)
        dt = time.perf_counter() - t0
        del loader, batch  # the workers are joined at the end of the epoch
        cpu = cpu_seconds() - c0
        rows = n
        if r:  # the first pass warms the page cache and imports
            best, best_cpu = min(best, dt), min(best_cpu, cpu)
    return rows / best, rows / best_cpu, rows


def bench_loader(workload: str, files: list[str], repeat: int) -> None:
    import tfrecord.torch.dataset as tfr  # noqa: PLC0415
    from torch.utils.data import ChainDataset  # noqa: PLC0415

    import tpudata.torch as tt  # noqa: PLC0415

    b = BATCH[workload]
    key = "x" if workload == "B" else "image/class/label"
    collate = keep_list if workload == "A" else None
    desc = PEER_DESC[workload]
    results = {}
    results["tpudata"] = run_loader(
        lambda DL: DL(tt.TFRecordIterable(files, b, pipeline=Parse(workload), num_workers=2,
                                          rank=0, world_size=1, progress=False),
                      batch_size=None, num_workers=2, multiprocessing_context="fork"),
        key, repeat, weight="weight")
    # no worker processes: tpudata's read-ahead thread reads and checks CRCs without the GIL
    results["tpudata, num_workers=0"] = run_loader(
        lambda DL: DL(tt.TFRecordIterable(files, b, pipeline=Parse(workload), num_workers=0,
                                          rank=0, world_size=1, progress=False),
                      batch_size=None, num_workers=0),
        key, repeat, weight="weight")
    if workload == "A":  # the images as one uint8 tensor in shared memory per batch
        results["tpudata bytes_as='tensor'"] = run_loader(
            lambda DL: DL(tt.TFRecordIterable(files, b, pipeline=Parse(workload), num_workers=2,
                                              rank=0, world_size=1, progress=False,
                                              bytes_as="tensor"),
                          batch_size=None, num_workers=2, multiprocessing_context="fork"),
            key, repeat, weight="weight")
    results["tfrecord TFRecordDataset"] = run_loader(
        lambda DL: DL(ChainDataset([tfr.TFRecordDataset(f, f + ".idx", desc) for f in files]),
                      batch_size=b, num_workers=2, multiprocessing_context="fork",
                      **({"collate_fn": collate} if collate else {})),
        key, repeat)
    d = os.path.dirname(files[0])
    splits = {os.path.basename(f): 1.0 for f in files}
    results["tfrecord MultiTFRecordDataset"] = run_loader(
        lambda DL: DL(tfr.MultiTFRecordDataset(os.path.join(d, "{}"), os.path.join(d, "{}.idx"),
                                               splits, desc, infinite=False),
                      batch_size=b, num_workers=2, multiprocessing_context="fork",
                      **({"collate_fn": collate} if collate else {})),
        key, repeat)
    print(f"\nworkload {workload}: DataLoader(num_workers=2), batches of {b}, {SHARDS} shards "
          f"(wall records/s; records per CPU-second of the main process + workers)")
    for name, (rate, per_cpu, rows) in results.items():
        print(f"  {name:32s} {rate:10,.0f} rec/s {per_cpu:10,.0f} rec/CPU-s  ({rows} records)")
    ours = [k for k in results if k.startswith("tpudata") and "num_workers=0" not in k]
    for mine in ours:
        for peer in (k for k in results if not k.startswith("tpudata")):
            (r1, c1, _), (r2, c2, _) = results[mine], results[peer]
            print(f"  ratio {mine} / {peer}: {r1 / r2:.2f}x wall, {c1 / c2:.2f}x per CPU-second")


def random_reads(src, batch: int, seconds: float) -> float:
    rng = np.random.default_rng(0)
    n = len(src)
    src.__getitems__(rng.integers(0, n, batch))  # warm up
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        got = src.__getitems__(rng.integers(0, n, batch))
        done += len(got)
    return done / (time.perf_counter() - t0)


def single_reads(src, seconds: float) -> float:
    rng = np.random.default_rng(1)
    n = len(src)
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for i in rng.integers(0, n, 256).tolist():
            src[i]
        done += 256
    return done / (time.perf_counter() - t0)


def start_fake_gcs() -> tuple[subprocess.Popen, str]:
    from bench_fake_gcs import start  # noqa: PLC0415

    return start("fake_gcs")


def bench_random_access(files_b: list[str], files_a: list[str], seconds: float, gcs: bool) -> None:
    from tpudata.source import TFRecordSource  # noqa: PLC0415

    print("\nTFRecordSource random access (CRC checked), reads/s")
    for name, files, batch in (("B (105 B)", files_b, 1024), ("A (~110 KB)", files_a, 32)):
        src = TFRecordSource(files, progress=False)
        batched = random_reads(src, batch, seconds)
        single = single_reads(src, seconds)
        print(f"  local {name:12s} __getitems__({batch}): {batched:12,.0f}/s   "
              f"source[i]: {single:10,.0f}/s   ({batched / single:.1f}x)")
    if not gcs:
        return
    proc, url = start_fake_gcs()
    try:
        os.environ["STORAGE_EMULATOR_HOST"] = url
        from tpudata import storage  # noqa: PLC0415

        fs = storage.gcs_filesystem()
        fs.mkdir("bench-src")
        for name, files, batch in (("B (105 B)", files_b, 1024), ("A (~110 KB)", files_a, 32)):
            remote = []
            for f in files:
                dst = f"gs://bench-src/{os.path.basename(f)}"
                fs.put_file(f, dst)
                fs.put_file(f + ".idx", dst + ".idx")
                remote.append(dst)
            src = TFRecordSource(remote, progress=False)
            batched = random_reads(src, batch, seconds)
            single = single_reads(src, seconds / 2)
            print(f"  fake_gcs {name:12s} __getitems__({batch}): {batched:10,.0f}/s   "
                  f"source[i]: {single:10,.0f}/s   ({batched / single:.1f}x)")
    finally:
        proc.kill()
        proc.wait()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "tpudata-bench", "torch"))
    p.add_argument("--workload", choices=["A", "B", "both"], default="both")
    p.add_argument("--a-shard-mb", type=int, default=100, help="size of each of A's 4 shards")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--seconds", type=float, default=3.0, help="per random-access measurement")
    p.add_argument("--skip-loader", action="store_true")
    p.add_argument("--skip-random", action="store_true")
    p.add_argument("--skip-gcs", action="store_true")
    args = p.parse_args()
    if "tensorflow" in sys.modules:
        raise SystemExit("never run the tfrecord package in a process with TensorFlow")
    files = {w: make_files(args.dir, w, args.a_shard_mb) for w in ("A", "B")}
    print(f"cores: {os.cpu_count()}; the machine may be shared: compare ratios, not absolutes")
    if not args.skip_loader:
        for w in ("A", "B") if args.workload == "both" else (args.workload,):
            bench_loader(w, files[w], args.repeat)
    if not args.skip_random:
        bench_random_access(files["B"], files["A"], args.seconds, not args.skip_gcs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
