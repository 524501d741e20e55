"""tpudata.jax on 8 CPU devices, with two jax.distributed processes on 127.0.0.1, and no fork."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

import tpudata.jax as tj  # noqa: E402
from tests.torch.helpers import SPEC, make_shards  # noqa: E402
from tpudata.source import TFRecordSource  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _parse(ds, _):
    return ds.parse(SPEC)


@pytest.fixture
def mesh():
    devices = jax.devices()
    if len(devices) != 8:
        pytest.fail(f"expected 8 CPU devices from XLA_FLAGS, got {len(devices)}")
    return Mesh(np.array(devices).reshape(4, 2), ("data", "model"))


def test_global_batch_is_sharded_over_the_data_axis(tmp_path, mesh):
    files, n = make_shards(str(tmp_path))
    ds = tj.tfrecord_batches(files, 16, pipeline=_parse, process_index=0, process_count=1)
    host = next(iter(ds))
    g = tj.global_batch(host, mesh)
    assert g["x"].shape == (16, 2) and g["x"].sharding == NamedSharding(mesh, PartitionSpec("data"))
    assert len(g["x"].addressable_shards) == 8
    assert {s.data.shape for s in g["x"].addressable_shards} == {(4, 2)}  # 4 rows per data slot
    np.testing.assert_array_equal(np.asarray(g["id"]), host["id"])
    assert float(jax.jit(lambda b: b["weight"].sum())(g)) == 16.0
    with pytest.raises(TypeError, match="parse or decode"):
        tj.global_batch({"record": np.array([b"a"] * 8, dtype=object)}, mesh)


@pytest.mark.parametrize("kind", ["stream", "source"])
def test_device_prefetch_keeps_the_state_of_consumed_batches(tmp_path, mesh, kind):
    files, n = make_shards(str(tmp_path))

    def host():
        if kind == "stream":
            return tj.tfrecord_batches(files, 8, pipeline=_parse, process_index=0,
                                       process_count=1).iterator()
        return tj.source_batches(TFRecordSource(files, progress=False), 8, seed=5,
                                 transform=lambda r: __import__("tpudata").parse_examples(r, SPEC),
                                 process_index=0, process_count=1)

    whole = [np.asarray(b["id"]).tolist() for b in tj.DeviceIterator(host(), mesh)]
    assert len(whole) == 10
    h = host()
    it = tj.DeviceIterator(h, mesh, depth=2)
    head = [np.asarray(next(it)["id"]).tolist() for _ in range(3)]
    state = it.get_state()
    assert state != h.get_state()  # the host ran ahead; the state is that of consumed batches
    h2 = host()
    it2 = tj.DeviceIterator(h2, mesh)
    it2.set_state(state)
    rest = [np.asarray(b["id"]).tolist() for b in it2]
    assert head + rest == whole
    ids = [i for b in whole for i in b]
    assert sorted(i for i in ids if i) == list(range(1, n))


def test_process_split_from_jax_and_explicit():
    assert tj.process_split() == (0, 1)
    assert tj.process_split(2, 4) == (2, 4)
    with pytest.raises(ValueError):
        tj.process_split(4, 4)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_jax_processes_each_feed_half_of_the_global_batch(tmp_path):
    files, n = make_shards(str(tmp_path), sizes=(40, 3, 21))  # 3 files, 2 processes: by records
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    port = _port()
    outs = [str(tmp_path / f"out{k}.json") for k in range(2)]
    procs = [subprocess.Popen([sys.executable, "-m", "tests.jax.two_process", str(k), str(port),
                               str(tmp_path), outs[k]], env=env, cwd=ROOT) for k in range(2)]
    for p in procs:
        assert p.wait(timeout=240) == 0
    r0, r1 = (json.load(open(o)) for o in outs)
    assert (r0["index"], r1["index"], r0["count"]) == (0, 1, 2)
    assert r0["steps"] == r1["steps"] == 8  # ceil(32 / 4) on each, equal
    assert r0["global_rows"] == 8  # 4 rows from each process
    assert sorted(r0["local_ids"] + r1["local_ids"]) == list(range(n))
    assert not set(r0["local_ids"]) & set(r1["local_ids"])
    assert r0["global_sum"] == r1["global_sum"] == sum(range(n))  # a cross-process reduction


NO_FORK = textwrap.dedent("""
    import os, sys
    forks = []
    os.register_at_fork(before=lambda: forks.append(os.getpid()))
    pid = os.fork()              # control: the hook sees a real fork
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert len(forks) == 1
    import jax, jax.numpy as jnp
    assert float(jnp.arange(4.0).sum()) == 6.0     # JAX is up (and multithreaded) now
    import tpudata
    from tests.jax.helpers import encode_item
    result = tpudata.build_shards(list(range(40)), encode_item, sys.argv[1], "nf",
                                  num_shards=4, workers=2, progress=False)
    assert sum(1 for _ in tpudata.read_records(sys.argv[1] + "/nf-*")) == 40
    assert len(forks) == 1, f"forked after JAX started: {forks}"
    print("no fork")
""")


def test_worker_processes_after_jax_are_spawned_not_forked(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", NO_FORK, str(tmp_path)], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "no fork"
