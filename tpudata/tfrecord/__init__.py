"""TFRecord files: framing, CRCs, compression streams, streaming readers, writers and indexes."""

from tpudata.tfrecord.batch import MultiBatch, RecordBatch
from tpudata.tfrecord.compression import (
    DecompressedStream,
    detect_compression,
    normalize_compression,
    open_stream,
)
from tpudata.tfrecord.framing import crc32c, frame, mask_crc, masked_crc32c, scan, unmask_crc
from tpudata.tfrecord.index import (
    IndexedTFRecordFile,
    build_index,
    read_index,
    read_record_at,
    write_index,
)
from tpudata.tfrecord.reader import (
    DEFAULT_BUFFER_SIZE,
    TFRecordFileReader,
    read_record_batches,
    read_records,
)
from tpudata.tfrecord.ranges import RangeReader
from tpudata.tfrecord.writer import TFRecordWriter, write_records

__all__ = [
    "DEFAULT_BUFFER_SIZE",
    "DecompressedStream",
    "IndexedTFRecordFile",
    "MultiBatch",
    "RangeReader",
    "RecordBatch",
    "TFRecordFileReader",
    "TFRecordWriter",
    "build_index",
    "crc32c",
    "detect_compression",
    "frame",
    "mask_crc",
    "masked_crc32c",
    "normalize_compression",
    "open_stream",
    "read_index",
    "read_record_at",
    "read_record_batches",
    "read_records",
    "scan",
    "unmask_crc",
    "write_index",
    "write_records",
]
