"""Progress bars (tqdm) show only on a terminal: never in log files, CI output or pipes.

Every tqdm bar in the package is checked here with a stderr that is not a terminal (pytest's
capture): nothing may be written to it.
"""

from __future__ import annotations

import tpudata
from tpudata.distribute import file_record_counts


def _files(tmp_path, n=3):
    names = []
    for k in range(n):  # no manifests: the bars below are the scanning ones
        name = str(tmp_path / f"part-{k}")
        tpudata.write_records(name, [tpudata.encode_example({"id": k * 10 + i}) for i in range(10)])
        names.append(name)
    return names


def test_tfrecord_source_indexing_shows_no_bar_off_a_terminal(tmp_path, capsys):
    names = _files(tmp_path)
    src = tpudata.TFRecordSource(names)  # progress=True: the default
    assert len(src) == 30 and src.__getitems__([0, 29])
    assert capsys.readouterr().err == ""


def test_record_counting_shows_no_bar_off_a_terminal(tmp_path, capsys):
    assert file_record_counts(_files(tmp_path)) == [10, 10, 10]  # progress=True: the default
    assert capsys.readouterr().err == ""


def test_shard_building_shows_no_bar_off_a_terminal(tmp_path, capsys):
    tpudata.write_shards([tpudata.encode_example({"id": i}) for i in range(20)], str(tmp_path),
                         "train", num_shards=2)
    assert capsys.readouterr().err == ""


def test_dataset_save_shows_no_bar_off_a_terminal(tmp_path, capsys):
    tpudata.Dataset.range(20).save(str(tmp_path / "saved"))
    assert capsys.readouterr().err == ""
