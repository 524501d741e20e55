"""``tpudata convert imagenet | images | numpy``: make sharded TFRecord datasets.

``convert imagenet`` takes the flags of TensorFlow's ``tools/datasets/imagenet_to_gcs.py``
(``--raw_data_dir``, ``--local_scratch_dir``, ``--gcs_output_path``, ``--[no]gcs_upload``,
``--project``) plus ``--num_train_shards``, ``--num_validation_shards``, ``--split_subdirs`` and
``--workers``; ``tools/imagenet_to_gcs.py`` is the same command as a script.

Layout: the original converts into ``local_scratch_dir/train/`` and ``.../validation/`` and then
uploads every shard to one GCS directory, where ``imagenet_input.py`` reads ``train-*`` and
``validation-*`` from one ``data_dir``; with ``--nogcs_upload`` it leaves the scratch layout,
which no single ``data_dir`` reads. Here the shards are written straight to their final place,
so ``--nogcs_upload`` writes the uploaded layout (both splits side by side) into
``--local_scratch_dir``; ``--split_subdirs`` gives the original's scratch layout.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from concurrent.futures.process import BrokenProcessPool

from tpudata.shards.executors import default_workers

logger = logging.getLogger(__name__)

_TRUE = {"1", "true", "t", "yes", "y"}
_FALSE = {"0", "false", "f", "no", "n"}


class _AbslBool(argparse.Action):
    """``--flag``, ``--noflag`` and ``--flag=true|false`` as absl's boolean flags accept."""

    def __init__(self, option_strings, dest, default=True, help=None):
        names = list(option_strings)
        names += ["--no" + o[2:] for o in option_strings if o.startswith("--")]
        super().__init__(names, dest, nargs="?", default=default, help=help, metavar="BOOL")

    def __call__(self, parser, namespace, value, option_string=None):
        if option_string.startswith("--no") and option_string[4:] == self.dest:
            if value is not None:
                parser.error(f"{option_string} takes no value")
            setattr(namespace, self.dest, False)
            return
        if value is None or value.lower() in _TRUE:
            setattr(namespace, self.dest, True)
        elif value.lower() in _FALSE:
            setattr(namespace, self.dest, False)
        else:
            parser.error(f"{option_string}: expected true or false, not {value!r}")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {value}")
    return value


def _common(p, workers_default) -> None:
    p.add_argument("--workers", type=_positive, default=workers_default,
                   help="worker processes (default: %(default)s)")
    p.add_argument("--dask_scheduler", "--dask-scheduler", dest="dask_scheduler", metavar="ADDRESS",
                   help="run on a dask.distributed cluster (scheduler address, or 'local' for a "
                        "local cluster of --workers processes); needs tpudata[dask]")
    p.add_argument("--no-resume", "--noresume", dest="resume", action="store_false",
                   help="rebuild every shard, even those a previous run completed")
    p.add_argument("--no-progress", dest="progress", action="store_const", const=False,
                   default=None, help="no progress bar (default: shown on a terminal)")


def add_imagenet_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of tensorflow/tpu's imagenet_to_gcs.py, plus this tool's own."""
    p.add_argument("--raw_data_dir", required=True,
                   help="ImageNet root with train/<synset>/*.JPEG, validation/*.JPEG and "
                        "synset_labels.txt (a local path or a URL such as gs://...)")
    p.add_argument("--local_scratch_dir",
                   help="output directory with --nogcs_upload: train-* and validation-* shards "
                        "side by side, the layout the original uploads to GCS and "
                        "imagenet_input.py's data_dir reads (see --split_subdirs); not needed "
                        "otherwise: shards are written straight to --gcs_output_path")
    p.add_argument("--gcs_output_path", help="gs://bucket/path the shards are written to")
    p.add_argument("--gcs_upload", action=_AbslBool, default=True,
                   help="write to --gcs_output_path (default); --nogcs_upload writes to "
                        "--local_scratch_dir instead")
    p.add_argument("--split_subdirs", action=_AbslBool, default=False,
                   help="with --nogcs_upload, write the original's scratch layout instead: "
                        "train-* in LOCAL_SCRATCH_DIR/train/, validation-* in "
                        "LOCAL_SCRATCH_DIR/validation/ (default: false)")
    p.add_argument("--project", help="Google Cloud project of the bucket")
    p.add_argument("--num_train_shards", type=_positive, default=1024,
                   help="training shards (default: %(default)s)")
    p.add_argument("--num_validation_shards", type=_positive, default=128,
                   help="validation shards (default: %(default)s)")
    p.add_argument("--verify_images", action="store_true",
                   help="fully decode every JPEG kept as is (slower; catches truncated files)")
    p.add_argument("--shuffle_seed", type=int, default=0,
                   help="seed of the training-file shuffle (default: 0, as the original)")
    _common(p, default_workers())


def register(sub) -> None:
    convert = sub.add_parser("convert", help="make sharded TFRecord datasets")
    kinds = convert.add_subparsers(dest="kind", metavar="KIND")
    kinds.required = True

    p = kinds.add_parser("imagenet", help="ImageNet tree -> train-*/validation-* shards "
                                          "(the flags of tensorflow/tpu's imagenet_to_gcs.py)")
    add_imagenet_arguments(p)
    p.set_defaults(func=cmd_imagenet)

    p = kinds.add_parser("images", help="ROOT/<class>/<image> -> image Example shards")
    p.add_argument("root", metavar="ROOT", help="folder with one sub-folder of images per class")
    p.add_argument("-o", "--output", required=True, help="output directory or URL")
    p.add_argument("--prefix", default="train", help="shard name prefix (default: train)")
    _shard_count(p)
    p.add_argument("--label-offset", type=int, default=0, help="label of the first class (0)")
    p.add_argument("--no-shuffle", dest="shuffle", action="store_false",
                   help="keep the sorted file order")
    p.add_argument("--seed", type=int, default=0, help="shuffle seed (default: 0)")
    p.add_argument("--verify-images", action="store_true", help="fully decode kept JPEGs")
    p.add_argument("--compression", choices=["GZIP", "ZLIB"], help="compress the shards")
    _common(p, default_workers())
    p.set_defaults(func=cmd_images)

    p = kinds.add_parser("numpy", help="FILE.npz -> one Example per row of its arrays")
    p.add_argument("path", metavar="FILE.npz", help="arrays with a common first dimension")
    p.add_argument("-o", "--output", help="output directory or URL (default: FILE's directory)")
    p.add_argument("--prefix", help="shard name prefix (default: FILE's name without .npz)")
    _shard_count(p)
    p.add_argument("--compression", choices=["GZIP", "ZLIB"], help="compress the shards")
    _common(p, 1)
    p.set_defaults(func=cmd_numpy)


def _shard_count(p) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--num-shards", type=_positive, help="exact number of shards")
    group.add_argument("--target-shard-mb", type=float, default=None,
                       help="shard size to aim for, in MB (default: 100)")


def _target_bytes(args) -> int | None:
    return None if args.target_shard_mb is None else int(args.target_shard_mb * 1e6)


@contextlib.contextmanager
def executor_for(args):
    """``None`` (tpudata's own process pool) or a dask.distributed executor."""
    if not args.dask_scheduler:
        yield None
        return
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise SystemExit("--dask_scheduler needs dask.distributed: pip install 'tpudata[dask]'")
    cluster = None
    if args.dask_scheduler == "local":
        cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True)
        client = Client(cluster)
    else:
        client = Client(args.dask_scheduler)
    try:
        yield client.get_executor()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _run(args, fn) -> int:
    try:
        results = fn()
    except BrokenProcessPool as exc:
        print(f"tpudata convert: a worker process died ({exc}); finished shards are kept: run "
              "the same command again to resume", file=sys.stderr)
        return 1
    except (ValueError, OSError, ImportError) as exc:
        print(f"tpudata convert {args.kind}: {exc}", file=sys.stderr)
        return 2
    for result in results:
        print(result.summary())
        print(f"  manifest: {result.manifest_url}")
    return 0


def cmd_imagenet(args) -> int:
    from tpudata.convert.imagenet import convert_imagenet

    so = {"project": args.project} if args.project else {}
    if args.gcs_upload:
        if not args.gcs_output_path:
            print("tpudata convert imagenet: --gcs_output_path must be provided "
                  "(or use --nogcs_upload with --local_scratch_dir)", file=sys.stderr)
            return 2
        if not args.gcs_output_path.startswith("gs://"):
            print("tpudata convert imagenet: --gcs_output_path must start with gs://",
                  file=sys.stderr)
            return 2
        if args.split_subdirs:
            print("tpudata convert imagenet: --split_subdirs applies to --nogcs_upload only "
                  "(GCS gets train-* and validation-* side by side, as from the original)",
                  file=sys.stderr)
            return 2
        output, subdirs = args.gcs_output_path, False
    else:
        if not args.local_scratch_dir:
            print("tpudata convert imagenet: --nogcs_upload needs --local_scratch_dir",
                  file=sys.stderr)
            return 2
        # the original leaves its scratch layout (train/, validation/) behind with --nogcs_upload;
        # here the local directory is the final output: the GCS layout, unless asked
        output, subdirs = args.local_scratch_dir, args.split_subdirs

    def go():
        with executor_for(args) as executor:
            results = convert_imagenet(
                args.raw_data_dir, output, num_train_shards=args.num_train_shards,
                num_validation_shards=args.num_validation_shards, split_subdirs=subdirs,
                workers=args.workers, executor=executor, seed=args.shuffle_seed,
                verify_images=args.verify_images, resume=args.resume, progress=args.progress,
                storage_options=so,
            )
        return list(results.values())

    return _run(args, go)


def cmd_images(args) -> int:
    from tpudata.convert.folder import convert_image_folder

    def go():
        with executor_for(args) as executor:
            return [convert_image_folder(
                args.root, args.output, args.prefix, num_shards=args.num_shards,
                target_shard_bytes=_target_bytes(args), label_offset=args.label_offset,
                shuffle=args.shuffle, seed=args.seed, verify_images=args.verify_images,
                workers=args.workers, executor=executor, compression=args.compression,
                resume=args.resume, progress=args.progress,
            )]

    return _run(args, go)


def cmd_numpy(args) -> int:
    from tpudata.convert.arrays import convert_npz

    base = args.path.rstrip("/").rsplit("/", 1)
    output = args.output or (base[0] if len(base) == 2 else ".")
    prefix = args.prefix or os.path.splitext(base[-1])[0]

    def go():
        with executor_for(args) as executor:
            return [convert_npz(
                args.path, output, prefix, num_shards=args.num_shards,
                target_shard_bytes=_target_bytes(args), workers=args.workers, executor=executor,
                compression=args.compression, resume=args.resume, progress=args.progress,
            )]

    return _run(args, go)


def imagenet_main(argv=None) -> int:
    """``tools/imagenet_to_gcs.py``: the ``convert imagenet`` command with INFO logging."""
    parser = argparse.ArgumentParser(
        prog="imagenet_to_gcs.py",
        description="Convert ImageNet to TFRecord shards, written to GCS or a local directory.",
    )
    add_imagenet_arguments(parser)
    args = parser.parse_args(argv)
    args.kind = "imagenet"
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return cmd_imagenet(args)


__all__ = ["add_imagenet_arguments", "executor_for", "imagenet_main", "register"]
