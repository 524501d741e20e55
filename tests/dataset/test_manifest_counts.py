"""Exact counts from build manifests, without scanning: cardinality() and `count --manifest`."""

from __future__ import annotations

import tpudata
from tpudata import storage
from tpudata.cli import main
from tpudata.dataset import UNKNOWN, TFRecordDataset


def _build(tmp_path, n=100):
    tpudata.build_shards(list(range(n)), _encode, str(tmp_path), "train", num_shards=3, workers=1)
    return storage.glob(str(tmp_path / "train-*"))


def _encode(i):
    return tpudata.encode_example({"y": i})


def test_cardinality_from_manifest(tmp_path):
    files = _build(tmp_path)
    assert TFRecordDataset(files).cardinality() == 100
    assert TFRecordDataset(files).batch(8).cardinality() == 13
    assert TFRecordDataset(files).batch(8, drop_remainder=True).cardinality() == 12
    assert TFRecordDataset(files[1:]).shard(2, 0).cardinality() == 33


def test_no_or_stale_manifest_means_unknown(tmp_path):
    files = _build(tmp_path)
    stray = tmp_path / "other.tfrecord"
    tpudata.write_records(str(stray), [b"x"])
    assert TFRecordDataset([*files, str(stray)]).cardinality() == UNKNOWN
    with open(files[0], "ab") as f:  # a shard that no longer matches its manifest
        f.write(b"junk")
    assert TFRecordDataset(files).cardinality() == UNKNOWN


def test_count_manifest_cli(tmp_path, capsys):
    _build(tmp_path)
    assert main(["count", "--manifest", str(tmp_path / "train-*")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "100\ttotal (3 files, from manifests)"


def test_shard_warning_counts_records_from_manifests(tmp_path, caplog):
    """With manifests the few-files warning counts this host's records (not only files)."""
    tpudata.build_shards(list(range(100)), _encode, str(tmp_path), "train", num_shards=3,
                         workers=1)
    with caplog.at_level("WARNING", logger="tpudata.dataset.ops.shard"):
        tpudata.Dataset.list_files(str(tmp_path / "train-*-of-*"), shuffle=False).shard(2, 0)
    counts = [34, 33, 33]  # build_shards splits 100 records over 3 shards
    assert f"gets {counts[0] + counts[2]} of 100 records (2 of 3 files; hosts get 33 to 67 " \
           "records)" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="tpudata.dataset.ops.shard"):
        tpudata.Dataset.list_files(str(tmp_path / "train-*-of-*"), seed=1).shard(3, 1)
    assert "gets 1 of 3 files, about 33 of 100 records" in caplog.text


def test_shard_warning_without_manifests_counts_files(tmp_path, caplog):
    files = _build(tmp_path)
    storage.remove(str(tmp_path / "train.manifest.json"))
    with caplog.at_level("WARNING", logger="tpudata.dataset.ops.shard"):
        tpudata.Dataset.list_files(files, shuffle=False).shard(2, 1)
    assert "gets 1 of 3 files;" in caplog.text and "records" not in caplog.text
