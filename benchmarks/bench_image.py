"""ResNet input pipelines: tpudata.image against tensorflow/tpu's tf.data + resnet_preprocessing, same run.

Data: --images photo-like JPEGs (~500x375, ~100 KB, q90) as imagenet_to_gcs Examples in 8 shards.
Both sides do the same work: tensorflow/tpu's current ``resnet_preprocessing.py`` (2023: train
decodes the whole image then crops; eval center crop of ``size / (size + round(size / 7))``;
output 0..255 float32, normalised by the model) and tpudata's preset with ``output="0-255"``.
Pipelines (train and eval), batches of 128, drop_remainder:

  tf.data   list_files -> interleave(TFRecordDataset, AUTOTUNE) -> shuffle(1024) ->
            map(parse_single_example + resnet_preprocessing.preprocess_image, CALLS) ->
            batch(128) -> prefetch(AUTOTUNE)                      (TensorFlow in a subprocess)
            twice: CALLS = AUTOTUNE and CALLS = 8 (8 beat AUTOTUNE on a 2-core VM); the
            ratios are against the faster of the two
  tpudata   list_files -> interleave -> shuffle(1024) -> parse -> map(resnet_preprocess, 2 threads)
  per-elem  -> batch(128, drop_remainder) -> prefetch: the form a port writes first. The
            map-and-batch fusion runs the preset calls as one batch call (tpudata.dataset's
            optimisation pass); "unfused" turns it off (Options.experimental_optimization)
  tpudata   ... -> parse -> batch(128, drop_remainder) -> map(resnet_preprocess_batch, AUTOTUNE) -> prefetch
  batch     (one GIL-free C call per batch, one thread per core, written into the batch array; two
            batches in flight, so reading/parsing the next batch overlaps the kernel)

Each tpudata contender runs in two processes per round (benchmarks/bench_common.py): as a user gets
it (glibc malloc as it comes) first, then tuned (``tpudata.tune_malloc()``); TensorFlow runs with
the tuned settings; the decode reference and --profile run in the (tuned) parent.

Prints images/s (best epoch; --rounds alternate the contenders, each round a warm-up + --repeat epochs), CPU ms per image (process CPU time /
images), core utilisation (CPU time / wall / cores), images/s per busy core, and the decode-only
reference (full decode of every image with the chosen decoder, one thread). The machine may be
shared: compare the ratios measured in one run.

    python benchmarks/bench_image.py [--images 2000] [--rounds 2] [--repeat 2] [--tf-python /path/to/python]
                                     [--mode train eval] [--profile] [--quiet-wait 120]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_common  # noqa: E402
import numpy as np  # noqa: E402

import tpudata  # noqa: E402
import tpudata.image as ti  # noqa: E402
from tpudata import AUTOTUNE, Dataset, FixedLenFeature, TFRecordDataset  # noqa: E402
from tpudata.dataset import Options  # noqa: E402
from tpudata.image.synthetic import photo_like  # noqa: E402

SHARDS = 8
BATCH = 128
SIZE = 224
OUTPUT = "0-255"  # tensorflow/tpu's output since June 2018 (the model normalises)
SPEC = {"image/encoded": FixedLenFeature([], bytes), "image/class/label": FixedLenFeature([], np.int64)}


def _encode_one(i: int) -> bytes:
    """Example ``i`` (its JPEG drawn from its own seed, so any process makes the same bytes)."""
    from PIL import Image

    rng = np.random.default_rng([0, i])
    h, w = (375, 500) if rng.random() < 0.7 else (500, 375)
    h += int(rng.integers(-40, 41))
    w += int(rng.integers(-40, 41))
    buf = io.BytesIO()
    Image.fromarray(photo_like(rng, h, w)).save(buf, "JPEG", quality=90)
    ex = {"image/encoded": buf.getvalue(), "image/format": b"JPEG", "image/class/label": int(i % 1000) + 1,
          "image/height": h, "image/width": w, "image/channels": 3, "image/colorspace": b"RGB",
          "image/class/synset": b"n01440764", "image/filename": f"img_{i}.JPEG".encode()}
    return tpudata.encode_example(ex)


def make_shards(directory: str, n: int, shards: int = SHARDS, processes: int = 1) -> str:
    """``n`` photo-like JPEG Examples, round-robin over ``shards`` files (``processes`` encode)."""
    os.makedirs(directory, exist_ok=True)
    pattern = os.path.join(directory, f"train-*-of-{shards:05d}")
    paths = [os.path.join(directory, f"train-{s:05d}-of-{shards:05d}") for s in range(shards)]
    stamp = os.path.join(directory, f"done-{n}-{shards}")
    if os.path.exists(stamp):
        return pattern
    from tqdm import tqdm

    writers = [tpudata.TFRecordWriter(p) for p in paths]
    if processes > 1:
        import multiprocessing

        pool = multiprocessing.get_context("spawn").Pool(processes)
        examples = pool.imap(_encode_one, range(n), chunksize=16)
    else:
        pool, examples = None, map(_encode_one, range(n))
    for i, record in enumerate(tqdm(examples, total=n, desc="writing JPEG shards", unit="img",
                                    disable=not sys.stderr.isatty())):
        writers[i % shards].write(record)
    if pool is not None:
        pool.close()
        pool.join()
    for w_ in writers:
        w_.close()
    open(stamp, "w").close()
    return pattern


def _source(pattern: str):
    return (Dataset.list_files(pattern, shuffle=False)
            .interleave(lambda f: TFRecordDataset(f), cycle_length=SHARDS, num_parallel_calls=2)
            .shuffle(1024, seed=0)
            .parse(SPEC))


def tpudata_per_element(pattern: str, train: bool, threads: int, fused: bool = True):
    def prep(features, index):
        image = ti.resnet_preprocess(features["image/encoded"], train, SIZE, seed=(0, int(index)), output=OUTPUT)
        return image, features["image/class/label"] - 1

    ds = (Dataset.zip((_source(pattern), Dataset.range(1 << 62)))
          .map(prep, num_parallel_calls=threads)
          .batch(BATCH, drop_remainder=True)
          .prefetch(2))
    if not fused:
        options = Options()
        options.experimental_optimization.map_and_batch_fusion = False
        ds = ds.with_options(options)
    return ds


def tpudata_batch(pattern: str, train: bool, threads: int):
    def prep(features, step):
        images = ti.resnet_preprocess_batch(features["image/encoded"], train, SIZE, seed=(0, int(step)),
                                            num_threads=threads, output=OUTPUT)
        return images, features["image/class/label"] - 1

    return (Dataset.zip((_source(pattern).batch(BATCH, drop_remainder=True), Dataset.range(1 << 62)))
            .map(prep, num_parallel_calls=AUTOTUNE)
            .prefetch(2))


def profile(pattern: str, train: bool, threads: int) -> dict:
    """Where the time goes: CPU per image of each stage alone, then the pipeline's timeline (when
    the first kernel call starts, i.e. the shuffle fill, and how much of the epoch has a kernel call
    running)."""
    from tpudata.image.presets import _windows

    t0, c0 = time.perf_counter(), _cpu()
    batches = []
    with _source(pattern).batch(BATCH, drop_remainder=True).iterator() as it:
        for f in it:
            batches.append(f["image/encoded"])
    n = BATCH * len(batches)
    out = {"source_cpu_ms": (_cpu() - c0) / n * 1e3, "source_wall_ms": (time.perf_counter() - t0) / n * 1e3}
    c0 = time.thread_time()
    wins = [_windows(b, train, SIZE, (0, i), "resnet") for i, b in enumerate(batches)]
    out["windows_cpu_ms"] = (time.thread_time() - c0) / n * 1e3
    for k in (1, threads):
        t0, c0 = time.perf_counter(), _cpu()
        for b, (crops, flips) in zip(batches, wins):
            ti.preprocess_batch(b, crops, flips, SIZE, num_threads=k, output=OUTPUT)
        out[f"kernel{k}_cpu_ms"] = (_cpu() - c0) / n * 1e3
        out[f"kernel{k}_wall_ms"] = (time.perf_counter() - t0) / n * 1e3
    print(f"  profile: source (read+parse+shuffle+batch) {out['source_cpu_ms']:.3f} CPU ms/img; crop windows "
          f"{out['windows_cpu_ms']:.3f}; kernel {out['kernel1_cpu_ms']:.3f} CPU ms/img on 1 thread, "
          f"{out[f'kernel{threads}_wall_ms']:.3f} wall ms/img on {threads}", flush=True)
    for label, calls in (("map(AUTOTUNE)", AUTOTUNE), ("map (sequential)", None)):
        res = _timeline(pattern, train, threads, calls)
        out[label] = res
        print(f"  profile: {label}: epoch {res['epoch_s']:.2f} s, first kernel call at {res['first_kernel_s']:.2f} s "
              f"(shuffle fill), a kernel call running {res['kernel_running'] * 100:.0f}% of the epoch, cores busy "
              f"{res['core_util'] * 100:.0f}%", flush=True)
    return out


def _timeline(pattern: str, train: bool, threads: int, calls) -> dict:
    spans = []

    def prep(features, step):
        a = time.perf_counter()
        images = ti.resnet_preprocess_batch(features["image/encoded"], train, SIZE, seed=(0, int(step)),
                                            num_threads=threads, output=OUTPUT)
        spans.append((a, time.perf_counter()))
        return images, features["image/class/label"] - 1

    ds = (Dataset.zip((_source(pattern).batch(BATCH, drop_remainder=True), Dataset.range(1 << 62)))
          .map(prep, num_parallel_calls=calls).prefetch(2))
    t0, c0 = time.perf_counter(), _cpu()
    with ds.iterator() as it:
        for _ in it:
            pass
    wall = time.perf_counter() - t0
    busy, end = 0.0, t0
    for a, b in sorted(spans):  # union of the kernel calls' intervals
        busy += max(0.0, b - max(a, end))
        end = max(end, b)
    return {"first_kernel_s": min(a for a, _ in spans) - t0, "kernel_running": busy / wall, "epoch_s": wall,
            "core_util": (_cpu() - c0) / wall / (os.cpu_count() or 1)}


def _idle_fraction(seconds: float = 1.0) -> float:
    """The machine's idle share over ``seconds`` (Linux /proc/stat; 1.0 elsewhere)."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v)

    try:
        a = snap()
        time.sleep(seconds)
        b = snap()
    except OSError:
        return 1.0
    return (b[0] - a[0]) / max(1, b[1] - a[1])


def wait_for_quiet(limit_s: float, idle: float = 0.85) -> None:
    """On a shared machine: wait (up to ``limit_s``) until other jobs leave the cores idle."""
    end = time.monotonic() + limit_s
    while limit_s > 0 and time.monotonic() < end and _idle_fraction() < idle:
        pass


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_epochs(make, repeat: int) -> dict:
    times, cpus = [], []
    for epoch in range(repeat + 1):
        ds = make()
        t0, c0, n = time.perf_counter(), _cpu(), 0
        with ds.iterator() as it:
            for images, labels in it:
                assert images.shape[1:] == (SIZE, SIZE, 3)
                n += len(images)
        if epoch:
            times.append(time.perf_counter() - t0)
            cpus.append(_cpu() - c0)
    return {"times": times, "cpus": cpus, "n": n}


TF_SCRIPT = textwrap.dedent("""
    import json, os, resource, sys, time
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf
    pattern, train, repeat, size = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4])
    calls = tf.data.AUTOTUNE if sys.argv[5] == "autotune" else int(sys.argv[5])
    CROP_FRACTION = 0.875

    # tensorflow/tpu models/official/resnet/resnet_preprocessing.py (2023, the newest), with
    # tf.compat.v1 spelled out; preprocess_image(image_bytes, is_training, False, size)
    def distorted_bounding_box_crop(image_bytes, bbox, min_object_covered, aspect_ratio_range,
                                    area_range, max_attempts):
        image = tf.io.decode_image(image_bytes, channels=3, expand_animations=False)
        shape = tf.shape(image)
        begin, bsize, _ = tf.image.sample_distorted_bounding_box(
            shape, bounding_boxes=bbox, min_object_covered=min_object_covered,
            aspect_ratio_range=aspect_ratio_range, area_range=area_range,
            max_attempts=max_attempts, use_image_if_no_bounding_boxes=True)
        offset_y, offset_x, _ = tf.unstack(begin)
        target_height, target_width, _ = tf.unstack(bsize)
        return tf.image.crop_to_bounding_box(image, offset_y, offset_x, target_height, target_width)

    def decode_and_center_crop(image_bytes):
        shape = tf.image.extract_jpeg_shape(image_bytes)
        h, w = shape[0], shape[1]
        crop_padding = round(size * (1 / CROP_FRACTION - 1))
        crop = tf.cast(((size / (size + crop_padding)) * tf.cast(tf.minimum(h, w), tf.float32)), tf.int32)
        oy, ox = ((h - crop) + 1) // 2, ((w - crop) + 1) // 2
        image = tf.image.decode_and_crop_jpeg(image_bytes, tf.stack([oy, ox, crop, crop]), channels=3)
        return tf.compat.v1.image.resize_bicubic([image], [size, size])[0]

    def decode_and_random_crop(image_bytes):
        bbox = tf.constant([0.0, 0.0, 1.0, 1.0], dtype=tf.float32, shape=[1, 1, 4])
        image = distorted_bounding_box_crop(image_bytes, bbox, 0.1, (3. / 4, 4. / 3.), (0.08, 1.0), 10)
        original_shape = tf.image.extract_jpeg_shape(image_bytes)
        bad = tf.reduce_sum(tf.cast(tf.equal(original_shape, tf.shape(image)), tf.int32)) >= 3
        return tf.cond(bad, lambda: decode_and_center_crop(image_bytes),
                       lambda: tf.compat.v1.image.resize_bicubic([image], [size, size])[0])

    def preprocess(image_bytes):
        if train:
            image = tf.image.random_flip_left_right(decode_and_random_crop(image_bytes))
        else:
            image = decode_and_center_crop(image_bytes)
        image = tf.reshape(image, [size, size, 3])
        return tf.image.convert_image_dtype(image, dtype=tf.float32)  # 0..255: the model normalises

    # tensorflow/tpu imagenet_input.py, with TF2's AUTOTUNE in place of contrib ops
    keys = {"image/encoded": tf.io.FixedLenFeature((), tf.string, ""),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64, -1)}

    def parser(value):
        parsed = tf.io.parse_single_example(value, keys)
        return preprocess(parsed["image/encoded"]), tf.cast(parsed["image/class/label"], tf.int32) - 1

    AUTO = tf.data.AUTOTUNE
    ds = (tf.data.Dataset.list_files(pattern, shuffle=False)
          .interleave(lambda f: tf.data.TFRecordDataset(f, buffer_size=8 << 20), cycle_length=8,
                      num_parallel_calls=AUTO)
          .shuffle(1024, seed=0)
          .map(parser, num_parallel_calls=calls)
          .batch(128, drop_remainder=True)
          .prefetch(AUTO))

    def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    times, cpus = [], []
    for epoch in range(repeat + 1):
        t0, c0, n = time.perf_counter(), cpu(), 0
        for images, labels in ds:
            n += int(images.shape[0])
        if epoch:
            times.append(time.perf_counter() - t0)
            cpus.append(cpu() - c0)
    print(json.dumps({"times": times, "cpus": cpus, "n": n, "version": tf.__version__}))
""")


TF_CONFIGS = {"tf": "autotune", "tf8": "8"}  # map(num_parallel_calls=AUTOTUNE) and =8


def run_tf(python: str, pattern: str, train: bool, repeat: int, calls: str) -> dict | None:
    proc = subprocess.run([python, "-c", TF_SCRIPT, pattern, "1" if train else "0", str(repeat), str(SIZE), calls],
                          capture_output=True, text=True, check=False, env=bench_common.peer_environ())
    if proc.returncode:
        print(proc.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def decode_reference(pattern: str, limit: int = 300) -> tuple[float, float, float]:
    """CPU ms per full decode of one image, one thread (the physical reference; CPU time, so a
    busy machine does not inflate it): tpudata's decode_jpeg, the same with libjpeg-turbo's own
    Huffman decoder (NaN without the kernel), Pillow."""
    images = []
    for path in sorted(tpudata.storage.glob(pattern)):
        for rec in tpudata.read_records(path):
            images.append(tpudata.decode_example(rec)["image/encoded"][0])
            if len(images) >= limit:
                break
    from PIL import Image

    def pillow(im):
        return np.asarray(Image.open(io.BytesIO(im)).convert("RGB"))

    kernel = ti._backend.kernel()

    def libjpeg_huffman(im):
        before = kernel._set_fast_huffman(False)
        try:
            return ti.decode_jpeg(im, channels=3)
        finally:
            kernel._set_fast_huffman(before)

    out = []
    for fn in (lambda im: ti.decode_jpeg(im, channels=3), libjpeg_huffman if kernel else None, pillow):
        if fn is None:
            out.append(float("nan"))
            continue
        best = float("inf")
        for _ in range(3):
            t0 = time.thread_time()
            for im in images:
                fn(im)
            best = min(best, time.thread_time() - t0)
        out.append(best / len(images) * 1e3)
    return out[0], out[1], out[2]


def summarise(name: str, res: dict, cores: int) -> dict:
    best = int(np.argmin(res["times"]))
    wall, cpu, n = res["times"][best], res["cpus"][best], res["n"]
    util = cpu / wall / cores
    row = {"img_s": n / wall, "cpu_ms_per_img": cpu / n * 1e3, "core_util": util,
           "img_s_per_busy_core": n / cpu}
    print(f"  {name:<52} {row['img_s']:8.0f} img/s  {row['cpu_ms_per_img']:6.2f} CPU ms/img  "
          f"cores busy {util * 100:5.1f}%  {row['img_s_per_busy_core']:6.0f} img/s per busy core", flush=True)
    return row


def _merge(results: list[dict]) -> dict:
    return {"times": [t for r in results for t in r["times"]], "cpus": [c for r in results for c in r["cpus"]],
            "n": results[0]["n"]}


def _fusion_option() -> bool:
    """Whether this tpudata can turn the map-and-batch fusion off (for the "unfused" row)."""
    try:
        Options().experimental_optimization.map_and_batch_fusion = False
    except AttributeError:
        return False
    return True


TPUDATA_CONTENDERS = {"tpudata_batch": "tpudata batch-level op", "tpudata_map": "tpudata per-element map",
                      "tpudata_map_unfused": "tpudata per-element, unfused"}


def run_tpudata_round(pattern: str, train: bool, args) -> dict:
    """One round of the tpudata contenders (in a child process: one malloc setting)."""
    out = {}
    wait_for_quiet(args.quiet_wait)
    out["tpudata_batch"] = run_epochs(lambda: tpudata_batch(pattern, train, args.threads), args.repeat)
    wait_for_quiet(args.quiet_wait)
    out["tpudata_map"] = run_epochs(lambda: tpudata_per_element(pattern, train, args.threads), 1)
    if _fusion_option():
        wait_for_quiet(args.quiet_wait)
        out["tpudata_map_unfused"] = run_epochs(
            lambda: tpudata_per_element(pattern, train, args.threads, fused=False), 1)
    return out


def _default_tf_python() -> str | None:
    import importlib.util

    if importlib.util.find_spec("tensorflow") is not None:
        return sys.executable
    return os.environ.get("TPUDATA_TF_PYTHON")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=2, help="timed epochs per round (after a warm-up)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds alternating tpudata and tf.data")
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "tpudata-bench", "images"))
    ap.add_argument("--tf-python", default=_default_tf_python(),
                    help="a Python with TensorFlow for the peer (default: this one, or $TPUDATA_TF_PYTHON)")
    ap.add_argument("--mode", nargs="+", default=["train", "eval"], choices=["train", "eval"])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--profile", action="store_true", help="also print where the batch pipeline's time goes")
    ap.add_argument("--quiet-wait", type=float, default=0.0, metavar="S",
                    help="shared machine: before each contender, wait up to S seconds for idle cores")
    bench_common.add_child_argument(ap)
    args = ap.parse_args(argv)
    cores = os.cpu_count() or 1
    pattern = make_shards(args.dir, args.images)
    if args.child:  # one round of the tpudata contenders of one mode in one setting, as JSON
        bench_common.start_child(args.child)
        return bench_common.child_result(run_tpudata_round(pattern, args.mode[0] == "train", args))
    bench_common.tune_parent()  # measures no tpudata row: TF's peers get the tuned settings
    kernel = ti._backend.kernel() is not None
    print(f"tpudata {tpudata.__version__}, image kernel {'on (libjpeg-turbo)' if kernel else 'off (Pillow)'}, "
          f"{cores} cpus, {args.images} JPEGs in {SHARDS} shards, batch {BATCH}, {SIZE}x{SIZE}, "
          f"{args.rounds} rounds x {args.repeat} epochs; load average {os.getloadavg()[0]:.1f}")
    dec, lib, pil = decode_reference(pattern)
    print(f"decode-only reference (full decode, 1 thread, CPU time): {dec:.2f} ms/img = {1e3 / dec:.0f} img/s "
          f"per core (tpudata.image.decode_jpeg); with libjpeg-turbo's own Huffman decoder {lib:.2f} ms/img; "
          f"Pillow {pil:.2f} ms/img")
    results = {"decode_ms": dec, "libjpeg_huffman_decode_ms": lib, "pillow_decode_ms": pil}
    for mode in args.mode:
        train = mode == "train"
        print(f"{mode}:")
        # the machine may be shared: alternate the contenders over --rounds and keep each one's best
        def peer(rnd: int) -> dict:
            out = {}
            for key, calls in TF_CONFIGS.items():
                if args.tf_python:
                    wait_for_quiet(args.quiet_wait)
                    out[key] = run_tf(args.tf_python, pattern, train, args.repeat, calls)
            return out

        child = ["--images", str(args.images), "--repeat", str(args.repeat), "--dir", args.dir,
                 "--mode", mode, "--threads", str(args.threads), "--quiet-wait", str(args.quiet_wait)]
        ours, theirs = bench_common.run_rows(__file__, child, rounds=args.rounds, peer=peer)
        runs: dict = {}
        for k in TPUDATA_CONTENDERS:
            for malloc, per_round in ours.items():  # as a user gets it first, then tuned
                runs[f"{k}_{malloc}"] = [r[k] for r in per_round if k in r]
        version = None
        for key in TF_CONFIGS:
            runs[key] = [p[key] for p in theirs if p.get(key)]
            version = runs[key][-1]["version"] if runs[key] else version
        names = {f"{k}_{malloc}": bench_common.label(name, malloc)
                 for k, name in TPUDATA_CONTENDERS.items() for malloc in bench_common.SETTINGS}
        names.update(tf=f"tf.data map(AUTOTUNE) (TF {version})", tf8=f"tf.data map(8) (TF {version})")
        rows = {k: summarise(names[k], _merge(v), cores) for k, v in runs.items() if v}
        peers = [k for k in TF_CONFIGS if k in rows]
        if peers:
            best = max(peers, key=lambda k: rows[k]["img_s"])  # tf.data's faster configuration
            rows["tf_best"] = best
            print(f"  ratios against tf.data's faster configuration ({names[best]}):", flush=True)
            for k in names:
                if k not in rows or k in TF_CONFIGS:
                    continue
                rows[k]["x_tf"] = rows[k]["img_s"] / rows[best]["img_s"]
                rows[k]["cpu_vs_tf"] = rows[k]["cpu_ms_per_img"] / rows[best]["cpu_ms_per_img"]
                print(f"  {k}: {rows[k]['x_tf']:.2f}x tf.data images/s, CPU per image "
                      f"{rows[k]['cpu_vs_tf'] * 100:.0f}% of tf.data's", flush=True)
        if args.profile:
            wait_for_quiet(args.quiet_wait)
            rows["profile"] = profile(pattern, train, args.threads)
        results[mode] = rows
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
