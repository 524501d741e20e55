"""Benchmark: ImageNet-layout conversion (1 worker vs all cores) and raw shard-writing speed.

    python benchmarks/bench_convert.py                 # ~2,000 JPEGs, cached in /tmp
    python benchmarks/bench_convert.py --images 500 --no-tf

1. Generates (once, cached under ``--cache``) an ImageNet-layout tree: ``--images`` JPEGs of
   500x375 at quality 90 (about 110 KB each, like ImageNet's average) in 20 synsets, plus 5%
   more as a validation set with ``synset_labels.txt``. The files are read once before timing,
   so every run reads them from the page cache.
2. Converts it with ``tpudata.convert.convert_imagenet`` with 1 worker and with one worker per
   core, in the default mode (image headers parsed, RGB JPEGs stored as they are) and with
   ``verify_images`` (every JPEG fully decoded, as the original's TensorFlow decode does), and
   reports images/s, MB/s and the speed-up. The peer is a single-process TensorFlow conversion
   of the same tree doing what the original tool does per image (decode_jpeg for the size,
   tf.train.Example, tf.io.TFRecordWriter), when TensorFlow is installed.
3. Measures raw shard writing (``tpudata.shards.write_shard``: framing + CRC32C of the file +
   atomic write) of ~110 KB records to local disk against a plain ``file.write`` of the same
   bytes and against ``tf.io.TFRecordWriter``. Target: >= 500 MB/s, never the bottleneck.

Timings depend on the machine's load: the script prints ``os.getloadavg()`` before each part.
"""

from __future__ import annotations

import argparse
import io
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

HEIGHT, WIDTH, QUALITY = 375, 500, 90
SYNSETS = [f"n{1440764 + 1000 * i:08d}" for i in range(20)]


def _jpeg(seed: int) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH]
    planes = [rng.uniform(40, 200) + rng.uniform(-0.3, 0.3) * x + rng.uniform(-0.3, 0.3) * y
              + 30 * np.sin(x / rng.uniform(5, 40) + rng.uniform(0, 6)) * np.cos(y / rng.uniform(5, 40))
              for _ in range(3)]
    arr = np.stack(planes, -1) + rng.normal(0, 26, (HEIGHT, WIDTH, 1)) + rng.normal(0, 9, (HEIGHT, WIDTH, 3))
    buf = io.BytesIO()
    Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=QUALITY)
    return buf.getvalue()


def _write_image(job: tuple[str, int]) -> int:
    path, seed = job
    data = _jpeg(seed)
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def make_tree(root: str, images: int) -> str:
    """The cached ImageNet-layout tree for ``images`` training images (made once)."""
    tree = os.path.join(root, f"imagenet-{images}")
    stamp = os.path.join(tree, ".complete")
    if os.path.exists(stamp):
        return tree
    shutil.rmtree(tree, ignore_errors=True)
    jobs = []
    for i in range(images):
        synset = SYNSETS[i % len(SYNSETS)]
        os.makedirs(os.path.join(tree, "train", synset), exist_ok=True)
        jobs.append((os.path.join(tree, "train", synset, f"{synset}_{i}.JPEG"), i))
    val = max(1, images // 20)
    os.makedirs(os.path.join(tree, "validation"), exist_ok=True)
    for i in range(val):
        jobs.append((os.path.join(tree, "validation", f"ILSVRC2012_val_{i + 1:08d}.JPEG"), 10**6 + i))
    with open(os.path.join(tree, "synset_labels.txt"), "w") as f:
        f.write("".join(SYNSETS[i % len(SYNSETS)] + "\n" for i in range(val)))
    t0 = time.perf_counter()
    with ProcessPoolExecutor() as pool:
        sizes = list(pool.map(_write_image, jobs, chunksize=16))
    print(f"generated {len(jobs)} JPEGs ({np.mean(sizes) / 1e3:.0f} KB average) in "
          f"{time.perf_counter() - t0:.0f} s under {tree}")
    open(stamp, "w").close()
    return tree


def warm(tree: str) -> tuple[int, int]:
    """Read every file once (page cache); returns (files, bytes)."""
    n = total = 0
    for d, _, files in os.walk(tree):
        for name in files:
            with open(os.path.join(d, name), "rb") as f:
                total += len(f.read())
            n += 1
    return n, total


def load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def _warm_worker(_) -> int:
    import PIL.Image  # noqa: F401
    import tpudata.convert.images  # noqa: F401
    import tpudata.shards.writing  # noqa: F401

    time.sleep(0.05)  # keep this worker busy so that the others get tasks too
    return os.getpid()


def warm_pool(workers: int) -> ProcessPoolExecutor:
    """A started process pool (spawn, like tpudata's own) whose workers have imported everything."""
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    pids = set(pool.map(_warm_worker, range(4 * workers)))
    if len(pids) != workers:
        print(f"  (warm-up reached {len(pids)} of {workers} workers)")
    return pool


def bench_tpudata(tree: str, workers: int, verify: bool, shards: int, scratch: str,
                  executor=None):
    from tpudata.convert import convert_imagenet

    out = tempfile.mkdtemp(prefix="bench-out-", dir=scratch)
    try:
        t0 = time.perf_counter()
        results = convert_imagenet(tree, out, num_train_shards=shards,
                                   num_validation_shards=max(1, shards // 8), split_subdirs=True,
                                   workers=workers, executor=executor, verify_images=verify,
                                   resume=False, progress=False)
        seconds = time.perf_counter() - t0
    finally:
        shutil.rmtree(out, ignore_errors=True)
    records = sum(r.manifest.num_records for r in results.values())
    nbytes = sum(r.manifest.total_bytes for r in results.values())
    return records, nbytes, seconds


def bench_tensorflow(tree: str, scratch: str):
    """What the original does per image, in one process: decode for the size, Example, write."""
    import tensorflow as tf

    files = sorted(
        os.path.join(d, f) for d, _, fs in os.walk(os.path.join(tree, "train")) for f in fs
    ) + sorted(os.path.join(tree, "validation", f) for f in os.listdir(os.path.join(tree, "validation")))
    out = tempfile.mkdtemp(prefix="bench-tf-", dir=scratch)

    def feature(v):
        if isinstance(v, int):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))

    tf.io.decode_jpeg(open(files[0], "rb").read(), channels=3)  # warm up TF's kernels
    t0 = time.perf_counter()
    nbytes = 0
    with tf.io.TFRecordWriter(os.path.join(out, "train-00000-of-00001")) as w:
        for path in files:
            data = tf.io.gfile.GFile(path, "rb").read()
            image = tf.io.decode_jpeg(data, channels=3)
            h, w_ = int(image.shape[0]), int(image.shape[1])
            ex = tf.train.Example(features=tf.train.Features(feature={
                "image/height": feature(h), "image/width": feature(w_),
                "image/colorspace": feature(b"RGB"), "image/channels": feature(3),
                "image/class/label": feature(1), "image/class/synset": feature(b"n00000000"),
                "image/format": feature(b"JPEG"),
                "image/filename": feature(os.path.basename(path).encode()),
                "image/encoded": feature(data)}))
            record = ex.SerializeToString()
            nbytes += len(record) + 16
            w.write(record)
    seconds = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    return len(files), nbytes, seconds


def bench_writer(scratch: str, total_mb: int, repeats: int, with_tf: bool):
    from tpudata.shards import write_shard

    rng = np.random.default_rng(0)
    record_size = 110_000
    count = total_mb * 1_000_000 // record_size
    pool = rng.integers(0, 256, record_size * 8, dtype=np.uint8).tobytes()
    records = [pool[(i % 7) * record_size:(i % 7 + 1) * record_size] for i in range(count)]
    nbytes = count * (record_size + 16)
    path = os.path.join(scratch, "bench-writer-00000-of-00001")

    def best(fn) -> float:
        times = []
        for _ in range(repeats):
            if os.path.exists(path):
                os.remove(path)
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        os.remove(path)
        return min(times)

    def plain():
        with open(path, "wb") as f:
            for r in records:
                f.write(r)

    rows = [("tpudata write_shard (frame + file CRC32C + atomic rename)",
             best(lambda: write_shard(path, records)))]
    rows.append(("plain file.write of the record bytes (no framing)", best(plain)))
    if with_tf:
        import tensorflow as tf

        def tf_write():
            with tf.io.TFRecordWriter(path) as w:
                for r in records:
                    w.write(r)

        rows.append(("tf.io.TFRecordWriter", best(tf_write)))
    return nbytes, count, rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=2000, help="training images (default 2000)")
    p.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "tpudata-bench-convert"),
                   help="where the generated tree is kept")
    p.add_argument("--shards", type=int, default=16, help="training shards (default 16)")
    p.add_argument("--workers", type=int, default=None, help="'all cores' (default: every core)")
    p.add_argument("--writer-mb", type=int, default=500, help="MB per shard-writing run")
    p.add_argument("--repeats", type=int, default=3, help="best of N for each timing")
    p.add_argument("--no-tf", action="store_true", help="skip the TensorFlow peers")
    args = p.parse_args(argv)

    from tpudata.shards.executors import default_workers

    cores = args.workers or default_workers()
    with_tf = not args.no_tf
    if with_tf:
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            with_tf = False
    os.makedirs(args.cache, exist_ok=True)
    tree = make_tree(args.cache, args.images)
    files, total = warm(tree)
    print(f"tree: {files} files, {total / 1e6:.0f} MB ({total / files / 1e3:.0f} KB per image); "
          f"{cores} core(s); python {sys.version.split()[0]}")

    print(f"\n== conversion ({load()}) ==")
    print("  (pool start = tpudata's own spawn pool, started inside the timing; warm pool = a "
          "started pool passed as executor)")
    results = {}
    pool = warm_pool(cores) if cores > 1 else None
    try:
        for verify in (False, True):
            mode = "verify_images (full decode)" if verify else "default (header parse)"
            runs = [("1 worker", 1, None)]
            if cores > 1:
                runs += [(f"{cores} workers, pool start", cores, None),
                         (f"{cores} workers, warm pool", cores, pool)]
            for label, workers, executor in runs:
                best = None
                for _ in range(args.repeats):
                    r = bench_tpudata(tree, workers, verify, args.shards, args.cache, executor)
                    best = r if best is None or r[2] < best[2] else best
                n, nbytes, seconds = best
                results[(verify, label)] = n / seconds
                print(f"tpudata {mode:28s} {label:24s}: {n / seconds:6.0f} images/s "
                      f"{nbytes / 1e6 / seconds:6.1f} MB/s  ({seconds:.2f} s)")
            if cores > 1:
                one = results[(verify, "1 worker")]
                print(f"  speed-up over 1 worker: "
                      f"{results[(verify, runs[1][0])] / one:.2f}x with the pool start, "
                      f"{results[(verify, runs[2][0])] / one:.2f}x warm")
    finally:
        if pool is not None:
            pool.shutdown()
    if with_tf:
        n, nbytes, seconds = bench_tensorflow(tree, args.cache)
        tf_rate = n / seconds
        print(f"peer: TensorFlow, one process (the original's per-image work): {tf_rate:8.0f} "
              f"images/s {nbytes / 1e6 / seconds:7.1f} MB/s  ({seconds:.2f} s)")
        for verify in (False, True):
            best_label = f"{cores} workers, warm pool" if cores > 1 else "1 worker"
            print(f"  tpudata {'verify' if verify else 'default'}: 1 worker / TF "
                  f"{results[(verify, '1 worker')] / tf_rate:.1f}x, {best_label} / TF "
                  f"{results[(verify, best_label)] / tf_rate:.1f}x")

    print(f"\n== shard writing to {args.cache} ({load()}) ==")
    nbytes, count, rows = bench_writer(args.cache, args.writer_mb, args.repeats, with_tf)
    base = rows[0][1]
    for name, seconds in rows:
        print(f"{name:58s} {nbytes / 1e6 / seconds:8.0f} MB/s  ({count} records of 110 KB, "
              f"{seconds:.3f} s){'' if seconds == base else f'  tpudata is {seconds / base:.2f}x'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
