"""Every default of every tf.data / tf.io / tf.image call tpudata implements matches TF's, or is
a deliberate difference listed here and in docs/porting.md ("Porting from tf.data").

TF's signatures come from ``tests/data/golden/tf_defaults.json`` (written by live TensorFlow
with ``tests/data/make_tf_defaults.py``); ``test_table_matches_live_tensorflow`` re-reads them
where TensorFlow is importable.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re

import numpy as np
import pytest

import tpudata
from tests.readme import ROOT

GOLDEN = os.path.join(ROOT, "tests", "data", "golden", "tf_defaults.json")
TABLE = json.load(open(GOLDEN, encoding="utf-8"))

# TF's graph-op ``name=`` is accepted nowhere (docs/porting.md: "name= argument").
IGNORED = {"name"}

# (TF call, parameter) -> why tpudata differs. Each must show in docs/porting.md.
DEVIATIONS = {
    ("ignore_errors", "log_warning"): "default True: skips are always logged",
    ("map", "synchronous"): "not accepted",
    ("map", "use_unbounded_threadpool"): "not accepted",
    ("tf.io.parse_example", "serialized"): "tpudata.parse_examples(records, spec)",
    ("tf.io.parse_example", "features"): "tpudata.parse_examples(records, spec)",
    ("tf.io.parse_single_example", "serialized"): "parse_single_example(record, spec)",
    ("tf.io.parse_single_example", "features"): "parse_single_example(record, spec)",
    ("tf.io.parse_example", "example_names"): "not accepted: errors name file and offset",
    ("tf.io.parse_single_example", "example_names"): "not accepted",
    ("tf.io.TFRecordWriter", "path"): "named url_or_fileobj (a URL or a file object)",
    ("tf.io.TFRecordWriter", "options"): "compression= / compression_level= instead",
    ("tf.io.decode_jpeg", "ratio"): "not accepted (full-size decode)",
    ("tf.io.decode_jpeg", "acceptable_fraction"): "not accepted",
    ("tf.io.decode_jpeg", "dct_method"): "position: keyword only in ported code",
    ("tf.io.decode_and_crop_jpeg", "ratio"): "not accepted",
    ("tf.io.decode_and_crop_jpeg", "acceptable_fraction"): "not accepted",
    ("tf.io.decode_and_crop_jpeg", "dct_method"): "position",
    ("tf.io.decode_image", "channels"): "0 (TF None): both mean the file's channels",
    ("tf.io.extract_jpeg_shape", "output_type"): "not accepted: always int32",
    ("tf.io.is_jpeg", "contents"): "named data",
    ("tf.compat.v1.image.resize_area", "align_corners"): "not accepted",
    ("tf.image.sample_distorted_bounding_box", "seed"): "None (TF 0): both draw a fresh seed",
    ("tf.image.sample_distorted_bounding_box", "aspect_ratio_range"): "TF's None = this value",
    ("tf.image.sample_distorted_bounding_box", "area_range"): "TF's None = this value",
    ("tf.image.sample_distorted_bounding_box", "max_attempts"): "TF's None = this value",
    ("tf.image.sample_distorted_bounding_box", "use_image_if_no_bounding_boxes"): "same",
}

# tf.data.Dataset methods tpudata does not have; each is named in docs/porting.md.
NOT_IMPLEMENTED = {"fingerprint", "ragged_batch", "rejection_resample", "snapshot",
                   "sparse_batch"}


def porting_section() -> str:
    return open(os.path.join(ROOT, "docs", "porting.md"), encoding="utf-8").read()


def resolve(path: str):
    module, _, name = path.rpartition(".")
    if module == "tpudata":
        return getattr(tpudata, name)
    return getattr(importlib.import_module(module), name)


def encode(default):
    """Our default in the table's JSON form (see make_tf_defaults.encode_default)."""
    if default is inspect.Parameter.empty:
        return {"required": True}
    if default is None or isinstance(default, (bool, int, float, str)):
        return {"value": default}
    if isinstance(default, (np.dtype, type)):
        dt = np.dtype(default)
        return {"dtype": "bytes" if dt.kind in "OSU" else dt.name}
    if isinstance(default, (tuple, list)):
        return {"value": [encode(v).get("value", repr(v)) for v in default]}
    return {"repr": repr(default)}


def _default(p: dict):
    return {k: v for k, v in p.items() if k in ("required", "value", "dtype", "repr")}


def differences(key: str, tf_params: list, fn) -> list[tuple]:
    """``(key, parameter, what)`` for each way ``fn`` differs from TF's parameters."""
    ours = {p.name: p for p in inspect.signature(fn).parameters.values()
            if p.name not in ("self", "cls")}
    positional = [p.name for p in ours.values() if p.kind == p.POSITIONAL_OR_KEYWORD]
    out = []
    tf_positional = [p["name"] for p in tf_params
                     if p["kind"] == "POSITIONAL_OR_KEYWORD" and p["name"] not in IGNORED]
    for p in tf_params:
        name = p["name"]
        if name in IGNORED:
            continue
        mine = ours.get(name)
        if mine is None:
            out.append((key, name, "missing"))
            continue
        tf_default = _default(p)
        if tf_default != encode(mine.default) and not (
                tf_default.get("required") and mine.default is not inspect.Parameter.empty):
            # (a default where TF requires the argument changes no ported call)
            out.append((key, name, f"default {encode(mine.default)} vs TF {tf_default}"))
        if name in tf_positional and tf_positional.index(name) != (
                positional.index(name) if name in positional else -1):
            out.append((key, name, "position"))
    return out


def all_differences() -> list[tuple]:
    out = []
    for name, entry in TABLE["dataset_methods"].items():
        if name in NOT_IMPLEMENTED or name == "range":  # range(*args): Python's range
            continue
        out += differences(name, entry["params"], getattr(tpudata.Dataset, name))
    for tf_path, entry in TABLE["calls"].items():
        out += differences(tf_path, entry["params"], resolve(entry["tpudata"]))
    return out


def test_defaults_match_tf_or_are_listed():
    found = {(key, param): what for key, param, what in all_differences()}
    unlisted = {k: v for k, v in found.items() if k not in DEVIATIONS}
    assert not unlisted, f"defaults that differ from tf's and are not listed: {unlisted}"
    stale = set(DEVIATIONS) - set(found)
    assert not stale, f"listed deviations that no longer differ: {stale}"


def test_every_tf_dataset_method_is_implemented_or_listed():
    ours = {n for n in TABLE["dataset_methods"] if hasattr(tpudata.Dataset, n)}
    assert ours | NOT_IMPLEMENTED == set(TABLE["dataset_methods"])
    assert not ours & NOT_IMPLEMENTED
    for name, entry in TABLE["dataset_methods"].items():
        if name in ours:
            static = isinstance(inspect.getattr_static(tpudata.Dataset, name), staticmethod)
            assert static == entry["static"], name


def test_deviations_and_missing_methods_are_in_the_readme():
    section = porting_section()
    for key, param in DEVIATIONS:
        op = key.rsplit(".", 1)[-1]
        assert re.search(rf"`[^`]*{re.escape(op)}[^`]*`", section), f"{op} not in Porting"
        assert param in section, f"{key}: {param} not in the Porting section"
    for name in NOT_IMPLEMENTED:
        assert f"`{name}`" in section, f"missing method {name} not named in Porting"
    assert "name=" in section


def test_options_defaults_match():
    options = tpudata.dataset.Options()
    assert TABLE["options"] == {
        "deterministic": options.deterministic,
        "autotune.cpu_budget": options.autotune.cpu_budget,
        "threading.private_threadpool_size": options.threading.private_threadpool_size}


def test_table_matches_live_tensorflow():
    pytest.importorskip("tensorflow")
    from tests.data.make_tf_defaults import table

    assert table() == TABLE


# -- the signature changes that brought tpudata to TF's --------------------------------------------
def test_tf_call_forms_work(tmp_path):
    from tpudata.dataset import Dataset
    from tests.dataset.helpers import outputs

    a, b = Dataset.range(3), Dataset.range(10, 14)
    assert outputs(Dataset.zip(a, b)) == outputs(Dataset.zip((a, b))) == [[0, 10], [1, 11],
                                                                           [2, 12]]
    assert outputs(Dataset.zip(datasets={"a": a})) == [{"a": 0}, {"a": 1}, {"a": 2}]
    with pytest.raises(TypeError):
        Dataset.zip()
    # batch(batch_size, drop_remainder, num_parallel_calls, deterministic) as in TF
    assert outputs(Dataset.range(5).batch(2, True, 4, False)) == [[0, 1], [2, 3]]
    assert outputs(Dataset.range(5).interleave(lambda x: Dataset.range(x, x + 2), 2, None)) == \
        outputs(Dataset.range(5).interleave(lambda x: Dataset.range(x, x + 2), 2, 1))
    cached = Dataset.range(4).cache(filename=str(tmp_path / "c")).repeat(2)
    assert outputs(cached) == [0, 1, 2, 3] * 2 and os.listdir(tmp_path / "c")
    assert outputs(Dataset.range(3).cache()) == [0, 1, 2]
    with pytest.raises(TypeError, match="filename or url"):
        Dataset.range(3).cache("a", url="b")
    (tmp_path / "f").write_bytes(b"")
    assert len(outputs(Dataset.list_files(file_pattern=str(tmp_path / "f")))) == 1


def test_readers_num_parallel_reads_interleave_files_like_tf(tmp_path):
    from tpudata import FixedLengthRecordDataset, TextLineDataset
    from tests.dataset.helpers import outputs

    fixed, text = [], []
    for i in range(3):
        (tmp_path / f"b{i}").write_bytes(b"HH" + bytes(range(i * 4, i * 4 + 4)))
        fixed.append(str(tmp_path / f"b{i}"))
        (tmp_path / f"t{i}").write_text(f"a{i}\nb{i}\nc{i}\n")
        text.append(str(tmp_path / f"t{i}"))
    got = outputs(FixedLengthRecordDataset(fixed, 2, header_bytes=2, num_parallel_reads=3))
    assert got == [bytes([0, 1]), bytes([4, 5]), bytes([8, 9]), bytes([2, 3]), bytes([6, 7]),
                   bytes([10, 11])]
    assert outputs(FixedLengthRecordDataset(fixed, 2, 2, None)) == sorted(got)
    assert outputs(TextLineDataset(text, num_parallel_reads=2)) == [
        b"a0", b"a1", b"b0", b"b1", b"c0", b"c1", b"a2", b"b2", b"c2"]
