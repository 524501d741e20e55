"""Sharded datasets: plan, write, resume and describe ``{prefix}-NNNNN-of-NNNNN`` TFRecord shards.

- :func:`build_shards`: items -> encoder -> shards, in parallel on any ``concurrent.futures``
  executor (a local process pool by default, dask.distributed for clusters), resumable.
- :func:`write_shards`: a stream of serialized records -> shards, in this process.
- :class:`Manifest` (``{prefix}.manifest.json``): every shard's name, record count, size,
  CRC32C and the feature schema; :func:`read_manifest`, :func:`verify_manifest`.

On a cluster, pass dask.distributed's executor (extra ``dask``); workers write straight to the
output URL, so give them one they can all reach (``gs://...``)::

    from distributed import Client
    with Client("tcp://scheduler:8786") as client:
        build_shards(items, encoder, "gs://bucket/data", "train", num_shards=1024,
                     executor=client.get_executor())

>>> r = write_shards([b"rec"] * 4, "memory://doc/pkg", "train", num_shards=2)
>>> read_manifest("memory://doc/pkg/train.manifest.json").num_records
4
"""

from tpudata.shards.builder import build_shards
from tpudata.shards.executors import InlineExecutor
from tpudata.shards.manifest import (
    Manifest,
    ShardInfo,
    manifest_name,
    read_manifest,
    schema_from_spec,
    spec_from_schema,
    verify_manifest,
    write_manifest,
)
from tpudata.shards.planning import (
    DEFAULT_TARGET_SHARD_BYTES,
    plan_by_count,
    plan_by_size,
    plan_shards,
    shard_name,
)
from tpudata.shards.progress import BuildResult
from tpudata.shards.stream import write_shards
from tpudata.shards.writing import write_shard

__all__ = [
    "DEFAULT_TARGET_SHARD_BYTES",
    "BuildResult",
    "InlineExecutor",
    "Manifest",
    "ShardInfo",
    "build_shards",
    "manifest_name",
    "plan_by_count",
    "plan_by_size",
    "plan_shards",
    "read_manifest",
    "schema_from_spec",
    "shard_name",
    "spec_from_schema",
    "verify_manifest",
    "write_manifest",
    "write_shard",
    "write_shards",
]
