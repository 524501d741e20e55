"""tpudata.jax.tfrecord_batches takes fsspec options as one ``storage_options`` dict: it used to
take them loose (``anon=True``) and pass them on as keywords TFRecordDataset refuses."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")

import tpudata.jax as tj  # noqa: E402
from tests.lockedfs import OPTIONS, locked, write_locked_shards  # noqa: E402,F401 (a fixture)


def test_storage_options_reach_fsspec(locked):
    write_locked_shards("bucket/j/train", 2, 6)
    ds = tj.tfrecord_batches("locked://bucket/j/train-*", 4, process_index=1, process_count=2,
                             progress=False, storage_options=OPTIONS)
    batches = list(ds)
    assert len(batches) == 2 and sum(float(w) for b in batches for w in b["weight"]) == 6


def test_loose_options_and_misspelt_keywords_raise_naming_the_fix(locked):
    files = write_locked_shards("bucket/k/train", 1, 2)
    with pytest.raises(TypeError, match=r"tfrecord_batches\(\).*'anon'.*storage_options=\{"):
        tj.tfrecord_batches(files, 2, process_index=0, process_count=1, anon=True)
    with pytest.raises(TypeError, match=r"'progres'; did you mean 'progress'"):
        tj.tfrecord_batches(files, 2, process_index=0, process_count=1, progres=False)
    with pytest.raises(TypeError, match=r"'sed'; did you mean 'seed'"):
        tj.source_batches([b"a"], 1, sed=3, process_index=0, process_count=1)
