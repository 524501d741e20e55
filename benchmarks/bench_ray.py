"""tpudata's Ray Data datasource against ``ray.data.read_tfrecords``, per CPU-second, same run.

Data (written once into --dir by tpudata and reused; both readers get the very same files):
  A: 4 shards of ~64 MB: Examples of an image-like ``image`` (random bytes, 80-120 KB) and an
     int64 ``label``, ~2,600 records in all.
  B: 4 shards of 40,000 small Examples (~100 bytes): ``x`` 16 floats and an int64 ``y``.

Contenders, each in its own process (``ray.init(num_cpus=2, include_dashboard=False)``, local):
  ray      ``ray.data.read_tfrecords(files, override_num_blocks=len(files))``: Ray's own reader
           (Ray 2.60 reads the framing in Python, parses each record with TensorFlow's
           ``tf.train.Example`` protobuf and makes one Arrow table per record; it has no tfx-bsl
           path any more, and skips the CRCs). One block per file: left at its default, Ray
           cuts each file's output into 50 slices (to reach 200 blocks), which costs it 1.5-1.9x
           the CPU on A. It runs under --ray-python (default ``TF_PYTHON``, else this
           interpreter), an environment with Ray and TensorFlow.
  tpudata  ``tpudata.ray.read_tfrecords(files, features=SPEC)``: CRCs checked, each 8 MiB read
           buffer parsed whole into one block of columns, no TensorFlow, one read task per file
           (its default); this interpreter (with Ray).
  floor    no reading at all: read tasks (one per file) that hand Ray ready Arrow blocks of the
           same shape as tpudata's (8 MiB, same rows and columns, made once per worker process):
           what Ray Data itself costs to move the rows to the driver and into numpy batches. No
           reader can go below it; Ray's CPU-s per GB over it bounds the ratio a reader can show.
Both read every row with ``ds.iter_batches(batch_size=128 (A) / 1024 (B), batch_format="numpy")``
and yield the same columns (``image``/``label``, ``x``/``y``); the row count and the sum of the
labels are checked equal. Each child runs a warm-up epoch (starts Ray's workers, imports what the
reader imports: TensorFlow in Ray's workers; the object store's pages touched once), then
--repeat timed epochs, each building its Dataset afresh.

CPU-seconds: Ray's read tasks run in worker processes, so ``getrusage(RUSAGE_CHILDREN)`` would not
see them (they are not waited for). Each child sums, with psutil, user+system CPU time (and the
reaped children's, so a process that exits mid-epoch still counts) of itself and every descendant
process (raylet, GCS, the ``ray::`` workers, agents) before and after an epoch: the whole process
tree's CPU, Ray's idle background included (the same for both contenders), and separately the
driver's own. Printed: rows/s, MB/s (file bytes / wall), CPU-s per GB of file bytes, and the ratio
of the rates per CPU-second (Ray's CPU-s per GB / tpudata's), per workload and for both together.

    TF_PYTHON=/path/to/tf-venv/bin/python python benchmarks/bench_ray.py [--repeat 3]
    python benchmarks/bench_ray.py --workload B --ray-python /work/tfvenv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

SHARDS = 4
BATCH = {"A": 128, "B": 1024}
LABEL = {"A": "label", "B": "y"}


def make_a(path: str, target_bytes: int, seed: int) -> None:
    import tpudata

    rng = np.random.default_rng(seed)
    written = 0
    with tpudata.TFRecordWriter(path) as w:
        while written < target_bytes:
            rec = tpudata.encode_example({"image": rng.bytes(int(rng.integers(80_000, 120_001))),
                                          "label": int(rng.integers(0, 1000))})
            w.write(rec)
            written += len(rec) + 16


def make_b(path: str, n: int, seed: int) -> None:
    import tpudata

    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((n, 16)).astype(np.float32)
    ys = rng.integers(0, 10, n)
    with tpudata.TFRecordWriter(path) as w:
        w.write_many(tpudata.encode_example({"x": xs[i], "y": int(ys[i])}) for i in range(n))


def shards(root: str, workload: str) -> list[str]:
    os.makedirs(root, exist_ok=True)
    files = []
    for i in range(SHARDS):
        path = os.path.join(root, f"ray_{workload.lower()}-{i:02d}-of-{SHARDS:02d}.tfrecords")
        if not os.path.exists(path):
            tmp = path + ".tmp"
            (make_a(tmp, 64 << 20, i) if workload == "A" else make_b(tmp, 40_000, i))
            os.replace(tmp, path)
        files.append(path)
    return files


# -- the child: one contender, one workload --------------------------------------------------------

def tree_cpu() -> tuple[float, float]:
    """(CPU-s of this process and all its descendants, CPU-s of this process alone)."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for p in [me] + me.children(recursive=True):
        try:
            t = p.cpu_times()
        except psutil.Error:  # exited since the listing
            continue
        cpu = t.user + t.system + t.children_user + t.children_system
        total += cpu
        if p.pid == me.pid:
            own = cpu
    return total, own


_BLOCKS: dict = {}
_ROWS: dict = {}  # file -> records, counted in the warm-up epoch (not timed)


def _floor_blocks(workload: str, rows: int, nbytes: int):
    """Ready Arrow blocks of ~8 MiB holding ``rows`` rows of ``nbytes`` file bytes in all."""
    import pyarrow as pa
    from ray.data.block import BlockAccessor

    per_block = max(1, rows * (8 << 20) // nbytes)
    for start in range(0, rows, per_block):
        n = min(per_block, rows - start)
        key = (workload, n, nbytes // rows)
        if key not in _BLOCKS:
            rng = np.random.default_rng(n)
            if workload == "A":
                size = nbytes // rows - 16
                ends = np.arange(n + 1, dtype=np.int32) * size
                image = pa.Array.from_buffers(pa.binary(), n, [
                    None, pa.py_buffer(ends), pa.py_buffer(rng.bytes(n * size))])
                cols = {"image": image, "label": np.zeros(n, np.int64)}
            else:
                cols = {"x": rng.standard_normal((n, 16)).astype(np.float32),
                        "y": np.zeros(n, np.int64)}
            _BLOCKS[key] = BlockAccessor.batch_to_block(cols)
        yield _BLOCKS[key]


def floor_dataset(files: list[str], workload: str):
    import ray.data
    from ray.data import Datasource, ReadTask
    from ray.data.block import BlockMetadata

    rows = [_ROWS.get(f) or _ROWS.setdefault(f, sum(1 for _ in _frames(f))) for f in files]
    sizes = [os.path.getsize(f) for f in files]

    class Floor(Datasource):
        def estimate_inmemory_data_size(self):
            return sum(sizes)

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            meta = BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None, input_files=None)
            return [ReadTask(lambda r=r, b=b: _floor_blocks(workload, r, b), meta)
                    for r, b in zip(rows, sizes)]

    return ray.data.read_datasource(Floor(), override_num_blocks=len(files))


def _frames(path: str):
    """The record lengths of a TFRecord file, from its framing (no CRC check, no parsing)."""
    import struct

    with open(path, "rb") as f:
        while head := f.read(12):
            (n,) = struct.unpack("<Q", head[:8])
            f.seek(n + 4, 1)
            yield n


def dataset(contender: str, files: list[str], workload: str):
    if contender == "floor":
        return floor_dataset(files, workload)
    if contender == "ray":
        import ray.data

        return ray.data.read_tfrecords(files, override_num_blocks=len(files))
    from tpudata import FixedLenFeature
    from tpudata.ray import read_tfrecords

    spec = ({"image": FixedLenFeature([], bytes), "label": FixedLenFeature([], np.int64)}
            if workload == "A" else
            {"x": FixedLenFeature([16], np.float32), "y": FixedLenFeature([], np.int64)})
    return read_tfrecords(files, features=spec)


def epoch(contender: str, files: list[str], workload: str) -> dict:
    rows = 0
    label_sum = 0
    columns = None
    for batch in dataset(contender, files, workload).iter_batches(
            batch_size=BATCH[workload], batch_format="numpy"):
        n = len(batch[LABEL[workload]])
        rows += n
        label_sum += int(np.asarray(batch[LABEL[workload]], np.int64).sum())
        columns = columns or sorted(batch)
    return {"rows": rows, "label_sum": label_sum, "columns": columns}


def child(contender: str, workload: str, files: list[str], repeat: int) -> None:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, configure_logging=False)
    try:
        import ray.data

        ray.data.DataContext.get_current().enable_progress_bars = False
        epoch(contender, files, workload)  # warm-up: workers started, their imports done
        for _ in range(repeat):
            cpu0, own0 = tree_cpu()
            t0 = time.perf_counter()
            out = epoch(contender, files, workload)
            wall = time.perf_counter() - t0
            cpu1, own1 = tree_cpu()
            out.update(wall=wall, cpu=cpu1 - cpu0, driver_cpu=own1 - own0)
            print("RESULT " + json.dumps(out), flush=True)
    finally:
        ray.shutdown()


# -- the parent ------------------------------------------------------------------------------------

def run_child(python: str, contender: str, workload: str, files: list[str], repeat: int) -> list:
    cmd = [python, os.path.abspath(__file__), "--child", contender, "--workload", workload,
           "--repeat", str(repeat), "--files", *files]
    env = dict(os.environ, RAY_DATA_DISABLE_PROGRESS_BARS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    results = [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or len(results) != repeat:
        sys.exit(f"{contender} {workload} failed ({python}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return results


def peer_versions(python: str) -> str:
    code = ("import importlib.metadata as m\n"
            "def v(*names):\n"
            "    for n in names:\n"
            "        try: return m.version(n)\n"
            "        except m.PackageNotFoundError: pass\n"
            "print(f'Ray {v(\"ray\")}, TensorFlow {v(\"tensorflow\", \"tensorflow-cpu\")}, "
            "tfx-bsl {v(\"tfx-bsl\")}')")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return out.stdout.strip() or out.stderr.strip()[-200:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", nargs="+", default=["A", "B"], choices=["A", "B"])
    ap.add_argument("--repeat", type=int, default=3, help="timed epochs per contender (after a warm-up)")
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "tpudata-bench"))
    ap.add_argument("--ray-python", default=os.environ.get("TF_PYTHON") or sys.executable,
                    help="interpreter with Ray and TensorFlow for ray.data.read_tfrecords")
    ap.add_argument("--no-floor", action="store_true", help="skip the floor contender")
    ap.add_argument("--child", choices=["ray", "tpudata", "floor"], help=argparse.SUPPRESS)
    ap.add_argument("--files", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.workload[0], args.files, args.repeat)

    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; Ray's reader under "
          f"{args.ray_python} ({peer_versions(args.ray_python)}); best (least CPU) of "
          f"{args.repeat} epochs after a warm-up\n")
    print(f"{'workload':9} {'contender':9} {'rows/s':>10} {'MB/s':>8} {'CPU-s/GB':>9} "
          f"{'driver':>7} {'cores':>6}")
    totals = {"ray": 0.0, "tpudata": 0.0, "floor": 0.0}
    contenders = ("ray", "tpudata") + (() if args.no_floor else ("floor",))
    for workload in args.workload:
        files = shards(args.dir, workload)
        nbytes = sum(os.path.getsize(f) for f in files)
        best = {}
        for contender in contenders:
            python = args.ray_python if contender == "ray" else sys.executable
            results = run_child(python, contender, workload, files, args.repeat)
            best[contender] = r = min(results, key=lambda r: r["cpu"])
            totals[contender] += r["cpu"]
            cpus = ", ".join(f"{x['cpu'] / nbytes * 1e9:.2f}" for x in results)
            print(f"{workload:9} {contender:9} {r['rows'] / r['wall']:10,.0f} "
                  f"{nbytes / r['wall'] / 1e6:8.0f} {r['cpu'] / nbytes * 1e9:9.2f} "
                  f"{r['driver_cpu'] / r['cpu']:6.0%} {r['cpu'] / r['wall']:6.2f}   "
                  f"(CPU-s/GB of each epoch: {cpus})")
            if r["rows"] != best["ray"]["rows"]:
                sys.exit(f"{contender} gave {r['rows']} rows, Ray's reader {best['ray']['rows']}")
        ray_r, tpu_r = best["ray"], best["tpudata"]
        if ray_r["label_sum"] != tpu_r["label_sum"]:
            sys.exit(f"the readers disagree: ray {ray_r}, tpudata {tpu_r}")
        bound = (f"; Ray's reader over the floor: {ray_r['cpu'] / best['floor']['cpu']:.1f}x, "
                 f"tpudata over it: {tpu_r['cpu'] / best['floor']['cpu']:.2f}x" if "floor" in best else "")
        print(f"{workload:9} {'ratio':9} per CPU-second {ray_r['cpu'] / tpu_r['cpu']:.1f}x, "
              f"wall {ray_r['wall'] / tpu_r['wall']:.1f}x{bound}\n{'':20}{tpu_r['rows']:,} rows, "
              f"{nbytes / 1e6:.0f} MB, columns {tpu_r['columns']} (same rows, same label sum)\n")
    if len(args.workload) > 1:
        print(f"all       ratio per CPU-second {totals['ray'] / totals['tpudata']:.1f}x "
              f"(the workloads' CPU-s together)")


if __name__ == "__main__":
    main()
