"""Read + CRC + parse throughput of tpudata against TensorFlow, in the same run.

Workloads (written once into --dir and reused):
  A: one ~100 MB shard of ~110 KB records (random image/encoded 80-140 KB, int64 label, height,
     width, format, filename); read + CRC + parse image/encoded + label into batches of 128.
  B: 500,000 Examples of x: 16 floats and y: int64 label; parsed into batches of 1024.

tpudata runs two ways: on one thread (reader, CRC checks and parser all in the calling thread),
and through the Dataset API (a read-ahead thread reads and checks CRCs while the calling thread
parses); each in two processes (benchmarks/bench_common.py): as a user gets it (glibc malloc as
it comes) and tuned (``tpudata.tune_malloc()``). TensorFlow, when importable (or ``TF_PYTHON``),
runs in a subprocess with its best pipeline (TFRecordDataset(buffer_size=8 MiB) -> batch ->
map(parse_example, AUTOTUNE) -> prefetch), using every core, with the tuned malloc settings. Each side reports its
best of --repeat epochs after a warm-up epoch; the page cache is warm for all.

    python benchmarks/bench_read.py                 # both workloads
    python benchmarks/bench_read.py --workload B --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_common  # noqa: E402
import numpy as np  # noqa: E402

import tpudata  # noqa: E402
from tpudata import FixedLenFeature, _accel  # noqa: E402

WORKLOADS = {
    "A": {"file": "workload_a.tfrecord", "batch": 128,
          "spec": {"image/encoded": ("bytes", []), "image/class/label": ("int64", [])}},
    "B": {"file": "workload_b.tfrecord", "batch": 1024,
          "spec": {"x": ("float32", [16]), "y": ("int64", [])}},
}


def make_a(path: str, target_bytes: int = 100 << 20, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    written = 0
    i = 0
    with tpudata.TFRecordWriter(path) as w:
        while written < target_bytes:
            size = int(rng.integers(80_000, 140_001))
            h, wd = int(rng.integers(200, 600)), int(rng.integers(200, 600))
            rec = tpudata.encode_example({
                "image/encoded": rng.bytes(size), "image/class/label": int(rng.integers(1, 1001)),
                "image/height": h, "image/width": wd, "image/format": b"JPEG",
                "image/filename": f"n{i:08d}_{i}.JPEG".encode(),
            })
            w.write(rec)
            written += len(rec) + 16
            i += 1


def make_b(path: str, n: int = 500_000, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((n, 16)).astype(np.float32)
    ys = rng.integers(0, 10, n)
    with tpudata.TFRecordWriter(path) as w:
        w.write_many(tpudata.encode_example({"x": xs[i], "y": int(ys[i])}) for i in range(n))


def spec_of(workload: str) -> dict:
    dt = {"bytes": bytes, "float32": np.float32, "int64": np.int64}
    return {k: FixedLenFeature(shape, dt[t]) for k, (t, shape) in WORKLOADS[workload]["spec"].items()}


def run_tpudata(path: str, workload: str, mode: str = "core") -> tuple[float, int]:
    """``core``: read_record_batches + parse_batches in this thread only. ``dataset``:
    TFRecordDataset(path).batch(B).parse(spec), which reads ahead (and checks CRCs) in a
    background thread while this thread parses."""
    spec = spec_of(workload)
    batch = WORKLOADS[workload]["batch"]
    first = next(iter(spec))
    t0 = time.perf_counter()
    n = 0
    if mode == "core":
        for out in tpudata.parse_batches(tpudata.read_record_batches(path), spec, batch):
            n += len(out[first])
    else:
        from tpudata.dataset import TFRecordDataset

        with TFRecordDataset(path).batch(batch).parse(spec).iterator() as it:
            for out in it:
                n += len(out[first])
    return time.perf_counter() - t0, n


TF_SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf
    path, batch, repeat, spec_json = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    dt = {"bytes": tf.string, "float32": tf.float32, "int64": tf.int64}
    spec = {k: tf.io.FixedLenFeature(s, dt[t]) for k, (t, s) in json.loads(spec_json).items()}
    ds = (tf.data.TFRecordDataset(path, buffer_size=8 << 20).batch(batch)
          .map(lambda x: tf.io.parse_example(x, spec), num_parallel_calls=tf.data.AUTOTUNE)
          .prefetch(tf.data.AUTOTUNE))
    times = []
    for epoch in range(repeat + 1):
        t0 = time.perf_counter(); n = 0
        for out in ds:
            n += int(out[next(iter(spec))].shape[0])
        if epoch:
            times.append(time.perf_counter() - t0)
    print(json.dumps({"times": times, "n": n, "version": tf.__version__}))
""")


def run_tf_script(script: str, args: list[str]) -> dict | None:
    """Run a TensorFlow benchmark script in a subprocess (None when TF is not installed), with
    the same glibc malloc settings tpudata runs with; returns its last line as JSON."""
    import importlib.util

    python = os.environ.get("TF_PYTHON") or sys.executable  # e.g. TF_PYTHON=/work/tfvenv/bin/python
    if python == sys.executable and importlib.util.find_spec("tensorflow") is None:
        return None
    proc = subprocess.run([python, "-c", script, *args], capture_output=True, text=True,
                          check=False, env=bench_common.peer_environ())
    if proc.returncode:
        print(proc.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_tf(path: str, workload: str, repeat: int) -> dict | None:
    spec = json.dumps(WORKLOADS[workload]["spec"])
    return run_tf_script(TF_SCRIPT, [path, str(WORKLOADS[workload]["batch"]), str(repeat), spec])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", nargs="+", default=["A", "B"], choices=["A", "B"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "tpudata-bench"))
    ap.add_argument("--no-tf", action="store_true", help="skip the TensorFlow peer")
    ap.add_argument("--pure", action="store_true", help="use the pure Python path (no accelerator)")
    bench_common.add_child_argument(ap)
    args = ap.parse_args(argv)
    if args.pure:
        _accel.use_native(False)
    if args.child:  # one process's tpudata rows, as JSON
        bench_common.start_child(args.child)
        path = os.path.join(args.dir, WORKLOADS[args.workload[0]]["file"])
        run_tpudata(path, args.workload[0])  # warm-up (page cache)
        return bench_common.child_result({m: [run_tpudata(path, args.workload[0], m)
                                              for _ in range(args.repeat)]
                                          for m in ("core", "dataset")})
    bench_common.tune_parent()  # this process measures nothing: TF's peer gets the settings
    os.makedirs(args.dir, exist_ok=True)
    print(f"tpudata {tpudata.__version__}, accelerator: {'on' if _accel.native else 'off'}, "
          f"cpu count {os.cpu_count()}")
    results = {}
    for wl in args.workload:
        path = os.path.join(args.dir, WORKLOADS[wl]["file"])
        if not os.path.exists(path):
            print(f"writing workload {wl} to {path} ...", flush=True)
            (make_a if wl == "A" else make_b)(path)
        size = os.path.getsize(path)
        child = ["--workload", wl, "--repeat", str(args.repeat), "--dir", args.dir] + (
            ["--pure"] if args.pure else [])
        # tpudata before and after TF, each malloc setting in its own process
        rows, peers = bench_common.run_rows(
            __file__, child, rounds=2,
            peer=lambda rnd: None if rnd or args.no_tf else run_tf(path, wl, args.repeat))
        tf_res = peers[0] if peers else None
        ours: dict = {}
        for malloc, per_round in rows.items():
            for result in per_round:
                for m, runs in result.items():
                    ours.setdefault((m, malloc), []).extend(runs)
        n = ours["core", "default"][0][1]
        row = {"records": n, "MB": size / 1e6}
        tbest = min(tf_res["times"]) if tf_res else None
        lines = [f"workload {wl}: {n} records, {size / 1e6:.0f} MB"]
        for (m, malloc), runs in sorted(ours.items()):
            label = {"core": "tpudata, one thread (read_record_batches + parse_batches)",
                     "dataset": "tpudata, Dataset (read-ahead thread + parse)"}[m]
            label = bench_common.label(label, malloc)
            best = min(t for t, _ in runs)
            med = statistics.median(t for t, _ in runs)
            row[f"{m}_{malloc}"] = {"GBps": size / best / 1e9, "Mrps": n / best / 1e6,
                                   "median_GBps": size / med / 1e9}
            line = (f"  {label}: {size / best / 1e9:.2f} GB/s, {n / best / 1e6:.3f} M rec/s "
                    f"(median {size / med / 1e9:.2f} GB/s)")
            if tbest:
                row[f"{m}_{malloc}"]["ratio"] = tbest / best
                line += f"  ratio {tbest / best:.2f}x"
            lines.append(line)
        for m in ("core", "dataset"):
            ratio = row[f"{m}_default"]["GBps"] / row[f"{m}_tuned"]["GBps"]
            lines.append(f"  {m}: as a user gets it / tuned = {ratio:.2f}")
        if tf_res:
            row.update(tf_GBps=size / tbest / 1e9, tf_Mrps=tf_res["n"] / tbest / 1e6,
                       tf_version=tf_res["version"])
            lines.append(f"  TensorFlow {tf_res['version']} (tf.data, all cores): "
                         f"{size / tbest / 1e9:.2f} GB/s, {tf_res['n'] / tbest / 1e6:.3f} M rec/s")
        else:
            lines.append("  TensorFlow not available")
        print("\n".join(lines), flush=True)
        results[wl] = row
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
