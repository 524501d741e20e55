"""``tpudata convert`` checks that it can write to its output before converting anything."""

from __future__ import annotations

import numpy as np
import pytest

from fake_gcs import pytest_plugin as plugin
from tpudata import storage
from tpudata.cli import main
from tpudata.convert import convert_arrays, convert_image_folder, convert_imagenet, convert_npz
from tpudata.errors import StorageError

fake_gcs_server = plugin.fake_gcs_server  # the fixture


def _blocked(tmp_path) -> str:
    """An output path below a regular file: no directory can be made there (also as root)."""
    (tmp_path / "a-file").write_bytes(b"x")
    return str(tmp_path / "a-file" / "out")


def _npz(tmp_path) -> str:
    path = tmp_path / "data.npz"
    np.savez(path, x=np.arange(10, dtype=np.int64), y=np.ones((10, 2), np.float32))
    return str(path)


def test_cli_unwritable_output_fails_before_reading_the_input(tmp_path, capsys):
    out = _blocked(tmp_path)
    # the input does not exist either: the output is checked first
    assert main(["convert", "numpy", str(tmp_path / "missing.npz"), "-o", out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"tpudata convert numpy: cannot write to the output {out!r}: ")
    assert "NotADirectoryError" in err[0]


@pytest.mark.parametrize("kind", ["images", "imagenet"])
def test_image_converters_check_the_output_before_scanning(tmp_path, kind):
    out = _blocked(tmp_path)
    fn = convert_image_folder if kind == "images" else convert_imagenet
    with pytest.raises(StorageError) as info:
        fn(str(tmp_path / "no-such-tree"), out)  # scanning it would fail otherwise
    assert info.value.url == out and f"cannot write to the output {out!r}" in str(info.value)


def test_missing_bucket_is_reported_before_converting(fake_gcs_server, tmp_path, capsys):
    out = "gs://no-bucket/data"
    assert main(["convert", "numpy", _npz(tmp_path), "-o", out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"tpudata convert numpy: cannot write to the "
                                               f"output {out!r}: bucket 'no-bucket' does not exist")
    with pytest.raises(StorageError, match="create it"):
        convert_arrays({"x": np.arange(3)}, out)


def test_probe_leaves_nothing_behind(fake_gcs_server, tmp_path):
    storage.gcs_filesystem().mkdir("bucket")
    for out in (str(tmp_path / "out"), "gs://bucket/out"):
        result = convert_npz(_npz(tmp_path), out, "rows", num_shards=2)
        names = sorted(u.rsplit("/", 1)[-1] for u in storage.glob(storage.join(out, "*"), include_side_files=True))
        assert names == ["rows-00000-of-00002", "rows-00001-of-00002", "rows.manifest.json"]
        assert result.records_written == 10
    assert not list((tmp_path / "out").glob(".*"))  # no probe, no temporary
