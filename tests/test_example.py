"""tf.train.Example codec, feature specs and batch parsing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tpudata
from tpudata import FixedLenFeature, VarLenFeature, VarLenValues
from tpudata import _accel
from tpudata.errors import InvalidExampleError, SpecError
from tpudata.example import wire
from tpudata.tfrecord import RecordBatch

# -- strategies -----------------------------------------------------------------------------------
names = st.text(min_size=0, max_size=8)
int64s = st.integers(-(2**63), 2**63 - 1)
float32s = st.floats(width=32, allow_nan=False)
values = st.one_of(
    st.binary(max_size=20),
    int64s,
    float32s,
    st.lists(st.binary(max_size=10), min_size=1, max_size=5),
    st.lists(int64s, min_size=1, max_size=20),
    st.lists(float32s, min_size=1, max_size=20).map(lambda v: np.array(v, np.float32)),
    st.sampled_from([np.array([], np.float32), np.array([], np.int64), np.array([], object)]),
)
examples = st.dictionaries(names, values, max_size=6)


def _expected(value):
    if isinstance(value, bytes):
        return [value]
    if isinstance(value, int):
        return [value]
    if isinstance(value, float):
        return [float(np.float32(value))]
    if isinstance(value, np.ndarray):
        return value.tolist()
    return list(value)


# -- encode / decode ------------------------------------------------------------------------------
@given(examples)
@settings(max_examples=200, deadline=None)
def test_encode_decode_roundtrip(ex):
    got = tpudata.decode_example(tpudata.encode_example(ex))
    assert set(got) == set(ex)
    for name, value in ex.items():
        assert got[name].tolist() == _expected(value)


def test_value_types():
    d = tpudata.decode_example(tpudata.encode_example({
        "s": "héllo", "b": b"\x00", "i": np.int32(5), "bool": True, "f": 2.5,
        "arr2d": np.arange(6, dtype=np.float64).reshape(2, 3), "u8": np.array([1, 255], np.uint8),
        "strs": np.array(["a", "bc"]), "mixed": [1, 2.5], "none": None,
    }))
    assert d["s"].tolist() == ["héllo".encode()] and d["b"].tolist() == [b"\x00"]
    assert d["i"].dtype == np.int64 and d["i"].tolist() == [5] and d["bool"].tolist() == [1]
    assert d["f"].dtype == np.float32 and d["arr2d"].tolist() == [0, 1, 2, 3, 4, 5]
    assert d["u8"].tolist() == [1, 255] and d["strs"].tolist() == [b"a", b"bc"]
    assert d["mixed"].dtype == np.float32 and d["mixed"].tolist() == [1.0, 2.5]
    assert d["none"].size == 0


@pytest.mark.parametrize("bad,match", [
    ([], "empty list"), ([b"a", 1], "only bytes"), (2**64, "int64 range"),
    (np.array([2**63], np.uint64), "int64 range"), ({"a": 1}, "cannot store"),
    (np.array([1 + 2j]), "complex"),
])
def test_encode_rejects(bad, match):
    with pytest.raises(SpecError, match=match):
        tpudata.encode_example({"feat": bad})


@pytest.mark.parametrize("junk", [b"\xff", b"\x0a\x05ab", b"\x0a\x02\x0a\x05", b"\x0b"])
def test_decode_rejects_malformed(junk):
    with pytest.raises(InvalidExampleError, match="not a valid tf.train.Example"):
        tpudata.decode_example(junk)


def test_decode_last_duplicate_key_wins_and_unknown_fields_skipped():
    first = tpudata.encode_example({"a": 1, "b": 2})
    second = tpudata.encode_example({"a": 3})
    unknown = wire.tag(7, wire.WT_VARINT) + wire.encode_varint(99)
    d = tpudata.decode_example(first + unknown + second)
    assert d["a"].tolist() == [3] and d["b"].tolist() == [2]


def test_sequence_example_roundtrip():
    rec = tpudata.encode_sequence_example(
        {"id": b"x", "n": 3}, {"frames": [np.ones(2, np.float32), np.zeros(2, np.float32)],
                               "empty": []})
    ctx, fl = tpudata.decode_sequence_example(rec)
    assert ctx["id"].tolist() == [b"x"] and ctx["n"].tolist() == [3]
    assert [a.tolist() for a in fl["frames"]] == [[1, 1], [0, 0]] and fl["empty"] == []
    with pytest.raises(InvalidExampleError, match="SequenceExample"):
        tpudata.decode_sequence_example(b"\x12\x05ab")


# -- specs ----------------------------------------------------------------------------------------
def test_spec_validation():
    assert FixedLenFeature(3, "float32").shape == (3,)
    assert FixedLenFeature([], tpudata.example.spec.BYTES, "x").default_value.tolist() == b"x"
    assert FixedLenFeature([2], np.int64, 4).default_value.tolist() == [4, 4]
    assert FixedLenFeature([2, 2], float, [1, 2, 3, 4]).default_value.shape == (2, 2)
    for bad in (np.int32, np.float64, "uint8"):
        with pytest.raises(SpecError, match="np.float32, np.int64"):
            FixedLenFeature([], bad)
    with pytest.raises(SpecError, match="does not fit"):
        FixedLenFeature([3], np.float32, [1.0, 2.0])
    with pytest.raises(SpecError, match="fully defined"):
        FixedLenFeature([-1], np.float32)
    with pytest.raises(SpecError, match="not an integer"):
        FixedLenFeature([], np.int64, 1.5)
    with pytest.raises(SpecError):
        tpudata.parse_examples([b""], {})
    with pytest.raises(SpecError, match="expected FixedLenFeature, VarLenFeature"):
        tpudata.parse_examples([b""], {"a": np.float32})


# -- parse ----------------------------------------------------------------------------------------
def _recs(*dicts):
    return [tpudata.encode_example(d) for d in dicts]


def test_parse_fixed_shapes_and_defaults(accel):
    recs = _recs({"x": np.arange(6, dtype=np.float32), "y": 1, "s": b"a"},
                 {"x": np.ones(6, np.float32), "s": b"bb"})
    out = tpudata.parse_examples(recs, {
        "x": FixedLenFeature([2, 3], np.float32),
        "y": FixedLenFeature([], np.int64, default_value=-1),
        "s": FixedLenFeature([], bytes),
        "t": FixedLenFeature([2], bytes, default_value=[b"p", "q"]),
    })
    assert out["x"].shape == (2, 2, 3) and out["x"][0, 1].tolist() == [3, 4, 5]
    assert out["y"].tolist() == [1, -1] and out["s"].tolist() == [b"a", b"bb"]
    assert out["t"].tolist() == [[b"p", b"q"], [b"p", b"q"]] and out["t"].dtype == object


def test_parse_varlen(accel):
    recs = _recs({"v": [1, 2, 3], "b": [b"x"]}, {"w": 1}, {"v": np.array([], np.int64), "b": [b"", b"yy"]})
    out = tpudata.parse_examples(recs, {"v": VarLenFeature(np.int64), "b": VarLenFeature(bytes)})
    assert out["v"] == VarLenValues(np.array([1, 2, 3]), np.array([0, 3, 3, 3]))
    assert [r.tolist() for r in out["b"]] == [[b"x"], [], [b"", b"yy"]]
    assert out["b"].dense_shape == (3, 2)
    assert out["b"].to_dense().tolist() == [[b"x", b""], [b"", b""], [b"", b"yy"]]


def test_parse_errors_name_feature_and_record(accel):
    recs = _recs({"a": 1.0}, {"a": 2.0}, {"b": 1})
    with pytest.raises(SpecError, match=r"feature 'a' is required but missing from record 2"):
        tpudata.parse_examples(recs, {"a": FixedLenFeature([], np.float32)})
    with pytest.raises(SpecError, match=r"feature 'a' in record 0: expected int64 .* float_list"):
        tpudata.parse_examples(recs, {"a": FixedLenFeature([], np.int64, 0)})
    pair = _recs({"a": [1.0, 2.0]}, {"a": 2.0})
    with pytest.raises(SpecError, match=r"feature 'a' in record 1: expected 2 float32 .* got 1"):
        tpudata.parse_examples(pair, {"a": FixedLenFeature([2], np.float32)})
    with pytest.raises(SpecError, match=r"record 7"):  # positions count from base_row
        tpudata.parse_examples(pair, {"a": FixedLenFeature([2], np.float32)}, base_row=6)
    with pytest.raises(SpecError, match=r"feature 'b' in record 2: expected bytes"):
        tpudata.parse_examples(recs, {"b": VarLenFeature(bytes)})
    with pytest.raises(InvalidExampleError, match=r"record 1 is not a valid"):
        tpudata.parse_examples([recs[0], b"\x0a\x09abc"], {"a": VarLenFeature(np.float32)})


def test_parse_errors_name_file_and_offset(accel, tmp_path):
    path = str(tmp_path / "e.tfrecord")
    tpudata.write_records(path, _recs({"a": 1}, {"b": 2}))
    (batch,) = list(tpudata.read_record_batches(path))
    with pytest.raises(SpecError, match=rf"record 1 \({path} at offset {batch.record_offsets[1]}\)"):
        tpudata.parse_examples(batch, {"a": FixedLenFeature([], np.int64)})


def test_tensorflow_quirks(accel):
    """Edge cases checked against tf.io.parse_example (TensorFlow 2.21)."""
    empty_list = _recs({"a": np.array([], np.float32)})
    # an empty list does not count as missing: the default is not used
    with pytest.raises(SpecError, match="got 0"):
        tpudata.parse_examples(empty_list, {"a": FixedLenFeature([], np.float32, 7.0)})
    # ... but a Feature with no list set does
    unset = _recs({"a": None})
    assert tpudata.parse_examples(unset, {"a": FixedLenFeature([], np.float32, 7.0)})["a"].tolist() == [7.0]
    with pytest.raises(SpecError, match="missing"):
        tpudata.parse_examples(unset, {"a": FixedLenFeature([], np.float32)})
    assert len(tpudata.parse_examples(unset, {"a": VarLenFeature(np.float32)})["a"].values) == 0
    # an empty list of the wrong type is still the wrong type
    with pytest.raises(SpecError, match="int64_list"):
        tpudata.parse_examples(_recs({"a": np.array([], np.int64)}), {"a": VarLenFeature(np.float32)})
    # duplicate keys: the last entry wins
    dup = [tpudata.encode_example({"a": 1.0}) + tpudata.encode_example({"a": 2.0})]
    assert tpudata.parse_examples(dup, {"a": FixedLenFeature([], np.float32)})["a"].tolist() == [2.0]
    # an empty record is an Example with no features
    assert tpudata.parse_examples([b""], {"a": FixedLenFeature([], np.float32, 1.0)})["a"].tolist() == [1.0]


def _feature_bytes(*lists):
    return b"".join(lists)


def test_unpacked_and_split_encodings(accel):
    """Encodings other writers may produce: unpacked floats/ints and packed fields in pieces."""
    floats = (wire.tag(1, wire.WT_I32) + np.float32(1.5).tobytes()
              + wire.len_field(1, np.array([2.5, 3.5], "<f4").tobytes()))
    ints = (wire.tag(1, wire.WT_VARINT) + wire.encode_varint(5)
            + wire.len_field(1, wire.encode_varints(np.array([-1, 7]))))
    def rec(feature):
        entry = wire.len_field(1, b"a") + wire.len_field(2, feature)
        return wire.len_field(1, wire.len_field(1, entry))
    f = tpudata.parse_examples([rec(wire.len_field(2, floats))], {"a": VarLenFeature(np.float32)})
    assert f["a"].values.tolist() == [1.5, 2.5, 3.5]
    i = tpudata.parse_examples([rec(wire.len_field(3, ints))], {"a": FixedLenFeature([3], np.int64)})
    assert i["a"].tolist() == [[5, -1, 7]]
    # a Feature setting two lists: TensorFlow keeps the first, protobuf the last - refuse
    two = rec(wire.len_field(2, floats) + wire.len_field(3, ints))
    with pytest.raises(InvalidExampleError, match="more than one"):
        tpudata.parse_examples([two], {"a": VarLenFeature(np.float32)})
    with pytest.raises(InvalidExampleError, match="more than one"):
        tpudata.decode_example(two)


def test_parse_single_example():
    out = tpudata.parse_single_example(tpudata.encode_example({"x": [1, 2]}),
                                       {"x": FixedLenFeature([2], np.int64), "v": VarLenFeature(np.int64)})
    assert out["x"].tolist() == [1, 2] and out["v"].tolist() == []


# -- the accelerator and the pure path agree ------------------------------------------------------
SPECS = [
    ("a", "fixed", np.float32, 1), ("a", "var", np.float32, None), ("b", "var", np.int64, None),
    ("b", "fixed", np.int64, 2), ("c", "var", bytes, None), ("c", "fixed", bytes, 1),
    ("", "var", np.int64, None),
]


def _run(records, mode, spec):
    prev = _accel.use_native(mode == "native")
    try:
        return ("ok", tpudata.parse_examples(records, spec))
    except (SpecError, InvalidExampleError) as exc:
        return (type(exc).__name__, str(exc))
    finally:
        _accel.use_native(prev)


def _same(x, y):
    if x[0] != "ok" or y[0] != "ok":
        return x == y
    for k in x[1]:
        a, b = x[1][k], y[1][k]
        if isinstance(a, VarLenValues):
            a, b = a.values, b.values
            if not np.array_equal(x[1][k].row_splits, y[1][k].row_splits):
                return False
        if a.dtype == np.float32:
            if not np.array_equal(a.view(np.uint32), b.view(np.uint32)):
                return False
        elif a.tolist() != b.tolist():
            return False
    return True


ex_values = st.one_of(st.binary(max_size=6), st.lists(int64s, max_size=3).map(lambda v: np.array(v, np.int64)),
                      st.lists(float32s, max_size=3).map(lambda v: np.array(v, np.float32)),
                      st.lists(st.binary(max_size=4), min_size=1, max_size=2), st.none())
small_examples = st.dictionaries(st.sampled_from(["a", "b", "c", "", "zz"]), ex_values, max_size=4)


@pytest.mark.skipif(not _accel.available(), reason="accelerator not built")
@given(st.lists(small_examples, min_size=1, max_size=6), st.data())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_native_equals_pure_on_valid_examples(exs, data):
    records = [tpudata.encode_example(e) for e in exs]
    name, kind, dtype, n = data.draw(st.sampled_from(SPECS))
    feat = FixedLenFeature([n], dtype, default_value=data.draw(st.sampled_from([None, 0])) if dtype is not bytes else b"d") if kind == "fixed" else VarLenFeature(dtype)
    spec = {name: feat}
    assert _same(_run(records, "native", spec), _run(records, "pure", spec))


@pytest.mark.skipif(not _accel.available(), reason="accelerator not built")
@given(st.lists(small_examples, min_size=1, max_size=3), st.data())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_native_equals_pure_on_damaged_examples(exs, data):
    records = []
    for e in exs:
        rec = bytearray(tpudata.encode_example(e))
        for _ in range(data.draw(st.integers(0, 3))):
            if rec:
                i = data.draw(st.integers(0, len(rec) - 1))
                rec[i] = data.draw(st.integers(0, 255))
        if rec and data.draw(st.booleans()):
            rec = rec[: data.draw(st.integers(0, len(rec)))]
        records.append(bytes(rec))
    name, kind, dtype, n = data.draw(st.sampled_from(SPECS))
    feat = FixedLenFeature([n], dtype) if kind == "fixed" else VarLenFeature(dtype)
    spec = {name: feat, "zz": VarLenFeature(np.int64)}
    assert _same(_run(records, "native", spec), _run(records, "pure", spec))


def test_parse_on_a_record_batch_from_a_reader_is_zero_copy(accel, tmp_path):
    path = str(tmp_path / "z.tfrecord")
    tpudata.write_records(path, _recs(*({"x": [float(i)] * 4, "y": i} for i in range(100))))
    total = 0
    for batch in tpudata.read_record_batches(path, buffer_size=1024):
        assert isinstance(batch, RecordBatch) and batch.buffer is not None
        out = tpudata.parse_examples(batch, {"x": FixedLenFeature([4], np.float32),
                                             "y": FixedLenFeature([], np.int64)})
        assert out["x"][:, 0].tolist() == out["y"].astype(np.float32).tolist()
        total += len(batch)
    assert total == 100
