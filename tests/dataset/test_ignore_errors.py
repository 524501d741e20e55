"""ignore_errors: map errors drop their element, damaged TFRecord files are skipped from the
bad record on (file and offset logged); the state stays element-exact."""

from __future__ import annotations

import logging

import pytest

from tpudata.dataset import Dataset, TFRecordDataset
from tpudata.errors import DataLossError
from tests.dataset.helpers import SPEC, check_restore_everywhere, outputs, write_shards


def inverse(x):
    return 12 // int(x % 4)  # ZeroDivisionError for multiples of 4


@pytest.mark.parametrize("parallel", [None, 3])
def test_map_errors_drop_their_elements(parallel, caplog):
    ds = Dataset.range(10).map(inverse, num_parallel_calls=parallel)
    with pytest.raises(ZeroDivisionError):
        outputs(ds)
    with caplog.at_level(logging.WARNING):
        assert outputs(ds.ignore_errors()) == [12, 6, 4, 12, 6, 4, 12]
    assert "ignore_errors: map(inverse) raised on the element after output 3" in caplog.text
    assert "ZeroDivisionError" in caplog.text


def test_map_errors_in_worker_processes():
    ds = Dataset.range(10).map(inverse, use_processes=True, num_parallel_calls=2)
    assert outputs(ds.ignore_errors()) == [12, 6, 4, 12, 6, 4, 12]


def test_restore_everywhere_with_dropped_elements():
    out = check_restore_everywhere(
        lambda: Dataset.range(30).map(inverse, num_parallel_calls=2).ignore_errors().batch(4))
    assert sum(len(b) for b in out) == 22


def test_damaged_tfrecord_file_is_skipped_with_file_and_offset(tmp_path, caplog):
    paths = write_shards(tmp_path, 2, 3)
    data = bytearray(open(paths[0], "rb").read())
    data[-3] ^= 1  # the last record of the first file
    open(paths[0], "wb").write(bytes(data))
    ds = TFRecordDataset(paths).parse(SPEC)
    with pytest.raises(DataLossError):
        outputs(ds)
    with caplog.at_level(logging.WARNING):
        assert [e["id"] for e in outputs(ds.ignore_errors())] == [0, 1, 3, 4, 5]
    assert f"skipping the rest of {paths[0]}: corrupted record at 150" in caplog.text
    files = Dataset.list_files(str(tmp_path / "train-*"), shuffle=False)
    got = outputs(files.interleave(lambda f: TFRecordDataset(f), cycle_length=2).parse(SPEC)
                  .ignore_errors())
    assert sorted(e["id"] for e in got) == [0, 1, 3, 4, 5]


def test_other_errors_still_raise():
    def bad(x):
        raise ValueError("predicate failed")

    with pytest.raises(ValueError, match="predicate failed"):
        outputs(Dataset.range(3).filter(bad).ignore_errors())
    assert Dataset.range(3).ignore_errors().element_spec == Dataset.range(3).element_spec
