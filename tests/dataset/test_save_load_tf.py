"""Dataset.save's shards are plain TFRecord files: live TensorFlow reads them record for record
(runs only where TensorFlow is importable). The element encoding inside is tpudata's own."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")

import tpudata  # noqa: E402
from tpudata.dataset import Dataset  # noqa: E402
from tpudata.dataset.io.saved_format import METADATA  # noqa: E402


@pytest.mark.parametrize("compression", [None, "GZIP", "ZLIB"])
def test_tensorflow_reads_the_saved_shards(tmp_path, compression):
    Dataset.range(20).map(lambda x: {"x": x, "s": b"v" * int(x)}).save(
        str(tmp_path), compression=compression, num_shards=3)
    meta = json.loads((tmp_path / METADATA).read_text())
    for shard in meta["shards"]:
        url = str(tmp_path / shard["file"])
        got = [r.numpy() for r in tf.data.TFRecordDataset(url, compression_type=compression or "")]
        assert got == list(tpudata.read_records(url)) and len(got) == shard["records"]
