"""JsonLinesDataset: fields of JSON-lines files, local, compressed and gs://; errors name the
file and line (after a restore too)."""

from __future__ import annotations

import gzip
import json
import logging

import numpy as np
import pytest

from fake_gcs.pytest_plugin import fake_gcs_server  # noqa: F401 - the fixture
from tests.text.helpers import killed_and_restored
from tpudata.errors import InvalidTextError, SpecError
from tpudata.text import JsonLinesDataset, tokenize


def write(path, objects, raw_lines=()):
    lines = [json.dumps(o).encode() for o in objects] + list(raw_lines)
    data = b"\n".join(lines) + b"\n"
    if str(path).endswith(".gz"):
        data = gzip.compress(data)
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


def test_one_field_or_a_dict_of_fields(tmp_path):
    path = write(tmp_path / "a.jsonl", [{"text": "héllo", "id": 1, "score": 0.5, "ids": [1, 2]},
                                        {"text": "x", "id": 2, "score": 1.5, "ids": [3]}])
    assert list(JsonLinesDataset(path)) == ["héllo".encode(), b"x"]
    out = list(JsonLinesDataset(path, fields=["id", "score", "ids"]))
    assert [int(e["id"]) for e in out] == [1, 2] and out[1]["score"] == np.float64(1.5)
    assert out[0]["ids"].tolist() == [1, 2]


def test_files_and_globs_in_order_gzip_and_blank_lines(tmp_path):
    write(tmp_path / "b-0.jsonl.gz", [{"text": "a"}, {"text": "b"}], raw_lines=[b"", b"  "])
    write(tmp_path / "b-1.jsonl.gz", [{"text": "c"}])
    ds = JsonLinesDataset(str(tmp_path / "b-*.jsonl.gz"), compression_type="GZIP")
    assert list(ds) == [b"a", b"b", b"c"]


def test_a_line_that_is_not_json_names_file_and_line_or_is_skipped(tmp_path, caplog):
    path = write(tmp_path / "c.jsonl", [{"text": "a"}], raw_lines=[b"{oops", b'{"text": "\xff"}'])
    write(tmp_path / "c.jsonl", [{"text": "a"}, {"text": "b"}],
          raw_lines=[b"{oops", b'{"text": "d\xff"}', b'{"text": "e"}'])
    with pytest.raises(InvalidTextError) as err:
        list(JsonLinesDataset(path))
    assert (err.value.path, err.value.record) == (path, "line 3")
    with caplog.at_level(logging.WARNING, logger="tpudata.text"):
        assert list(JsonLinesDataset(path, skip_invalid=True)) == [b"a", b"b", b"e"]
    assert "line 3" in caplog.text and "line 4" in caplog.text


def test_a_missing_field_names_file_and_line_even_after_a_restore(tmp_path):
    objects = [{"text": str(i)} for i in range(50)] + [{"body": "no text"}]
    path = write(tmp_path / "d.jsonl", objects)
    it = JsonLinesDataset(path).iterator()
    [next(it) for _ in range(20)]
    state = it.get_state()
    it = JsonLinesDataset(path).iterator(state)
    assert next(it) == b"20"
    with pytest.raises(SpecError, match=r"d.jsonl, line 51 has no field 'text'"):
        list(it)


def test_restores_exactly(tmp_path):
    paths = [write(tmp_path / f"e-{k}.jsonl", [{"text": f"{k}-{i}"} for i in range(30)])
             for k in range(3)]
    ds = JsonLinesDataset(paths)
    want = list(ds)
    for seed in range(3):
        assert killed_and_restored(ds, seed)[0] == want


def test_gs_urls(fake_gcs_server):  # noqa: F811 - the fixture imported above
    from tpudata import storage

    storage.gcs_filesystem().mkdir("textbucket")
    with storage.open_atomic("gs://textbucket/docs/part-0.jsonl") as f:
        f.write(b"\n".join(json.dumps({"text": f"doc {i}"}).encode() for i in range(10)))
    ds = tokenize(JsonLinesDataset("gs://textbucket/docs/*.jsonl"), lambda t: [[len(x)] for x in t])
    assert [e["tokens"].tolist() for e in ds] == [[5]] * 10
