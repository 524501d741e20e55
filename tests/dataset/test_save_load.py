"""Dataset.save / Dataset.load: TFRecord shards + element-spec metadata, atomic, checkpointable."""

from __future__ import annotations

import collections
import json
import os
import threading
import time
import uuid

import numpy as np
import pytest

import tpudata
from fake_gcs.pytest_plugin import fake_gcs_server  # noqa: F401 - the fixture
from tpudata import storage
from tpudata.dataset import Dataset, TensorSpec, VarLenSpec
from tpudata.dataset.io.saved_format import METADATA
from tpudata.dataset.core.spec import RaggedSpec, SparseSpec
from tpudata.errors import SavedDatasetError, SavedDatasetNotFoundError, SpecError
from tpudata.example.parse import VarLenValues
from tpudata.example.structured import RaggedValues, SparseValues
from tests.dataset.helpers import SPEC, check_restore_everywhere, outputs, plain, write_shards

Point = collections.namedtuple("Point", ["x", "y"])


def _rich(x):
    x = int(x)
    return {
        "id": np.int64(x),
        "name": f"n{x}".encode() * (x % 3),
        "ragged": np.arange(x % 4, dtype=np.int32),
        "image": np.full((2, 3), x, np.uint8),
        "pair": (np.float16(x) / 2, np.array([x % 2 == 0, True])),
        "point": Point(np.float64(x), np.array([b"a", b"bc"][: x % 3], dtype=object)),
        "c": np.complex64(x + 1j),
    }


def rich_ds(n=11):
    return Dataset.range(n).map(_rich)


def load_rich(path, **kwargs):
    """``Dataset.load`` of a save of ``rich_ds``: its Point class passed (never imported)."""
    return Dataset.load(path, namedtuples=[Point], **kwargs)


def test_round_trip_keeps_elements_spec_and_order(tmp_path):
    ds = rich_ds()
    ds.save(str(tmp_path), num_shards=3)
    loaded = Dataset.load(str(tmp_path), namedtuples=[Point])  # data only: classes are passed
    assert outputs(loaded) == outputs(ds)
    assert loaded.cardinality() == 11
    assert loaded.element_spec == ds.element_spec  # unknown dims stay unknown
    assert loaded.element_spec["ragged"] == TensorSpec((None,), np.dtype(np.int32))
    first = next(iter(loaded))
    assert type(first["point"]) is Point and first["name"] == b""
    assert isinstance(first["id"], np.int64) and first["c"].dtype == np.complex64
    assert sorted(os.listdir(tmp_path)) == sorted(
        [METADATA] + [f for f in os.listdir(tmp_path) if f.startswith("shard-")])
    assert len([f for f in os.listdir(tmp_path) if f.startswith("shard-")]) == 3


def test_shards_are_plain_tfrecord_files_round_robin(tmp_path):
    Dataset.range(10).save(str(tmp_path), num_shards=4)
    meta = json.loads((tmp_path / METADATA).read_text())
    assert [s["records"] for s in meta["shards"]] == [3, 3, 2, 2]
    first = storage.join(str(tmp_path), meta["shards"][1]["file"])
    records = list(tpudata.read_records(first))  # TFRecord framing, CRCs checked
    assert len(records) == 3
    from tpudata.dataset.io.saved_format import Leaf, decode_element

    leaf = [Leaf("tensor", np.int64, ())]
    assert [int(decode_element(leaf, r)[0]) for r in records] == [1, 5, 9]


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_compressed_save(tmp_path, compression):
    rich_ds(7).save(str(tmp_path), compression=compression, num_shards=2)
    meta = json.loads((tmp_path / METADATA).read_text())
    assert meta["compression"] == compression
    raw = (tmp_path / meta["shards"][0]["file"]).read_bytes()
    assert raw[:2] == (b"\x1f\x8b" if compression == "GZIP" else b"\x78\x9c")
    assert len(list(tpudata.read_records(str(tmp_path / meta["shards"][0]["file"]),
                                         compression=compression))) == 4
    assert outputs(load_rich(str(tmp_path))) == outputs(rich_ds(7))
    assert outputs(load_rich(str(tmp_path), compression=compression)) == outputs(rich_ds(7))
    with pytest.raises(ValueError, match="saved with compression"):
        load_rich(str(tmp_path), compression="ZLIB" if compression == "GZIP" else "GZIP")


def _structured(x):
    x = int(x)
    rows = [np.arange(k, dtype=np.float32) for k in (x % 3, 1)]
    return {"varlen": VarLenValues.from_rows(rows, np.float32),
            "sparse": SparseValues(np.array([[0, x % 4]]), np.array([x], np.int64), (2, 4)),
            "ragged": RaggedValues(np.array([b"a", b"b", b"c"], dtype=object),
                                   [np.array([0, 1, 1 + x % 2]), np.array([0, 2, 3][:2 + x % 2])])}


def test_sparse_ragged_and_varlen_values(tmp_path):
    ds = Dataset.range(5).map(_structured)
    ds.save(str(tmp_path), num_shards=2)
    loaded = Dataset.load(str(tmp_path))
    got, want = list(loaded), list(ds)
    for g, w in zip(got, want):
        assert g["varlen"] == w["varlen"] and g["sparse"] == w["sparse"]
        assert g["ragged"] == w["ragged"]
    assert len(got) == 5
    spec = loaded.element_spec
    assert isinstance(spec["sparse"], SparseSpec) and spec["sparse"].dtype == np.int64
    assert isinstance(spec["ragged"], RaggedSpec) and spec["ragged"].ragged_rank == 2
    assert isinstance(spec["varlen"], VarLenSpec)


def test_parsed_examples_round_trip(tmp_path):
    files = write_shards(tmp_path / "src", 2, 6)
    ds = tpudata.TFRecordDataset(files).batch(4).parse(
        dict(SPEC, ragged=tpudata.VarLenFeature(np.int64)))
    ds.save(str(tmp_path / "saved"), compression="GZIP", num_shards=2)
    loaded = Dataset.load(str(tmp_path / "saved"))
    assert outputs(loaded) == outputs(ds)
    assert loaded.element_spec["x"] == TensorSpec((None, 3), np.dtype(np.float32))


def test_restore_everywhere_after_load(tmp_path):
    rich_ds(13).save(str(tmp_path), num_shards=3)
    out = check_restore_everywhere(lambda: load_rich(str(tmp_path)))
    assert out == outputs(rich_ds(13))
    Dataset.range(9).save(str(tmp_path / "r"), num_shards=2)
    check_restore_everywhere(
        lambda: Dataset.load(str(tmp_path / "r")).shuffle(4, seed=3).batch(2))


def test_custom_shard_func_and_reader_func(tmp_path):
    Dataset.range(10).save(str(tmp_path), shard_func=lambda x: np.int64(x % 3 == 0))
    meta = json.loads((tmp_path / METADATA).read_text())
    assert [(s["shard_id"], s["records"]) for s in meta["shards"]] == [(0, 6), (1, 4)]
    # default reader: the shards interleaved one element at a time (as TF's default reader)
    assert outputs(Dataset.load(str(tmp_path))) == [1, 0, 2, 3, 4, 6, 5, 9, 7, 8]
    concat = Dataset.load(str(tmp_path), reader_func=lambda d: d.flat_map(lambda s: s))
    assert outputs(concat) == [1, 2, 4, 5, 7, 8, 0, 3, 6, 9]
    check_restore_everywhere(lambda: Dataset.load(str(tmp_path),
                                                  reader_func=lambda d: d.flat_map(lambda s: s)))
    with pytest.raises(ValueError, match="shard_func returned"):
        Dataset.range(3).save(str(tmp_path / "bad"), shard_func=lambda x: -1)


def test_interrupted_save_is_never_loadable_and_keeps_the_earlier_save(tmp_path):
    path = str(tmp_path / "ds")

    def boom(x):
        if x == 7:
            raise RuntimeError("input failed")
        return x

    with pytest.raises(RuntimeError, match="input failed"):
        Dataset.range(10).map(boom).save(path, num_shards=2)
    assert os.listdir(path) == []  # no shard, no metadata, no temporaries
    with pytest.raises(SavedDatasetNotFoundError, match="interrupted") as info:
        Dataset.load(path)
    assert isinstance(info.value, FileNotFoundError) and METADATA in info.value.path
    Dataset.range(4).save(path, num_shards=2)
    with pytest.raises(RuntimeError):
        Dataset.range(10).map(boom).save(path, num_shards=2)
    assert outputs(Dataset.load(path)) == [0, 1, 2, 3]  # the earlier save is intact
    Dataset.range(5, 8).save(path, num_shards=2)  # a complete save replaces it
    assert outputs(Dataset.load(path)) == [5, 6, 7]
    assert len(os.listdir(path)) == 3  # the earlier shards are removed


def test_damaged_metadata_and_missing_shards_name_the_path(tmp_path):
    Dataset.range(6).save(str(tmp_path), num_shards=2)
    meta_path = tmp_path / METADATA
    good = meta_path.read_text()
    meta_path.write_text("{not json")
    with pytest.raises(SavedDatasetError, match="damaged or not a tpudata save.*save the dataset"
                       ) as info:
        Dataset.load(str(tmp_path))
    assert info.value.path.endswith(METADATA)
    meta_path.write_text(json.dumps(dict(json.loads(good), format="tf.data")))
    with pytest.raises(SavedDatasetError, match="not 'tpudata.save'"):
        Dataset.load(str(tmp_path))
    meta_path.write_text(good)
    shard = json.loads(good)["shards"][1]["file"]
    os.remove(tmp_path / shard)
    with pytest.raises(SavedDatasetError, match="1 of its 2 shards are missing") as info:
        Dataset.load(str(tmp_path))
    assert info.value.path.endswith(shard)


def test_element_spec_mismatch_names_the_feature(tmp_path):
    rich_ds(3).save(str(tmp_path), num_shards=1)
    spec = dict(rich_ds().element_spec)
    assert Dataset.load(str(tmp_path), element_spec=spec).element_spec == spec
    spec["image"] = TensorSpec((2, 3), np.dtype(np.float32))
    with pytest.raises(SpecError, match="'image'"):
        Dataset.load(str(tmp_path), element_spec=spec)
    spec["image"] = TensorSpec((None, 4), np.dtype(np.uint8))
    with pytest.raises(SpecError, match="'image'"):
        Dataset.load(str(tmp_path), element_spec=spec)
    with pytest.raises(SpecError, match="structure"):
        load_rich(str(tmp_path), element_spec=TensorSpec((), np.dtype(np.int64)))


def test_save_checks_elements_against_the_spec(tmp_path):
    ds = Dataset.from_generator(lambda: iter([np.zeros(2, np.float32), np.zeros(3, np.float32)]),
                                output_signature=TensorSpec((None,), np.dtype(np.float32)))
    ds.save(str(tmp_path / "ok"))
    assert [len(x) for x in Dataset.load(str(tmp_path / "ok"))] == [2, 3]
    with pytest.raises(TypeError, match="flat_map"):
        Dataset.range(4).window(2).save(str(tmp_path / "w"))
    with pytest.raises(NotImplementedError, match="checkpoint_args"):
        Dataset.range(4).save(str(tmp_path / "c"), checkpoint_args={"directory": "x"})
    with pytest.raises(TypeError, match="unexpected keyword"):
        Dataset.range(4).save(str(tmp_path / "k"), shard_fn=lambda x: 0)


def test_empty_dataset(tmp_path):
    Dataset.range(0).save(str(tmp_path))
    loaded = Dataset.load(str(tmp_path))
    assert outputs(loaded) == [] and loaded.cardinality() == 0
    assert loaded.element_spec == TensorSpec((), np.dtype(np.int64))


def test_progress_bar(tmp_path, capsys):
    Dataset.range(50).save(str(tmp_path / "a"), progress=True)
    err = capsys.readouterr().err
    assert f"save {tmp_path / 'a'}" in err and "/50" in err
    Dataset.range(50).save(str(tmp_path / "b"), progress=False)
    assert capsys.readouterr().err == ""


def test_wait_for_a_save_in_progress(tmp_path, monkeypatch):
    from tpudata.dataset.sources import load

    monkeypatch.setattr(load, "WAIT_POLL_SECONDS", 0.05)
    path = str(tmp_path / "later")
    saver = threading.Timer(0.3, lambda: Dataset.range(3).save(path))
    saver.start()
    try:
        start = time.monotonic()
        assert outputs(Dataset.load(path, wait=True)) == [0, 1, 2]
        assert time.monotonic() - start >= 0.2
    finally:
        saver.join()


def test_memory_filesystem(memfs):
    url = f"memory://saved-{uuid.uuid4().hex[:8]}"
    rich_ds(6).save(url, num_shards=2, compression="GZIP")
    assert outputs(load_rich(url)) == outputs(rich_ds(6))
    check_restore_everywhere(lambda: load_rich(url), stride=2)


def test_fake_gcs(fake_gcs_server):
    bucket = f"save-{uuid.uuid4().hex[:8]}"
    fs, _ = storage.url_to_fs(f"gs://{bucket}")
    fs.mkdir(bucket)
    try:
        url = f"gs://{bucket}/datasets/rich"
        rich_ds(5).save(url, num_shards=2)
        loaded = load_rich(url)
        assert loaded.cardinality() == 5 and outputs(loaded) == outputs(rich_ds(5))
        with pytest.raises(SavedDatasetNotFoundError, match="no saved dataset"):
            Dataset.load(f"gs://{bucket}/datasets/none")
    finally:
        fs.clear_instance_cache()


def test_loaded_dataset_pickles(tmp_path):
    import pickle

    Dataset.range(5).save(str(tmp_path), num_shards=2)
    ds = pickle.loads(pickle.dumps(Dataset.load(str(tmp_path)).map(lambda x: x + 1)))
    assert [plain(x) for x in ds] == [1, 2, 3, 4, 5]


def test_bfloat16_loads_in_a_fresh_process(tmp_path):
    """The metadata names bfloat16; load imports ml_dtypes itself to get the dtype back."""
    import subprocess
    import sys

    ml_dtypes = pytest.importorskip("ml_dtypes")
    Dataset.range(4).map(lambda x: np.full(3, x, ml_dtypes.bfloat16)).save(str(tmp_path))
    code = ("import sys\nfrom tpudata import Dataset\nds = Dataset.load(sys.argv[1])\n"
            "print(ds.element_spec.dtype, [x.astype('float32').tolist() for x in ds])")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, check=True, timeout=120)
    assert out.stdout.split(" ", 1) == ["bfloat16", str([[float(x)] * 3 for x in range(4)]) + "\n"]


# -- the block fast paths equal the element-by-element reference ---------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tpudata.dataset.io.saved_format import (  # noqa: E402
    Leaf, decode_columns, decode_element, encode_columns, encode_element,
)

DTYPES = [np.int64, np.int8, np.uint16, np.float32, np.float64, np.bool_, np.complex64, bytes]


@st.composite
def columns_case(draw):
    n = draw(st.integers(1, 6))
    leaves, cols = [], []
    for _ in range(draw(st.integers(1, 4))):
        dtype = draw(st.sampled_from(DTYPES))
        if dtype is bytes:
            values = [draw(st.binary(max_size=9)) for _ in range(n)]
            col = np.empty(n, dtype=object)
            col[:] = values
            leaves.append(Leaf("tensor", object, ()))
        else:
            shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
            col = np.asarray(np.random.default_rng(draw(st.integers(0, 99))).integers(
                0, 100, (n,) + shape)).astype(dtype)
            known = tuple(d if draw(st.booleans()) else None for d in shape)
            leaves.append(Leaf("tensor", dtype, known))
        cols.append(col)
    return leaves, cols, n


@settings(max_examples=150, deadline=None)
@given(columns_case())
def test_block_paths_equal_the_reference(case):
    leaves, cols, n = case
    rows = [[c[i] for c in cols] for i in range(n)]
    reference = [encode_element(leaves, r) for r in rows]
    assert encode_columns(leaves, cols, n) == reference
    decoded = decode_columns(leaves, reference)
    assert decoded is not None
    for k, col in enumerate(decoded):
        assert col.dtype == cols[k].dtype and col.shape == cols[k].shape
        assert all(plain(decode_element(leaves, rec)[k]) == plain(col[i])
                   for i, rec in enumerate(reference))
        assert plain(col) == plain(cols[k])


def test_rows_of_different_shapes_fall_back_to_the_reference():
    leaves = [Leaf("tensor", np.int64, (None,))]
    records = [encode_element(leaves, [np.arange(k)]) for k in (1, 3)]
    assert decode_columns(leaves, records) is None
    assert [decode_element(leaves, r)[0].tolist() for r in records] == [[0], [0, 1, 2]]
    with pytest.raises(ValueError, match="left over"):
        decode_element(leaves, records[0] + b"x")
    assert decode_columns(leaves, [records[0] + b"x"]) is None
