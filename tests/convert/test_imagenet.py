"""ImageNet -> TFRecord: the nine features, labels, shard layout, the CLI, kills and resumes."""

from __future__ import annotations

import io
import os
import random
import subprocess
import sys
from concurrent.futures.process import BrokenProcessPool

import crc32c as crc32c_pkg
import numpy as np
import pytest
from PIL import Image

import tpudata
from tpudata.cli import main
from tpudata.convert import IMAGE_FEATURES, ImageExampleEncoder, convert_imagenet, scan_imagenet
from tpudata.shards import read_manifest, verify_manifest
from tests.convert.conftest import TRAIN_SHARDS, VALIDATION_SHARDS
from tests.convert.helpers import (
    SYNSETS,
    TRAIN,
    VALIDATION,
    VALIDATION_ONLY_SYNSET,
    KillAfter,
    leftovers,
    tree_bytes,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALL_SYNSETS = sorted(SYNSETS + [VALIDATION_ONLY_SYNSET])
LABELS = {s: i + 1 for i, s in enumerate(ALL_SYNSETS)}


def _records(directory: str, prefix: str, count: int) -> list[list[bytes]]:
    return [list(tpudata.read_records(os.path.join(directory, f"{prefix}-{i:05d}-of-{count:05d}")))
            for i in range(count)]


def _expected_train_order(root: str) -> list[str]:
    files = sorted(rel for rel, *_ in TRAIN)
    order = list(range(len(files)))
    random.Random(0).shuffle(order)
    return [os.path.basename(files[i]) for i in order]


def test_files_and_shard_layout(imagenet_reference):
    out, results = imagenet_reference
    assert sorted(os.listdir(out)) == ["train", "validation"]
    assert sorted(os.listdir(os.path.join(out, "train"))) == sorted(
        [f"train-{i:05d}-of-{TRAIN_SHARDS:05d}" for i in range(TRAIN_SHARDS)] + ["train.manifest.json"])
    assert sorted(os.listdir(os.path.join(out, "validation"))) == sorted(
        [f"validation-{i:05d}-of-{VALIDATION_SHARDS:05d}" for i in range(VALIDATION_SHARDS)]
        + ["validation.manifest.json"])
    train = _records(os.path.join(out, "train"), "train", TRAIN_SHARDS)
    assert [len(s) for s in train] == [2] * 7  # 14 images, contiguous balanced slices
    val = _records(os.path.join(out, "validation"), "validation", VALIDATION_SHARDS)
    assert [len(s) for s in val] == [3, 2]
    assert results["train"].manifest.num_records == 14
    assert results["validation"].manifest.num_records == 5


def _check_example(features: dict, info: dict) -> str:
    assert sorted(features) == sorted(IMAGE_FEATURES)  # exactly the original's nine features
    name = features["image/filename"][0].decode()
    synset, mode, fmt, (w, h), original = info[name]
    assert features["image/height"].tolist() == [h]
    assert features["image/width"].tolist() == [w]
    assert features["image/channels"].tolist() == [3]
    assert features["image/colorspace"].tolist() == [b"RGB"]
    assert features["image/format"].tolist() == [b"JPEG"]
    assert features["image/class/synset"].tolist() == [synset.encode()]
    assert features["image/class/label"].tolist() == [LABELS[synset]]
    encoded = features["image/encoded"][0]
    with Image.open(io.BytesIO(encoded)) as img:
        assert (img.format, img.mode, img.size) == ("JPEG", "RGB", (w, h))
        pixels = np.asarray(img.convert("RGB"), dtype=np.int16)
    if fmt == "JPEG" and mode == "RGB":
        assert encoded == original  # kept byte for byte
    else:  # re-encoded at quality 100: the same picture
        assert encoded != original
        with Image.open(io.BytesIO(original)) as img:
            want = np.asarray(img.convert("RGB"), dtype=np.int16)
        assert np.abs(pixels - want).mean() < 4.0
    return name


def test_every_example_has_the_nine_features(imagenet_tree, imagenet_reference):
    root, info = imagenet_tree
    out, _ = imagenet_reference
    train = [r for s in _records(os.path.join(out, "train"), "train", TRAIN_SHARDS) for r in s]
    names = [_check_example(tpudata.decode_example(r), info) for r in train]
    assert names == _expected_train_order(root)  # sorted, then shuffled with seed 0
    val = [r for s in _records(os.path.join(out, "validation"), "validation", VALIDATION_SHARDS)
           for r in s]
    names = [_check_example(tpudata.decode_example(r), info) for r in val]
    assert names == [v[0] for v in VALIDATION]  # sorted; labels from synset_labels.txt
    parsed = tpudata.parse_examples(val, IMAGE_FEATURES)
    assert parsed["image/class/label"].tolist() == [LABELS[v[1]] for v in VALIDATION]


def test_manifest_crc_and_counts(imagenet_reference):
    out, _ = imagenet_reference
    for split, count in (("train", TRAIN_SHARDS), ("validation", VALIDATION_SHARDS)):
        url = os.path.join(out, split, f"{split}.manifest.json")
        m = read_manifest(url)
        assert [s.name for s in m.shards] == [f"{split}-{i:05d}-of-{count:05d}" for i in range(count)]
        for shard in m.shards:
            data = open(os.path.join(out, split, shard.name), "rb").read()
            assert shard.bytes == len(data)
            assert shard.crc32c == crc32c_pkg.crc32c(data)  # recomputed independently
            assert shard.records == sum(1 for _ in tpudata.read_records(os.path.join(out, split, shard.name)))
        assert verify_manifest(url) == []
        assert m.features() == IMAGE_FEATURES
        assert m.metadata["synsets"] == ALL_SYNSETS and m.metadata["label_offset"] == 1
    assert leftovers(out) == []


def test_scan_rejects_mismatched_labels(tmp_path, imagenet_tree):
    root, _ = imagenet_tree
    raw = tmp_path / "raw"
    raw.mkdir()
    os.symlink(os.path.join(root, "train"), raw / "train")
    os.symlink(os.path.join(root, "validation"), raw / "validation")
    (raw / "synset_labels.txt").write_text("n01440764\n")
    with pytest.raises(ValueError, match="1 synsets for 5 validation images"):
        scan_imagenet(str(raw))
    (raw / "synset_labels.txt").unlink()
    with pytest.raises(FileNotFoundError, match="synset_labels.txt"):
        scan_imagenet(str(raw))
    with pytest.raises(FileNotFoundError, match="no training images"):
        scan_imagenet(str(tmp_path / "nothing"))


def test_cli_nogcs_upload_matches_library(imagenet_tree, imagenet_reference, tmp_path, capsys):
    root, _ = imagenet_tree
    scratch = tmp_path / "scratch"
    argv = ["convert", "imagenet", f"--raw_data_dir={root}", f"--local_scratch_dir={scratch}",
            "--nogcs_upload", "--num_train_shards", str(TRAIN_SHARDS),
            f"--num_validation_shards={VALIDATION_SHARDS}", "--workers", "1", "--split_subdirs"]
    assert main(argv) == 0  # the original's scratch layout: train/ and validation/
    out = capsys.readouterr().out
    assert "train: 7 shard(s), 14 records" in out and "validation: 2 shard(s), 5 records" in out
    assert tree_bytes(str(scratch)) == tree_bytes(imagenet_reference[0])
    # a rerun keeps everything
    assert main(argv) == 0
    assert "kept from a previous run" in capsys.readouterr().out
    assert tree_bytes(str(scratch)) == tree_bytes(imagenet_reference[0])


def test_nogcs_upload_writes_the_layout_imagenet_input_reads(imagenet_tree, imagenet_reference,
                                                            tmp_path, capsys):
    """Both splits side by side in --local_scratch_dir, as the original uploads them to GCS: one
    data_dir for train-* and validation-*, as tensorflow/tpu's imagenet_input.py (and the
    README's port) read them."""
    root, _ = imagenet_tree
    data_dir = tmp_path / "imagenet"
    assert main(["convert", "imagenet", f"--raw_data_dir={root}", f"--local_scratch_dir={data_dir}",
                 "--nogcs_upload", f"--num_train_shards={TRAIN_SHARDS}",
                 f"--num_validation_shards={VALIDATION_SHARDS}", "--workers=1"]) == 0
    capsys.readouterr()
    reference = {os.path.basename(k): v for k, v in tree_bytes(imagenet_reference[0]).items()}
    assert tree_bytes(str(data_dir)) == reference  # the same files, one directory
    for split, shards, records in (("train", TRAIN_SHARDS, 14), ("validation", VALIDATION_SHARDS, 5)):
        files = tpudata.Dataset.list_files(os.path.join(str(data_dir), f"{split}-*"), shuffle=False)
        assert len(list(files)) == shards
        assert sum(1 for _ in tpudata.TFRecordDataset(files)) == records
    # --split_subdirs is about the local layout only
    assert main(["convert", "imagenet", f"--raw_data_dir={root}", "--gcs_output_path=gs://b/x",
                 "--split_subdirs"]) == 2
    assert "--nogcs_upload only" in capsys.readouterr().err


def test_tool_flag_checks(tmp_path):
    tool = os.path.join(ROOT, "tools", "imagenet_to_gcs.py")
    run = lambda *a: subprocess.run([sys.executable, tool, *a], capture_output=True, text=True)
    r = run(f"--raw_data_dir={tmp_path}")
    assert r.returncode == 2 and "--gcs_output_path must be provided" in r.stderr
    r = run(f"--raw_data_dir={tmp_path}", "--gcs_output_path=/local/dir")
    assert r.returncode == 2 and "must start with gs://" in r.stderr
    r = run(f"--raw_data_dir={tmp_path}", "--gcs_upload=false")
    assert r.returncode == 2 and "--local_scratch_dir" in r.stderr
    r = run(f"--raw_data_dir={tmp_path}", "--nogcs_upload", f"--local_scratch_dir={tmp_path}/o")
    assert r.returncode == 2 and "no training images" in r.stderr


def test_killed_worker_then_resume_is_byte_identical(imagenet_tree, imagenet_reference, tmp_path):
    root, _ = imagenet_tree
    out = str(tmp_path / "out")
    marker = tmp_path / "kill-marker"
    marker.write_text("")
    killer = KillAfter(ImageExampleEncoder(), str(marker), after=5)
    kw = dict(num_train_shards=TRAIN_SHARDS, num_validation_shards=VALIDATION_SHARDS,
              split_subdirs=True, workers=2)
    with pytest.raises(BrokenProcessPool):
        convert_imagenet(root, out, encoder=killer, **kw)
    assert not marker.exists()  # a worker really died
    assert not os.path.exists(os.path.join(out, "train", "train.manifest.json"))
    journal = read_manifest(os.path.join(out, "train", ".train.manifest.partial.json"))
    assert 1 <= len(journal.shards) < TRAIN_SHARDS
    assert [n for n in leftovers(out) if ".tmp-" in n] == []  # the failed run cleaned up

    results = convert_imagenet(root, out, **kw)
    assert results["train"].skipped == len(journal.shards) >= 1
    assert results["train"].written == TRAIN_SHARDS - len(journal.shards)
    assert tree_bytes(out) == tree_bytes(imagenet_reference[0])
    assert leftovers(out) == []


KILL_SCRIPT = """
import sys
from tpudata.convert import ImageExampleEncoder, convert_imagenet
from tests.convert.helpers import KillAfter
root, out, marker = sys.argv[1:4]
convert_imagenet(root, out, num_train_shards=7, num_validation_shards=2, split_subdirs=True,
                 workers=1, encoder=KillAfter(ImageExampleEncoder(), marker, after=5))
"""


def test_killed_conversion_process_then_resume(imagenet_tree, imagenet_reference, tmp_path):
    root, _ = imagenet_tree
    out = str(tmp_path / "out")
    marker = tmp_path / "kill-marker"
    marker.write_text("")
    proc = subprocess.run([sys.executable, "-c", KILL_SCRIPT, root, out, str(marker)], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr  # SIGKILL: no cleanup code ran
    # two shards were finished and journaled; the third was being written
    journal = read_manifest(os.path.join(out, "train", ".train.manifest.partial.json"))
    assert [s.name for s in journal.shards] == ["train-00000-of-00007", "train-00001-of-00007"]
    temps = [n for n in leftovers(out) if ".tmp-" in n]
    assert len(temps) == 1 and temps[0].startswith("train/.train-00002-of-00007.tmp-")

    results = convert_imagenet(root, out, num_train_shards=TRAIN_SHARDS,
                               num_validation_shards=VALIDATION_SHARDS, split_subdirs=True,
                               workers=1)
    assert (results["train"].skipped, results["train"].written) == (2, 5)
    assert tree_bytes(out) == tree_bytes(imagenet_reference[0])
    assert leftovers(out) == []


def test_tensorflow_reads_the_shards(imagenet_tree, imagenet_reference):
    tf = pytest.importorskip("tensorflow")
    _, info = imagenet_tree
    out, _ = imagenet_reference
    files = sorted(os.path.join(out, "train", n) for n in os.listdir(os.path.join(out, "train"))
                   if n.startswith("train-"))
    spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/filename": tf.io.FixedLenFeature([], tf.string),
            "image/height": tf.io.FixedLenFeature([], tf.int64),
            "image/width": tf.io.FixedLenFeature([], tf.int64),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64)}
    seen = 0
    for record in tf.data.TFRecordDataset(files):
        ex = tf.io.parse_single_example(record, spec)
        image = tf.io.decode_jpeg(ex["image/encoded"], channels=3)
        synset, _, _, (w, h), _ = info[ex["image/filename"].numpy().decode()]
        assert tuple(image.shape) == (h, w, 3)
        assert (int(ex["image/height"]), int(ex["image/width"])) == (h, w)
        assert int(ex["image/class/label"]) == LABELS[synset]
        seen += 1
    assert seen == 14
