"""tf.data's model without TensorFlow: sources, transformations, prefetch, checkpointable state."""

from tpudata.dataset.core.base import INFINITE, UNKNOWN, Dataset, Iterator
from tpudata.dataset.core.columns import BytesColumn
from tpudata.dataset.sources.files import (
    FixedLengthRecordDataset,
    TextLineDataset,
    TFRecordDataset,
)
from tpudata.dataset.core.options import AUTOTUNE, Options
from tpudata.dataset.core.spec import TensorSpec, VarLenSpec

import importlib as _importlib  # noqa: E402

# The modules that provide what core's Dataset methods build (see core/registry.py)
for _module in (
    "io.cache", "io.save", "ops.batch", "ops.concatenate", "ops.directed", "ops.enumerate",
    "ops.filter", "ops.grouping", "ops.ignore_errors", "ops.interleave", "ops.map", "ops.map_batch", "ops.mixture",
    "ops.parse",
    "ops.rebatch", "ops.repeat", "ops.scan", "ops.shard", "ops.shuffle", "ops.shuffle_parse", "ops.take",
    "ops.take_while", "ops.unique", "ops.window", "ops.zip", "parallel.prefetch",
    "remote.dataset",
    "sources.counter", "sources.generator", "sources.load", "sources.random_values",
):
    _importlib.import_module(f"tpudata.dataset.{_module}")
del _module

from tpudata.dataset.ops.hosts import combine_host_states, elastic_hosts  # noqa: E402

__all__ = [
    "AUTOTUNE",
    "BytesColumn",
    "Dataset",
    "FixedLengthRecordDataset",
    "INFINITE",
    "Iterator",
    "Options",
    "TFRecordDataset",
    "TensorSpec",
    "TextLineDataset",
    "UNKNOWN",
    "VarLenSpec",
    "combine_host_states",
    "elastic_hosts",
]
