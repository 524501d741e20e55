"""Element order of every transformation, against tf.data's documented semantics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpudata
from tpudata.dataset import Dataset, FixedLengthRecordDataset, TextLineDataset, TFRecordDataset
from tpudata.errors import DataLossError, StorageError
from tests.dataset.helpers import SPEC, outputs, plain, tf_interleave_reference, write_shards


# -- sources --------------------------------------------------------------------------------------
def test_from_tensor_slices_structures():
    ds = Dataset.from_tensor_slices(({"a": np.arange(3)}, np.array([[1, 2], [3, 4], [5, 6]])))
    assert outputs(ds) == [[{"a": 0}, [1, 2]], [{"a": 1}, [3, 4]], [{"a": 2}, [5, 6]]]
    assert outputs(Dataset.from_tensor_slices(["a", "bc"])) == [b"a", b"bc"]  # like tf.string
    assert outputs(Dataset.from_tensors([1, 2])) == [[1, 2]]
    assert Dataset.from_tensor_slices(np.zeros((5, 2))).cardinality() == 5
    with pytest.raises(ValueError, match="different first dimensions"):
        Dataset.from_tensor_slices((np.arange(3), np.arange(4)))


def test_range():
    assert outputs(Dataset.range(5)) == [0, 1, 2, 3, 4]
    assert outputs(Dataset.range(2, 10, 3)) == [2, 5, 8]
    assert outputs(Dataset.range(5, 0, -2)) == [5, 3, 1]
    assert outputs(Dataset.range(0)) == []
    assert next(iter(Dataset.range(3, dtype=np.int32))).dtype == np.int32


def test_list_files(tmp_path):
    for name in ("b1", "a1", "c2", "a2"):
        (tmp_path / name).write_bytes(b"")
    got = outputs(Dataset.list_files([str(tmp_path / "*2"), str(tmp_path / "*1")], shuffle=False))
    assert got == [str(tmp_path / n).encode() for n in ("a1", "a2", "b1", "c2")]  # sorted union
    shuffled = [outputs(Dataset.list_files(str(tmp_path / "*"), shuffle=True, seed=5)) for _ in range(2)]
    assert shuffled[0] == shuffled[1] and sorted(shuffled[0]) == got
    with pytest.raises(StorageError, match="no files match"):
        Dataset.list_files(str(tmp_path / "zz*"))


def test_tfrecord_dataset_orders(tmp_path):
    paths = write_shards(tmp_path, 3, [4, 2, 5])
    ids = lambda ds: [e["id"] for e in outputs(ds.parse(SPEC))]  # noqa: E731
    assert ids(TFRecordDataset(paths)) == list(range(11))
    # num_parallel_reads interleaves files record by record, deterministically (as tf.data)
    expected = tf_interleave_reference(
        [list(range(0, 4)), list(range(4, 6)), list(range(6, 11))], iter, 2, 1)
    assert ids(TFRecordDataset(paths, num_parallel_reads=2)) == expected
    assert ids(TFRecordDataset(Dataset.list_files(str(tmp_path / "train-*"), shuffle=False))) == list(range(11))
    assert outputs(TFRecordDataset(paths[1]))[0] == tpudata.encode_example(
        {"id": 4, "x": np.full(3, 4, np.float32), "tag": b"t4"})


def test_tfrecord_dataset_errors_and_skip(tmp_path):
    paths = write_shards(tmp_path, 2, 3)
    data = bytearray(open(paths[0], "rb").read())
    data[-3] ^= 1
    open(paths[0], "wb").write(bytes(data))
    with pytest.raises(DataLossError, match="corrupted record at"):
        outputs(TFRecordDataset(paths))
    got = [e["id"] for e in outputs(TFRecordDataset(paths, on_error="skip").parse(SPEC))]
    assert got == [0, 1, 3, 4, 5]


def test_fixed_length_record_dataset(tmp_path):
    p = tmp_path / "fl.bin"
    p.write_bytes(b"HHabcdefgF" + b"")
    assert outputs(FixedLengthRecordDataset(str(p), 2, header_bytes=2, footer_bytes=2)) == [
        b"ab", b"cd", b"ef"]
    with pytest.raises(DataLossError, match="not a multiple of the record length"):
        outputs(FixedLengthRecordDataset(str(p), 3, header_bytes=2, footer_bytes=1))
    big = tmp_path / "big.bin"
    big.write_bytes(bytes(range(256)) * 40)
    got = outputs(FixedLengthRecordDataset(str(big), 16, buffer_size=100))
    assert got == [bytes(range(256)) [i % 256: i % 256 + 16] for i in range(0, 10240, 16)]
    import gzip

    gz = tmp_path / "fl.gz"
    gz.write_bytes(gzip.compress(b"HHabcdefgF"))
    assert outputs(FixedLengthRecordDataset(str(gz), 2, 2, 2, compression_type="GZIP")) == [
        b"ab", b"cd", b"ef"]


def test_text_line_dataset(tmp_path):
    p = tmp_path / "t.txt"
    p.write_bytes(b"a\r\nb\n\nc")
    assert outputs(TextLineDataset(str(p))) == [b"a", b"b", b"", b"c"]  # as TF 2.21 gives
    long = tmp_path / "long.txt"
    lines = [("x" * (i % 37)).encode() for i in range(1000)]
    long.write_bytes(b"\n".join(lines) + b"\n")
    assert outputs(TextLineDataset(str(long), buffer_size=64)) == lines


# -- transformations ------------------------------------------------------------------------------
def test_shard_takes_every_nth():
    assert outputs(Dataset.range(10).shard(3, 1)) == [1, 4, 7]
    assert outputs(Dataset.range(10).shard(3, 0)) == [0, 3, 6, 9]
    with pytest.raises(ValueError):
        Dataset.range(3).shard(2, 2)


def test_shard_warns_about_few_files(tmp_path, caplog):
    for i in range(6):
        (tmp_path / f"f{i}").write_bytes(b"")
    Dataset.list_files(str(tmp_path / "f*"), shuffle=False).shard(2, 0)
    assert "gets 3 of 6 files" in caplog.text


def test_interleave_tf_documented_example():
    ds = Dataset.range(1, 6).interleave(lambda x: Dataset.from_tensors(x).repeat(6),
                                        cycle_length=2, block_length=4)
    assert "".join(str(v) for v in outputs(ds)) == "111122221122333344443344555555"


@given(st.lists(st.integers(0, 9), min_size=0, max_size=7), st.integers(1, 4), st.integers(1, 3),
       st.booleans())
@settings(max_examples=150, deadline=None)
def test_interleave_matches_tensorflow_algorithm(lengths, cycle, block, parallel):
    subs = [list(range(100 * i, 100 * i + n)) for i, n in enumerate(lengths)]
    expected = tf_interleave_reference(range(len(subs)), lambda i: subs[i], cycle, block)
    ds = Dataset.range(len(subs)).interleave(
        lambda i: Dataset.from_tensor_slices(np.array(subs[int(i)], dtype=np.int64)),
        cycle_length=cycle, block_length=block, num_parallel_calls=2 if parallel else None)
    assert outputs(ds) == expected


def test_interleave_vectorised_rounds_on_big_blocks():
    subs = [np.arange(k * 100000, k * 100000 + 20000 + 7 * k) for k in range(3)]
    ds = Dataset.range(3).interleave(lambda i: Dataset.from_tensor_slices(subs[int(i)]),
                                     cycle_length=3, block_length=5)
    expected = tf_interleave_reference(range(3), lambda i: subs[i].tolist(), 3, 5)
    assert outputs(ds) == expected


def test_take_skip_repeat():
    assert outputs(Dataset.range(10).skip(3).take(4)) == [3, 4, 5, 6]
    assert outputs(Dataset.range(3).repeat(2)) == [0, 1, 2, 0, 1, 2]
    assert outputs(Dataset.range(3).repeat().take(7)) == [0, 1, 2, 0, 1, 2, 0]
    assert outputs(Dataset.range(0).repeat()) == []  # an empty dataset repeated stays empty
    assert outputs(Dataset.range(5).take(-1)) == [0, 1, 2, 3, 4]
    assert outputs(Dataset.range(5).skip(-1)) == []
    assert Dataset.range(5).repeat(3).cardinality() == 15


def test_batch_and_unbatch():
    assert outputs(Dataset.range(5).batch(2)) == [[0, 1], [2, 3], [4]]
    assert outputs(Dataset.range(5).batch(2, drop_remainder=True)) == [[0, 1], [2, 3]]
    pairs = Dataset.from_tensor_slices((np.arange(4), np.arange(4) * 10)).batch(3)
    assert outputs(pairs) == [[[0, 1, 2], [0, 10, 20]], [[3], [30]]]
    assert outputs(Dataset.range(7).batch(3).unbatch()) == list(range(7))
    assert outputs(Dataset.range(6).batch(2).batch(2)) == [[[0, 1], [2, 3]], [[4, 5]]]


def test_padded_batch_tf_example():
    # tf.data docs: elements [1], [2, 2], [3, 3, 3], [4, 4, 4, 4] padded_batch(2)
    ds = Dataset.range(1, 5).map(lambda x: np.full(int(x), x))
    assert outputs(ds.padded_batch(2)) == [[[1, 0], [2, 2]], [[3, 3, 3, 0], [4, 4, 4, 4]]]
    assert outputs(ds.padded_batch(2, padded_shapes=5, padding_values=-1))[0] == [
        [1, -1, -1, -1, -1], [2, 2, -1, -1, -1]]
    with pytest.raises(ValueError, match="more than the padded shape"):
        outputs(ds.padded_batch(2, padded_shapes=3))


def test_map_filter_zip():
    ds = Dataset.from_tensor_slices((np.arange(5), np.arange(5) * 2)).map(lambda a, b: {"s": a + b})
    assert outputs(ds) == [{"s": 0}, {"s": 3}, {"s": 6}, {"s": 9}, {"s": 12}]
    assert outputs(Dataset.range(10).filter(lambda x: x % 3 == 0)) == [0, 3, 6, 9]
    z = Dataset.zip((Dataset.range(3), Dataset.range(10, 20)))
    assert outputs(z) == [[0, 10], [1, 11], [2, 12]]
    zd = Dataset.zip({"a": Dataset.range(2), "b": Dataset.from_tensor_slices(["x", "y", "z"])})
    assert outputs(zd) == [{"a": 0, "b": b"x"}, {"a": 1, "b": b"y"}]
    par = Dataset.range(50).map(lambda x: x * x, num_parallel_calls=4)
    assert outputs(par) == [x * x for x in range(50)]


def test_parse_before_or_after_batch(tmp_path):
    paths = write_shards(tmp_path, 2, [5, 4])
    before = outputs(TFRecordDataset(paths).parse(SPEC).batch(4))
    after = outputs(TFRecordDataset(paths).batch(4).parse(SPEC))
    assert before == after
    assert [b["id"] for b in after] == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    assert after[0]["x"][1] == [1.0, 1.0, 1.0] and after[2]["tag"] == [b"t8"]
    with pytest.raises(TypeError, match="parse"):
        outputs(Dataset.range(3).parse(SPEC))


def test_parse_varlen_through_batch(tmp_path):
    paths = write_shards(tmp_path, 1, 5, lambda i: {"v": np.arange(i, dtype=np.int64)})
    spec = {"v": tpudata.VarLenFeature(np.int64)}
    batches = list(TFRecordDataset(paths).parse(spec).batch(2))
    assert [plain(b["v"]) for b in batches] == [[[], [0]], [[0, 1], [0, 1, 2]], [[0, 1, 2, 3]]]
    assert batches[1]["v"].dense_shape == (2, 3)
    same = list(TFRecordDataset(paths).batch(2).parse(spec))
    assert [plain(b["v"]) for b in same] == [plain(b["v"]) for b in batches]


def test_cache_in_memory_and_files(tmp_path):
    calls = []

    def f(x):
        calls.append(int(x))
        return x * 2

    ds = Dataset.range(5).map(f).cache()
    assert outputs(ds) == [0, 2, 4, 6, 8] and outputs(ds) == [0, 2, 4, 6, 8]
    assert calls == [0, 1, 2, 3, 4]  # the second pass came from the cache
    url = str(tmp_path / "cache")
    ds2 = Dataset.range(4).shuffle(4, seed=None).cache(url).repeat(3)
    got = outputs(ds2)
    assert got[:4] == got[4:8] == got[8:]  # cached order is replayed
    fresh = Dataset.range(4).map(lambda x: x * 100).cache(url)  # a complete cache is reused
    assert outputs(fresh) == got[:4]
    partial = Dataset.range(10).cache(str(tmp_path / "partial"))
    with partial.iterator() as it:
        next(it)
    assert not (tmp_path / "partial" / "_complete.json").exists()


def test_element_spec(tmp_path):
    paths = write_shards(tmp_path, 1, 3)
    spec = TFRecordDataset(paths).parse(SPEC).batch(8, drop_remainder=True).element_spec
    assert repr(spec["x"]) == "TensorSpec(shape=(8, 3), dtype=float32)"
    assert repr(spec["tag"]) == "TensorSpec(shape=(8,), dtype=bytes)"
    padded = TFRecordDataset(paths).parse(SPEC).batch(8, pad_remainder=True).element_spec
    assert padded["weight"].shape == (8,) and padded["id"].shape == (8,)
    mapped = Dataset.range(3).map(lambda x: {"y": np.zeros((2, 2), np.float32)}).element_spec
    assert mapped["y"].shape == (2, 2) and mapped["y"].dtype == np.float32
    assert TFRecordDataset(paths).element_spec.shape == ()
