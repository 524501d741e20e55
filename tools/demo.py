"""`make demo`: the whole job on a laptop, no cloud account.

1. start an embedded fake GCS server (tpudata talks to it through STORAGE_EMULATOR_HOST),
2. generate a small ImageNet-layout tree of real JPEGs (train/<synset>/*.JPEG, validation/,
   synset_labels.txt),
3. convert it with imagenet_to_gcs straight to gs://demo/imagenet,
4. stream the shards from gs:// through a tpudata Dataset (interleave, shuffle, parse, batch, then
   tpudata.image's ResNet preset on each batch) into the TPU executor (8 replicas, loops of 10 steps):
   on 8 JAX devices when JAX is installed (device time measured), else the numpy backend (simulated),
5. print the infeed report, the evaluation of an exact epoch and where the shards are.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time

import numpy as np

SYNSETS = [f"n0{1440764 + 7 * i:07d}" for i in range(8)]
SIDE = 8  # images are downsized to SIDE x SIDE RGB for the model


def make_tree(root: str, per_class: int, validation: int, seed: int = 0) -> None:
    """Real JPEGs whose colours depend on the class (so a small model can learn them)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    colours = rng.integers(30, 226, (len(SYNSETS), 3))

    def jpeg(path: str, k: int) -> None:
        h, w = int(rng.integers(90, 160)), int(rng.integers(90, 160))
        base = np.tile(colours[k], (h, w, 1)).astype(np.float64)
        img = np.clip(base + rng.normal(0, 40, (h, w, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(path, "JPEG", quality=90)

    for k, synset in enumerate(SYNSETS):
        os.makedirs(os.path.join(root, "train", synset), exist_ok=True)
        for i in range(per_class):
            jpeg(os.path.join(root, "train", synset, f"{synset}_{i}.JPEG"), k)
    os.makedirs(os.path.join(root, "validation"), exist_ok=True)
    labels = []
    for i in range(validation):
        k = int(rng.integers(len(SYNSETS)))
        jpeg(os.path.join(root, "validation", f"ILSVRC2012_val_{i + 1:08d}.JPEG"), k)
        labels.append(SYNSETS[k])
    with open(os.path.join(root, "synset_labels.txt"), "w") as f:
        f.write("\n".join(labels) + "\n")


def decode(features, is_training: bool = False):
    """Host preprocessing on a whole batch: tpudata.image's ResNet preset (crop window decode,
    bicubic resize, flip when training, normalise) straight into the batch; labels 1..K -> 0..K-1."""
    import tpudata.image

    from tpudata.dataset import BytesColumn

    encoded = features["image/encoded"]  # a BytesColumn (read in place) unless a shuffle copied it
    # padding rows of an exact-epoch batch are b""
    real = encoded.lengths > 0 if isinstance(encoded, BytesColumn) else np.array([len(b) > 0 for b in encoded])
    x = np.zeros((len(encoded), SIDE, SIDE, 3), np.float32)
    if real.all():
        tpudata.image.resnet_preprocess_batch(encoded, is_training, SIDE, out=x)
    elif real.any():
        x[real] = tpudata.image.resnet_preprocess_batch(encoded[real], is_training, SIDE)
    out = {"x": x.reshape(len(encoded), -1)}
    if "weight" in features:
        out["weight"] = features["weight"]
    return out, (features["image/class/label"] - 1).astype(np.int32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-class", type=int, default=60, help="training images per synset")
    ap.add_argument("--validation", type=int, default=100)
    ap.add_argument("--tensorboard-dir", default=None, help="copy the run's TensorBoard event files "
                    "here (default: WORKDIR/tensorboard, or demo_out/tensorboard without --workdir)")
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--step-ms", type=float, default=25.0,
                    help="simulated device time per step (a real model's step on the accelerator)")
    ap.add_argument("--workdir", default=None, help="generate the images here and keep them "
                    "(default: a temporary directory, removed at the end)")
    ap.add_argument("--backend", choices=["auto", "jax", "numpy"], default="auto",
                    help="TPUEstimator backend (auto: jax when installed)")
    args = ap.parse_args(argv)
    if args.backend == "auto":
        import importlib.util

        args.backend = "jax" if importlib.util.find_spec("jax") else "numpy"
    if args.backend == "jax" and "device_count" not in os.environ.get("XLA_FLAGS", ""):
        # 8 devices even on a CPU-only machine; set before JAX is imported
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_force_host_platform_device_count=8").strip()
    logging.basicConfig(level=logging.WARNING, format="  %(message)s")
    logging.getLogger("tpudata.tpu.estimator").setLevel(logging.INFO)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

    import tpudata

    tpudata.tune_malloc()  # what TF's guides get from tcmalloc; the library leaves it to the caller
    from tpudata import FixedLenFeature, storage, tpu
    from tpudata.cli import main as cli
    from tpudata.dataset import Dataset, TFRecordDataset
    from fake_gcs import FakeGCSServer, Knobs, pointed_at

    t_start = time.perf_counter()
    workdir = args.workdir or tempfile.mkdtemp(prefix="tpudata-demo-")
    with FakeGCSServer(port=0) as server, pointed_at(server):
        print(f"[1/5] fake GCS server at {server.url} (STORAGE_EMULATOR_HOST)")
        storage.gcs_filesystem().mkdir("demo")

        raw = os.path.join(workdir, "raw")
        make_tree(raw, args.per_class, args.validation)
        n_train = args.per_class * len(SYNSETS)
        kept = "" if args.workdir else " (removed at the end; --workdir DIR keeps them)"
        print(f"[2/5] generated {n_train} training + {args.validation} validation JPEGs in {raw}{kept}")

        print("[3/5] tools/imagenet_to_gcs.py --gcs_output_path=gs://demo/imagenet ...")
        rc = cli(["convert", "imagenet", f"--raw_data_dir={raw}", "--gcs_output_path=gs://demo/imagenet",
                  "--num_train_shards=8", "--num_validation_shards=2", "--workers=2", "--no-progress"])
        if rc:
            return rc
        server.knobs = Knobs(latency_ms=20, bandwidth_mbps=200)  # reads now feel like a network

        spec = {"image/encoded": FixedLenFeature([], bytes),
                "image/class/label": FixedLenFeature([], np.int64)}

        def train_input_fn(params):
            files = Dataset.list_files("gs://demo/imagenet/train-*", shuffle=False)
            return (files.interleave(lambda f: TFRecordDataset(f), cycle_length=4, num_parallel_calls=4)
                    .repeat().shuffle(512, seed=0).parse(spec)
                    .batch(params["batch_size"], drop_remainder=True)
                    .map(lambda f: decode(f, is_training=True), num_parallel_calls=2)
                    .prefetch(8))

        def eval_input_fn(params):
            files = Dataset.list_files("gs://demo/imagenet/validation-*", shuffle=False)
            return (TFRecordDataset(files).parse(spec)
                    .batch(params["batch_size"], pad_remainder=True).map(decode))

        if args.backend == "jax":
            import jax

            where = (f"8 JAX {jax.devices()[0].platform} devices, device time measured to "
                     "block_until_ready")
        else:
            where = f"numpy replicas, {args.step_ms:g} ms simulated device time per step"
        print(f"[4/5] training from gs:// with backend={args.backend} (8 replicas, "
              f"iterations_per_loop=10; {where})")
        est = tpu.TPUEstimator(
            tpu.models.softmax_regression(len(SYNSETS), learning_rate=0.2),
            config=tpu.RunConfig(model_dir="gs://demo/model", save_summary_steps=10,
                                 tpu_config=tpu.TPUConfig(
                                     iterations_per_loop=10, num_shards=8,
                                     simulated_step_seconds=args.step_ms / 1e3 * (args.backend == "numpy"))),
            train_batch_size=64, eval_batch_size=32, backend=args.backend)
        est.train(train_input_fn, steps=args.steps)
        report = est.last_train_report
        result = est.evaluate(eval_input_fn)

        print("[5/5] results")
        print(f"  infeed ({args.backend} backend): {report.summary()}")
        verdict = "input-bound: speed up the input pipeline" if report.input_bound_percent > 20 else \
            "not input-bound: the input pipeline keeps up with the device"
        print(f"  -> {verdict}")
        print(f"  evaluation (exact epoch): accuracy {result['accuracy']:.3f} on "
              f"{result['examples']} of {args.validation} validation images")
        fs = storage.gcs_filesystem()
        for prefix in ("train", "validation"):
            manifest = tpudata.read_manifest(f"gs://demo/imagenet/{prefix}.manifest.json")
            print(f"  gs://demo/imagenet/{prefix}-*: {manifest.num_shards} shards, "
                  f"{manifest.num_records} records, {manifest.total_bytes / 1e6:.1f} MB")
        names = [p.rsplit("/", 1)[-1] for p in fs.ls("demo/model", detail=False)]
        checkpoints = sorted(n for n in names if n == "checkpoint" or n.startswith("model.ckpt-"))
        print(f"  checkpoints: {checkpoints}")
        tb_dir = args.tensorboard_dir or os.path.join(args.workdir or "demo_out", "tensorboard")
        for path in fs.find("demo/model"):  # the fake GCS ends with the demo: keep the curves
            if "/events.out.tfevents." in path:
                local = os.path.join(tb_dir, os.path.relpath(path, "demo/model"))
                os.makedirs(os.path.dirname(local), exist_ok=True)
                fs.get_file(path, local)
        print(f"  TensorBoard (loss, global_step/sec, examples/sec, infeed/*; eval/): "
              f"tensorboard --logdir {tb_dir}")
        print("\n$ tpudata head -n 1 gs://demo/imagenet/validation-00000-of-00002")
        sys.stdout.flush()
        cli(["head", "-n", "1", "--values", "4", "gs://demo/imagenet/validation-00000-of-00002"])
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
        print(f"\nremoved {workdir} (the generated JPEGs; --workdir DIR keeps them)")
    print(f"\ndemo finished in {time.perf_counter() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
