"""A Ray Data ``Datasource`` for TFRecord shards: tpudata's reader, CRCs checked, no TensorFlow.

``ray.data.read_tfrecords`` imports TensorFlow (or tfx-bsl) and does not check the records'
CRCs. :func:`read_tfrecords` reads with tpudata's reader instead: both masked CRC32Cs of every
record are checked (a damaged file raises :class:`~tpudata.errors.DataLossError` naming file
and offset), GZIP/ZLIB files are detected, any fsspec URL works, and with ``features`` (a
tf.io-style spec) each read buffer is parsed whole into columns (``tf.io.parse_example``); without
it the rows are ``{"record": bytes}``. One read task reads whole files (the files are dealt
round-robin over ``override_num_blocks`` or Ray's parallelism), one block per read buffer.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tpudata import storage
from tpudata._keywords import storage_options_dict, strict_keywords

__all__ = ["TFRecordDatasource", "read_tfrecords"]


def _records_table(batch):
    """A RecordBatch as an Arrow table of one ``record`` (large binary) column, one copy."""
    import pyarrow as pa

    n = len(batch)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(batch.lengths, out=offsets[1:])
    view = memoryview(batch.buffer)
    data = b"".join([view[o:o + k] for o, k in zip(batch.offsets.tolist(), batch.lengths.tolist())])
    array = pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [
        None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return pa.Table.from_arrays([array], names=["record"])


def _column(values):
    from tpudata.example.parse import VarLenValues

    if isinstance(values, VarLenValues):
        out = np.empty(len(values), dtype=object)
        out[:] = values.to_list()
        return out
    return values


def _read_files(files: list, features, options: dict):
    from ray.data.block import BlockAccessor

    from tpudata.example.parse import parse_examples
    from tpudata.tfrecord.reader import TFRecordFileReader

    for path in files:
        with TFRecordFileReader(path, verify=True, **options) as reader:
            for batch in reader:
                if not len(batch):
                    continue
                if features is None:
                    yield _records_table(batch)
                else:
                    parsed = parse_examples(batch, features)
                    yield BlockAccessor.batch_to_block({k: _column(v) for k, v in parsed.items()})


def _read_fn(files: list, features, options: dict):
    return lambda: _read_files(files, features, options)


class TFRecordDatasource:
    """``ray.data.read_datasource(TFRecordDatasource(paths))``: see :func:`read_tfrecords`."""

    def __new__(cls, *args, **kwargs):  # a ray.data.Datasource, made when Ray is imported
        return _datasource_class()(*args, **kwargs)


_CLASS = None


def _datasource_class():
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    from ray.data import Datasource, ReadTask
    from ray.data.block import BlockMetadata

    class _TFRecordDatasource(Datasource):
        @strict_keywords
        def __init__(self, paths, *, features: Mapping | None = None,
                     compression: str | None = None, storage_options: Mapping | None = None):
            super().__init__()
            options = storage_options_dict("TFRecordDatasource", storage_options)
            names = [paths] if isinstance(paths, str) else list(paths)
            self.files = []
            for name in names:
                self.files += storage.expand(name, **options) if storage.has_glob(name) else [name]
            if not self.files:
                raise FileNotFoundError(f"no files match {paths!r}")
            self.features = dict(features) if features is not None else None
            self.options = {"compression": compression, "storage_options": options}

        def get_name(self) -> str:
            return "tpudata.TFRecord"

        def estimate_inmemory_data_size(self) -> int | None:
            try:
                return sum(storage.size(f, **self.options["storage_options"]) for f in self.files)
            except Exception:  # unknown sizes: Ray plans without them
                return None

        def get_read_tasks(self, parallelism: int, per_task_row_limit=None,
                           data_context=None) -> list:
            tasks = []
            k = max(1, min(int(parallelism), len(self.files)))
            for i in range(k):
                files = self.files[i::k]
                meta = BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None,
                                     input_files=tuple(files))
                tasks.append(ReadTask(_read_fn(files, self.features, self.options), meta))
            return tasks

    _CLASS = _TFRecordDatasource
    return _CLASS


def read_tfrecords(paths, *, features: Mapping | None = None, compression: str | None = None,
                   storage_options: Mapping | None = None, **read_args):
    """A ``ray.data.Dataset`` of TFRecord files (a glob, a name or a list): rows are
    ``{"record": bytes}``, or the parsed ``features`` (a tf.io-style spec). CRCs are checked;
    no TensorFlow. ``read_args`` go to ``ray.data.read_datasource`` (e.g. ``override_num_blocks``).
    """
    import ray.data

    source = TFRecordDatasource(paths, features=features, compression=compression,
                                storage_options=storage_options)
    return ray.data.read_datasource(source, **read_args)
