"""FixedLenSequenceFeature, SparseFeature, RaggedFeature and decode_raw against TensorFlow's
results (tests/data/golden/structured.json, made by tests/data/make_structured_golden.py)."""

from __future__ import annotations

import base64
import json
import os

import numpy as np
import pytest

import tpudata
from tpudata.errors import DecodeError, SpecError
from tpudata.example import (
    FixedLenSequenceFeature,
    RaggedFeature,
    RaggedValues,
    SparseFeature,
    SparseValues,
    VarLenValues,
    decode_raw,
    encode_example,
    parse_examples,
    parse_single_example,
)

GOLDEN = os.path.join(os.path.dirname(__file__), "data", "golden", "structured.json")
with open(GOLDEN) as _f:
    DATA = json.load(_f)

PARTS = {"row_lengths": RaggedFeature.RowLengths, "row_splits": RaggedFeature.RowSplits,
         "row_starts": RaggedFeature.RowStarts, "row_limits": RaggedFeature.RowLimits,
         "value_rowids": RaggedFeature.ValueRowIds}


def dtype_of(name):
    return bytes if name == "bytes" else np.dtype(name)


def make_spec(name, plain):
    kind = plain["kind"]
    if kind == "fixed_sequence":
        key = plain.get("key", name)
        return key, FixedLenSequenceFeature(plain["shape"], dtype_of(plain["dtype"]), allow_missing=True,
                                            default_value=plain.get("default"))
    if kind == "sparse":
        return name, SparseFeature(plain["index"], plain["value"], dtype_of(plain["dtype"]), plain["size"],
                                   already_sorted=plain.get("already_sorted", False))
    parts = [RaggedFeature.UniformRowLength(k) if p == "uniform" else PARTS[p](k) for p, k in plain["partitions"]]
    return name, RaggedFeature(dtype_of(plain["dtype"]), value_key=plain["value"], partitions=parts,
                               row_splits_dtype=plain.get("row_splits_dtype", "int32"))


def values(plain_values, dtype):
    if dtype == "bytes":
        return [base64.b64decode(v) for v in plain_values]
    return plain_values


def check(got, want, dtype):
    if "indices" in want:
        assert isinstance(got, SparseValues)
        assert got.indices.tolist() == want["indices"]
        assert list(got.dense_shape) == want["dense_shape"]
        # TF orders entries with repeated indices arbitrarily (an unstable sort); tpudata keeps
        # record order: compare each run of equal indices as a multiset
        got_v, want_v = got.values.tolist(), values(want["values"], dtype)
        keys = [tuple(i) for i in want["indices"]]
        start = 0
        for end in range(1, len(keys) + 1):
            if end == len(keys) or keys[end] != keys[start]:
                assert sorted(got_v[start:end]) == pytest.approx(sorted(want_v[start:end]))
                start = end
    elif "nested_row_splits" in want:
        splits = want["nested_row_splits"]
        if isinstance(got, VarLenValues):   # ragged rank 1: tpudata's VarLenValues (int64 splits)
            assert len(splits) == 1
            assert got.row_splits.tolist() == splits[0]
            flat = got.values
        else:
            assert isinstance(got, RaggedValues)
            assert [s.tolist() for s in got.nested_row_splits] == splits
            assert all(s.dtype == np.dtype(want["row_splits_dtype"]) for s in got.nested_row_splits)
            flat = got.flat_values
        assert flat.tolist() == values(want["flat_values"], dtype)
    else:
        assert isinstance(got, np.ndarray)
        assert list(got.shape) == want["shape"]
        if dtype == "bytes":
            assert got.reshape(-1).tolist() == values(want["values"], dtype)
        else:
            np.testing.assert_array_equal(got.reshape(-1), np.array(want["values"], dtype=got.dtype))


@pytest.mark.parametrize("case", range(len(DATA["cases"])))
def test_parse_example_matches_tensorflow(case):
    case = DATA["cases"][case]
    records = [base64.b64decode(r) for r in case["records"]]
    for name, result in case["results"].items():
        key, feat = make_spec(name, result["spec"])
        got = parse_examples(records, {key: feat})[key]
        check(got, result["batch"], result["spec"]["dtype"])
        single = parse_single_example(records[0], {key: feat})[key]
        if isinstance(single, VarLenValues) and "nested_row_splits" in result["single"] \
                and len(result["single"]["nested_row_splits"]) == 1:
            check(single, result["single"], result["spec"]["dtype"])
        elif isinstance(single, np.ndarray) and "nested_row_splits" in result["single"]:
            pytest.fail(f"{name}: single example should stay ragged")
        else:
            check(single, result["single"], result["spec"]["dtype"])


def test_all_specs_together_share_one_pass():
    case = DATA["cases"][0]
    records = [base64.b64decode(r) for r in case["records"]]
    results = {n: r for n, r in case["results"].items() if n != "seq_flat"}   # same key as "seq"
    spec = dict(make_spec(n, r["spec"]) for n, r in results.items())
    spec["seq_varlen"] = tpudata.VarLenFeature(np.int64)   # unrelated plain feature in the same spec
    out = parse_examples(records, spec)
    assert set(out) == set(spec)
    for name, result in results.items():
        key, _ = make_spec(name, result["spec"])
        check(out[key], result["batch"], result["spec"]["dtype"])


@pytest.mark.parametrize("i", range(len(DATA["decode_raw"])))
def test_decode_raw_matches_tensorflow(i):
    c = DATA["decode_raw"][i]
    data = [base64.b64decode(b) for b in c["input"]]
    got = decode_raw(data, c["dtype"], little_endian=c["little_endian"], fixed_length=c["fixed_length"])
    assert list(got.shape) == c["shape"]
    assert got.dtype == np.dtype(c["dtype"])
    assert got.reshape(-1).tolist() == c["values"]


def test_decode_raw_scalar_views_and_errors():
    assert decode_raw(memoryview(b"\x01\x00\x00\x00"), np.int32).tolist() == [1]
    assert decode_raw(np.array([[b"\x01", b"\x02"]], dtype=object), np.uint8).shape == (1, 2, 1)
    with pytest.raises(DecodeError, match="element 1 has 1 bytes != 2") as e:
        decode_raw([b"ab", b"c"], np.int16)
    assert e.value.index == 1
    with pytest.raises(DecodeError, match="not a multiple of 4"):
        decode_raw(b"abc", np.float32)
    with pytest.raises(DecodeError, match="fixed_length 3"):
        decode_raw([b"ab"], np.int16, fixed_length=3)
    with pytest.raises(TypeError, match="unsupported out_type"):
        decode_raw(b"ab", "nonsense")
    with pytest.raises(TypeError, match="element 0 is str"):
        decode_raw(["ab"], np.uint8)


def test_decode_raw_bfloat16():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
    assert decode_raw(x.tobytes(), "bfloat16").tolist() == x.tolist()


def rec(**features):
    return encode_example({k: np.asarray(v) for k, v in features.items()})


def test_fixed_sequence_errors_name_feature_and_record():
    with pytest.raises(SpecError, match="requires allow_missing=True"):
        parse_examples([rec(x=[1.0])], {"x": FixedLenSequenceFeature([], np.float32)})
    with pytest.raises(SpecError, match=r"feature 'x' in record 1: 3 value\(s\) is not a multiple of the 2"):
        parse_examples([rec(x=[1.0, 2.0]), rec(x=[1.0, 2.0, 3.0])],
                       {"x": FixedLenSequenceFeature([2], np.float32, allow_missing=True)})
    with pytest.raises(SpecError, match="expected float32 values but the record has a int64_list"):
        parse_examples([rec(x=[1])], {"x": FixedLenSequenceFeature([], np.float32, allow_missing=True)})
    with pytest.raises(SpecError, match="must be a scalar"):
        FixedLenSequenceFeature([], np.float32, default_value=[1.0, 2.0])


def test_sparse_errors_tensorflow_does_not_check():
    spec = {"s": SparseFeature("i", "v", np.float32, 3)}
    with pytest.raises(SpecError, match=r"record 1: index feature 'i' has 2 value\(s\) but value feature 'v' has 1"):
        parse_examples([rec(i=[0], v=[1.0]), rec(i=[1, 2], v=[1.0])], spec)
    with pytest.raises(SpecError, match=r"index 3 in feature 'i' is outside \[0, 3\)"):
        parse_examples([rec(i=[0], v=[1.0]), rec(i=[3], v=[1.0])], spec)
    with pytest.raises(SpecError, match="one non-negative size per index_key"):
        SparseFeature(["i", "j"], "v", np.float32, 3)
    s = parse_examples([rec(i=[2, 0], v=[5.0, 6.0]), rec(y=[1])], spec)["s"]
    np.testing.assert_array_equal(s.to_dense(), [[6.0, 0.0, 5.0], [0.0, 0.0, 0.0]])


def test_ragged_partitions_are_validated():
    spec = {"r": RaggedFeature(np.int64, partitions=[RaggedFeature.RowSplits("rs")])}
    # TensorFlow (validate=False) silently drops the second value here; tpudata refuses
    with pytest.raises(SpecError, match=r"ragged feature 'r' in record 0: RowSplits 'rs' covers 1 item\(s\) but there are 2"):
        parse_examples([rec(r=[1, 2], rs=[0, 1])], spec)
    with pytest.raises(SpecError, match="covers 0 item"):
        parse_examples([rec(r=[1, 2])], spec)       # splits missing, values present
    with pytest.raises(SpecError, match="do not split into rows of UniformRowLength"):
        parse_examples([rec(r=[1, 2, 3])], {"r": RaggedFeature(np.int64, partitions=[RaggedFeature.UniformRowLength(2)])})
    with pytest.raises(SpecError, match="non-decreasing"):
        parse_examples([rec(r=[1, 2], ids=[1, 0])], {"r": RaggedFeature(np.int64, partitions=[RaggedFeature.ValueRowIds("ids")])})
    with pytest.raises(SpecError, match="partitions must be"):
        RaggedFeature(np.int64, partitions=["rs"])
    r = parse_examples([rec(r=[1, 2, 3], rl=[2, 1]), rec(y=[0])],
                       {"r": RaggedFeature(np.int64, partitions=[RaggedFeature.RowLengths("rl")])})["r"]
    assert r.to_list() == [[[1, 2], [3]], []]
    assert r[0].row_splits.tolist() == [0, 2, 3]


def test_structured_features_through_tfrecord_files(tmp_path):
    path = str(tmp_path / "s.tfrecord")
    with tpudata.TFRecordWriter(path) as w:
        for k in range(5):
            w.write(rec(x=np.arange(2 * k, dtype=np.float32), i=[k], v=[float(k)]))
    spec = {"x": FixedLenSequenceFeature([2], np.float32, allow_missing=True),
            "s": SparseFeature("i", "v", np.float32, 5)}
    batches = list(tpudata.parse_batches(tpudata.read_record_batches(path), spec, 5))
    assert batches[0]["x"].shape == (5, 4, 2)
    assert batches[0]["s"].to_dense().diagonal().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_structured_features_through_the_dataset(tmp_path):
    from tpudata.dataset import TFRecordDataset

    path = str(tmp_path / "d.tfrecord")
    with tpudata.TFRecordWriter(path) as w:
        for k in range(5):
            w.write(rec(x=np.arange(2 * k, dtype=np.float32), i=[k], v=[float(k)]))
    spec = {"x": FixedLenSequenceFeature([2], np.float32, allow_missing=True),
            "s": SparseFeature("i", "v", np.float32, 5),
            "r": RaggedFeature(np.float32, value_key="x")}
    batches = list(TFRecordDataset(path).batch(2).parse(spec).as_numpy_iterator())
    assert [b["x"].shape for b in batches] == [(2, 1, 2), (2, 3, 2), (1, 4, 2)]   # tf.io.parse_example
    assert batches[1]["s"].indices.tolist() == [[0, 2], [1, 3]]
    assert [row.tolist() for row in batches[0]["r"]] == [[], [0.0, 1.0]]
    # per record: a ragged row works as VarLenFeature; batch-level features say where to parse
    rows = list(TFRecordDataset(path).parse({"r": spec["r"]}).as_numpy_iterator())
    assert [len(r["r"]) for r in rows] == [0, 2, 4, 6, 8]
    for name in ("x", "s"):
        with pytest.raises(SpecError, match=rf"feature '{name}' is a .* put .parse\(...\) after .batch"):
            list(TFRecordDataset(path).parse({name: spec[name]}))


def test_a_prepared_spec_parses_like_parse_examples():
    # (the dataset's parse checks a spec once for a column spread over many read buffers)
    from tpudata.example.parse import parse_prepared, prepare_spec
    from tpudata.tfrecord.batch import RecordBatch

    spec = {"s": SparseFeature("i", "v", np.float32, 3), "v": tpudata.VarLenFeature(np.float32),
            "n": tpudata.FixedLenFeature([], np.int64, default_value=-1)}
    prepared = prepare_spec(spec)
    for records in ([rec(i=[0, 2], v=[1.0, 2.0], n=[4])], [rec(i=[1], v=[3.0]), rec(i=np.zeros(0, np.int64), v=np.zeros(0, np.float32))]):
        batch = RecordBatch.from_records(records)
        got, want = parse_prepared(batch, prepared), parse_examples(batch, spec)
        assert got.keys() == want.keys()
        assert got["n"].tolist() == want["n"].tolist()
        assert [list(r) for r in got["v"].to_list()] == [list(r) for r in want["v"].to_list()]
        for attr in ("indices", "values", "dense_shape"):
            assert np.array_equal(getattr(got["s"], attr), getattr(want["s"], attr))
    with pytest.raises(SpecError, match="non-empty mapping"):
        prepare_spec({})
