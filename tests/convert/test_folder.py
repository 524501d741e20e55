"""``tpudata convert images ROOT``: one folder per class -> image Examples."""

from __future__ import annotations

import io
import math
import os

import numpy as np
from PIL import Image

import tpudata
from tpudata.cli import main
from tpudata.convert import IMAGE_FEATURES, convert_image_folder
from tpudata.shards import read_manifest, verify_manifest


def _write(path, mode, size, fmt):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rng = np.random.default_rng(abs(hash(path)) % 2**32)
    arr = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(arr, "RGB").convert(mode).save(path, fmt)


def _tree(root):
    files = {
        "cat/a.jpg": ("RGB", (20, 10), "JPEG"),
        "cat/b.JPEG": ("L", (7, 9), "JPEG"),
        "cat/sub/c.png": ("RGBA", (5, 5), "PNG"),
        "dog/d.jpeg": ("RGB", (31, 17), "JPEG"),
        "dog/e.PNG": ("RGB", (8, 3), "PNG"),
        "zebra/f.jpg": ("CMYK", (12, 12), "JPEG"),
    }
    for rel, (mode, size, fmt) in files.items():
        _write(os.path.join(root, rel), mode, size, fmt)
    with open(os.path.join(root, "dog", "readme.txt"), "w") as f:
        f.write("not an image")
    _write(os.path.join(root, "dog", ".hidden.jpg"), "RGB", (2, 2), "JPEG")
    return files


def test_folder_conversion(tmp_path):
    files = _tree(str(tmp_path / "raw"))
    r = convert_image_folder(str(tmp_path / "raw"), str(tmp_path / "out"), "train", num_shards=2,
                             workers=1)
    assert r.manifest.metadata["classes"] == ["cat", "dog", "zebra"]
    assert verify_manifest(str(tmp_path / "out" / "train.manifest.json")) == []
    records = [x for u in r.files for x in tpudata.read_records(u)]
    parsed = tpudata.parse_examples(records, IMAGE_FEATURES)
    names = [n.decode() for n in parsed["image/filename"]]
    assert sorted(names) == sorted(os.path.basename(f) for f in files)
    by_name = {os.path.basename(k): (k.split("/")[0], v) for k, v in files.items()}
    for i, name in enumerate(names):
        cls, (mode, (w, h), fmt) = by_name[name]
        assert parsed["image/class/synset"][i] == cls.encode()
        assert parsed["image/class/label"][i] == ["cat", "dog", "zebra"].index(cls)
        assert (parsed["image/height"][i], parsed["image/width"][i]) == (h, w)
        with Image.open(io.BytesIO(parsed["image/encoded"][i])) as img:
            assert (img.format, img.mode, img.size) == ("JPEG", "RGB", (w, h))


def test_folder_cli_target_size(tmp_path, capsys):
    raw = str(tmp_path / "raw")
    _tree(raw)
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(raw) for f in fs
                if f.lower().endswith((".jpg", ".jpeg", ".png")) and not f.startswith("."))
    target_mb = total / 3.5 / 1e6
    out = tmp_path / "out"
    assert main(["convert", "images", raw, "-o", str(out), "--prefix", "pets",
                 "--target-shard-mb", str(target_mb), "--label-offset", "1", "--workers", "1"]) == 0
    m = read_manifest(str(out / "pets.manifest.json"))
    assert m.num_records == 6
    # planned from the file sizes (+ ~200 bytes of other features each): ceil(total / target)
    assert m.num_shards == math.ceil((total + 6 * 216) / (target_mb * 1e6))
    labels = sorted(tpudata.decode_example(x)["image/class/label"][0]
                    for u in m.files(str(out)) for x in tpudata.read_records(u))
    assert labels == [1, 1, 1, 2, 2, 3]
