"""TFRecordIterable takes fsspec options as one ``storage_options`` dict (it used to take them
loose and pass them on as keywords the readers refuse) and names misspelt keywords."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

import tpudata  # noqa: E402
from tests.lockedfs import OPTIONS, locked, write_locked_shards  # noqa: E402,F401 (a fixture)
from tpudata.torch import SourceIterable, TFRecordIterable  # noqa: E402

ID = {"id": tpudata.FixedLenFeature([], np.int64)}


def parse_ids(ds, split):
    return ds.parse(ID)


def test_storage_options_reach_fsspec(locked):
    write_locked_shards("bucket/t/train", 2, 7)
    ds = TFRecordIterable("locked://bucket/t/train-*", 4, pipeline=parse_ids, num_workers=0,
                          rank=0, world_size=1, progress=False, storage_options=OPTIONS)
    ids = []
    for batch in DataLoader(ds, batch_size=None):
        ids += batch["id"].numpy()[batch["weight"].numpy() > 0].tolist()
    assert sorted(ids) == list(range(14)) and ds.storage_options == OPTIONS


def test_loose_options_and_misspelt_keywords_raise_naming_the_fix(locked):
    files = write_locked_shards("bucket/u/train", 1, 2)
    with pytest.raises(TypeError, match=r"TFRecordIterable\(\).*'anon'.*storage_options=\{"):
        TFRecordIterable(files, 2, num_workers=0, rank=0, world_size=1, anon=True)
    with pytest.raises(TypeError, match=r"'mask_ky'; did you mean 'mask_key'"):
        TFRecordIterable(files, 2, counts=[2], mask_ky="w")
    with pytest.raises(TypeError, match=r"'shufle'; did you mean 'shuffle'"):
        SourceIterable([b"a"], 1, shufle=False)
