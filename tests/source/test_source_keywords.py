"""TFRecordSource's keywords: a misspelt one raises at once naming the closest (``verfy=False``
used to be taken as an fsspec option and fail later, naming ``build_index()``), and fsspec
options go in one ``storage_options`` dict."""

from __future__ import annotations

import pytest

from tests.lockedfs import OPTIONS, locked, write_locked_shards  # noqa: F401 (a fixture)
from tpudata import TFRecordSource, decode_example


def test_misspelt_keyword_raises_naming_the_closest(tmp_path):
    files = [str(tmp_path / "missing.tfrecord")]  # never opened: the keyword is checked first
    with pytest.raises(TypeError, match=r"TFRecordSource\(\) got an unexpected keyword argument "
                                        r"'verfy'; did you mean 'verify'\?"):
        TFRecordSource(files, verfy=False)
    with pytest.raises(TypeError, match=r"'anon'.*fsspec options go in storage_options=\{"):
        TFRecordSource(files, anon=True)


def test_storage_options_reach_fsspec(locked):
    write_locked_shards("bucket/s/train", 2, 5)
    src = TFRecordSource("locked://bucket/s/train-*", progress=False, storage_options=OPTIONS)
    assert len(src) == 10
    assert [int(decode_example(r)["id"][0]) for r in src.__getitems__([9, 0, 5])] == [9, 0, 5]
    assert src.storage_options == OPTIONS
