"""The dask.distributed path: a real local cluster of worker processes writes the same bytes."""

from __future__ import annotations

import logging
import os

import pytest

from tests.convert.conftest import TRAIN_SHARDS, VALIDATION_SHARDS
from tests.convert.helpers import leftovers, tree_bytes

distributed = pytest.importorskip("distributed")


def test_dask_cluster_writes_the_same_bytes(imagenet_tree, imagenet_reference, tmp_path):
    from tpudata.convert import convert_imagenet

    logging.getLogger("distributed").setLevel(logging.ERROR)
    out = str(tmp_path / "out")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, scheduler_port=0) as cluster, \
            distributed.Client(cluster) as client:
        with distributed.get_task_stream(client) as stream:
            results = convert_imagenet(imagenet_tree[0], out, num_train_shards=TRAIN_SHARDS,
                                       num_validation_shards=VALIDATION_SHARDS,
                                       split_subdirs=True, executor=client.get_executor())
        worker_pids = set(client.run(lambda: __import__("os").getpid()).values())
        addresses = set(client.scheduler_info()["workers"])
    assert len(worker_pids) == 2 and os.getpid() not in worker_pids
    # every shard was a task run by the cluster's worker processes, not by this process
    shard_tasks = [t for t in stream.data if "run_shard_task" in t["key"]]
    assert len(shard_tasks) == TRAIN_SHARDS + VALIDATION_SHARDS
    assert {t["worker"] for t in shard_tasks} <= addresses
    assert results["train"].written == TRAIN_SHARDS
    assert tree_bytes(out) == tree_bytes(imagenet_reference[0])
    assert leftovers(out) == []
