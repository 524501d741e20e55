"""ImageNet (ILSVRC-2012) -> TFRecord shards, as TensorFlow's ``imagenet_to_gcs.py`` makes them.

Input (``raw_data_dir``, a local path or any fsspec URL such as ``gs://``)::

    train/<synset>/*.JPEG        e.g. train/n03062245/n03062245_4620.JPEG
    validation/*.JPEG            sorted by name
    synset_labels.txt            one synset per line, for the sorted validation files

Labels number the sorted synsets from 1 (0 is left for "background"). Training files are
listed in sorted order and shuffled with a fixed seed (0): the original meant to do this, but
on Python 3 its ``random.shuffle(list(range(n)))`` shuffles a throw-away copy, so its training
shards follow the glob order. Validation files stay sorted. Shards are contiguous balanced
slices named ``train-00000-of-01024`` and ``validation-00000-of-00128``, built in parallel,
resumable, and written straight to their destination (``gs://`` or local); every Example has
the nine features of :mod:`tpudata.convert.images`.
"""

from __future__ import annotations

import logging
import random
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from tpudata import storage
from tpudata._keywords import storage_options_dict
from tpudata.convert.images import IMAGE_FEATURES, ImageExampleEncoder, ImageItem, list_files
from tpudata.shards import BuildResult, build_shards
from tpudata.shards.executors import make_executor

logger = logging.getLogger(__name__)

TRAINING_DIRECTORY = "train"
VALIDATION_DIRECTORY = "validation"
LABELS_FILE = "synset_labels.txt"
TRAINING_SHARDS = 1024
VALIDATION_SHARDS = 128
IMAGE_SUFFIX = ".JPEG"  # the original globs train/*/*.JPEG and validation/*.JPEG
SHUFFLE_SEED = 0


@dataclass
class ImageNetLayout:
    """What :func:`scan_imagenet` found: items in output order and the synset -> label map."""

    root: str
    train: list[ImageItem] = field(default_factory=list)
    validation: list[ImageItem] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)

    def item_key(self, item: ImageItem) -> str:
        """An item as it enters shard fingerprints: relative to the root, so data can move."""
        rel = item.path[len(self.root):].lstrip("/") if item.path.startswith(self.root) else item.path
        return f"{rel}\t{item.label}\t{item.synset}\t{item.size}"


def _list_or_empty(directory: str, so: dict) -> list[tuple[str, int]]:
    try:
        return list_files(directory, so)
    except FileNotFoundError:
        return []


def read_synset_labels(url: str, storage_options: Mapping | None = None) -> list[str]:
    """The synsets of ``synset_labels.txt``, one per non-empty line."""
    storage_options = storage_options_dict("read_synset_labels", storage_options)
    text = storage.read_bytes(url, **storage_options).decode("utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


def scan_imagenet(raw_data_dir: str, seed: int = SHUFFLE_SEED,
                  storage_options: Mapping | None = None) -> ImageNetLayout:
    """List the training and validation images and assign labels (see the module doc)."""
    so = dict(storage_options or {})
    root = raw_data_dir.rstrip("/")
    train_dir = storage.join(root, TRAINING_DIRECTORY)
    training = []
    for rel, size in _list_or_empty(train_dir, so):
        parts = rel.split("/")
        if len(parts) == 2 and parts[1].endswith(IMAGE_SUFFIX):
            training.append((storage.join(train_dir, rel), parts[0], size))
    if not training:
        raise FileNotFoundError(
            f"no training images match {train_dir}/*/*{IMAGE_SUFFIX}: raw_data_dir must hold "
            f"{TRAINING_DIRECTORY}/<synset>/*{IMAGE_SUFFIX}, {VALIDATION_DIRECTORY}/*{IMAGE_SUFFIX} "
            f"and {LABELS_FILE}"
        )
    val_dir = storage.join(root, VALIDATION_DIRECTORY)
    validation = [(storage.join(val_dir, rel), size) for rel, size in _list_or_empty(val_dir, so)
                  if "/" not in rel and rel.endswith(IMAGE_SUFFIX)]
    val_synsets: list[str] = []
    labels_url = storage.join(root, LABELS_FILE)
    if validation:
        if not storage.exists(labels_url, **so):
            raise FileNotFoundError(
                f"{labels_url} is missing: it gives the synset of each validation image "
                "(one per line, in sorted file order)"
            )
        val_synsets = read_synset_labels(labels_url, so)
        if len(val_synsets) != len(validation):
            raise ValueError(
                f"{labels_url} has {len(val_synsets)} synsets for {len(validation)} validation "
                f"images in {val_dir}: it needs exactly one line per image, in sorted file order"
            )
    else:
        logger.warning("no validation images match %s/*%s: converting the training set only",
                       val_dir, IMAGE_SUFFIX)
    synsets = sorted({s for _, s, _ in training} | set(val_synsets))
    labels = {s: i + 1 for i, s in enumerate(synsets)}
    order = list(range(len(training)))
    random.Random(seed).shuffle(order)
    layout = ImageNetLayout(root, labels=labels)
    layout.train = [ImageItem(training[i][0], labels[training[i][1]], training[i][1], training[i][2])
                    for i in order]
    layout.validation = [ImageItem(path, labels[s], s, size)
                         for (path, size), s in zip(validation, val_synsets)]
    logger.info("found %d training images in %d classes and %d validation images under %s",
                len(layout.train), len(synsets), len(layout.validation), root)
    return layout


def convert_imagenet(
    raw_data_dir: str,
    output: str,
    *,
    num_train_shards: int = TRAINING_SHARDS,
    num_validation_shards: int = VALIDATION_SHARDS,
    split_subdirs: bool = False,
    workers: int | None = None,
    executor: Executor | None = None,
    seed: int = SHUFFLE_SEED,
    verify_images: bool = False,
    encoder: Callable[[ImageItem], Any] | None = None,
    resume: bool = True,
    progress: bool | None = None,
    storage_options: Mapping | None = None,
) -> dict[str, BuildResult]:
    """Convert an ImageNet tree into ``train-*`` and ``validation-*`` shards under ``output``.

    ``split_subdirs`` puts them in ``output/train`` and ``output/validation`` (the original's
    scratch layout) instead of side by side (its GCS layout). ``encoder`` replaces the default
    :class:`~tpudata.convert.images.ImageExampleEncoder` (it must be picklable; give it a
    ``fingerprint`` attribute if reruns should resume). Returns ``{split: BuildResult}``.
    """
    so = dict(storage_options or {})
    storage.check_writable(output, **so)  # before the (long) scan: a bad output fails at once
    layout = scan_imagenet(raw_data_dir, seed, so)
    encoder = encoder or ImageExampleEncoder(verify=verify_images, storage_options=so)
    metadata = {
        "source": "imagenet",
        "label_offset": 1,
        "synsets": sorted(layout.labels, key=layout.labels.get),
        "shuffle_seed": seed,
    }
    own = executor is None
    in_flight = None
    if own:
        executor, in_flight = make_executor(workers, num_train_shards + num_validation_shards)
    results: dict[str, BuildResult] = {}
    try:
        for split, items, count in ((TRAINING_DIRECTORY, layout.train, num_train_shards),
                                    (VALIDATION_DIRECTORY, layout.validation, num_validation_shards)):
            if not items:
                continue
            out = storage.join(output, split) if split_subdirs else output
            logger.info("processing the %s data: %d images into %d shards in %s",
                        split, len(items), count, out)
            results[split] = build_shards(
                items, encoder, out, split, num_shards=count, executor=executor,
                max_in_flight=in_flight, schema=IMAGE_FEATURES, metadata=metadata, resume=resume,
                item_key=layout.item_key, progress=progress, storage_options=so,
            )
    finally:
        if own:
            executor.shutdown(wait=True, cancel_futures=True)
    return results


__all__ = [
    "ImageNetLayout",
    "LABELS_FILE",
    "TRAINING_SHARDS",
    "VALIDATION_SHARDS",
    "convert_imagenet",
    "read_synset_labels",
    "scan_imagenet",
]
