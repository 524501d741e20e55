"""Helpers for the converter tests: a tiny ImageNet-layout tree, tree comparison, a killer encoder.

Importable by worker processes (spawned pool workers and dask workers unpickle ``KillAfter``).
"""

from __future__ import annotations

import io
import os
import signal
from dataclasses import dataclass

import numpy as np

SYNSETS = ["n01440764", "n01443537", "n02105855", "n03062245"]
VALIDATION_ONLY_SYNSET = "n04596742"  # appears in synset_labels.txt only: still gets a label

_PROCESS_ITEMS = 0


def _image(mode: str, size: tuple[int, int], rng: np.random.Generator):
    from PIL import Image

    w, h = size
    channels = {"RGB": 3, "L": 1, "CMYK": 4, "RGBA": 4, "P": 1}[mode]
    # smooth gradients plus a little noise: re-encoding keeps such pictures recognisable
    y, x = np.mgrid[0:h, 0:w]
    planes = [(rng.uniform(0, 200) + rng.uniform(-3, 3) * x + rng.uniform(-3, 3) * y
               + rng.normal(0, 2, (h, w))) for _ in range(channels)]
    arr = np.clip(np.stack(planes, axis=-1), 0, 255).astype(np.uint8)
    if channels == 1:
        return Image.fromarray(arr[:, :, 0], "L").convert(mode) if mode == "P" else \
            Image.fromarray(arr[:, :, 0], "L")
    return Image.fromarray(arr, "RGB" if mode == "RGB" else mode)


def _encode(img, fmt: str) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


# (relative path, Pillow mode, saved format, (width, height))
TRAIN = [
    ("n01440764/n01440764_10026.JPEG", "RGB", "JPEG", (37, 23)),
    ("n01440764/n01440764_10027.JPEG", "RGB", "JPEG", (16, 16)),
    ("n01440764/n01440764_3.JPEG", "RGB", "JPEG", (9, 41)),
    ("n01440764/n01440764_3199.JPEG", "RGB", "JPEG", (64, 48)),
    ("n01443537/n01443537_1.JPEG", "L", "JPEG", (21, 13)),          # grayscale JPEG
    ("n01443537/n01443537_2.JPEG", "RGB", "JPEG", (1, 1)),
    ("n01443537/n01443537_3.JPEG", "RGB", "JPEG", (50, 7)),
    ("n02105855/n02105855_2933.JPEG", "RGBA", "PNG", (19, 17)),     # a PNG named .JPEG
    ("n02105855/n02105855_4.JPEG", "RGB", "JPEG", (33, 33)),
    ("n02105855/n02105855_5.JPEG", "RGB", "JPEG", (12, 30)),
    ("n03062245/n03062245_4620.JPEG", "CMYK", "JPEG", (27, 18)),    # a CMYK JPEG
    ("n03062245/n03062245_6.JPEG", "RGB", "JPEG", (40, 25)),
    ("n03062245/n03062245_7.JPEG", "P", "PNG", (11, 5)),            # a palette PNG named .JPEG
    ("n03062245/n03062245_8.JPEG", "RGB", "JPEG", (8, 8)),
]
IGNORED = ["n01440764/notes.txt", "n01440764/n01440764_99.jpg", "stray.JPEG"]
VALIDATION = [  # (file, synset, mode, format, size)
    ("ILSVRC2012_val_00000001.JPEG", "n03062245", "RGB", "JPEG", (30, 20)),
    ("ILSVRC2012_val_00000002.JPEG", "n01440764", "L", "JPEG", (15, 25)),
    ("ILSVRC2012_val_00000003.JPEG", VALIDATION_ONLY_SYNSET, "RGB", "JPEG", (7, 9)),
    ("ILSVRC2012_val_00000004.JPEG", "n02105855", "RGB", "PNG", (14, 14)),
    ("ILSVRC2012_val_00000005.JPEG", "n01443537", "CMYK", "JPEG", (22, 11)),
]


def make_imagenet_tree(root: str, seed: int = 1) -> dict:
    """Write the tree; returns ``{basename: (synset or None, mode, format, (w, h), bytes)}``."""
    rng = np.random.default_rng(seed)
    info = {}
    for rel, mode, fmt, size in TRAIN:
        data = _encode(_image(mode, size, rng), fmt)
        path = os.path.join(root, "train", rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        info[os.path.basename(rel)] = (rel.split("/")[0], mode, fmt, size, data)
    for rel in IGNORED:
        with open(os.path.join(root, "train", rel), "wb") as f:
            f.write(_encode(_image("RGB", (4, 4), rng), "JPEG"))
    os.makedirs(os.path.join(root, "validation"), exist_ok=True)
    for name, synset, mode, fmt, size in VALIDATION:
        data = _encode(_image(mode, size, rng), fmt)
        with open(os.path.join(root, "validation", name), "wb") as f:
            f.write(data)
        info[name] = (synset, mode, fmt, size, data)
    with open(os.path.join(root, "synset_labels.txt"), "w") as f:
        f.write("".join(s + "\n" for _, s, *_ in VALIDATION))
    return info


def tree_bytes(root: str) -> dict[str, bytes]:
    """``{relative path: content}`` of every file under ``root``."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out


def leftovers(root: str) -> list[str]:
    """Temporary or journal files anywhere under ``root``."""
    return sorted(os.path.relpath(os.path.join(d, n), root)
                  for d, _, files in os.walk(root) for n in files
                  if ".tmp-" in n or n.endswith(".partial.json"))


@dataclass(frozen=True)
class KillAfter:
    """Wraps an encoder; the first process to encode more than ``after`` items SIGKILLs itself.

    The kill happens once per marker file: the process that manages to delete ``marker`` dies.
    """

    inner: object
    marker: str
    after: int

    @property
    def fingerprint(self):
        return self.inner.fingerprint

    def __call__(self, item):
        global _PROCESS_ITEMS
        _PROCESS_ITEMS += 1
        if _PROCESS_ITEMS > self.after:
            try:
                os.remove(self.marker)
            except FileNotFoundError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        return self.inner(item)
