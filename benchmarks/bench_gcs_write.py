"""Writing shards to gs:// at network speed: ``build_shards`` vs ``gcsfs.put`` vs local disk.

A fake GCS server (``python -m fake_gcs``, its own process) at 50 ms per request and 50 MB/s per
connection stands in for GCS. The same sharded build (random 128 KiB records, the default
process pool) is written

- to local disk (the ceiling: encoding and framing alone),
- to gs:// with tpudata's parallel composite uploads (parts uploaded in the background while
  the shard is written, ``parallel`` at once, composed into the final name on close; each
  worker publishes one shard while it encodes the next),
- to gs:// with ``parallel=0``: gcsfs's own resumable upload, one chunk after the other, as
  tpudata wrote before,

and the local build's files are uploaded with ``fs.put(local_files, remote_files)``, the
fastest form of gcsfs a competent user writes: every file at once (fsspec's batch size is the
open-file limit / 8), each a resumable upload in 50 MiB chunks. Each gs:// row gives MB/s of
shard bytes (from the best of ``--repeat`` interleaved rounds; the median is shown too), its
ratio to ``gcsfs.put`` and to local disk, the requests the server saw and the most it served
at once. Everything shares the machine's CPUs with the server (pin it with ``--server-cpus``).

    python benchmarks/bench_gcs_write.py            # 16 shards x 64 MiB, 3 rounds
    python benchmarks/bench_gcs_write.py --quick    # 8 shards x 16 MiB, 1 round
    python benchmarks/bench_gcs_write.py --parallel 4 8 --part-mib 8 16   # a sweep
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

BUCKET = "write-bench"
RECORD = 128 << 10


class RandomRecords:
    """Picklable encoder: item ``i`` -> a 128 KiB slice of a random pool (built per process)."""

    fingerprint = "bench-random-records-v1"

    def __init__(self, size: int = RECORD):
        self.size = size
        self._pool = None

    def __getstate__(self):
        return {"size": self.size, "_pool": None}

    def __call__(self, i: int) -> bytes:
        if self._pool is None:
            self._pool = np.random.default_rng(0).bytes(self.size * 64)
        start = (i * 7919 % 63) * self.size
        return self._pool[start:start + self.size]


SERVER_CPUS: set[int] | None = None


def _pin_server() -> None:
    if SERVER_CPUS:
        os.sched_setaffinity(0, SERVER_CPUS)


def _start_server(latency_ms: float, mbps: float) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "fake_gcs", "--port", "0", "--bucket", BUCKET,
         "--latency-ms", str(latency_ms), "--bandwidth-mbps", str(mbps), "--log-level", "WARNING"],
        stdout=subprocess.PIPE, text=True, preexec_fn=_pin_server)
    line = proc.stdout.readline().strip()
    if not line.startswith("STORAGE_EMULATOR_HOST="):
        proc.kill()
        raise SystemExit(f"fake_gcs did not start: {line!r}")
    return proc, line.split("=", 1)[1]


def _server(url: str, path: str, method: str = "GET") -> dict:
    req = urllib.request.Request(url + path, method=method)
    with urllib.request.urlopen(req, timeout=30) as resp:
        body = resp.read()
    return json.loads(body) if body else {}


def _fresh_fs():
    from fake_gcs.env import clear_fsspec_cache
    from tpudata import storage

    clear_fsspec_cache()
    return storage.gcs_filesystem()


def _build(out: str, n_items: int, shards: int, workers: int | None) -> float:
    from tpudata.shards import build_shards

    t = time.perf_counter()
    build_shards(range(n_items), RandomRecords(), out, "train", num_shards=shards,
                 workers=workers, resume=False, progress=False)
    return time.perf_counter() - t


def _row(name, times, total, put_s, local_s, stats=None) -> None:
    best = min(times)
    mbps = total / best / 1e6
    ratio_put = f"{put_s / best:7.2f}" if put_s else "      -"
    ratio_local = f"{local_s / best:7.2f}" if local_s else "      -"
    extra = ""
    if stats is not None:
        extra = f"  {stats['requests']['total']:6d} {stats['in_flight']['peak']:5d}"
    print(f"{name:<42} {best:7.2f} {statistics.median(times):7.2f} {mbps:8.1f} {ratio_put} "
          f"{ratio_local}{extra}", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 shards x 16 MiB, one run of each")
    ap.add_argument("--shards", type=int, default=None)
    ap.add_argument("--shard-mib", type=int, default=None)
    ap.add_argument("--workers", type=int, default=None, help="build processes (default: cores)")
    ap.add_argument("--parallel", type=int, nargs="+", default=[None],
                    help="parts in flight per shard for the composite rows (default: tpudata's)")
    ap.add_argument("--part-mib", type=int, nargs="+", default=[None],
                    help="part size for the composite rows (default: tpudata's)")
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--bandwidth-mbps", type=float, default=50.0)
    ap.add_argument("--repeat", type=int, default=None,
                    help="rounds over every row, interleaved (default 3, --quick 1)")
    ap.add_argument("--server-cpus", type=int, nargs="*", default=None,
                    help="pin fake_gcs to these CPUs")
    args = ap.parse_args(argv)
    shards = args.shards or (8 if args.quick else 16)
    shard_mib = args.shard_mib or (16 if args.quick else 64)
    repeat = args.repeat or (1 if args.quick else 3)
    n_items = shards * ((shard_mib << 20) // RECORD)

    global SERVER_CPUS
    SERVER_CPUS = set(args.server_cpus) if args.server_cpus else None
    proc, url = _start_server(args.latency_ms, args.bandwidth_mbps)
    os.environ["STORAGE_EMULATOR_HOST"] = url
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
    scratch = tempfile.mkdtemp(prefix="bench-gcs-write-")
    local = os.path.join(scratch, "local")
    files: list[str] = []

    def build_local() -> float:
        return _build(local, n_items, shards, args.workers)

    def put() -> float:
        fs = _fresh_fs()
        remote = [f"{BUCKET}/o/{os.path.basename(f)}" for f in files]
        t = time.perf_counter()
        fs.put(files, remote)
        return time.perf_counter() - t

    def build_gcs(parallel, part_mib):
        def run() -> float:
            saved = dict(os.environ)
            if parallel is not None:
                os.environ["TPUDATA_GCS_UPLOAD_PARALLEL"] = str(parallel)
            if part_mib is not None:
                os.environ["TPUDATA_GCS_UPLOAD_PART_MIB"] = str(part_mib)
            try:
                return _build(f"gs://{BUCKET}/o", n_items, shards, args.workers)
            finally:
                os.environ.clear()
                os.environ.update(saved)
        return run

    from tpudata import _upload

    rows = [("local disk build (ceiling)", build_local, False),
            ("gcsfs fs.put(files) (peer)", put, True),
            ("build_shards, sequential (gcsfs file)", build_gcs(0, None), True)]
    for parallel in args.parallel:
        for part_mib in args.part_mib:
            p = parallel if parallel is not None else _upload.PARALLEL
            m = part_mib if part_mib is not None else _upload.PART_SIZE >> 20
            rows.append((f"build_shards, composite {p} x {m} MiB parts",
                         build_gcs(parallel, part_mib), True))
    times: dict[str, list[float]] = {name: [] for name, _, _ in rows}
    stats: dict[str, dict] = {}
    try:
        for _ in range(repeat):  # interleaved rounds: a busy moment hurts every row alike
            for name, run, remote in rows:
                if remote:
                    fs = _fresh_fs()
                    if fs.exists(f"{BUCKET}/o"):
                        fs.rm(f"{BUCKET}/o", recursive=True)
                    _server(url, "/_stats/reset", "POST")
                seconds = run()
                if remote and (not times[name] or seconds < min(times[name])):
                    stats[name] = _server(url, "/_stats")
                times[name].append(seconds)
                if not files:
                    files = sorted(glob.glob(os.path.join(local, "train-*")))
        total = sum(os.path.getsize(f) for f in files)
        local_s, put_s = min(times[rows[0][0]]), min(times[rows[1][0]])
        print(f"{shards} shards x {total / shards / 2**20:.1f} MiB ({total / 1e6:.0f} MB), "
              f"workers={args.workers or os.cpu_count()}, {os.cpu_count()} CPUs, fake_gcs "
              f"(own process) at {args.latency_ms:g} ms and {args.bandwidth_mbps:g} MB/s per "
              f"connection; best and median of {repeat}")
        print(f"{'':<42} {'best s':>7} {'median':>7} {'MB/s':>8} {'x put':>7} {'x local':>7}"
              f"  {'reqs':>6} {'peak':>5}")
        for name, _, remote in rows:
            _row(name, times[name], total, put_s if remote else None,
                 local_s if remote else None, stats.get(name))
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
