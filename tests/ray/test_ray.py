"""tpudata.ray on a local Ray instance (2 CPUs): the TFRecord datasource (CRCs checked, parsed
columns) and ds.distribute(RayExecutor()) with a worker dying mid-task. Opt-in (see below)."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest

if not os.environ.get("TPUDATA_TEST_RAY"):  # opt-in: TPUDATA_TEST_RAY=1 pytest tests/ray
    pytest.skip("Ray 2.60's raylet and GCS listen on every interface (not only 127.0.0.1, as the "
                "servers this suite starts must)", allow_module_level=True)
ray = pytest.importorskip("ray")
pytest.importorskip("pyarrow")

import tpudata  # noqa: E402
from tests.distribute import remote_fns as fns  # noqa: E402
from tpudata import Dataset  # noqa: E402
from tpudata.errors import DataLossError, RemoteSplitError  # noqa: E402
from tpudata.ray import RayExecutor, read_tfrecords  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return fns.make_files(tmp_path_factory.mktemp("ray"))


def test_the_datasource_reads_records_and_parsed_columns(local_ray, files):
    records = [r for f in files for r in tpudata.read_records(f)]
    rows = read_tfrecords(files).take_all()
    assert sorted(bytes(r["record"]) for r in rows) == sorted(records)
    parsed = read_tfrecords(files, features=fns.SPEC).take_all()
    assert sorted(int(r["i"]) for r in parsed) == list(range(len(records)))
    row = next(r for r in parsed if r["i"] == 7)
    assert np.array_equal(row["x"], np.arange(8, dtype=np.float32) + 7)


def test_the_datasource_gives_bytes_and_variable_length_columns(local_ray, tmp_path):
    path = str(tmp_path / "mixed.tfrecord")
    rows = [{"img": bytes([i % 256]) * (500 + i), "v": np.arange(i % 4, dtype=np.int64),
             "s": [b"a" * (i % 3)] * (1 + i % 2), "i": i} for i in range(300)]
    with tpudata.TFRecordWriter(path) as w:
        w.write_many(tpudata.encode_example(r) for r in rows)
    spec = {"img": tpudata.FixedLenFeature([], bytes), "i": tpudata.FixedLenFeature([], np.int64),
            "v": tpudata.VarLenFeature(np.int64), "s": tpudata.VarLenFeature(bytes)}
    got = sorted(read_tfrecords([path], features=spec).take_all(), key=lambda r: int(r["i"]))
    assert [bytes(r["img"]) for r in got] == [r["img"] for r in rows]
    assert [list(r["v"]) for r in got] == [r["v"].tolist() for r in rows]
    assert [[bytes(x) for x in r["s"]] for r in got] == [r["s"] for r in rows]
    batches = list(read_tfrecords([path], features=spec).iter_batches(batch_size=64,
                                                                      batch_format="numpy"))
    assert sum(len(b["i"]) for b in batches) == 300 and batches[0]["img"][1] == rows[1]["img"]


def test_the_datasource_checks_crcs(local_ray, tmp_path):
    (bad,) = fns.make_files(tmp_path, (10,))
    data = bytearray(open(bad, "rb").read())
    data[100] ^= 0x01
    open(bad, "wb").write(bytes(data))
    with pytest.raises(DataLossError):
        read_tfrecords([bad]).take_all()


def test_distribute_on_ray_tasks_survives_a_dying_worker(local_ray, files, tmp_path):
    out = list(fns.pipeline(files).distribute(RayExecutor(), chunk_bytes=40_000))
    assert fns.ids(out) == list(range(sum(fns.SIZES)))
    dies = functools.partial(die_once, marker=str(tmp_path / "died"))
    got = [int(x) for x in Dataset.range(120).map(dies).distribute(RayExecutor(), split_size=20)]
    assert got == list(range(120)) and os.path.exists(tmp_path / "died")
    with pytest.raises(RemoteSplitError) as info:
        list(Dataset.range(60).map(fns.fail_at).distribute(RayExecutor(), split_size=10))
    assert info.value.split == 1 and "fail_at" in info.value.worker_traceback


def die_once(x, marker):
    if int(x) == 50 and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)  # the Ray worker process dies mid-task: Ray runs the task again
    return x
