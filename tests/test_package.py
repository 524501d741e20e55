"""The public surface: a sorted __all__ whose names all import, and no heavy imports."""

from __future__ import annotations

import subprocess
import sys

import tpudata


def test_all_is_sorted_and_importable():
    assert tpudata.__all__ == sorted(tpudata.__all__)
    for name in tpudata.__all__:
        assert getattr(tpudata, name) is not None
    for name in ("TFRecordWriter", "read_records", "encode_example", "decode_example",
                 "parse_examples", "FixedLenFeature", "VarLenFeature", "DataLossError",
                 "CorruptRecordError", "TruncatedRecordError", "SpecError", "Dataset",
                 "TFRecordDataset", "build_shards"):
        assert name in tpudata.__all__


def test_import_stays_light():
    code = ("import sys, tpudata; print(sorted(m for m in ('PIL', 'dask', 'distributed', "
            "'tensorflow', 'google.cloud.storage') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
