"""tf.data's model without TensorFlow: sources, transformations, prefetch, checkpointable state."""

from tpudata.dataset.core.base import INFINITE, UNKNOWN, Dataset, Iterator
from tpudata.dataset.core.block import Block, RecordColumn
from tpudata.dataset.core.columns import BytesColumn
from tpudata.dataset.sources.files import (
    AUTOTUNE,
    FixedLengthRecordDataset,
    TextLineDataset,
    TFRecordDataset,
)
from tpudata.dataset.core.options import Options
from tpudata.dataset.core.spec import TensorSpec, VarLenSpec

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
