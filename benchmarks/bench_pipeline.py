"""Input-pipeline throughput of tpudata.Dataset against tf.data, in the same run.

Pipeline (both sides): list_files -> interleave(TFRecordDataset, cycle_length=4) ->
shuffle(10,000) -> parse -> batch(drop_remainder) -> prefetch, over 4 shards of each workload of
benchmarks/bench_read.py (A: 4 x ~100 MB of ~110 KB records, batches of 128; B: 4 x 125,000
Examples of 16 floats + label, batches of 1024). TensorFlow gets its fastest equivalent: parallel
interleave, AUTOTUNE everywhere, and parsing after batching (vectorised parse_example), run in a
subprocess with the tuned glibc malloc settings. tpudata runs in two processes per round
(benchmarks/bench_common.py): as a user gets it (glibc malloc as it comes), then tuned
(``tpudata.tune_malloc()``); two rounds, TensorFlow between them. Best of --repeat epochs after a
warm-up epoch each.

    python benchmarks/bench_pipeline.py [--workload A B] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_common  # noqa: E402
import bench_read  # noqa: E402

import tpudata  # noqa: E402
from tpudata import _accel  # noqa: E402
from tpudata.dataset import Dataset, TFRecordDataset  # noqa: E402

SHARDS = 4
SHUFFLE = 10_000


def make_shards(directory: str, workload: str) -> str:
    os.makedirs(directory, exist_ok=True)
    pattern = os.path.join(directory, f"{workload.lower()}-*-of-{SHARDS:05d}")
    for s in range(SHARDS):
        path = os.path.join(directory, f"{workload.lower()}-{s:05d}-of-{SHARDS:05d}")
        if not os.path.exists(path):
            print(f"writing {path} ...", flush=True)
            if workload == "A":
                bench_read.make_a(path, seed=100 + s)
            else:
                bench_read.make_b(path, n=500_000 // SHARDS, seed=100 + s)
    return pattern


def tpudata_pipeline(pattern: str, workload: str):
    spec = bench_read.spec_of(workload)
    batch = bench_read.WORKLOADS[workload]["batch"]
    return (Dataset.list_files(pattern, shuffle=False)
            .interleave(lambda f: TFRecordDataset(f), cycle_length=4, num_parallel_calls=4)
            .shuffle(SHUFFLE, seed=0)
            .parse(spec)
            .batch(batch, drop_remainder=True)
            .prefetch(2))


def run_tpudata(pattern: str, workload: str) -> tuple[float, int]:
    ds = tpudata_pipeline(pattern, workload)
    first = next(iter(bench_read.WORKLOADS[workload]["spec"]))
    t0 = time.perf_counter()
    n = 0
    with ds.iterator() as it:
        for b in it:
            n += len(b[first])
    return time.perf_counter() - t0, n


TF_SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf
    pattern, batch, repeat, spec_json = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    dt = {"bytes": tf.string, "float32": tf.float32, "int64": tf.int64}
    spec = {k: tf.io.FixedLenFeature(s, dt[t]) for k, (t, s) in json.loads(spec_json).items()}
    AUTO = tf.data.AUTOTUNE
    ds = (tf.data.Dataset.list_files(pattern, shuffle=False)
          .interleave(lambda f: tf.data.TFRecordDataset(f, buffer_size=8 << 20), cycle_length=4,
                      num_parallel_calls=AUTO)
          .shuffle(%d, seed=0)
          .batch(batch, drop_remainder=True)
          .map(lambda x: tf.io.parse_example(x, spec), num_parallel_calls=AUTO)
          .prefetch(AUTO))
    times = []
    for epoch in range(repeat + 1):
        t0 = time.perf_counter(); n = 0
        for out in ds:
            n += int(out[next(iter(spec))].shape[0])
        if epoch:
            times.append(time.perf_counter() - t0)
    print(json.dumps({"times": times, "n": n, "version": tf.__version__}))
""" % SHUFFLE)


def run_tf(pattern: str, workload: str, repeat: int) -> dict | None:
    return bench_read.run_tf_script(TF_SCRIPT, [
        pattern, str(bench_read.WORKLOADS[workload]["batch"]), str(repeat),
        json.dumps(bench_read.WORKLOADS[workload]["spec"])])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", nargs="+", default=["A", "B"], choices=["A", "B"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "tpudata-bench"))
    ap.add_argument("--no-tf", action="store_true")
    bench_common.add_child_argument(ap)
    args = ap.parse_args(argv)
    if args.child:  # one process's tpudata epochs of one workload, as JSON
        bench_common.start_child(args.child)
        wl = args.workload[0]
        pattern = make_shards(os.path.join(args.dir, f"pipeline_{wl.lower()}"), wl)
        run_tpudata(pattern, wl)  # warm-up
        return bench_common.child_result([run_tpudata(pattern, wl) for _ in range(args.repeat)])
    bench_common.tune_parent()  # this process measures nothing: TF's peer gets the settings
    print(f"tpudata {tpudata.__version__}, accelerator {'on' if _accel.native else 'off'}, "
          f"{os.cpu_count()} cpus; pipeline: list_files -> interleave(4) -> shuffle({SHUFFLE}) -> "
          "parse -> batch(drop_remainder) -> prefetch")
    results = {}
    for wl in args.workload:
        pattern = make_shards(os.path.join(args.dir, f"pipeline_{wl.lower()}"), wl)
        size = sum(os.path.getsize(p) for p in tpudata.storage.glob(pattern))
        child = ["--workload", wl, "--repeat", str(args.repeat), "--dir", args.dir]
        rows, peers = bench_common.run_rows(
            __file__, child, rounds=2,
            peer=lambda rnd: None if rnd or args.no_tf else run_tf(pattern, wl, args.repeat))
        tf_res = peers[0] if peers else None
        tbest = min(tf_res["times"]) if tf_res else None
        row: dict = {"GB": size / 1e9}
        lines = []
        for malloc, per_round in rows.items():  # as a user gets it first, then tuned
            ours = [run for result in per_round for run in result]
            best = min(t for t, _ in ours)
            n = row["records"] = ours[0][1]
            key = f"tpudata_{malloc}"
            row[key] = {"GBps": size / best / 1e9, "Mrps": n / best / 1e6,
                        "median_Mrps": n / statistics.median(t for t, _ in ours) / 1e6}
            line = (f"  {bench_common.label('tpudata', malloc)}: {row[key]['GBps']:.2f} GB/s "
                    f"{row[key]['Mrps']:.3f} M rec/s")
            if tbest:
                row[key]["ratio"] = tbest / best
                line += f" | ratio {tbest / best:.2f}x"
            lines.append(line)
        lines.insert(0, f"workload {wl}: {row['records']} records in batches, {size / 1e6:.0f} MB")
        lines.append(f"  as a user gets it / tuned = "
                     f"{row['tpudata_default']['GBps'] / row['tpudata_tuned']['GBps']:.2f}")
        if tf_res:
            row.update(tf_GBps=size / tbest / 1e9, tf_Mrps=tf_res["n"] / tbest / 1e6,
                       tf_version=tf_res["version"])
            lines.append(f"  TensorFlow {tf_res['version']}: {row['tf_GBps']:.2f} GB/s "
                         f"{row['tf_Mrps']:.3f} M rec/s")
        print("\n".join(lines), flush=True)
        results[wl] = row
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
