#!/usr/bin/env python3
"""Throughput of fake_gcs through gcsfs, against gcp-storage-emulator in the same run.

    python benchmarks/bench_fake_gcs.py [--size-mb 256] [--repeat 3] [--no-peer]

Each server runs in its own process (so the client's event loop and the server do not share a
GIL), on a free loopback port. Measured through ``gcsfs.core.GCSFileSystem``:

- upload: one stream written in 8 MiB blocks (a resumable upload, 8 MiB chunks);
- download: one stream read in 8 MiB blocks (``cache_type="none"``: one range GET per block);
- parallel ranges: ``cat_ranges`` with 8 ranges of 8 MiB at a time, over the whole object.

Best of ``--repeat`` runs, in MB/s (10**6 bytes), then fake_gcs / peer ratios, and fake_gcs's
round trips (``GET /_stats``: requests by kind, connections opened). The peer is
gcp-storage-emulator (``pip install -e '.[bench]'``); it is skipped when not installed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = 8 << 20
PARALLEL = 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(kind: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    if kind == "fake_gcs":
        cmd = [
            sys.executable,
            "-m",
            "fake_gcs",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "WARNING",
        ]
    else:
        exe = shutil.which("gcp-storage-emulator") or os.path.join(
            os.path.dirname(sys.executable), "gcp-storage-emulator"
        )
        cmd = [exe, "start", "--host=127.0.0.1", f"--port={port}", "--in-memory"]
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{kind} did not start")


def peer_available() -> bool:
    try:
        import gcp_storage_emulator  # noqa: F401
    except ImportError:
        return False
    return True


def measure(url: str, data: bytes, repeat: int) -> dict[str, float]:
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
    import gcsfs.core

    gcsfs.core.GCSFileSystem.clear_instance_cache()
    fs = gcsfs.core.GCSFileSystem(token="anon", endpoint_url=url, skip_instance_cache=True)
    fs.mkdir("bench-bucket")
    path = "bench-bucket/object.bin"
    size = len(data)
    view = memoryview(data)
    best = {"upload": 0.0, "download": 0.0, "parallel ranges": 0.0}
    for _ in range(repeat):
        t0 = time.perf_counter()
        with fs.open(path, "wb", block_size=BLOCK) as f:
            for off in range(0, size, BLOCK):
                f.write(view[off : off + BLOCK])
        best["upload"] = max(best["upload"], size / (time.perf_counter() - t0) / 1e6)

        t0 = time.perf_counter()
        got = 0
        with fs.open(path, "rb", block_size=BLOCK, cache_type="none") as f:
            while chunk := f.read(BLOCK):
                got += len(chunk)
        if got != size:
            raise RuntimeError(f"download returned {got} of {size} bytes")
        best["download"] = max(best["download"], size / (time.perf_counter() - t0) / 1e6)

        starts = list(range(0, size, BLOCK))
        t0 = time.perf_counter()
        for i in range(0, len(starts), PARALLEL):
            batch = starts[i : i + PARALLEL]
            out = fs.cat_ranges([path] * len(batch), batch, [min(s + BLOCK, size) for s in batch])
            if i == 0 and out[-1] != data[batch[-1] : batch[-1] + BLOCK]:
                raise RuntimeError("range read returned the wrong bytes")
        best["parallel ranges"] = max(best["parallel ranges"], size / (time.perf_counter() - t0) / 1e6)
    fs.rm(path)
    gcsfs.core.GCSFileSystem.clear_instance_cache()
    return best


def main() -> int:
    p = argparse.ArgumentParser(description="fake_gcs vs gcp-storage-emulator through gcsfs")
    p.add_argument("--size-mb", type=int, default=256, help="object size in MiB (default 256)")
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is kept")
    p.add_argument("--no-peer", action="store_true", help="skip gcp-storage-emulator")
    args = p.parse_args()
    data = os.urandom(args.size_mb << 20)
    kinds = ["fake_gcs"] + ([] if args.no_peer or not peer_available() else ["peer"])
    if "peer" not in kinds and not args.no_peer:
        print("gcp-storage-emulator is not installed (pip install -e '.[bench]'): no peer numbers")
    results = {}
    trips = None
    for kind in kinds:
        proc, url = start(kind)
        try:
            results[kind] = measure(url, data, args.repeat)
            if kind == "fake_gcs":
                with urllib.request.urlopen(url + "/_stats", timeout=30) as resp:
                    trips = json.load(resp)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    print(
        f"object {args.size_mb} MiB, {BLOCK >> 20} MiB blocks, {PARALLEL} parallel ranges, best of {args.repeat}"
    )
    names = {"fake_gcs": "fake_gcs", "peer": "gcp-storage-emulator"}
    header = (
        f"{'':18}" + "".join(f"{names[k]:>22}" for k in kinds) + ("        ratio" if "peer" in kinds else "")
    )
    print(header)
    for metric in ("upload", "download", "parallel ranges"):
        row = f"{metric:18}" + "".join(f"{results[k][metric]:>17.0f} MB/s" for k in kinds)
        if "peer" in kinds:
            row += f"  {results['fake_gcs'][metric] / results['peer'][metric]:>9.1f}x"
        print(row)
    if trips is not None:
        kinds_seen = ", ".join(f"{k} {n}" for k, n in trips["requests"]["by_kind"].items() if n)
        conns = trips["connections"]
        print(
            f"fake_gcs round trips: {trips['requests']['total']} requests ({kinds_seen}), "
            f"{conns['opened']} connections opened, peak {trips['in_flight']['peak']} in flight"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
