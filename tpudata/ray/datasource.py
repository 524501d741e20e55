"""A Ray Data ``Datasource`` for TFRecord shards: tpudata's reader, CRCs checked, no TensorFlow.

``ray.data.read_tfrecords`` imports TensorFlow (tfx-bsl in Ray before 2.60) and skips the records'
CRCs. :func:`read_tfrecords` reads with tpudata's reader instead: both masked CRC32Cs of every
record are checked (a damaged file raises :class:`~tpudata.errors.DataLossError` naming file
and offset), GZIP/ZLIB files are detected, any fsspec URL works, and with ``features`` (a
tf.io-style spec) each read buffer is parsed whole into columns (``tf.io.parse_example``); without
it the rows are ``{"record": bytes}``. One read task reads whole files (the files are dealt
round-robin over ``override_num_blocks``; :func:`read_tfrecords` makes that one task per file, up
to 200, where Ray would cut every task's output into slices to reach 200 blocks), one Arrow block
per 8 MiB read buffer, built from the buffer whole: bytes values in one gather copy (no Python
object per value), variable-length features as list arrays over the parsed values.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tpudata import storage
from tpudata._keywords import storage_options_dict, strict_keywords

__all__ = ["TFRecordDatasource", "read_tfrecords"]


def _binary(buffer, offsets, lengths):
    """An Arrow binary array of ``buffer[offsets[i]:offsets[i] + lengths[i]]``: one gather copy
    into a buffer Arrow wraps as it is (no ``bytes`` object per value)."""
    import pyarrow as pa

    n = len(lengths)
    ends = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=ends[1:])
    view = memoryview(buffer).cast("B")
    data = b"".join([view[o:o + k] for o, k in zip(np.asarray(offsets).tolist(),
                                                   np.asarray(lengths).tolist())])
    large = len(data) >= 1 << 31
    kind, dtype = (pa.large_binary(), np.int64) if large else (pa.binary(), np.int32)
    return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(ends.astype(dtype, copy=False)),
                                           pa.py_buffer(data)])


def _column(values):
    """A parsed column as Ray takes it: Arrow arrays for bytes values (built from the read
    buffer) and variable-length values (a list array over the values, no copy), numpy else."""
    import pyarrow as pa

    from tpudata.example.parse import VarLenValues
    from tpudata.tfrecord.batch import RecordBatch

    if isinstance(values, RecordBatch):  # a scalar bytes feature as views into the read buffer
        return _binary(values.buffer, values.offsets, values.lengths)
    if isinstance(values, VarLenValues):
        flat = values.values
        flat = pa.array(flat, pa.binary()) if flat.dtype == object else pa.array(flat)
        splits = values.row_splits
        if len(flat) < 1 << 31:
            return pa.ListArray.from_arrays(pa.array(splits.astype(np.int32)), flat)
        return pa.LargeListArray.from_arrays(pa.array(splits), flat)
    return values


def _read_files(files: list, features, options: dict):
    """One block per read buffer (8 MiB by default): the records as one ``record`` column, or
    the buffer parsed whole into the ``features`` columns."""
    import pyarrow as pa
    from ray.data.block import BlockAccessor

    from tpudata.example.parse import parse_prepared, prepare_spec
    from tpudata.tfrecord.reader import TFRecordFileReader

    prepared = prepare_spec(features) if features is not None else None
    for path in files:
        with TFRecordFileReader(path, verify=True, **options) as reader:
            row = 0
            for batch in reader:
                if not len(batch):
                    continue
                if prepared is None:
                    yield pa.Table.from_arrays(
                        [_binary(batch.buffer, batch.offsets, batch.lengths)], names=["record"])
                else:
                    parsed = parse_prepared(batch, prepared, row, views=True)
                    yield BlockAccessor.batch_to_block({k: _column(v) for k, v in parsed.items()})
                row += len(batch)


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
    no TensorFlow. ``read_args`` go to ``ray.data.read_datasource``; ``override_num_blocks``
    defaults to one read task per file (at most ``DataContext.read_op_min_num_blocks``, 200).
    """
    import ray.data

    source = TFRecordDatasource(paths, features=features, compression=compression,
                                storage_options=storage_options)
    if "override_num_blocks" not in read_args and "parallelism" not in read_args:
        # one read task per file (up to Ray's 200): left to itself, Ray asks for 200 blocks and
        # cuts each task's output into that many slices, which costs more CPU than the reading
        limit = ray.data.DataContext.get_current().read_op_min_num_blocks
        read_args["override_num_blocks"] = max(1, min(len(source.files), limit))
    return ray.data.read_datasource(source, **read_args)
