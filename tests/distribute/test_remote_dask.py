"""ds.distribute(client) on a real dask.distributed LocalCluster (2 worker processes, one thread
each, 127.0.0.1): equal to the local pipeline, a SIGKILLed worker loses and repeats nothing,
workers join and leave, restores on another number of workers, two trainer processes, the
scheduler going away, packages missing on the workers, and the torch / JAX bridges."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from tests.distribute import remote_fns as fns  # noqa: E402
from tpudata import Dataset  # noqa: E402
from tpudata.errors import ExecutorLostError, RemoteSplitError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address="127.0.0.1:0") as c:
        yield c


@pytest.fixture
def client(cluster):
    with distributed.Client(cluster) as c:
        c.wait_for_workers(2)
        yield c
    cluster.scale(2)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return fns.make_files(tmp_path_factory.mktemp("remote_dask"))


def _ours() -> list:
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"tpd_x{os.getpid()}_")]


def test_dask_output_equals_the_local_pipeline(client, files):
    import gc

    local = fns.ids(fns.pipeline(files))
    for executor in (client, client.get_executor()):
        with fns.pipeline(files).distribute(executor, chunk_bytes=40_000).iterator() as it:
            out = list(it)
        assert fns.ids(out) == local
        assert out[5]["big"].flags.writeable and (out[5]["big"] == 5).all()
    del it, out
    gc.collect()
    assert _ours() == []  # the shared-memory segments are gone with the dataset


def test_the_next_epoch_writes_into_the_last_ones_slots(client, files):
    """Each epoch is a new iteration: it takes over the slots the last one left (fresh pages
    cost the workers a fault and a zeroed page each), and they go with the Dataset."""
    import gc

    ds = fns.pipeline(files).distribute(client, chunk_bytes=40_000)
    local = fns.ids(fns.pipeline(files))
    assert fns.ids(list(ds)) == local
    first = set(_ours())
    assert any("_s" in n for n in first), first  # slots were used
    for _ in range(2):
        assert fns.ids(list(ds)) == local
        assert set(_ours()) <= first  # the same segments, none new
    with ds.iterator() as it:  # a restore mid-epoch (the slots the head still holds stay lent)
        head = [next(it) for _ in range(7)]
        state = it.get_state()
    rest = list(ds.iterator(state))
    assert fns.ids(head + rest) == local
    del ds, it, head, rest
    gc.collect()
    assert _ours() == []


def test_a_sigkilled_worker_loses_and_repeats_nothing(client):
    ds = Dataset.range(600).map(fns.slow).batch(10).distribute(client, split_size=50)
    pids = list(client.run(os.getpid).values())
    got = []
    with ds.iterator() as it:
        for step, batch in enumerate(it):
            got += batch["i"].tolist()
            if step == 6:
                os.kill(pids[0], signal.SIGKILL)
    assert got == list(range(600))


def test_workers_join_and_leave_mid_epoch(client, cluster):
    ds = Dataset.range(400).map(fns.slow).distribute(client, split_size=20)
    got = []
    with ds.iterator() as it:
        for x in it:
            got.append(int(x["i"]))
            if len(got) == 60:
                cluster.scale(3)
            if len(got) == 200:
                client.wait_for_workers(3, timeout=30)
                client.retire_workers(list(client.scheduler_info()["workers"])[:1])
    assert got == list(range(400))


def test_restore_on_another_number_of_workers(client, files):
    full = fns.ids(fns.pipeline(files))
    ds = fns.pipeline(files).distribute(client, chunk_bytes=40_000)
    for k in (0, 13, 37, 90, len(full)):
        with ds.iterator() as it:
            head = fns.ids(next(it) for _ in range(k))
            state = json.loads(json.dumps(it.get_state()))
        rest = fns.ids(fns.pipeline(files).distribute(None).iterator(state))
        assert head + rest == full
    with fns.pipeline(files).distribute(None).iterator() as it:  # and back onto the cluster
        head = fns.ids(next(it) for _ in range(50))
        state = it.get_state()
    assert head + fns.ids(ds.iterator(state)) == full


def test_nondeterministic_is_still_exactly_once(client):
    ds = Dataset.range(500).map(fns.jitter).distribute(client, split_size=25, deterministic=False)
    assert sorted(int(x) for x in ds) == list(range(500))


def test_a_worker_error_names_split_worker_and_traceback(client):
    with pytest.raises(RemoteSplitError) as info:
        list(Dataset.range(60).map(fns.fail_at).distribute(client, split_size=10))
    err = info.value
    assert err.split == 1 and err.worker.startswith("tcp://127.0.0.1:")
    assert "fail_at" in err.worker_traceback and "cannot handle element 17" in str(err)


def test_a_package_missing_on_the_workers_is_named(client, tmp_path, monkeypatch):
    (tmp_path / "only_here_mod.py").write_text("def f(x):\n    return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the consumer has it, the workers do not
    import only_here_mod

    with pytest.raises(RemoteSplitError, match="only_here_mod.*install it on every worker"):
        list(Dataset.range(10).map(only_here_mod.f).distribute(client, split_size=5))


TRAINER = textwrap.dedent("""
    import json, sys
    from distributed import Client
    from tpudata import Dataset
    from tests.distribute import remote_fns as fns
    if __name__ == "__main__":
        address, index, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
        with Client(address) as client:
            ds = (Dataset.range(300).map(fns.slow)
                  .distribute(client, split_size=16, num_consumers=2, consumer_index=index))
            json.dump([int(e["i"]) for e in ds], open(out, "w"))
""")


def test_two_trainer_processes_share_the_epoch_exactly_once(client, cluster, tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    procs = [subprocess.Popen([sys.executable, "-c", TRAINER, cluster.scheduler_address, str(i),
                               str(tmp_path / f"{i}.json")], env=env, cwd=ROOT) for i in (0, 1)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    parts = [json.load(open(tmp_path / f"{i}.json")) for i in (0, 1)]
    assert sorted(parts[0] + parts[1]) == list(range(300)) and parts[0] and parts[1]


SCHEDULER = textwrap.dedent("""
    import sys
    from distributed import LocalCluster
    if __name__ == "__main__":
        c = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                         dashboard_address="127.0.0.1:0")
        print(c.scheduler_address, flush=True)
        sys.stdin.read()
""")


def test_the_scheduler_going_away_is_a_clear_error_not_a_hang(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", SCHEDULER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        address = proc.stdout.readline().strip()
        with distributed.Client(address, timeout=10) as client:
            ds = Dataset.range(10_000).map(fns.slow).distribute(client, split_size=50,
                                                                 lost_after=3)
            it = ds.iterator()
            got = [int(next(it)["i"]) for _ in range(20)]
            os.kill(proc.pid, signal.SIGKILL)  # the scheduler's process, and its nanny
            t0 = time.monotonic()
            with pytest.raises(ExecutorLostError, match="restore the iterator's state"):
                for x in it:
                    got.append(int(x["i"]))
            assert time.monotonic() - t0 < 30
            assert got == list(range(len(got)))  # nothing lost or repeated before the error
            state = it.get_state()
        with Dataset.range(10_000).map(fns.slow).distribute(None, split_size=50).iterator(
                state) as again:
            assert [int(next(again)["i"]) for _ in range(3)] == [len(got), len(got) + 1, len(got) + 2]
    finally:
        proc.kill()
        proc.wait()


def test_the_torch_and_jax_bridges_read_from_remote_workers(client, files):
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    import torch

    from tpudata.jax import DeviceIterator, tfrecord_batches
    from tpudata.torch import TFRecordIterable

    def remote(ds, _):
        return ds.parse(fns.SPEC).distribute(client)

    iterable = TFRecordIterable(files, 16, pipeline=remote, split="files", progress=False)
    loader = torch.utils.data.DataLoader(iterable, batch_size=None, num_workers=0)
    seen = sorted(int(i) for b in loader for i, w in zip(b["i"], b["weight"]) if w > 0)
    assert seen == list(range(sum(fns.SIZES)))

    ds = tfrecord_batches(files, 16, pipeline=remote, split="files", process_index=0,
                          process_count=1, progress=False)

    def rows(b):
        return np.asarray(b["i"])[np.asarray(b["weight"]) > 0]

    device = DeviceIterator(ds.iterator(), to_device=rows)
    first = [next(device) for _ in range(3)]
    state = device.get_state()  # the batches handed out, not those on their way
    rest = list(DeviceIterator(ds.iterator(state), to_device=rows))
    assert sorted(np.concatenate(first + rest).tolist()) == list(range(sum(fns.SIZES)))


def test_a_straggler_is_overtaken_by_a_copy(client, tmp_path):
    """(Last: the straggling worker sleeps on after the test, until the cluster closes.)"""
    marker = str(tmp_path / "straggled")
    fn = functools.partial(fns.straggle_on_file, marker=marker)
    t0 = time.monotonic()
    ds = Dataset.range(100).map(fn).distribute(client, split_size=20, speculate_after=0.5)
    assert [int(x) for x in ds] == list(range(100))
    assert os.path.exists(marker) and time.monotonic() - t0 < 8  # not the 10 s straggler
