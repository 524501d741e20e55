"""Dataset constructors take explicit keywords: a misspelt one raises, naming the closest."""

from __future__ import annotations

import pytest

from tpudata.dataset import Dataset, FixedLengthRecordDataset, TextLineDataset, TFRecordDataset
from tests.dataset.helpers import outputs, write_shards


@pytest.mark.parametrize("make,bad,closest", [
    (lambda p: TFRecordDataset(p, num_parralel_reads=8), "num_parralel_reads", "num_parallel_reads"),
    (lambda p: TFRecordDataset(p, verfy=False), "verfy", "verify"),
    (lambda p: TFRecordDataset(p, compresion="GZIP"), "compresion", "compression"),
    (lambda p: TextLineDataset(p, bufer_size=10), "bufer_size", "buffer_size"),
    (lambda p: FixedLengthRecordDataset(p, 4, header_byte=2), "header_byte", "header_bytes"),
    (lambda p: Dataset.list_files(p, sead=3), "sead", "seed"),
])
def test_misspelt_keyword_raises_with_the_closest(tmp_path, make, bad, closest):
    path = write_shards(tmp_path, 1, 2)[0]
    with pytest.raises(TypeError, match=rf"{bad!r}; did you mean {closest!r}"):
        make(path)


def test_unrelated_keyword_points_to_storage_options(tmp_path):
    path = write_shards(tmp_path, 1, 2)[0]
    with pytest.raises(TypeError, match=r"'token'.*storage_options=\{"):
        TFRecordDataset(path, token="anon")
    with pytest.raises(TypeError, match="must be a dict"):
        TFRecordDataset(path, storage_options="anon")


def test_storage_options_reach_fsspec(tmp_path):
    path = write_shards(tmp_path, 1, 3)[0]
    assert len(outputs(TFRecordDataset(path, storage_options={"auto_mkdir": False}))) == 3
    assert len(outputs(Dataset.list_files(str(tmp_path / "train-*"), storage_options={}))) == 1
