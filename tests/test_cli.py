"""The ``tpudata`` command line: count, verify, head, index."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import tpudata
from tpudata.cli import main


@pytest.fixture
def shards(tmp_path):
    paths = []
    for i, n in enumerate((3, 5)):
        p = str(tmp_path / f"train-{i:05d}-of-00002")
        tpudata.write_records(p, [tpudata.encode_example({"x": np.arange(20, dtype=np.float32),
                                                          "y": j, "img": b"\xff\xd8" * 50})
                                  for j in range(n)])
        paths.append(p)
    return paths


def test_count(shards, tmp_path, capsys):
    assert main(["count", str(tmp_path / "train-*")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"3\t{shards[0]}", f"5\t{shards[1]}", "8\ttotal (2 files)"]


def test_verify_ok_and_first_damage(shards, capsys):
    assert main(["verify", *shards]) == 0
    assert "ok: 8 good records in 2 file(s)" in capsys.readouterr().err
    data = bytearray(open(shards[0], "rb").read())
    data[200] ^= 1
    open(shards[0], "wb").write(bytes(data))
    assert main(["verify", *shards]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith(f"{shards[0]}:")
    assert "corrupted record at" in captured.out


def test_verify_all_resynchronises(shards, capsys):
    record_len = os.path.getsize(shards[1]) // 5
    data = bytearray(open(shards[1], "rb").read())
    data[record_len + 20] ^= 1          # damage record 1
    data[3 * record_len + 20] ^= 1      # and record 3
    open(shards[1], "wb").write(bytes(data))
    assert main(["verify", "--all", *shards]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines == [f"{shards[1]}:{record_len + 12}: corrupted record at {record_len + 12}",
                     f"{shards[1]}:{3 * record_len + 12}: corrupted record at {3 * record_len + 12}"]
    assert "FAILED: 6 good records in 2 file(s), 2 damaged spot(s)" in captured.err


def test_verify_truncated_exit_code(shards, capsys):
    data = open(shards[0], "rb").read()
    open(shards[0], "wb").write(data[:-5])
    assert main(["verify", "--all", shards[0]]) == 1
    assert "truncated record at" in capsys.readouterr().out


def test_head(shards, capsys):
    assert main(["head", "-n", "2", shards[1]]) == 0
    out = capsys.readouterr().out
    assert out.count("record ") == 2
    assert "  y: int64[1] [1]" in out
    assert "  x: float32[20] [0, 1, 2, 3, 4, 5, 6, 7, ... (20 values)]" in out
    assert "img: bytes[1] [b'\\xff\\xd8" in out and "(100 bytes)" in out


def test_index(shards, tmp_path, capsys):
    out_dir = tmp_path / "idx"
    assert main(["index", "--output-dir", str(out_dir), *shards]) == 0
    idx = tpudata.read_index(str(out_dir / "train-00001-of-00002.idx"))
    assert len(idx) == 5
    assert tpudata.read_record_at(shards[1], 4, idx) == list(tpudata.read_records(shards[1]))[4]
    assert main(["index", shards[0]]) == 0
    assert os.path.exists(shards[0] + ".idx")


def test_missing_input_is_a_clear_error(tmp_path, capsys):
    assert main(["count", str(tmp_path / "nope-*")]) == 2
    assert "no files match" in capsys.readouterr().err


def test_console_script_runs():
    proc = subprocess.run([sys.executable, "-m", "tpudata.cli", "--version"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("tpudata ")


def _subcommands(parser):
    """Every (sub)command path of an argparse parser, e.g. ("convert", "imagenet")."""
    import argparse

    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.append((name,))
                out += [(name,) + rest for rest in _subcommands(sub)]
    return out


def test_every_subcommand_has_working_help(capsys):
    from tpudata.cli import build_parser

    paths = _subcommands(build_parser())
    assert ("bench",) in paths and ("bench", "infeed") in paths and ("convert", "imagenet") in paths
    for path in [()] + paths:
        with pytest.raises(SystemExit) as exit_:
            main([*path, "--help"])
        assert exit_.value.code == 0, path
        out = capsys.readouterr().out
        assert out.startswith("usage: tpudata"), (path, out[:200])


def _encode(i):
    return tpudata.encode_example({"y": i})


def test_verify_skips_manifests_a_glob_picks_up(tmp_path, capsys):
    out = str(tmp_path / "ds")
    items = list(range(12))
    tpudata.build_shards(items, _encode, out, "train", num_shards=2, workers=1, progress=False)
    assert os.path.exists(os.path.join(out, "train.manifest.json"))
    assert main(["verify", os.path.join(out, "*")]) == 0
    err = capsys.readouterr().err
    assert "train.manifest.json" not in err  # the glob itself skips tpudata's side files
    assert "ok: 12 good records in 2 file(s)" in err
    assert main(["count", os.path.join(out, "*")]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("12\ttotal (2 files)")
    # a manifest named explicitly is read, and reported as what it is
    assert main(["verify", os.path.join(out, "train.manifest.json")]) == 1
    with pytest.raises(tpudata.StorageError, match="matches only manifests"):
        from tpudata.commands.records import _files

        _files(type("A", (), {"paths": [os.path.join(out, "*.json")]}))
