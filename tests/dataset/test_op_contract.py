"""The op contract: element specs never run the pipeline, constructors never call user code,
no op inspects another (rewrites do, keeping every setting and the checkpoints of the graph as
written)."""

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


def _numbers(tmp_path, n=50):
    tpudata.write_shards([tpudata.encode_example({"x": i}) for i in range(n)], str(tmp_path),
                         "t", num_shards=1, progress=False)
    return tpudata.storage.glob(str(tmp_path / "t-*"))


SPEC = {"x": FixedLenFeature([], np.int64)}


def test_parse_after_shuffle_is_built_as_written_and_moved_by_a_rewrite(tmp_path):
    from tpudata.dataset.core.optimize import optimize

    files = _numbers(tmp_path)
    spill = str(tmp_path / "spill")
    shuffled = tpudata.TFRecordDataset(files).shuffle(
        8, seed=3, reshuffle_each_iteration=False, spill_url=spill, spill_bytes=1 << 16,
        spill_keep=2)
    ds = shuffled.parse(SPEC)
    assert type(ds).__name__ == "ParseDataset" and ds.input is shuffled  # nothing inspected
    run = optimize(ds)  # the rewrite: parse under the shuffle, every shuffle setting kept
    assert type(run).__name__ == "ShuffleDataset" and type(run.input).__name__ == "ParseDataset"
    assert (run.spill_url, run.spill_bytes, run.spill_keep, run.reshuffle_each_iteration,
            run.seed) == (spill, 1 << 16, 2, False, 3)
    assert run.input.views is True and shuffled.input is not run.input  # image values: in place
    got = [int(e["x"]) for e in ds]
    assert sorted(got) == list(range(50)) and got != list(range(50))
    assert got == [int(e["x"]) for e in ds]  # reshuffle_each_iteration=False kept
    from tpudata.dataset import Options

    off = Options()
    off.experimental_optimization.parse_before_shuffle = False
    assert type(optimize(ds.with_options(off)).input).__name__ == "ParseDataset"
    assert [int(e["x"]) for e in ds.with_options(off)] == got


def _buffers(state) -> list:
    """The shuffle buffers a state holds: ``"origin"`` (named by record) or ``"elements"``."""
    if isinstance(state, dict):
        found = [k for k in ("origin", "elements") if k in state]
        return found + [b for v in state.values() for b in _buffers(v)]
    if isinstance(state, list):
        return [b for v in state for b in _buffers(v)]
    return []


def _cut(ds, k):
    it = ds.iterator()
    head = [int(next(it)["x"]) for _ in range(k)]
    state = it.get_state()
    return head, state, [int(e["x"]) for e in it]


@pytest.mark.parametrize("k", [3, 17, 45])
def test_a_checkpoint_restores_with_the_parse_moved_or_not(tmp_path, k):
    """The moved shuffle names its buffer by record as the shuffle as written does: a state
    taken with the rewrite on restores with it off, and the other way round, and into
    parse(spec).shuffle(n), which gives the same elements."""
    from tpudata.dataset import Options

    files = _numbers(tmp_path)
    off = Options()
    off.experimental_optimization.parse_before_shuffle = False
    written = tpudata.TFRecordDataset(files).shuffle(10, seed=5).parse(SPEC)
    pipelines = {"on": written, "off": written.with_options(off),
                 "parse first": tpudata.TFRecordDataset(files).parse(SPEC).shuffle(10, seed=5)}
    runs = {name: _cut(ds, k) for name, ds in pipelines.items()}
    head, _, tail = runs["on"]
    assert sorted(head + tail) == list(range(50))
    for name, (h, state, t) in runs.items():
        assert (h, t) == (head, tail), name
        buffers = _buffers(state)
        assert "elements" not in buffers, f"{name}: the buffer was carried, not named"
        assert name == "off" or "origin" in buffers, name
        for other, ds in pipelines.items():
            assert [int(e["x"]) for e in ds.iterator(state)] == tail, (name, other)


def test_a_shuffle_after_parse_and_filter_names_and_restores_its_buffer(tmp_path):
    files = _numbers(tmp_path, 100)
    ds = tpudata.TFRecordDataset(files).parse(SPEC).filter(lambda e: e["x"] % 2 == 0) \
        .shuffle(10, seed=1)
    head, state, tail = _cut(ds, 5)
    assert _buffers(state) == ["origin"]
    assert sorted(head + tail) == list(range(0, 100, 2))
    assert [int(e["x"]) for e in ds.iterator(state)] == tail


def test_an_older_checkpoint_of_a_moved_shuffle_still_restores(tmp_path):
    """Checkpoints taken when the parse was moved while building name the buffer "parsed"."""
    files = _numbers(tmp_path)
    ds = tpudata.TFRecordDataset(files).shuffle(10, seed=2).parse(SPEC)
    _, state, tail = _cut(ds, 7)
    origin = state["cursor"]["before"]["buffer"]["origin"]
    assert origin["kind"] == "records"
    origin["kind"] = "parsed"
    assert [int(e["x"]) for e in ds.iterator(state)] == tail


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


def test_ops_answer_what_files_they_list_and_who_reads_a_path(tmp_path):
    """What one op asks of another goes through the contract's questions, never by type:
    ``_file_names`` through shuffles and shards, ``_storage_options_for`` through an
    interleave's function."""
    files = []
    for k in range(4):
        files += _numbers(tmp_path / str(k), 3)
    listed = Dataset.list_files(str(tmp_path / "*" / "t-*"), shuffle=False,
                                storage_options={"marker": 1})
    assert listed._file_names() == (sorted(files), "listed")
    assert listed.shard(2, 1)._file_names() == (sorted(files)[1::2], "listed")
    assert listed.shuffle(4, seed=1)._file_names() == (sorted(files), "seeded")
    with pytest.warns(UserWarning, match="without a seed"):  # any unseeded shuffle of a list
        unseeded = listed.shuffle(4).shard(2, 0)
    assert unseeded._file_names() is None  # which names: the order decides
    assert tpudata.Dataset.range(3)._file_names() is None
    ds = listed.interleave(
        lambda f: tpudata.TFRecordDataset(f, storage_options={"reader": 2}), cycle_length=2)
    assert ds.cardinality() == 12  # from the shards' manifests, per listed file
    assert ds.shuffle(5)._storage_options_for(files[2]) == {"reader": 2}
    assert listed.map(lambda f: f)._storage_options_for(files[0]) == {"marker": 1}
    assert tpudata.Dataset.range(3).map(abs)._storage_options_for(files[0]) is None
