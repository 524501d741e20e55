"""Infeed benchmark: is training input-bound, from local disk and from (fake) GCS?

    python tools/bench_infeed.py [--steps 30] [--parallel 1 2 4 8 16] [--latency-ms 50]
    tpudata bench infeed ...          (the same script, run by the CLI from a source checkout)

For ``num_parallel_reads`` in 1, 2, 4, 8, 16 it streams the ImageNet-like workload (~110 KB
records) through ``TFRecordDataset -> parse -> batch -> prefetch`` into the numpy TPUEstimator
(8 replicas, a simulated device step time) and reports records/s, MB/s and the share of time
the device waited for input. Sources: local files, and the same shards on an embedded fake GCS
server with realistic knobs (first-byte latency, per-connection bandwidth cap). With TensorFlow
installed, tf.data over the local files is measured too. Prints a table; writes a PNG plot when
matplotlib is installed (extra ``plot``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import textwrap
import time

import numpy as np

from tqdm.auto import tqdm

from tpudata import storage

logger = logging.getLogger("tpudata.bench_infeed")

PARALLEL = (1, 2, 4, 8, 16)
SPEC_KEYS = ("image/encoded", "image/class/label")


def add_arguments(p) -> None:
    p.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "tpudata-infeed"),
                   help="where the workload shards are written (reused between runs)")
    p.add_argument("--shards", type=int, default=16)
    p.add_argument("--shard-mb", type=float, default=24.0, help="size of each shard")
    p.add_argument("--parallel", type=int, nargs="+", default=list(PARALLEL),
                   help="num_parallel_reads values (default 1 2 4 8 16)")
    p.add_argument("--steps", type=int, default=30, help="training steps per measurement")
    p.add_argument("--batch-size", type=int, default=256, help="global batch size (8 replicas)")
    p.add_argument("--step-ms", type=float, default=20.0, help="simulated device time per step")
    p.add_argument("--latency-ms", type=float, default=50.0, help="fake GCS first-byte latency")
    p.add_argument("--bandwidth-mbps", type=float, default=100.0,
                   help="fake GCS bandwidth cap per connection (MB/s)")
    p.add_argument("--no-gcs", action="store_true", help="local disk only")
    p.add_argument("--no-tf", action="store_true", help="skip tf.data even when installed")
    p.add_argument("--plot", default=None, help="PNG file for the plot (default DIR/infeed.png)")
    p.add_argument("--json", default=None, help="also write the results as JSON here")


# -- workload -------------------------------------------------------------------------------------
def make_workload(directory: str, shards: int, shard_mb: float, seed: int = 0) -> list[str]:
    """ImageNet-like shards: random 80-140 KB "JPEG" bytes, label, height, width, format, name."""
    from tpudata.example import encode_example
    from tpudata.tfrecord import TFRecordWriter

    os.makedirs(directory, exist_ok=True)
    paths = []
    rng = np.random.default_rng(seed)
    todo = []
    for s in range(shards):
        path = os.path.join(directory, f"train-{s:05d}-of-{shards:05d}")
        paths.append(path)
        if not (os.path.exists(path) and abs(os.path.getsize(path) / 1e6 - shard_mb) < 0.2 * shard_mb):
            todo.append((s, path))
    if todo:
        print(f"preparing the workload: writing {len(todo)} shard(s) of {shard_mb:g} MB in {directory} "
              f"({shards - len(todo)} reused)", flush=True)
    for s, path in tqdm(todo, desc="workload shards", unit="shard", disable=not todo):
        written, i = 0, 0
        with TFRecordWriter(path) as w:
            while written < shard_mb * 1e6:
                rec = encode_example({
                    "image/encoded": rng.bytes(int(rng.integers(80_000, 140_001))),
                    "image/class/label": int(rng.integers(1, 1001)),
                    "image/height": int(rng.integers(200, 600)),
                    "image/width": int(rng.integers(200, 600)),
                    "image/format": b"JPEG", "image/filename": f"img-{s}-{i}.JPEG".encode()})
                w.write(rec)
                written += len(rec) + 16
                i += 1
    return paths


def _features(batch):
    """Host-side preprocessing stand-in: 64 bytes of each image as floats, labels as int32."""
    images = batch["image/encoded"]
    x = np.stack([np.frombuffer(b, np.uint8, 64, 0) for b in images]).astype(np.float32) / 255.0
    return {"x": x}, (batch["image/class/label"] % 10).astype(np.int32)


# -- one measurement ------------------------------------------------------------------------------
def measure(files: list[str], parallel: int, args, avg_record: float) -> dict:
    """One run of the executor over ``files``; ``avg_record`` (bytes) converts records to MB."""
    from tpudata import FixedLenFeature
    from tpudata import tpu
    from tpudata.dataset import TFRecordDataset

    spec = {"image/encoded": FixedLenFeature([], bytes),
            "image/class/label": FixedLenFeature([], np.int64)}

    def input_fn(params):
        return (TFRecordDataset(files, num_parallel_reads=parallel).repeat().parse(spec)
                .batch(params["batch_size"], drop_remainder=True).map(_features).prefetch(8))

    cfg = tpu.RunConfig(tpu_config=tpu.TPUConfig(iterations_per_loop=10, num_shards=8,
                                                 simulated_step_seconds=args.step_ms / 1000.0))
    est = tpu.TPUEstimator(tpu.models.softmax_regression(10), cfg, train_batch_size=args.batch_size)
    t0 = time.perf_counter()
    est.train(input_fn, steps=args.steps)
    wall = time.perf_counter() - t0
    report = est.last_train_report
    records = report.records
    return {"parallel": parallel, "records_per_s": records / wall,
            "MB_per_s": records * avg_record / wall / 1e6,
            "input_bound_pct": report.input_bound_percent, "steps": report.steps}


def _count(files: list[str]) -> int:
    from tpudata.tfrecord import read_record_batches

    return sum(len(b) for b in read_record_batches(files, verify=False))


TF_SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf
    files, parallel, records, batch = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64)}
    ds = (tf.data.TFRecordDataset(files, buffer_size=8 << 20, num_parallel_reads=parallel).repeat()
          .batch(batch, drop_remainder=True).map(lambda r: tf.io.parse_example(r, spec),
          num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE).take(records // batch))
    for _ in ds.take(2): pass
    t0 = time.perf_counter(); n = 0
    for b in ds: n += int(b["image/class/label"].shape[0])
    print(json.dumps({"records_per_s": n / (time.perf_counter() - t0)}))
""")


def measure_tf(files: list[str], parallel: int, records: int, batch: int) -> float | None:
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:
        return None
    proc = subprocess.run([sys.executable, "-c", TF_SCRIPT, json.dumps(files), str(parallel),
                           str(records), str(batch)], capture_output=True, text=True)
    if proc.returncode:
        logger.warning("tf.data run failed: %s", proc.stderr[-500:])
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])["records_per_s"]


# -- running it all -------------------------------------------------------------------------------
def _upload(files: list[str], server_url: str) -> list[str]:
    fs = storage.gcs_filesystem()
    fs.mkdir("infeed-bench")
    urls = []
    for f in tqdm(files, desc="uploading to fake GCS", unit="shard"):
        url = f"gs://infeed-bench/{os.path.basename(f)}"
        if not storage.exists(url) or storage.size(url) != os.path.getsize(f):
            fs.put_file(f, url[5:])
        urls.append(url)
    return urls


def run(args) -> dict:
    files = make_workload(args.dir, args.shards, args.shard_mb)
    total_mb = sum(os.path.getsize(f) for f in files) / 1e6
    records = _count(files)
    avg_record = total_mb * 1e6 / records  # the GCS copies hold the same bytes
    print(f"workload: {len(files)} shards, {total_mb:.0f} MB, {records} records of "
          f"~{avg_record / 1e3:.0f} KB; {args.steps} steps of {args.batch_size} "
          f"on 8 replicas, {args.step_ms:g} ms simulated device time per step", flush=True)
    results: dict = {"local": [], "gcs": [], "tf_local": []}
    for k in args.parallel:
        results["local"].append(measure(files, k, args, avg_record))
        if not args.no_tf:
            tf_rate = measure_tf(files, k, args.steps * args.batch_size, args.batch_size)
            if tf_rate is not None:
                results["tf_local"].append({"parallel": k, "records_per_s": tf_rate})
    if not args.no_gcs:
        from fake_gcs import pointed_at

        with _server_process(args) as server, pointed_at(server):
            urls = _upload(files, server.url)
            print(f"fake GCS at {server.url} (own process): {args.latency_ms:g} ms first-byte "
                  f"latency, {args.bandwidth_mbps:g} MB/s per connection", flush=True)
            for k in args.parallel:
                results["gcs"].append(measure(urls, k, args, avg_record))
    return results


class _server_process:
    """``python -m fake_gcs`` with the knobs, in its own process (its own GIL, like a real
    remote store); ``.url`` once it is listening."""

    def __init__(self, args):
        self.cmd = [sys.executable, "-m", "fake_gcs", "--port", "0", "--log-level", "WARNING",
                    "--latency-ms", str(args.latency_ms), "--bandwidth-mbps", str(args.bandwidth_mbps)]

    def __enter__(self):
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("STORAGE_EMULATOR_HOST="):
            self.proc.kill()
            raise RuntimeError(f"fake_gcs did not start: {line!r}")
        self.url = line.split("=", 1)[1]
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def table(results: dict) -> str:
    tf_by_k = {r["parallel"]: r["records_per_s"] for r in results.get("tf_local", [])}
    gcs_by_k = {r["parallel"]: r for r in results.get("gcs", [])}
    lines = ["num_parallel_reads | local rec/s | local MB/s | local input-bound | "
             "fake GCS rec/s | fake GCS MB/s | fake GCS input-bound | tf.data local rec/s",
             "---|---|---|---|---|---|---|---"]
    for r in results["local"]:
        k = r["parallel"]
        g = gcs_by_k.get(k)
        gcs = (f"{g['records_per_s']:,.0f} | {g['MB_per_s']:,.0f} | {g['input_bound_pct']:.0f}%"
               if g else "- | - | -")
        tf = f"{tf_by_k[k]:,.0f}" if k in tf_by_k else "-"
        lines.append(f"{k} | {r['records_per_s']:,.0f} | {r['MB_per_s']:,.0f} | "
                     f"{r['input_bound_pct']:.0f}% | {gcs} | {tf}")
    return "\n".join(lines)


def plot(results: dict, path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib not installed (extra 'plot'): no plot written")
        return False
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for key, label in (("local", "tpudata, local disk"), ("gcs", "tpudata, fake GCS"),
                       ("tf_local", "tf.data, local disk")):
        rows = results.get(key) or []
        if rows:
            ks = [r["parallel"] for r in rows]
            a.plot(ks, [r["records_per_s"] for r in rows], marker="o", label=label)
            if key != "tf_local":
                b.plot(ks, [r["input_bound_pct"] for r in rows], marker="o", label=label)
    for ax, title in ((a, "throughput (records/s)"), (b, "device time waiting for input (%)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("num_parallel_reads")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend()
    b.set_ylim(0, 100)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bench_infeed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return parser


def cmd_infeed(args) -> int:
    import tpudata

    tpudata.tune_malloc()  # as TF's guides get from tcmalloc; the library leaves it to the caller
    results = run(args)
    print()
    print(table(results))
    png = args.plot or os.path.join(args.dir, "infeed.png")
    if plot(results, png):
        print(f"\nplot: {png}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.exit(cmd_infeed(build_parser().parse_args()))
