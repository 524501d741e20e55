"""The op contract: element specs never run the pipeline, constructors never call user code,
and an op that moves ahead of another keeps every setting of the one it moves past."""

import numpy as np
import pytest

import tpudata
from tpudata import Dataset, FixedLenFeature
from tpudata.errors import SpecError


def test_element_spec_never_reads_an_element():
    seen = []

    def only_real(x):  # fails on the dummy elements a trace uses (0 and 1)
        seen.append(int(x))
        if x < 100:
            raise ValueError("not a real element")
        return np.full(int(x) % 3 + 1, x)

    ds = Dataset.range(100, 110).map(only_real)
    with pytest.raises(SpecError, match="output_signature"):
        ds.element_spec
    assert all(v < 100 for v in seen), "element_spec ran the pipeline"
    declared = Dataset.range(100, 110).map(
        only_real, output_signature=tpudata.TensorSpec((None,), np.int64))
    assert declared.element_spec == tpudata.TensorSpec((None,), np.int64)


def test_unbatch_spec_is_declared_not_read():
    seen = []

    def f(x):
        seen.append(np.asarray(x).tolist())
        return x * 2

    ds = Dataset.range(100, 110).batch(3).map(f).unbatch()
    assert ds.element_spec == tpudata.TensorSpec((), np.int64)
    assert all(v in ([0], [0, 0], [1], [1, 1]) or max(v, default=0) < 100 for v in seen)
    assert not any(max(v, default=0) >= 100 for v in seen), "element_spec read real elements"
    assert Dataset.from_tensor_slices({"a": np.zeros((4, 2, 3), np.float32)}).batch(2).unbatch() \
        .element_spec == {"a": tpudata.TensorSpec((2, 3), np.float32)}


def test_concatenate_calls_no_user_code_when_built():
    calls = []

    def f(x):
        calls.append(x)
        return x

    ds = Dataset.range(3).map(f).concatenate(Dataset.range(3).map(f))
    assert calls == []
    assert [int(v) for v in ds] == [0, 1, 2, 0, 1, 2]


def test_concatenate_still_refuses_declared_mismatch_when_built():
    a = Dataset.range(3)
    b = Dataset.from_tensor_slices(np.zeros((3, 2), np.float32))
    with pytest.raises(SpecError):
        a.concatenate(b)


def test_concatenate_of_traced_mismatch_fails_at_the_spec_or_the_data():
    a = Dataset.range(3).map(lambda x: x)
    b = Dataset.range(3).map(lambda x: np.zeros(2, np.float32))
    ds = a.concatenate(b)  # the traced specs are not looked at when building
    with pytest.raises(SpecError):
        ds.element_spec
    with pytest.raises(SpecError):
        list(ds)


def test_parse_after_shuffle_keeps_every_shuffle_setting(tmp_path):
    tpudata.write_shards([tpudata.encode_example({"x": i}) for i in range(50)], str(tmp_path),
                         "t", num_shards=1, progress=False)
    files = tpudata.storage.glob(str(tmp_path / "t-*"))
    spill = str(tmp_path / "spill")
    shuffled = tpudata.TFRecordDataset(files).shuffle(
        8, seed=3, reshuffle_each_iteration=False, spill_url=spill, spill_bytes=1 << 16,
        spill_keep=2)
    ds = shuffled.parse({"x": FixedLenFeature([], np.int64)})
    assert (ds.spill_url, ds.spill_bytes, ds.spill_keep, ds.reshuffle_each_iteration, ds.seed) == \
        (spill, 1 << 16, 2, False, 3)
    assert type(ds.input).__name__ == "ParseDataset"
    assert shuffled.input is not ds.input and type(shuffled.input).__name__ != "ParseDataset"
    got = [int(e["x"]) for e in ds]
    assert sorted(got) == list(range(50)) and got != list(range(50))
    assert got == [int(e["x"]) for e in ds]  # reshuffle_each_iteration=False kept


def test_a_shuffle_over_a_parse_copies_its_values_in_a_rewrite_not_when_built(tmp_path):
    from tpudata.dataset.core.optimize import optimize

    tpudata.write_shards([tpudata.encode_example({"x": i, "b": b"v%d" % i}) for i in range(40)],
                         str(tmp_path), "t", num_shards=1, progress=False)
    files = tpudata.storage.glob(str(tmp_path / "t-*"))
    spec = {"x": FixedLenFeature([], np.int64), "b": FixedLenFeature([], object)}
    ds = tpudata.TFRecordDataset(files).parse(spec).shuffle(8, seed=4)
    assert ds.input.views is True  # the graph as written: the shuffle changed nothing
    run = optimize(ds)
    assert run.input.views is False and ds.input.views is True  # copied for the iteration
    from tpudata.dataset import Options

    off = Options()
    off.experimental_optimization.shuffle_parse_copies = False
    assert optimize(ds.with_options(off)).input.input.views is True
    got = [(int(e["x"]), bytes(e["b"])) for e in ds]
    assert got == [(int(e["x"]), bytes(e["b"])) for e in ds.with_options(off)]
    assert sorted(got) == [(i, b"v%d" % i) for i in range(40)]


def test_from_tensor_slices_keeps_python_bytes_whole():
    """A list of bytes becomes an object column: numpy's fixed-width 'S' would silently drop
    trailing NUL bytes (and pad every value to the longest)."""
    values = [b"ab\x00", b"c\x00\x00", b"", b"\x00"]
    assert [bytes(x) for x in Dataset.from_tensor_slices(values)] == values
    got = list(Dataset.from_tensor_slices({"t": [b"x\x00", "é"], "n": [1, 2]}))
    assert [bytes(e["t"]) for e in got] == [b"x\x00", "é".encode()]
    nested = [[b"a", b"b\x00"], [b"c", b"d"]]
    assert [x.tolist() for x in Dataset.from_tensor_slices(nested)] == nested
    with pytest.raises(TypeError, match="flat index 1"):
        Dataset.from_tensor_slices([b"a", 3])
