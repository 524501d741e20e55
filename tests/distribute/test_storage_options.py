"""The distribute entry points take fsspec options as one ``storage_options`` dict (they used to
take them loose and pass them on as keywords the readers refuse) and name misspelt keywords."""

from __future__ import annotations

import pytest

import tpudata
from tests.lockedfs import OPTIONS, locked, write_locked_shards  # noqa: F401 (a fixture)
from tpudata.distribute import file_record_counts, split_batches


def test_counts_and_split_batches_reach_fsspec_with_the_storage_options(locked):
    files = write_locked_shards("bucket/d/train", 2, 10)
    assert file_record_counts("locked://bucket/d/train-*", progress=False,
                              storage_options=OPTIONS) == [10, 10]
    counts = file_record_counts(files, False, OPTIONS)
    batches = list(split_batches(files, counts, 4, 0, 2, split="records",
                                 storage_options=OPTIONS))
    weights = [float(w) for b in batches for w in b["weight"]]
    assert len(batches) == 3 and sum(weights) == 10  # 10 of the 20 records, padded to 3 steps


def test_loose_fsspec_options_and_misspelt_keywords_raise_naming_the_fix(locked):
    files = write_locked_shards("bucket/e/train", 1, 3)
    with pytest.raises(TypeError, match=r"split_batches\(\).*'anon'.*storage_options=\{"):
        split_batches(files, [3], 2, 0, 1, anon=True)
    with pytest.raises(TypeError, match=r"'mask_ky'; did you mean 'mask_key'"):
        split_batches(files, [3], 2, 0, 1, mask_ky="w")
    with pytest.raises(TypeError, match=r"file_record_counts\(\).*'password'.*storage_options"):
        file_record_counts(files, password=OPTIONS["password"])
    with pytest.raises(TypeError, match=r"'progres'; did you mean 'progress'"):
        file_record_counts(files, progres=False)
    with pytest.raises(TypeError, match="storage_options must be a dict"):
        file_record_counts(files, storage_options="anon")
    with pytest.raises((PermissionError, tpudata.StorageError), match="needs storage_options"):
        file_record_counts(files, progress=False)  # this filesystem needs its options
