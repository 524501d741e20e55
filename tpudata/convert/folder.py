"""A folder of images, one sub-folder per class -> TFRecord shards of image Examples.

``root/<class>/<image>`` (any depth below the class folder; ``.jpg .jpeg .png .bmp .gif .webp
.tif .tiff``, any case). Classes are the sorted folder names, numbered from ``label_offset``
(default 0, as Keras' ``image_dataset_from_directory`` and torchvision's ``ImageFolder`` do;
ImageNet's tools start at 1). Files are sorted and, by default, shuffled with ``seed``. Each
Example has the nine ImageNet features (``image/class/synset`` holds the class folder name);
non-RGB-JPEG images are re-encoded as RGB JPEG. Shards are about ``target_shard_bytes`` (100 MB)
each, planned from the file sizes, unless ``num_shards`` is given.
"""

from __future__ import annotations

import logging
import random
from concurrent.futures import Executor
from typing import Mapping

from tpudata import storage
from tpudata.convert.images import IMAGE_FEATURES, ImageExampleEncoder, ImageItem, list_files
from tpudata.shards import BuildResult, build_shards

logger = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")


def scan_image_folder(root: str, *, label_offset: int = 0, shuffle: bool = True, seed: int = 0,
                      extensions=IMAGE_EXTENSIONS, storage_options: Mapping | None = None):
    """``(items, classes)``: the images under ``root`` in output order and the class names."""
    so = dict(storage_options or {})
    root = root.rstrip("/")
    exts = tuple(e.lower() for e in extensions)
    found = []
    for rel, size in list_files(root, so):
        parts = rel.split("/")
        if len(parts) >= 2 and not any(p.startswith(".") for p in parts) and rel.lower().endswith(exts):
            found.append((rel, parts[0], size))
    if not found:
        raise FileNotFoundError(
            f"no images under {root}/<class>/ (extensions {', '.join(exts)}): give a folder with "
            "one sub-folder of images per class"
        )
    classes = sorted({c for _, c, _ in found})
    labels = {c: label_offset + i for i, c in enumerate(classes)}
    items = [ImageItem(storage.join(root, rel), labels[c], c, size) for rel, c, size in found]
    if shuffle:
        random.Random(seed).shuffle(items)
    logger.info("found %d images in %d classes under %s", len(items), len(classes), root)
    return items, classes


def convert_image_folder(
    root: str,
    output: str,
    prefix: str = "train",
    *,
    num_shards: int | None = None,
    target_shard_bytes: int | None = None,
    label_offset: int = 0,
    shuffle: bool = True,
    seed: int = 0,
    verify_images: bool = False,
    workers: int | None = None,
    executor: Executor | None = None,
    compression: str | None = None,
    resume: bool = True,
    progress: bool | None = None,
    storage_options: Mapping | None = None,
) -> BuildResult:
    """Convert ``root/<class>/*`` images into ``{output}/{prefix}-NNNNN-of-NNNNN`` shards."""
    so = dict(storage_options or {})
    storage.check_writable(output, **so)  # before the scan: a bad output fails at once
    items, classes = scan_image_folder(root, label_offset=label_offset, shuffle=shuffle, seed=seed,
                                       storage_options=so)
    root = root.rstrip("/")

    def item_key(item: ImageItem) -> str:
        rel = item.path[len(root):].lstrip("/")
        return f"{rel}\t{item.label}\t{item.synset}\t{item.size}"

    metadata = {"source": "image_folder", "classes": classes, "label_offset": label_offset,
                "shuffle_seed": seed if shuffle else None}
    return build_shards(
        items, ImageExampleEncoder(verify=verify_images, storage_options=so), output, prefix,
        num_shards=num_shards, target_shard_bytes=target_shard_bytes,
        item_sizes=[it.size + 200 for it in items],  # ~200 bytes of the other eight features
        executor=executor, workers=workers, compression=compression, schema=IMAGE_FEATURES,
        metadata=metadata, resume=resume, item_key=item_key, progress=progress,
        storage_options=so,
    )


__all__ = ["IMAGE_EXTENSIONS", "convert_image_folder", "scan_image_folder"]
