"""Reading GZIP / ZLIB TFRecord files: tpudata's reader against decompression alone.

The peer is zlib inflating the whole file in one call (no framing, no CRC checks): the ceiling
for any reader of the file. tpudata decodes incrementally (every intact record is delivered before
damage is reported), frames and checks both CRCs of every record. tpudata runs in two processes
per round (benchmarks/bench_common.py): as a user gets it (glibc malloc as it comes), then tuned
(``tpudata.tune_malloc()``); the peer runs after each round, in this (tuned) process.

    python benchmarks/bench_compressed.py [--repeat 5] [--dir /tmp/tpudata-bench]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_common  # noqa: E402
import numpy as np  # noqa: E402

import tpudata  # noqa: E402
from tpudata import _accel  # noqa: E402

CODECS = (("GZIP", 31), ("ZLIB", 15))
ROUNDS = 2


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
    bench_common.add_child_argument(ap)
    args = ap.parse_args(argv)
    paths = {c: os.path.join(args.dir, f"compressed.tfrecord.{c.lower()}") for c, _ in CODECS}
    if args.child:  # one process's read_record_batches times, as JSON
        bench_common.start_child(args.child)
        out = {}
        for compression, path in paths.items():
            times = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                n = sum(len(b) for b in tpudata.read_record_batches(path, compression))
                times.append(time.perf_counter() - t)
            out[compression] = {"times": times, "n": n}
        return bench_common.child_result(out)
    bench_common.tune_parent()  # the peer (zlib, in this process) runs with the tuned settings
    os.makedirs(args.dir, exist_ok=True)
    describe = getattr(_accel, "describe", lambda: "")  # older versions: no description
    print(f"tpudata {tpudata.__version__}, {describe()}")
    for compression, path in paths.items():
        if not os.path.exists(path):
            make(path, compression)

    def peer(rnd: int) -> dict:
        out = {}
        for compression, wbits in CODECS:
            times = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                with open(paths[compression], "rb") as f:
                    zlib.decompressobj(wbits).decompress(f.read())
                times.append(time.perf_counter() - t)
            out[compression] = times
        return out

    # alternate rounds (the machine may be shared): each setting's process, then the peer
    rows, peers = bench_common.run_rows(__file__, ["--repeat", str(args.repeat), "--dir", args.dir],
                                        rounds=ROUNDS, peer=peer)
    for compression, _ in CODECS:
        size = os.path.getsize(paths[compression])
        b = min(t for p in peers for t in p[compression])
        n = rows["default"][0][compression]["n"]
        print(f"{compression}: {n} records, {size / 1e6:.1f} MB compressed; zlib one call "
              f"{size / b / 1e6:.0f} MB/s")
        for malloc, per_round in rows.items():
            a = min(t for r in per_round for t in r[compression]["times"])
            print(f"  {bench_common.label('tpudata read_record_batches', malloc)}: "
                  f"{size / a / 1e6:.0f} MB/s, ratio {b / a:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
