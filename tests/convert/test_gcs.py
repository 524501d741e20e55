"""Converting straight to ``gs://`` through the fake GCS server (no local copy of the shards)."""

from __future__ import annotations

import os

import pytest

from tests.convert.conftest import TRAIN_SHARDS, VALIDATION_SHARDS
from tests.convert.helpers import tree_bytes

plugin = pytest.importorskip("fake_gcs.pytest_plugin")
fake_gcs_server = plugin.fake_gcs_server  # the fixture, also when run without -p


def test_imagenet_straight_to_gcs(fake_gcs_server, imagenet_tree, imagenet_reference, capsys):
    from tpudata import storage
    from tpudata.cli import main
    from tpudata.shards import read_manifest, verify_manifest
    from tpudata.shards.manifest import file_crc32c

    fs, _ = storage.url_to_fs("gs://imagenet-bucket")
    fs.mkdir("imagenet-bucket")
    out = "gs://imagenet-bucket/data/imagenet"
    argv = ["convert", "imagenet", f"--raw_data_dir={imagenet_tree[0]}",
            f"--gcs_output_path={out}", "--project=test-project", "--workers=2",
            f"--num_train_shards={TRAIN_SHARDS}", f"--num_validation_shards={VALIDATION_SHARDS}"]
    assert main(argv) == 0, capsys.readouterr().err
    assert "train: 7 shard(s), 14 records" in capsys.readouterr().out

    # the original's GCS layout: both splits side by side under the output path
    want = {os.path.basename(k): v for k, v in tree_bytes(imagenet_reference[0]).items()}
    names = sorted(os.path.basename(p) for p in fs.ls("imagenet-bucket/data/imagenet", detail=False))
    assert names == sorted(want)  # no journal, no temporaries
    fs.invalidate_cache()
    for name, data in want.items():
        assert fs.cat_file(f"imagenet-bucket/data/imagenet/{name}") == data, name
    for split in ("train", "validation"):
        url = f"{out}/{split}.manifest.json"
        assert verify_manifest(url) == []
        for shard in read_manifest(url).shards:  # the server's CRC32C agrees with the manifest
            assert file_crc32c(f"{out}/{shard.name}") == (shard.bytes, shard.crc32c)

    # a rerun finds every shard complete (checked against the object's CRC32C) and keeps it
    assert main(argv) == 0
    assert capsys.readouterr().out.count("kept from a previous run") == 2
