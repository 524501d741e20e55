"""Image files -> tf.train.Example records with the nine features of TensorFlow's ImageNet tools.

Every Example carries ``image/height``, ``image/width``, ``image/channels`` (3),
``image/class/label`` (int64), ``image/colorspace`` (b"RGB"), ``image/class/synset``,
``image/format`` (b"JPEG"), ``image/filename`` (the basename) and ``image/encoded``.

Images are stored as their original bytes when they are RGB JPEGs. Anything else - a PNG named
``.JPEG``, a CMYK or grayscale JPEG, another format - is decoded and re-encoded as an RGB JPEG at
quality 100, as ``imagenet_to_gcs.py`` does for the files on its hard-coded lists. What an
image is comes from its header (Pillow, extra ``images``), not from its name; height and width
come from the image itself. Needs Pillow.

>>> import io
>>> from PIL import Image
>>> buf = io.BytesIO(); Image.new("L", (5, 3)).save(buf, "PNG")
>>> jpeg, height, width, was = normalize_image(buf.getvalue())
>>> (jpeg[:2], height, width, was)
(b'\\xff\\xd8', 3, 5, 'PNG L')
"""

from __future__ import annotations

import io
import logging
import os
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple

import numpy as np

from tpudata import storage
from tpudata._keywords import storage_options_dict
from tpudata.example import FixedLenFeature, encode_example

logger = logging.getLogger(__name__)

REENCODE_QUALITY = 100

#: The parse spec of the nine features (the manifest records it as the schema).
IMAGE_FEATURES = {
    "image/height": FixedLenFeature([], np.int64),
    "image/width": FixedLenFeature([], np.int64),
    "image/colorspace": FixedLenFeature([], bytes),
    "image/channels": FixedLenFeature([], np.int64),
    "image/class/label": FixedLenFeature([], np.int64),
    "image/class/synset": FixedLenFeature([], bytes),
    "image/format": FixedLenFeature([], bytes),
    "image/filename": FixedLenFeature([], bytes),
    "image/encoded": FixedLenFeature([], bytes),
}


class ImageItem(NamedTuple):
    """One image to convert: where it is, its label and class name, and its size in bytes."""

    path: str
    label: int
    synset: str
    size: int


def _pil():
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError(
            "converting images needs Pillow: pip install 'tpudata[images]'"
        ) from None
    return Image


def normalize_image(data: bytes, quality: int = REENCODE_QUALITY, verify: bool = False):
    """``(jpeg_bytes, height, width, converted_from)`` for encoded image ``data``.

    RGB JPEGs come back unchanged (``converted_from`` is ``None``); everything else is converted
    to RGB and re-encoded as JPEG, and ``converted_from`` says what it was (e.g. ``"PNG RGBA"``,
    ``"JPEG CMYK"``). With ``verify`` a kept JPEG is fully decoded too, so a truncated or corrupt
    file fails here rather than when training reads it. Unreadable data raises ``OSError``
    (Pillow's ``UnidentifiedImageError``).
    """
    Image = _pil()
    with Image.open(io.BytesIO(data)) as img:
        fmt, mode = img.format, img.mode
        width, height = img.size
        if fmt == "JPEG" and mode == "RGB":
            if verify:
                img.load()
            return data, height, width, None
        img.load()
        rgb = _to_rgb(img)
        out = io.BytesIO()
        rgb.save(out, "JPEG", quality=quality)
    return out.getvalue(), height, width, f"{fmt} {mode}"


def _to_rgb(img):
    if img.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N"):  # 16/32-bit grayscale (PNG)
        arr = np.asarray(img).astype(np.uint32)
        scale = 8 if arr.max(initial=0) < 65536 else 24
        img = _pil().fromarray((arr >> scale).astype(np.uint8))
    elif img.mode == "F":
        arr = np.clip(np.asarray(img), 0, 255).astype(np.uint8)
        img = _pil().fromarray(arr)
    return img.convert("RGB")  # alpha is dropped, as TensorFlow's decode_png(channels=3) does


def image_example(jpeg: bytes, height: int, width: int, label: int, synset: str, filename: str) -> bytes:
    """The serialized Example with the nine features, in the original tool's order."""
    return encode_example({
        "image/height": int(height),
        "image/width": int(width),
        "image/colorspace": b"RGB",
        "image/channels": 3,
        "image/class/label": int(label),
        "image/class/synset": synset.encode("utf-8"),
        "image/format": b"JPEG",
        "image/filename": os.path.basename(filename).encode("utf-8"),
        "image/encoded": bytes(jpeg),
    })


@dataclass(frozen=True)
class ImageExampleEncoder:
    """Turns an :class:`ImageItem` into a serialized Example (picklable; runs in workers)."""

    verify: bool = False
    quality: int = REENCODE_QUALITY
    storage_options: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def fingerprint(self) -> str:
        return f"tpudata.convert.images.ImageExampleEncoder/1 verify={self.verify} q={self.quality}"

    def __call__(self, item: ImageItem) -> bytes:
        data = storage.read_bytes(item.path, **self.storage_options)
        try:
            jpeg, height, width, was = normalize_image(data, self.quality, self.verify)
        except OSError as exc:
            raise OSError(f"{item.path}: not a readable image ({exc})") from exc
        if was is not None:
            logger.info("converted %s (%s) to an RGB JPEG", item.path, was)
        return image_example(jpeg, height, width, item.label, item.synset, item.path)


def list_files(directory: str, storage_options: Mapping | None = None) -> list[tuple[str, int]]:
    """``(relative path, size)`` of every file under ``directory`` (recursively), sorted."""
    storage_options = storage_options_dict("list_files", storage_options)
    out = []
    if storage.is_local(directory):
        root = storage.local_path(directory)
        if not os.path.isdir(root):
            raise FileNotFoundError(f"no such directory: {directory}")
        stack = [""]
        while stack:
            rel = stack.pop()
            with os.scandir(os.path.join(root, rel)) as entries:
                for entry in entries:
                    sub = f"{rel}/{entry.name}" if rel else entry.name
                    if entry.is_dir():
                        stack.append(sub)
                    elif entry.is_file():
                        out.append((sub, entry.stat().st_size))
    else:
        fs, path = storage.url_to_fs(directory, **storage_options)
        path = path.rstrip("/")
        for name, info in fs.find(path, detail=True).items():
            if info.get("type", "file") == "file" and name.startswith(path + "/"):
                out.append((name[len(path) + 1 :], int(info.get("size") or 0)))
    out.sort()
    return out


__all__ = [
    "IMAGE_FEATURES",
    "ImageExampleEncoder",
    "ImageItem",
    "image_example",
    "list_files",
    "normalize_image",
]
