"""tf.data's defaults: list_files shuffles (seeded by ``seed``), shard after an unseeded file
shuffle warns, unseeded shuffles differ between worker processes, cardinality from manifests,
a readable repr."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings

import pytest

import tpudata
from tpudata import storage
from tpudata.dataset import UNKNOWN, Dataset, TFRecordDataset
from tests.dataset.helpers import outputs


@pytest.fixture
def files(tmp_path):
    for i in range(12):
        (tmp_path / f"f{i:02d}").write_bytes(b"")
    return str(tmp_path / "f*"), sorted(str(tmp_path / f"f{i:02d}").encode() for i in range(12))


def test_list_files_shuffles_by_default_like_tf(files):
    pattern, names = files
    a, b = outputs(Dataset.list_files(pattern, seed=3)), outputs(Dataset.list_files(pattern, seed=3))
    assert a == b and a != names and sorted(a) == names
    assert outputs(Dataset.list_files(pattern, seed=4)) != a
    assert outputs(Dataset.list_files(pattern, shuffle=False)) == names
    epochs = outputs(Dataset.list_files(pattern, seed=3).repeat(2))  # reshuffled each epoch
    assert sorted(epochs[:12]) == sorted(epochs[12:]) == names and epochs[:12] != epochs[12:]
    unseeded = Dataset.list_files(pattern)
    assert sorted(outputs(unseeded)) == names and outputs(unseeded) != names


def test_shard_after_unseeded_list_files_warns(files):
    pattern, _ = files
    with pytest.warns(UserWarning, match="without a seed.*seed=S"):
        Dataset.list_files(pattern).shard(2, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Dataset.list_files(pattern, seed=1).shard(2, 0)
        Dataset.list_files(pattern, shuffle=False).shard(2, 0)
        Dataset.list_files(pattern).interleave(lambda f: Dataset.range(1))


def test_seeded_hosts_get_disjoint_files(files):
    pattern, names = files
    parts = [outputs(Dataset.list_files(pattern, seed=9).shard(3, h)) for h in range(3)]
    assert sorted(sum(parts, [])) == names


FORK_PROBE = textwrap.dedent("""
    import json, os, sys
    from tpudata.dataset import Dataset
    ds = Dataset.range(50).shuffle(50)        # unseeded, built before the fork
    ds_seeded = Dataset.range(50).shuffle(50, seed=1)
    orders = []
    for _ in range(3):
        r, w = os.pipe()
        if os.fork() == 0:
            os.close(r)
            out = [[int(x) for x in ds], [int(x) for x in ds_seeded]]
            os.write(w, json.dumps(out).encode())
            os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            orders.append(json.loads(f.read()))
        os.wait()
    print(json.dumps(orders))
""")


def test_unseeded_shuffle_differs_between_forked_workers():
    out = subprocess.run([sys.executable, "-c", FORK_PROBE], capture_output=True, text=True,
                         timeout=120, check=True)
    orders = json.loads(out.stdout)
    unseeded = [tuple(o[0]) for o in orders]
    seeded = [tuple(o[1]) for o in orders]
    assert len(set(unseeded)) == 3  # each worker its own order
    assert len(set(seeded)) == 1  # a seed still gives every worker the same order


def _encode(i):
    return tpudata.encode_example({"y": i})


def test_cardinality_of_list_files_pipelines_from_manifests(tmp_path):
    tpudata.build_shards(list(range(100)), _encode, str(tmp_path), "train", num_shards=4,
                         workers=1)
    pattern = str(tmp_path / "train-*")
    files = storage.glob(pattern)
    read = lambda f: TFRecordDataset(f)  # noqa: E731
    assert Dataset.list_files(pattern).interleave(read, cycle_length=2).cardinality() == 100
    assert Dataset.list_files(pattern, shuffle=False).flat_map(read).cardinality() == 100
    host = Dataset.list_files(pattern, shuffle=False).shard(2, 1).interleave(read, cycle_length=2)
    assert host.cardinality() == len(outputs(host)) == 50
    assert host.batch(8).cardinality() == 7
    assert TFRecordDataset(files, num_parallel_reads=2).cardinality() == 100
    # which files an unseeded shuffled list gives a shard is not known in advance
    with pytest.warns(UserWarning):
        assert Dataset.list_files(pattern).shard(2, 0).flat_map(read).cardinality() == UNKNOWN
    # no manifests: unknown
    (tmp_path / "other").mkdir()
    tpudata.write_records(str(tmp_path / "other" / "x.tfrecord"), [b"a", b"b"])
    assert Dataset.list_files(str(tmp_path / "other" / "*")).flat_map(read).cardinality() == UNKNOWN
    assert Dataset.range(3).flat_map(lambda x: Dataset.range(x)).cardinality() == UNKNOWN


CALLS: list = []


def f(x):
    CALLS.append(x)
    return x


def test_repr_names_the_pipeline_without_running_it():
    ds = Dataset.range(10).shuffle(4, seed=1).map(f).batch(3, drop_remainder=True).prefetch(2)
    assert repr(ds) == ("<Dataset range(n=10, start=0) -> shuffle(buffer_size=4, seed=1) -> "
                        "map(f) -> batch(batch_size=3, drop_remainder=True) -> "
                        "prefetch(buffer_size=2)>")
    assert CALLS == []
    assert repr(TFRecordDataset(["a", "b"])) == "<Dataset tf_record_files(2 files)>"
    assert repr(Dataset.range(2).concatenate(Dataset.range(3))) == \
        "<Dataset concatenate(2 datasets)>"
