"""MultiBatch: records gathered from many read buffers parse in one pass (native and pure), with
the same results as the records copied into one buffer, and errors naming each record's file."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tpudata
from tpudata import FixedLenFeature, RaggedFeature, VarLenFeature, VarLenValues
from tpudata import _accel
from tpudata.dataset.core.block import RecordColumn
from tpudata.dataset.core.columns import BytesColumn
from tpudata.dataset.ops.parse import _parse_column
from tpudata.errors import InvalidExampleError, SpecError
from tpudata.example import wire
from tpudata.example.parse import parse_prepared, prepare_spec
from tpudata.tfrecord import RecordBatch
from tpudata.tfrecord.batch import MultiBatch
from tpudata.tfrecord.reader import TFRecordFileReader

int64s = st.integers(-(2**63), 2**63 - 1)
float32s = st.floats(width=32, allow_nan=False)
ex_values = st.one_of(st.binary(max_size=6), st.lists(int64s, max_size=3).map(lambda v: np.array(v, np.int64)),
                      st.lists(float32s, max_size=3).map(lambda v: np.array(v, np.float32)),
                      st.lists(st.binary(max_size=4), min_size=1, max_size=2), st.none())
small_examples = st.dictionaries(st.sampled_from(["a", "b", "c", "", "zz"]), ex_values, max_size=4)
SPECS = [
    {"a": FixedLenFeature([1], np.float32, default_value=0.0), "b": VarLenFeature(np.int64)},
    {"c": FixedLenFeature([1], bytes, default_value=b"d"), "a": VarLenFeature(np.float32)},
    {"c": VarLenFeature(bytes), "b": FixedLenFeature([2], np.int64, default_value=[0, 0])},
    {"zz": FixedLenFeature([], bytes, default_value=b""), "": VarLenFeature(np.int64)},
    {"b": RaggedFeature(np.int64), "c": RaggedFeature(bytes)},
]


def _scatter(records: list[bytes], which: list[int], nbuf: int) -> MultiBatch:
    """The records placed in ``nbuf`` buffers (record i in buffer which[i]), with junk between."""
    parts: list[bytearray] = [bytearray(b"\x07junk") for _ in range(nbuf)]
    offsets, lengths = [], []
    for rec, k in zip(records, which):
        offsets.append(len(parts[k]))
        lengths.append(len(rec))
        parts[k] += rec + b"\xff"
    return MultiBatch([bytes(p) for p in parts], which, offsets, lengths, [(None, None)] * nbuf)


def _parse(batch, spec, native: bool):
    prev = _accel.use_native(native)
    try:
        return "ok", parse_prepared(batch, prepare_spec(spec))
    except (SpecError, InvalidExampleError) as exc:
        return type(exc).__name__, str(exc)
    finally:
        _accel.use_native(prev)


def _plain(x):
    """A comparable form of an array: floats by their bits (damaged bytes can make NaN, and NaN
    never equals itself), anything else as lists."""
    a = np.asarray(x)
    if a.dtype.kind == "f":
        return a.dtype.str, a.shape, a.tobytes()
    return a.tolist()


def _values(out):
    if out[0] != "ok":
        return out
    res = {}
    for k, v in out[1].items():
        if isinstance(v, VarLenValues):
            res[k] = (v.row_splits.tolist(), _plain(v.values))
        elif hasattr(v, "to_list"):
            res[k] = [_plain(x) for x in v.to_list()]
        else:
            res[k] = _plain(v)
    return "ok", res


@given(st.lists(small_examples, min_size=1, max_size=8), st.data())
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_multibatch_parses_like_one_buffer(exs, data):
    records = [tpudata.encode_example(e) for e in exs]
    nbuf = data.draw(st.integers(1, 4))
    which = data.draw(st.lists(st.integers(0, nbuf - 1), min_size=len(records), max_size=len(records)))
    spec = data.draw(st.sampled_from(SPECS))
    multi = _scatter(records, which, nbuf)
    assert multi.to_list() == records
    one = RecordBatch.from_records(records)
    for native in ([False, True] if _accel.available() else [False]):
        assert _values(_parse(multi, spec, native)) == _values(_parse(one, spec, native))


@given(st.lists(small_examples, min_size=1, max_size=4), st.data())
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_multibatch_native_equals_pure_on_damaged_examples(exs, data):
    if not _accel.available():
        pytest.skip("accelerator not built")
    records = []
    for e in exs:
        rec = bytearray(tpudata.encode_example(e))
        for _ in range(data.draw(st.integers(0, 3))):
            if rec:
                rec[data.draw(st.integers(0, len(rec) - 1))] = data.draw(st.integers(0, 255))
        records.append(bytes(rec))
    nbuf = data.draw(st.integers(1, 3))
    which = data.draw(st.lists(st.integers(0, nbuf - 1), min_size=len(records), max_size=len(records)))
    spec = dict(data.draw(st.sampled_from(SPECS[:4])))
    multi = _scatter(records, which, nbuf)
    native, pure = _parse(multi, spec, True), _parse(multi, spec, False)
    assert _values(native) == _values(pure)
    # the same verdict as the records in one buffer (offsets in messages differ with the layout)
    assert native[0] == _parse(RecordBatch.from_records(records), spec, True)[0]


@pytest.mark.parametrize("native", [False, True])
def test_buffers_and_bidx_are_checked(native):
    if native and not _accel.available():
        pytest.skip("accelerator not built")
    rec = tpudata.encode_example({"a": 1})
    locate = _accel.native.locate if native else wire.locate_pure
    offs, lens = np.array([0], np.int64), np.array([len(rec)], np.int64)
    locs = np.empty((1, 1, 2), np.int64)
    with pytest.raises(TypeError, match="tuple of buffers needs bidx"):
        locate((rec,), offs, lens, (b"a",), locs)
    with pytest.raises(TypeError, match="tuple of buffers needs bidx"):
        locate(rec, offs, lens, (b"a",), locs, np.zeros(1, np.int32))
    with pytest.raises(ValueError, match="bidx"):
        locate((rec,), offs, lens, (b"a",), locs, np.ones(1, np.int32))  # no buffer 1
    with pytest.raises(ValueError, match="bidx"):
        locate((rec,), offs, lens, (b"a",), locs, np.zeros(2, np.int32))  # one per record
    if native:
        with pytest.raises(ValueError, match="int32"):
            locate((rec,), offs, lens, (b"a",), locs, np.zeros(1, np.int64))
        with pytest.raises(ValueError, match="outside the buffer"):  # checked against its buffer
            locate((b"", rec), offs, lens, (b"a",), locs, np.zeros(1, np.int32))
    assert locate((b"xx", rec), offs, lens, (b"a",), locs, np.ones(1, np.int32)) == (-1, -1)
    with pytest.raises(ValueError, match="one source per buffer"):
        MultiBatch([rec], [0], [0], [len(rec)], [])


def _files(tmp_path, n: int, per: int) -> list[str]:
    paths = []
    for f in range(n):
        p = str(tmp_path / f"f{f}.tfrecord")
        tpudata.write_records(p, [tpudata.encode_example(
            {"id": 100 * f + i, "img": bytes([f]) * (200 + i)}) for i in range(per)])
        paths.append(p)
    return paths


def test_a_column_from_many_read_buffers_parses_in_one_pass(accel, tmp_path):
    paths = _files(tmp_path, 5, 4)
    cols = [RecordColumn.from_batch(b) for p in paths for b in TFRecordFileReader(p)]
    col = RecordColumn.concat(cols).take(np.random.default_rng(1).permutation(20))
    batch = col.as_batch()
    assert isinstance(batch, MultiBatch) and len(batch.buffers) == 5
    spec = {"id": FixedLenFeature([], np.int64), "img": FixedLenFeature([], bytes)}
    want = tpudata.parse_examples(col.to_list(), spec)
    for views in (False, True):
        out = _parse_column(col, spec, 0, views)
        assert out["id"].tolist() == want["id"].tolist()
        assert list(out["img"]) == list(want["img"])
        # the images stay in the five read buffers (zero-copy), in the column's order
        assert isinstance(out["img"], BytesColumn) == views
        if views:
            assert len(out["img"].buffers) == 5 and out["img"].buf_idx is not None


def test_an_error_in_a_multibatch_names_that_records_file(accel, tmp_path):
    paths = _files(tmp_path, 3, 4)
    records = [tpudata.encode_example({"id": i}) for i in range(4)]
    records[2] = tpudata.encode_example({"other": 1})  # the third record of the last file
    tpudata.write_records(paths[2], records)
    cols = {p: [RecordColumn.from_batch(b) for b in TFRecordFileReader(p)] for p in paths}
    col = RecordColumn.concat(cols[paths[1]] + cols[paths[2]] + cols[paths[0]])
    offset = sum(len(r) + 16 for r in records[:2])
    with pytest.raises(SpecError) as info:
        parse_prepared(col.as_batch(), prepare_spec({"id": FixedLenFeature([], np.int64)}))
    assert f"record 6 ({paths[2]} at offset {offset})" in str(info.value)
    with pytest.raises(SpecError) as info:  # the first record: the second file's, at offset 0
        parse_prepared(col.as_batch(), prepare_spec({"img2": FixedLenFeature([], np.int64)}))
    assert f"record 0 ({paths[1]} at offset 0)" in str(info.value)
