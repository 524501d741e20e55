"""Record indexes (``.idx``) that do not describe their file: refused before any read, or rebuilt
with a warning when asked.

An index must tile its whole file - start at 0, each frame where the previous one ends, the last
ending at the file's size - and must not be older than the file (local modification time, GCS
generation). Before these checks, 7 of 14 index faults gave wrong records with no error: a
stale index after the file grew, a cut index, a dropped, repeated or swapped line, an empty
index; and with a manifest a stale index only logged a warning.
"""

from __future__ import annotations

import logging
import os
import time

import pytest

import tpudata
from tpudata import storage
from tpudata.errors import DataLossError, StaleIndexError
from tpudata.shards.manifest import Manifest, ShardInfo, file_crc32c, manifest_name, write_manifest
from tpudata.source import TFRecordSource
from tpudata.tfrecord import IndexedTFRecordFile, build_index, read_index, write_index, write_records

from fake_gcs.pytest_plugin import fake_gcs_server  # noqa: F401  (fixture)

RECORDS = [b"record-%03d-" % i + b"x" * (i % 7) for i in range(40)]


def _indexed(tmp_path, name="part.tfrecord"):
    url = str(tmp_path / name)
    write_records(url, RECORDS)
    build_index(url, url + ".idx")
    return url, url + ".idx"


def _lines(idx: str) -> list[str]:
    return open(idx).read().splitlines(keepends=True)


def _rewrite(idx: str, lines: list[str]) -> None:
    mtime = os.stat(idx).st_mtime_ns  # an edit, not a newer index: keep it no older than the file
    with open(idx, "w") as f:
        f.writelines(lines)
    os.utime(idx, ns=(mtime, mtime))


def _append(url: str) -> None:
    with open(url, "ab") as f:
        f.write(tpudata.tfrecord.framing.frame([b"appended"]))


def _fault(kind: str, url: str, idx: str) -> None:
    lines = _lines(idx)
    if kind == "appended":
        _append(url)
        later = os.stat(idx).st_mtime_ns
        os.utime(url, ns=(later, later))  # grown within the same clock tick as the index
    elif kind == "cut":
        _rewrite(idx, lines[:-3])
    elif kind == "dropped":
        _rewrite(idx, lines[:10] + lines[11:])
    elif kind == "repeated":
        _rewrite(idx, lines[:10] + lines[9:])
    elif kind == "swapped":
        _rewrite(idx, lines[:10] + [lines[11], lines[10]] + lines[12:])
    elif kind == "empty":
        _rewrite(idx, [])
    elif kind == "shifted":
        _rewrite(idx, [f"{int(a) + 1} {b}\n" for a, b in (line.split() for line in lines)])
    elif kind == "newer-file":  # rewritten in place after indexing: same size, later mtime
        data = open(url, "rb").read()
        with open(url, "wb") as f:
            f.write(data)
        ahead = os.stat(idx).st_mtime_ns + 5_000_000_000
        os.utime(url, ns=(ahead, ahead))
    else:
        raise AssertionError(kind)


FAULTS = ["appended", "cut", "dropped", "repeated", "swapped", "empty", "shifted", "newer-file"]


@pytest.mark.parametrize("kind", FAULTS)
def test_a_faulty_index_file_is_refused_by_the_source(tmp_path, kind):
    url, idx = _indexed(tmp_path)
    _fault(kind, url, idx)
    with pytest.raises(StaleIndexError, match="stale index") as info:
        src = TFRecordSource([url], progress=False)
        [src[i] for i in range(len(src))]
    assert info.value.path == url and info.value.index_path == idx
    assert idx in str(info.value) and "rebuild" in str(info.value)


@pytest.mark.parametrize("kind", FAULTS)
def test_a_faulty_index_file_is_refused_by_indexed_file(tmp_path, kind):
    url, idx = _indexed(tmp_path)
    _fault(kind, url, idx)
    with pytest.raises(StaleIndexError, match="stale index"):
        f = IndexedTFRecordFile(url, idx)
        [f[i] for i in range(len(f))]


@pytest.mark.parametrize("kind", ["appended", "dropped", "swapped", "empty"])
def test_a_faulty_index_array_is_refused(tmp_path, kind):
    url, idx = _indexed(tmp_path)
    _fault(kind, url, idx)
    array = read_index(idx)
    with pytest.raises(StaleIndexError, match="the index given"):
        TFRecordSource([url], index=[array], progress=False)[0]
    with pytest.raises(StaleIndexError):
        tpudata.read_record_at(url, 0, array)


def test_a_stale_index_is_rebuilt_when_asked(tmp_path, caplog):
    url, idx = _indexed(tmp_path)
    _fault("appended", url, idx)
    with caplog.at_level(logging.WARNING):
        src = TFRecordSource([url], progress=False, rebuild_stale_index=True)
    assert [src[i] for i in range(len(src))] == RECORDS + [b"appended"]
    assert "rebuilding the index" in caplog.text and idx in caplog.text
    assert len(read_index(idx)) == 40  # rebuilt in memory only: the file is not rewritten
    f = IndexedTFRecordFile(url, idx, rebuild_stale_index=True)
    assert f[40] == b"appended"
    TFRecordSource([url], progress=False, rebuild_stale_index=True, write_index=True)
    assert len(read_index(idx)) == 41  # asked to write indexes: the stale one is replaced
    assert TFRecordSource([url], progress=False)[40] == b"appended"


def test_an_unreadable_index_names_both_files(tmp_path):
    url, idx = _indexed(tmp_path)
    _rewrite(idx, ["0 20\n", "not numbers\n"])
    with pytest.raises(StaleIndexError, match="unreadable index") as info:
        TFRecordSource([url], progress=False)
    assert info.value.path == url and info.value.index_path == idx
    assert TFRecordSource([url], progress=False, rebuild_stale_index=True)[39] == RECORDS[39]


def test_a_manifest_does_not_make_a_stale_index_trusted(tmp_path, caplog):
    """With a manifest whose size no longer matches, the old code warned and used the index."""
    url, idx = _indexed(tmp_path, "train-00000-of-00001")
    size, crc = file_crc32c(url)
    write_manifest(str(tmp_path / manifest_name("train")),
                   Manifest("train", [ShardInfo("train-00000-of-00001", 40, size, crc)]))
    assert len(TFRecordSource([url], progress=False)) == 40
    _fault("appended", url, idx)
    with pytest.raises(StaleIndexError):
        src = TFRecordSource([url], progress=False)
        [src[i] for i in range(len(src))]


def test_a_good_index_costs_no_scan(tmp_path, monkeypatch):
    url, idx = _indexed(tmp_path)
    from tpudata.source import tfrecord as source_module

    monkeypatch.setattr(source_module, "build_index", None)  # any scan would fail
    src = TFRecordSource([url], progress=False)
    assert src.__getitems__([39, 0]) == [RECORDS[39], RECORDS[0]]


def test_gcs_generations_order_an_index_and_its_file(fake_gcs_server):  # noqa: F811
    storage.gcs_filesystem().mkdir("idx-bucket")
    url = "gs://idx-bucket/d/part.tfrecord"
    write_records(url, RECORDS)
    write_index(url + ".idx", build_index(url))
    assert TFRecordSource([url], progress=False)[39] == RECORDS[39]
    time.sleep(0.01)
    write_records(url, RECORDS)  # the same bytes again: a newer generation than the index's
    with pytest.raises(StaleIndexError, match="modified after its index"):
        TFRecordSource([url], progress=False)[0]
    assert TFRecordSource([url], progress=False, rebuild_stale_index=True)[0] == RECORDS[0]


def test_stale_index_errors_are_data_loss_errors():
    assert issubclass(StaleIndexError, DataLossError) and issubclass(StaleIndexError, OSError)
