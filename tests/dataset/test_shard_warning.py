"""The few-files-per-host warning of shard(): only for a file-level split of more than one host,
once per process and split, with the numbers that matter (files, records, hosts left empty)."""

from __future__ import annotations

import logging
import os

import pytest

import tpudata
from tpudata import Dataset, TFRecordDataset
from tpudata.distribute import split_batches

LOGGER = "tpudata.dataset.ops.shard"


@pytest.fixture
def files(tmp_path):
    """Three TFRecord files of 10, 20 and 30 records (no manifest: counts are unknown)."""
    out = []
    for k, n in enumerate((10, 20, 30)):
        path = os.path.join(tmp_path, f"part-{k}.tfrecord")
        tpudata.write_records(path, [b"%d" % i for i in range(n)])
        out.append(path)
    return out


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_one_shard_and_record_level_splits_do_not_warn(files, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        # every single-host input_fn: shard(1, 0) of a short file list
        one = Dataset.list_files(files, shuffle=False).shard(1, 0)
        # a record-level split reads every file: "gets 0 of 3 files" would be false
        records = TFRecordDataset(files).shard(4, 3)
        got = sum(1 for _ in records)
    assert len(list(one)) == 3 and got == len(range(3, 60, 4)) == 15
    assert _warnings(caplog) == []


def test_a_file_split_that_starves_hosts_warns_once_with_the_numbers(files, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(3):  # the same split built again (every epoch, every worker): one warning
            ds = Dataset.list_files(files, shuffle=False).shard(4, 3)
    assert len(list(ds)) == 0
    (message,) = _warnings(caplog)
    assert "shard 3 of 4 gets 0 of 3 files" in message
    assert "1 of 4 hosts get no file at all" in message and "TFRecordDataset(files).shard" in message
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        Dataset.list_files(files, shuffle=False).shard(2, 1)  # another split: its own warning
        Dataset.list_files(files, shuffle=False).shard(2, 1)
    (message,) = _warnings(caplog)
    assert "shard 1 of 2 gets 1 of 3 files;" in message and "no file at all" not in message


def test_the_bridges_record_split_does_not_warn_in_any_reader_or_epoch(files, caplog):
    counts = [10, 20, 30]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        rows = []
        for epoch in range(2):
            for index in range(4):  # 4 readers on 3 files: the records are dealt round robin
                ds = split_batches(files, counts, 4, index, 4, split="records", context=epoch)
                rows += [r for b in ds for r, w in zip(b["record"].tolist(), b["weight"]) if w]
    assert sorted(rows) == sorted([b"%d" % i for n in counts for i in range(n)] * 2)
    assert _warnings(caplog) == []
