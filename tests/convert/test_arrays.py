"""``tpudata convert numpy FILE.npz``: one Example per row, and back to the same arrays."""

from __future__ import annotations

import logging
import math
import os

import numpy as np
import pytest

import tpudata
from tests.lockedfs import OPTIONS, locked  # noqa: F401 (a fixture)
from tpudata.cli import main
from tpudata.convert import convert_arrays, convert_npz, load_arrays
from tpudata.shards import read_manifest, verify_manifest


def _arrays(n=50):
    rng = np.random.default_rng(0)
    return {
        "image": rng.integers(0, 256, (n, 4, 3), dtype=np.uint8),
        "x": rng.normal(size=(n, 5)).astype(np.float32),
        "label": rng.integers(-5, 1000, n).astype(np.int64),
        "flag": rng.random(n) < 0.5,
        "small": rng.integers(-100, 100, (n, 2)).astype(np.int8),
        "name": np.array([f"row-{i}-é" for i in range(n)]),
        "key": np.array([b"k%d" % i for i in range(n)]),
        "w": rng.normal(size=n),  # float64: stored as float32
    }


def test_cli_npz_round_trip(tmp_path, capsys, caplog):
    arrays = _arrays()
    path = tmp_path / "toy.npz"
    np.savez(path, **arrays)
    with caplog.at_level(logging.WARNING):
        assert main(["convert", "numpy", str(path), "--num-shards", "3"]) == 0
    assert "array 'w' is float64: stored as float32" in caplog.text
    assert "toy: 3 shard(s), 50 records" in capsys.readouterr().out
    # next to the file, named after it
    assert sorted(n for n in os.listdir(tmp_path) if n != "toy.npz") == [
        "toy-00000-of-00003", "toy-00001-of-00003", "toy-00002-of-00003", "toy.manifest.json"]
    m = read_manifest(str(tmp_path / "toy.manifest.json"))
    assert [s.records for s in m.shards] == [17, 17, 16]
    assert m.schema["image"] == {"type": "fixed", "dtype": "int64", "shape": [4, 3],
                                 "source_dtype": "|u1"}
    assert verify_manifest(str(tmp_path / "toy.manifest.json")) == []
    back = load_arrays(str(tmp_path), "toy")
    assert sorted(back) == sorted(arrays)
    for k, v in arrays.items():
        want = v.astype(np.float32).astype(np.float64) if k == "w" else v  # float32 precision
        assert back[k].dtype == want.dtype and back[k].shape == want.shape, k
        np.testing.assert_array_equal(back[k], want)
    # each record is a plain Example, readable without the manifest
    first = next(tpudata.read_records(str(tmp_path / "toy-00000-of-00003")))
    d = tpudata.decode_example(first)
    assert d["label"].tolist() == [arrays["label"][0]]
    assert d["name"].tolist() == ["row-0-é".encode()]


def test_npz_target_size_and_output_dir(tmp_path):
    arrays = {"x": np.zeros((1000, 64), np.float32), "y": np.arange(1000)}
    np.savez_compressed(tmp_path / "big.npz", **arrays)
    out = tmp_path / "out"
    assert main(["convert", "numpy", str(tmp_path / "big.npz"), "-o", str(out), "--prefix",
                 "train", "--target-shard-mb", "0.1"]) == 0
    m = read_manifest(str(out / "train.manifest.json"))
    assert m.num_records == 1000 and m.num_shards == math.ceil(m.total_bytes / 100_000) == 4
    again = convert_npz(str(tmp_path / "big.npz"), str(out), "train", target_shard_bytes=100_000)
    assert again.skipped == 4
    back = load_arrays(str(out))
    np.testing.assert_array_equal(back["y"], arrays["y"])


def test_bad_arrays(tmp_path, capsys):
    np.savez(tmp_path / "bad.npz", a=np.zeros(3), b=np.zeros(4))
    assert main(["convert", "numpy", str(tmp_path / "bad.npz")]) == 2
    assert "common first dimension" in capsys.readouterr().err
    with pytest.raises(ValueError, match="cannot be stored"):
        convert_arrays({"c": np.zeros(3, np.complex64)}, "memory://bad", "c")


def test_in_memory_arrays(memfs):
    arrays = {"x": np.arange(12, dtype=np.float32).reshape(6, 2), "s": np.array(list("abcdef"))}
    r = convert_arrays(arrays, "memory://arr", "d", num_shards=2)
    assert r.manifest.num_records == 6
    back = load_arrays("memory://arr", "d")
    np.testing.assert_array_equal(back["x"], arrays["x"])
    np.testing.assert_array_equal(back["s"], arrays["s"])


def test_load_arrays_takes_one_storage_options_dict(locked):
    arrays = {"x": np.arange(8, dtype=np.int64)}
    convert_arrays(arrays, "locked://bucket/arr", "d", num_shards=2, storage_options=OPTIONS)
    back = load_arrays("locked://bucket/arr", "d", storage_options=OPTIONS)
    np.testing.assert_array_equal(back["x"], arrays["x"])
    with pytest.raises(TypeError, match=r"'prefx'; did you mean 'prefix'"):
        load_arrays("locked://bucket/arr", prefx="d")
    with pytest.raises(TypeError, match=r"load_arrays\(\).*'password'.*storage_options=\{"):
        load_arrays("locked://bucket/arr", "d", **OPTIONS)
