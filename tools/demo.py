"""`make demo`: write a small sample dataset and look at it with the tpudata CLI.

No cloud account or TensorFlow needed. Output goes to ./demo_out (override with --out).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

import numpy as np

import tpudata
from tpudata import FixedLenFeature, VarLenFeature
from tpudata.cli import main as cli


def write_sample(out: str, num_shards: int = 4, per_shard: int = 500, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    paths = []
    for s in range(num_shards):
        path = os.path.join(out, f"train-{s:05d}-of-{num_shards:05d}")
        with tpudata.TFRecordWriter(path) as w:
            for i in range(per_shard):
                label = int(rng.integers(0, 10))
                w.write(tpudata.encode_example({
                    "image/encoded": rng.bytes(int(rng.integers(2_000, 6_000))),
                    "image/class/label": label,
                    "x": rng.standard_normal(16).astype(np.float32) + label,
                    "tags": [b"sample", f"shard-{s}".encode()][: int(rng.integers(1, 3))],
                }))
        paths.append(path)
    return paths


def run(cmd: list[str]) -> None:
    print(f"\n$ tpudata {' '.join(cmd)}", flush=True)
    rc = cli(cmd)
    sys.stdout.flush()
    if rc:
        raise SystemExit(f"tpudata {cmd[0]} failed with exit code {rc}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="demo_out")
    args = ap.parse_args(argv)
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    t0 = time.perf_counter()
    paths = write_sample(args.out)
    print(f"wrote {len(paths)} shards to {args.out}/ in {time.perf_counter() - t0:.2f} s")
    pattern = os.path.join(args.out, "train-*")
    run(["count", pattern])
    run(["verify", pattern])
    run(["head", "-n", "1", paths[0]])
    run(["index", "--output-dir", os.path.join(args.out, "idx"), paths[0]])

    spec = {"image/encoded": FixedLenFeature([], bytes),
            "image/class/label": FixedLenFeature([], np.int64),
            "x": FixedLenFeature([16], np.float32), "tags": VarLenFeature(bytes)}
    t0 = time.perf_counter()
    n = 0
    for batch in tpudata.parse_batches(tpudata.read_record_batches(pattern), spec, 128):
        n += len(batch["image/class/label"])
        last = batch
    dt = time.perf_counter() - t0
    print(f"\nparsed {n} Examples into batches of 128 in {dt * 1e3:.1f} ms; last batch: "
          f"x {last['x'].shape} {last['x'].dtype}, labels {last['image/class/label'][:8].tolist()}..., "
          f"tags {last['tags'].dense_shape}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
