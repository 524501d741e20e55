"""tpudata: TensorFlow's TFRecord input-pipeline semantics without TensorFlow, and faster.

>>> import tpudata
>>> with tpudata.TFRecordWriter("memory://doc/pkg.tfrecord") as w:
...     w.write(tpudata.encode_example({"label": 7}))
>>> [tpudata.decode_example(r)["label"].tolist() for r in tpudata.read_records("memory://doc/pkg.tfrecord")]
[[7]]
"""

from tpudata._accel import accelerated
from tpudata._accel import tune_allocator as tune_malloc
from tpudata._info import info
from tpudata._outpool import release_batch_memory
from tpudata.dataset import (
    AUTOTUNE,
    Dataset,
    FixedLengthRecordDataset,
    TensorSpec,
    TextLineDataset,
    TFRecordDataset,
    VarLenSpec,
)
from tpudata.errors import (
    CorruptRecordError,
    DataLossError,
    InvalidExampleError,
    SpecError,
    StaticShapeError,
    StorageError,
    TpuDataError,
    TruncatedRecordError,
    UnsupportedDtypeError,
)
from tpudata.example import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    RaggedValues,
    SparseFeature,
    SparseValues,
    VarLenFeature,
    VarLenValues,
    decode_example,
    decode_raw,
    decode_sequence_example,
    encode_example,
    encode_sequence_example,
    parse_batches,
    parse_examples,
    parse_single_example,
)
from tpudata.shards import (
    BuildResult,
    Manifest,
    ShardInfo,
    build_shards,
    read_manifest,
    shard_name,
    verify_manifest,
    write_shards,
)
from tpudata.source import TFRecordSource
from tpudata.tfrecord import (
    IndexedTFRecordFile,
    RecordBatch,
    TFRecordFileReader,
    TFRecordWriter,
    build_index,
    read_index,
    read_record_at,
    read_record_batches,
    read_records,
    write_index,
    write_records,
)

__version__ = "0.1.0"

__all__ = [
    "AUTOTUNE",
    "BuildResult",
    "CorruptRecordError",
    "DataLossError",
    "Dataset",
    "FixedLenFeature",
    "FixedLenSequenceFeature",
    "FixedLengthRecordDataset",
    "IndexedTFRecordFile",
    "InvalidExampleError",
    "Manifest",
    "RaggedFeature",
    "RaggedValues",
    "RecordBatch",
    "ShardInfo",
    "SparseFeature",
    "SparseValues",
    "SpecError",
    "StaticShapeError",
    "StorageError",
    "TFRecordDataset",
    "TFRecordFileReader",
    "TFRecordSource",
    "TFRecordWriter",
    "TensorSpec",
    "TextLineDataset",
    "TpuDataError",
    "TruncatedRecordError",
    "UnsupportedDtypeError",
    "VarLenFeature",
    "VarLenSpec",
    "VarLenValues",
    "accelerated",
    "build_index",
    "build_shards",
    "decode_example",
    "decode_raw",
    "decode_sequence_example",
    "encode_example",
    "encode_sequence_example",
    "info",
    "parse_batches",
    "parse_examples",
    "parse_single_example",
    "read_index",
    "read_manifest",
    "read_record_at",
    "read_record_batches",
    "read_records",
    "release_batch_memory",
    "shard_name",
    "tune_malloc",
    "verify_manifest",
    "write_index",
    "write_records",
    "write_shards",
]
