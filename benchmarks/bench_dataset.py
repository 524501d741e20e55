"""Dataset-engine figures (issue 9), each printed with what it measures.

  files    interleave over 1 / 16 / 256 files of ~110 KB records (same ~100 MB in total):
           list_files -> interleave(TFRecordDataset, cycle_length=4, parallel) -> batch(128) ->
           parse -> prefetch, tpudata against tf.data (subprocess; TF_PYTHON=/path/to/python
           picks the interpreter that has TensorFlow) in the same run. Each side builds its
           dataset once (list_files globs then) and times whole epochs of it, best of --repeat.
  filesb   the same over 1 / 16 / 256 files of workload B (768,000 105-byte Examples, batches of
           1024): many small files of tiny records (not in the default set).
  nondet   16 sub-datasets, one slow (5 ms per element, the others 0.2 ms): parallel interleave
           with deterministic=True against False.
  map      user code element by element: calls made by range(100_000).map(f).take(3); first
           element's peak memory of from_tensor_slices(range(200_000)).map(to_4kb).prefetch(1);
           cores kept busy by a per-element Pillow decode+resize map (num_parallel_calls=2).
  cache    peak RSS above the baseline while cache(url) writes 1 GiB.
  shuffle  state size and restore time of shuffle(10,000) over ~110 KB records (local files
           and fake_gcs).

tpudata runs in two processes (benchmarks/bench_common.py): as a user gets it (glibc malloc as it
comes) first, then tuned (``tpudata.tune_malloc()``); files/filesb print both rows with TensorFlow
(tuned settings) after them, the other sections print each process's lines under its label.

    python benchmarks/bench_dataset.py [--only files map ...] [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_common  # noqa: E402
import bench_read  # noqa: E402
import numpy as np  # noqa: E402

import tpudata  # noqa: E402
from tpudata import _accel  # noqa: E402
from tpudata.dataset import AUTOTUNE, Dataset, TFRecordDataset  # noqa: E402

TOTAL_BYTES = 100 << 20
FILE_COUNTS = (1, 16, 256)


# -- files ----------------------------------------------------------------------------------------
TOTAL_B_RECORDS = 768_000  # workload B: ~80 MB of 105-byte Examples


def make_files(directory: str, n: int, workload: str = "A") -> str:
    if workload == "A":
        d, stem = os.path.join(directory, f"files_{n}"), "a"
    else:
        d, stem = os.path.join(directory, f"files_b_{n}"), "b"
    os.makedirs(d, exist_ok=True)
    for s in range(n):
        path = os.path.join(d, f"{stem}-{s:05d}-of-{n:05d}")
        if not os.path.exists(path):
            if workload == "A":
                bench_read.make_a(path, target_bytes=TOTAL_BYTES // n, seed=1000 * n + s)
            else:
                bench_read.make_b(path, n=TOTAL_B_RECORDS // n, seed=1000 * n + s)
    return os.path.join(d, f"{stem}-*")


def files_pipeline(pattern: str, workload: str = "A"):
    spec = bench_read.spec_of(workload)
    batch = bench_read.WORKLOADS[workload]["batch"]
    return (Dataset.list_files(pattern, shuffle=False)
            .interleave(lambda f: TFRecordDataset(f), cycle_length=4, num_parallel_calls=AUTOTUNE)
            .batch(batch, drop_remainder=True).parse(spec).prefetch(2))


def time_tpudata(make, repeat: int) -> tuple[float, int, float]:
    """Best wall time, records, and best CPU time (all threads) of ``repeat`` epochs (after a
    warm-up one) of the dataset ``make()`` builds once, as the TF script builds its own once."""
    best, cpu, n = float("inf"), float("inf"), 0
    ds = make()
    for epoch in range(repeat + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        n = 0
        with ds.iterator() as it:
            for b in it:
                n += len(next(iter(b.values())))
        if epoch:
            best = min(best, time.perf_counter() - t0)
            cpu = min(cpu, time.process_time() - c0)
    return best, n, cpu


TF_FILES = textwrap.dedent("""
    import json, os, sys, time
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf
    pattern, repeat, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    types = {"bytes": tf.string, "float32": tf.float32, "int64": tf.int64}
    spec = {k: tf.io.FixedLenFeature(shape, types[t]) for k, (t, shape) in json.loads(sys.argv[4]).items()}
    AUTO = tf.data.AUTOTUNE
    ds = (tf.data.Dataset.list_files(pattern, shuffle=False)
          .interleave(lambda f: tf.data.TFRecordDataset(f, buffer_size=8 << 20), cycle_length=4,
                      num_parallel_calls=AUTO)
          .batch(batch, drop_remainder=True)
          .map(lambda x: tf.io.parse_example(x, spec), num_parallel_calls=AUTO)
          .prefetch(AUTO))
    times, cpus = [], []
    for epoch in range(repeat + 1):
        t0, c0 = time.perf_counter(), time.process_time(); n = 0
        for out in ds:
            n += int(next(iter(out.values())).shape[0])
        if epoch:
            times.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
    print(json.dumps({"times": times, "cpus": cpus, "n": n, "version": tf.__version__}))
""")


def bench_files(args, workload: str = "A") -> dict:
    """In a child: this process's tpudata times per file count. In the parent: both settings'
    rows (children), then TensorFlow's, per file count."""
    patterns = {n: make_files(args.dir, n, workload) for n in FILE_COUNTS}
    if args.child:
        return {n: time_tpudata(lambda: files_pipeline(patterns[n], workload), args.repeat)
                for n in FILE_COUNTS}
    w = bench_read.WORKLOADS[workload]
    name = "files" if workload == "A" else "filesb"
    label = "files" if workload == "A" else "files B"

    def peer(rnd: int) -> dict | None:
        return None if args.no_tf else {n: bench_read.run_tf_script(
            TF_FILES, [patterns[n], str(args.repeat), str(w["batch"]), json.dumps(w["spec"])])
            for n in FILE_COUNTS}

    ours, peers = bench_common.run_rows(__file__, _child_argv(args, name), rounds=1, peer=peer)
    theirs = peers[0] if peers else {}
    rows = {}
    for n in FILE_COUNTS:
        size = sum(os.path.getsize(p) for p in tpudata.storage.glob(patterns[n]))
        row: dict = {"files": n}
        for malloc, (result,) in ours.items():  # as a user gets it first, then tuned
            best, count, cpu = result[str(n)]
            row["records"] = count
            row[malloc] = {"tpudata_GBps": size / best / 1e9, "tpudata_cpu_s": cpu}
            line = (f"{label} {n:4d}: {count} records {size / 1e6:.0f} MB | "
                    f"{bench_common.label('tpudata', malloc)} {size / best / 1e9:.2f} GB/s "
                    f"{count / best / 1e6:.2f} M rec/s ({cpu:.3f} CPU s)")
            tf_res = theirs.get(n)
            if tf_res:
                tbest, tcpu = min(tf_res["times"]), min(tf_res["cpus"])
                row.update(tf_GBps=size / tbest / 1e9, tf_cpu_s=tcpu)
                row[malloc].update(ratio=tbest / best, cpu_ratio=tcpu / cpu)
                line += f" | ratio {tbest / best:.2f}x, CPU-time ratio {tcpu / cpu:.2f}x"
            print(line, flush=True)
        if "tf_GBps" in row:
            print(f"{label} {n:4d}: TensorFlow {theirs[n]['version']} {row['tf_GBps']:.2f} GB/s "
                  f"({row['tf_cpu_s']:.3f} CPU s)", flush=True)
        rows[n] = row
    for malloc in bench_common.SETTINGS:
        first, last = rows[FILE_COUNTS[0]][malloc], rows[FILE_COUNTS[-1]][malloc]
        print(f"{label}: 1 -> 256 files slows {bench_common.label('tpudata', malloc)} "
              f"{first['tpudata_GBps'] / last['tpudata_GBps']:.2f}x "
              f"(CPU time {last['tpudata_cpu_s'] / first['tpudata_cpu_s']:.2f}x)", flush=True)
    if "tf_GBps" in rows[FILE_COUNTS[0]]:
        first, last = rows[FILE_COUNTS[0]], rows[FILE_COUNTS[-1]]
        print(f"{label}: 1 -> 256 files slows TensorFlow {first['tf_GBps'] / last['tf_GBps']:.2f}x "
              f"(CPU time {last['tf_cpu_s'] / first['tf_cpu_s']:.2f}x)", flush=True)
    return rows


def bench_filesb(args) -> dict:
    return bench_files(args, "B")


# -- nondet ---------------------------------------------------------------------------------------
class _Cost:
    def __init__(self, slow: int):
        self.slow = slow

    def __call__(self, i):
        seconds = 0.005 if int(i) == self.slow else 0.0002

        def work(x):
            time.sleep(seconds)
            return x

        return Dataset.range(int(i) * 1000, int(i) * 1000 + 60).map(work)


def bench_nondet(args) -> dict:
    out = {}
    for det in (True, False):
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            n = sum(1 for _ in Dataset.range(16).interleave(
                _Cost(0), cycle_length=4, num_parallel_calls=4, deterministic=det))
            best = min(best, time.perf_counter() - t0)
        out["deterministic" if det else "nondeterministic"] = best
        assert n == 16 * 60
    gain = out["deterministic"] / out["nondeterministic"]
    print(f"nondet: one slow sub-dataset among 16 | deterministic {out['deterministic']:.3f} s | "
          f"deterministic=False {out['nondeterministic']:.3f} s | gain {gain:.2f}x", flush=True)
    out["gain"] = gain
    return out


# -- map ------------------------------------------------------------------------------------------
PEAK = textwrap.dedent("""
    import json
    import numpy as np
    from tpudata.dataset import Dataset

    def hwm():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))

    def to_4kb(x):
        return np.full(512, x, np.float64)

    base = hwm()
    it = Dataset.from_tensor_slices(np.arange(200_000)).map(to_4kb).prefetch(1).iterator()
    next(it)
    print(json.dumps({"delta_mb": (hwm() - base) / 1024}))
""")


def _jpegs(n: int) -> list[bytes]:
    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    base = rng.integers(0, 255, (375, 500, 3), dtype=np.uint8)
    for i in range(n):
        img = Image.fromarray(np.roll(base, i, axis=1))
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def decode_resize(data):
    from PIL import Image

    img = Image.open(io.BytesIO(bytes(data)))
    img.draft("RGB", (250, 188))  # as TPU input pipelines do: decode at reduced size when possible
    img = img.convert("RGB").resize((224, 224), Image.BILINEAR)
    return np.asarray(img)


def _busy(fn) -> tuple[float, float]:
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return cpu / wall, wall


def bench_map(args) -> dict:  # noqa: C901 - a list of small measurements
    calls = []

    def f(x):
        calls.append(x)
        return x

    list(Dataset.range(100_000).map(f).take(3))
    seq_calls = len(calls)
    calls.clear()
    list(Dataset.range(100_000).map(f, num_parallel_calls=8).take(3))
    par_calls = len(calls)
    print(f"map: range(100_000).map(f).take(3) calls f {seq_calls} times; with "
          f"num_parallel_calls=8, {par_calls} times (bound: 3 + 8 - 1)", flush=True)
    peak = json.loads(subprocess.run([sys.executable, "-c", PEAK], capture_output=True, text=True,
                                     check=True).stdout)
    print(f"map: first element of from_tensor_slices(range(200_000)).map(to_4kb).prefetch(1): "
          f"peak RSS +{peak['delta_mb']:.1f} MB over the baseline", flush=True)
    images = _jpegs(400)
    out = {"take3_calls": seq_calls, "take3_calls_parallel8": par_calls,
           "first_element_peak_mb": peak["delta_mb"]}
    for n in (None, 2):
        ds = Dataset.from_tensor_slices(np.array(images, dtype=object)).map(decode_resize,
                                                                           num_parallel_calls=n)
        sum(1 for _ in ds.take(20))  # warm-up
        busy, wall = _busy(lambda: sum(1 for _ in ds))
        print(f"map: Pillow decode+resize per element, num_parallel_calls={n}: "
              f"{len(images) / wall:.0f} images/s, {busy:.2f} cores busy", flush=True)
        out[f"pillow_cores_{n}"] = busy
        out[f"pillow_ips_{n}"] = len(images) / wall
    return out


# -- cache ----------------------------------------------------------------------------------------
CACHE = textwrap.dedent("""
    import json, sys
    import numpy as np
    from tpudata.dataset import Dataset

    def hwm():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))

    def block(x):
        return np.full(1 << 17, x, np.float64)  # 1 MiB

    base = hwm()
    n = sum(1 for _ in Dataset.range(1024).map(block).cache(sys.argv[1]))
    print(json.dumps({"n": n, "delta_mb": (hwm() - base) / 1024}))
""")


def bench_cache(args) -> dict:
    d = tempfile.mkdtemp(dir=args.dir)
    try:
        t0 = time.perf_counter()
        r = json.loads(subprocess.run([sys.executable, "-c", CACHE, os.path.join(d, "c")],
                                      capture_output=True, text=True, check=True).stdout)
        wall = time.perf_counter() - t0
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"cache: writing 1 GiB through cache(url): peak RSS +{r['delta_mb']:.1f} MB over the "
          f"baseline ({wall:.1f} s)", flush=True)
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="+", default=["files", "nondet", "map", "cache", "shuffle"],
                    choices=["files", "filesb", "nondet", "map", "cache", "shuffle"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "tpudata-bench"))
    ap.add_argument("--no-tf", action="store_true")
    bench_common.add_child_argument(ap)
    args = ap.parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)
    if args.child:  # one section's tpudata figures in one setting, as JSON
        bench_common.start_child(args.child)
        return bench_common.child_result(_section(args.only[0])(args))
    bench_common.tune_parent()  # this process measures nothing: TF's peers get the settings
    print(f"tpudata {tpudata.__version__}, accelerator {'on' if _accel.native else 'off'}, "
          f"{os.cpu_count()} cpus", flush=True)
    results = {}
    for name in args.only:
        if name in ("files", "filesb"):
            results[name] = _section(name)(args)
            continue
        print(f"{name}:", flush=True)
        ours, _ = bench_common.run_rows(__file__, _child_argv(args, name), rounds=1, relay=True)
        results[name] = {malloc: result for malloc, (result,) in ours.items()}
    print(json.dumps(results, default=str))
    return 0


def _section(name: str):
    if name == "shuffle":
        from bench_shuffle_state import bench_shuffle

        return bench_shuffle
    return globals()[f"bench_{name}"]


def _child_argv(args, name: str) -> list[str]:
    return ["--only", name, "--repeat", str(args.repeat), "--dir", args.dir]


if __name__ == "__main__":
    sys.exit(main())
