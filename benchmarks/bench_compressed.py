"""Reading GZIP / ZLIB TFRecord files: tpudata's reader against decompression alone.

The peer is zlib inflating the whole file in one call (no framing, no CRC checks): the ceiling
for any reader of the file. tpudata decodes incrementally (every intact record is delivered before
damage is reported), frames and checks both CRCs of every record.

    python benchmarks/bench_compressed.py [--repeat 5] [--dir /tmp/tpudata-bench]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import zlib

import numpy as np

import tpudata
from tpudata import _accel


def make(path: str, compression: str, n: int = 200_000) -> None:
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((n, 16)).astype(np.float32)
    with tpudata.TFRecordWriter(path, compression) as w:
        w.write_many(tpudata.encode_example({"x": xs[i], "y": i}) for i in range(n))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "tpudata-bench"))
    args = ap.parse_args(argv)
    _accel.ensure_allocator_tuned()
    os.makedirs(args.dir, exist_ok=True)
    describe = getattr(_accel, "describe", lambda: "")  # older versions: no description
    print(f"tpudata {tpudata.__version__}, {describe()}")
    for compression, wbits in (("GZIP", 31), ("ZLIB", 15)):
        path = os.path.join(args.dir, f"compressed.tfrecord.{compression.lower()}")
        if not os.path.exists(path):
            make(path, compression)
        size = os.path.getsize(path)
        ours, peer = [], []
        for _ in range(args.repeat):  # alternate: the machine may be shared
            t = time.perf_counter()
            n = sum(len(b) for b in tpudata.read_record_batches(path, compression))
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            with open(path, "rb") as f:
                zlib.decompressobj(wbits).decompress(f.read())
            peer.append(time.perf_counter() - t)
        a, b = min(ours), min(peer)
        print(f"{compression}: {n} records, {size / 1e6:.1f} MB compressed; tpudata read_record_batches"
              f" {size / a / 1e6:.0f} MB/s, zlib one call {size / b / 1e6:.0f} MB/s, ratio {b / a:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
