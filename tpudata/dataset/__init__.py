"""tf.data's model without TensorFlow: sources, transformations, prefetch, checkpointable state."""

from tpudata.dataset.base import INFINITE, UNKNOWN, Dataset, Iterator
from tpudata.dataset.block import Block, RecordColumn
from tpudata.dataset.columns import BytesColumn
from tpudata.dataset.sources import (
    AUTOTUNE,
    FixedLengthRecordDataset,
    TextLineDataset,
    TFRecordDataset,
)
from tpudata.dataset.options import Options
from tpudata.dataset.spec import TensorSpec, VarLenSpec

__all__ = [
    "AUTOTUNE",
    "Block",
    "BytesColumn",
    "Dataset",
    "FixedLengthRecordDataset",
    "INFINITE",
    "Iterator",
    "Options",
    "RecordColumn",
    "TFRecordDataset",
    "TensorSpec",
    "TextLineDataset",
    "UNKNOWN",
    "VarLenSpec",
]
