"""Dataset sources: in-memory tensors, ranges, file lists, and record readers.

>>> list(Dataset.from_tensor_slices({"x": np.arange(3), "name": ["a", "b", "c"]}).take(2))
[{'name': b'a', 'x': np.int64(0)}, {'name': b'b', 'x': np.int64(1)}]
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

import numpy as np

from tpudata.dataset.core import registry
from tpudata import storage
from tpudata._keywords import storage_options_dict, strict_keywords
from tpudata.dataset.core.base import UNKNOWN, BlockIterator, Dataset
from tpudata.dataset.core.block import Block, RecordColumn
from tpudata.dataset.core.nest import LEAF, flatten
from tpudata.dataset.core.options import worker_count
from tpudata.errors import DataLossError
from tpudata.tfrecord.batch import RecordBatch
from tpudata.tfrecord.compression import normalize_compression, open_stream
from tpudata.tfrecord.reader import DEFAULT_BUFFER_SIZE, TFRecordFileReader
from tpudata.tfrecord.whole import whole_file

logger = logging.getLogger(__name__)

BLOCK_ELEMENTS = 65536


def _first_leaf(value):
    while isinstance(value, (list, tuple)) and value:
        value = value[0]
    return value


def _to_column(value) -> np.ndarray:
    if isinstance(value, (list, tuple)) and isinstance(_first_leaf(value), (bytes, str)):
        # Python strings: straight into an object array (numpy's fixed-width 'S' would drop
        # trailing NUL bytes and pad every value to the longest one)
        arr = np.array(value, dtype=object)
        flat = arr.ravel()
        for i, v in enumerate(flat.tolist()):
            if isinstance(v, str):
                flat[i] = v.encode("utf-8")
            elif not isinstance(v, bytes):
                why = ("its rows differ in length: give rows of one length"
                       if isinstance(v, (list, tuple)) else "give one kind of value")
                raise TypeError(f"from_tensor_slices: a list of strings holds a "
                                f"{type(v).__name__} at flat index {i}: {why}")
        return arr
    arr = np.asarray(value)
    if arr.dtype.kind == "U":  # strings become bytes, as tf.string elements do
        out = np.empty(arr.shape, dtype=object)
        out.ravel()[:] = [s.encode("utf-8") for s in arr.ravel().tolist()]
        return out
    if arr.dtype.kind == "S":
        out = np.empty(arr.shape, dtype=object)
        out.ravel()[:] = arr.ravel().tolist()
        return out
    return arr


class _ArrayIterator(BlockIterator):
    def __init__(self, make_block, n: int):
        self.make_block = make_block
        self.n = n
        self.pos = 0

    def next(self):
        if self.pos >= self.n:
            return None
        end = min(self.n, self.pos + BLOCK_ELEMENTS)
        block = self.make_block(self.pos, end)
        self.pos = end
        return block

    def get_state(self):
        return {"pos": self.pos}

    def set_state(self, state):
        self.pos = int(state["pos"])


class TensorSlicesDataset(Dataset):
    """Elements are slices of arrays (or a single element, for ``from_tensors``)."""

    def __init__(self, tensors, single: bool = False):
        super().__init__()
        self.tree, leaves = flatten(tensors)
        cols = [_to_column(v) for v in leaves]
        if single:
            cols = [c[None] for c in cols]
        if any(c.ndim == 0 for c in cols):
            raise ValueError("from_tensor_slices needs arrays with a first dimension, not scalars")
        sizes = {len(c) for c in cols}
        if len(sizes) != 1:
            raise ValueError(f"from_tensor_slices: components have different first dimensions {sorted(sizes)}")
        self.cols = cols
        self.n = sizes.pop()

    def _make_iterator(self, ctx):
        return _ArrayIterator(lambda i, j: Block(self.tree, [c[i:j] for c in self.cols], j - i), self.n)

    def _spec(self):
        from tpudata.dataset.core.nest import unflatten
        from tpudata.dataset.core.spec import TensorSpec

        return unflatten(self.tree, [TensorSpec(c.shape[1:], c.dtype) for c in self.cols])

    def cardinality(self) -> int:
        return self.n


class RangeDataset(Dataset):
    def __init__(self, *args, dtype=np.int64):
        super().__init__()
        r = range(*args)
        self.start, self.step, self.n = r.start, r.step, len(r)
        self.dtype = np.dtype(dtype)

    def _make_iterator(self, ctx):
        def make(i, j):
            values = (self.start + self.step * np.arange(i, j, dtype=np.int64)).astype(self.dtype)
            return Block(LEAF, [values], j - i)

        return _ArrayIterator(make, self.n)

    def _spec(self):
        from tpudata.dataset.core.spec import TensorSpec

        return TensorSpec((), self.dtype)

    def cardinality(self) -> int:
        return self.n


class FileListDataset(TensorSlicesDataset):
    """A known list of file names (bytes elements, like tf.string)."""

    def __init__(self, files: list[str], storage_options: Mapping | None = None):
        super().__init__(np.array([f.encode("utf-8") for f in files] + [b""], dtype=object)[:-1])
        self.files = list(files)
        self.storage_options = dict(storage_options or {})  # to read the shards' manifests

    def _file_names(self) -> tuple:
        return list(self.files), "listed"

    def _storage_options_for(self, path: str, depth: int = 0) -> dict | None:
        return self.storage_options if path in self.files else None


@strict_keywords
def list_files(file_pattern, shuffle: bool | None = None, seed: int | None = None,
               storage_options: Mapping | None = None) -> Dataset:
    """Files matching a glob (or list of globs). As in TF, ``shuffle=None`` means True: the
    names are shuffled (seeded by ``seed``), again each epoch; ``shuffle=False`` keeps them
    sorted. Without a seed every process draws its own order, so ``.shard()`` after an
    unseeded shuffle gives hosts overlapping files: that combination warns."""
    storage_options = storage_options_dict("list_files", storage_options)
    pattern = file_pattern
    patterns = [pattern] if isinstance(pattern, (str, os.PathLike)) else list(pattern)
    files: list[str] = []
    for p in patterns:
        files += storage.expand(os.fspath(p), **storage_options)
    files = sorted(files)
    listed = FileListDataset(files, storage_options)
    return ShuffledFileList(listed, seed) if shuffle is None or shuffle else listed


def ShuffledFileList(listed: "FileListDataset", seed: int | None) -> Dataset:
    """``list_files(shuffle=True)``: the file list shuffled whole."""
    ds = listed.shuffle(len(listed.files), seed=seed)
    # described in checkpoints' pipeline fingerprints (what is asked of the list goes through
    # Dataset._file_names)
    ds.files = list(listed.files)
    ds.unseeded_file_shuffle = seed is None
    return ds


def _names(filenames) -> list[str]:
    if isinstance(filenames, (str, bytes, os.PathLike)):
        filenames = [filenames]
    elif isinstance(filenames, np.ndarray):
        filenames = filenames.ravel().tolist()
    out = []
    for f in filenames:
        if isinstance(f, (bytes, np.bytes_)):
            f = f.decode("utf-8")
        out.append(os.fspath(f))
    if not out:
        raise ValueError("no file names given")
    return out


def _globbed(names: list[str], storage_options) -> list[str]:
    """``names`` with each glob (``*``, ``?``, ``[``) replaced by its sorted matches, as
    :func:`list_files` finds them (one listing; no match raises naming the pattern)."""
    if not any(storage.has_glob(n) for n in names):
        return names
    out: list[str] = []
    for name in names:
        out += storage.expand(name, **(storage_options or {})) if storage.has_glob(name) else [name]
    return out


class _FilesIterator(BlockIterator):
    """Reads files one after the other; state is (file index, byte offset of the next element)."""

    def __init__(self, files: list[str], open_file, whole_job=None):
        self.files = files
        self.open_file = open_file
        self.whole_job = whole_job  # (TFRecord files) path -> WholeFile or None
        self.whole = None  # the only file's whole-file read, done by a pool (prepare_whole)
        self.file = 0
        self.offset = 0
        self.gen = None

    def prepare_whole(self):
        """A whole-file read (:mod:`tpudata.tfrecord.whole`) of the only file, if nothing was
        read yet and it is local: the caller has it read (``read_whole``) before the first
        :meth:`next` (or drops it). None when that cannot be."""
        if (self.whole_job is None or self.whole is not None or self.gen is not None
                or self.file or self.offset or len(self.files) != 1):
            return None
        self.whole = self.whole_job(self.files[0])
        return self.whole

    def next(self):
        while self.file < len(self.files):
            if self.gen is None:
                whole, self.whole = self.whole, None
                if whole is not None and whole.done:  # (set only at file 0, offset 0)
                    self.gen = self.open_file(self.files[0], 0, whole)
                else:
                    self.gen = self.open_file(self.files[self.file], self.offset)
            item = next(self.gen, None)
            if item is None:
                self.gen = None
                self.file += 1
                self.offset = 0
                continue
            block, self.offset = item
            return block
        return None

    def get_state(self):
        return {"file": self.file, "offset": self.offset}

    def set_state(self, state):
        self.close()
        self.file, self.offset = int(state["file"]), int(state["offset"])

    def close(self):
        self.whole = None  # (its owner discards it if it was never read)
        if self.gen is not None:
            self.gen.close()
            self.gen = None


class _RecordFilesDataset(Dataset):
    def __init__(self, files: list[str]):
        super().__init__()
        self.files = files

    def _open(self, path: str, offset: int):
        raise NotImplementedError

    def _make_iterator(self, ctx):
        return _FilesIterator(self.files, self._open)

    def _spec(self):
        from tpudata.dataset.core.spec import BYTES, TensorSpec

        return TensorSpec((), BYTES)


class _TFRecordFiles(_RecordFilesDataset):
    def __init__(self, files, compression, buffer_size, verify, on_error, storage_options,
                 use_mmap: bool = False, read_ahead_bytes: int = 0):
        super().__init__(files)
        self.read_ahead_bytes = read_ahead_bytes
        self.options = dict(compression=compression, verify=verify, buffer_size=buffer_size,
                            on_error=on_error, use_mmap=use_mmap, storage_options=storage_options)
        self.storage_options = storage_options
        self._count: int | None = None

    def _storage_options_for(self, path: str, depth: int = 0) -> dict | None:
        return self.storage_options if path in self.files else None

    def cardinality(self) -> int:
        """Exact, from the shards' manifests (written by tpudata.shards); else UNKNOWN."""
        if self._count is None:
            from tpudata.shards.manifest import record_counts

            counts = record_counts(self.files, storage_options=self.storage_options)
            self._count = UNKNOWN if counts is None else sum(counts)
        return self._count

    def _make_iterator(self, ctx):
        origins, skip = ctx.origins, ctx.ignore_errors
        it = _FilesIterator(self.files, lambda path, offset, whole=None: self._open(
            path, offset, origins, skip, whole), self._whole_job)
        if self.read_ahead_bytes > 0 and not ctx.in_background and not self._fits_one_read():
            from tpudata.dataset.parallel.prefetch import PrefetchIterator  # a few read buffers ahead

            return PrefetchIterator(it, max_elements=1 << 40, max_bytes=self.read_ahead_bytes,
                                    name="tpudata-readahead", ctx=ctx)
        return it

    def _fits_one_read(self) -> bool:
        """Local files that one read buffer holds in all: a read-ahead thread would cost more
        (~0.25 ms to start and hand over) than the single read it overlaps."""
        if not all(storage.is_local(f) for f in self.files):
            return False
        limit = self.options["buffer_size"] or DEFAULT_BUFFER_SIZE
        total = 0
        for f in self.files:
            try:
                total += os.path.getsize(storage.local_path(f))
            except OSError:  # missing: the reader reports it, with or without a thread
                return False
            if total > limit:
                return False
        return True

    def _whole_job(self, path: str):
        """A whole-file read of ``path``, unless these options rule it out (see
        ``prepare_whole``)."""
        o = self.options
        if o["use_mmap"] or normalize_compression(o["compression"]) not in (None, ""):
            return None
        return whole_file(path, o["buffer_size"] or DEFAULT_BUFFER_SIZE, o["verify"])

    def _open(self, path, offset, origins: bool = False, skip_errors: bool = False, whole=None):
        options = dict(self.options, on_error="skip") if skip_errors else self.options
        reader = TFRecordFileReader(path, start_offset=offset, **options)
        if whole is not None:
            reader.use_whole(whole)
        try:
            for batch in reader:
                yield Block.of_records(batch, origins and reader.compression == ""), batch.end_offset
        finally:
            reader.close()


READ_AHEAD_BYTES = 32 << 20


@strict_keywords
def TFRecordDataset(filenames, compression_type: str | None = None,
                    buffer_size: int | None = None,
                    num_parallel_reads: int | None = None, verify: bool = True,
                    on_error: str = "raise", compression: str | None = None,
                    read_ahead_bytes: int = READ_AHEAD_BYTES, use_mmap: bool = False,
                    storage_options: Mapping | None = None) -> Dataset:
    """Records of TFRecord files (any fsspec URL), like ``tf.data.TFRecordDataset``.

    ``filenames`` is a name, a list of names (a glob among them is expanded, sorted, as
    :func:`list_files` does, leaving out tpudata's ``.idx``/manifest files), or a Dataset of
    names; ``compression_type`` (or
    ``compression``) is None (detect), "" , "GZIP" or "ZLIB". Files are read (and their CRCs
    checked) in a background thread up to ``read_ahead_bytes`` ahead (0: in the caller's
    thread; local files that one read buffer holds are read in the caller's thread too). ``num_parallel_reads=k``
    reads ``k`` files at once in background threads, interleaving their records one by one in a
    deterministic order (as tf.data does). ``on_error="skip"`` stops reading a damaged file with
    a warning instead of raising (tf.data's ``ignore_errors``). ``use_mmap=True`` memory-maps
    local uncompressed files (faster, but a file truncated while it is read kills the process
    with SIGBUS; the default reads into buffers and reports that as DataLossError).
    ``storage_options`` (a dict) goes to fsspec; any other keyword raises TypeError naming the
    closest valid one.
    """
    storage_options = storage_options_dict("TFRecordDataset", storage_options)
    if compression is not None and compression_type is not None and compression != compression_type:
        raise ValueError("give compression or compression_type (tf.data's name), not both")
    compression_type = compression_type if compression_type is not None else compression
    opts = (compression_type, buffer_size or DEFAULT_BUFFER_SIZE, verify, on_error, storage_options,
            use_mmap)

    def one(name) -> Dataset:  # parallel reads: each file already has its own thread
        return _TFRecordFiles(_names(name), *opts)

    k = worker_count(num_parallel_reads, "num_parallel_reads")
    if isinstance(filenames, Dataset):
        files_ds = filenames
    else:
        files = _globbed(_names(filenames), storage_options)
        if k <= 1 or len(files) == 1:
            return _TFRecordFiles(files, *opts, read_ahead_bytes=read_ahead_bytes)
        files_ds = FileListDataset(files)
    if not k:  # one reader thread, reused from file to file
        return files_ds.interleave(one, cycle_length=1, block_length=1, num_parallel_calls=1)
    return files_ds.interleave(one, cycle_length=k, block_length=1, num_parallel_calls=k,
                               deterministic=True)


class _FixedLengthFiles(_RecordFilesDataset):
    def __init__(self, files, record_bytes, header_bytes, footer_bytes, buffer_size, compression,
                 storage_options):
        super().__init__(files)
        if record_bytes <= 0:
            raise ValueError(f"record_bytes must be positive, not {record_bytes}")
        self.record_bytes, self.header, self.footer = record_bytes, header_bytes, footer_bytes
        self.chunk = max(1, (buffer_size or DEFAULT_BUFFER_SIZE) // record_bytes) * record_bytes
        self.compression = (compression or "").upper()
        self.storage_options = storage_options

    def _open(self, path, offset):
        rb, footer = self.record_bytes, self.footer
        if not self.compression:  # the size is known: check it up front, as TensorFlow does
            self._check_body(path, storage.size(path, **self.storage_options) - self.header - footer)
        pos = max(offset, self.header)
        with open_stream(path, self.compression, start=pos, storage_options=self.storage_options) as f:
            carry = b""
            while True:
                chunk = f.read(self.chunk)
                data = carry + chunk
                usable = len(data) - footer  # hold the footer back until the end
                if not chunk:
                    self._check_body(path, pos - self.header + usable)
                n = max(usable, 0) // rb
                if n:
                    offs = np.arange(n, dtype=np.int64) * rb
                    batch = RecordBatch(data, offs, np.full(n, rb, np.int64), path, 0, framed=False)
                    pos += n * rb
                    yield Block(LEAF, [RecordColumn.from_batch(batch)], n), pos
                if not chunk:
                    return
                carry = data[n * rb :]

    def _check_body(self, path: str, body: int) -> None:
        if body < 0 or body % self.record_bytes:
            raise DataLossError(
                f"excluding the header ({self.header} bytes) and footer ({self.footer} bytes), "
                f"{path} has a body of {body} bytes, which is not a multiple of the record length "
                f"({self.record_bytes} bytes)", path, None)


def _read_in_parallel(files: list[str], one, num_parallel_reads) -> Dataset:
    """``one`` of each file; with ``num_parallel_reads=k`` (2 or more), ``k`` files read at
    once in background threads, their records interleaved one by one in a deterministic order
    (as tf.data's readers do)."""
    k = worker_count(num_parallel_reads, "num_parallel_reads")
    if k <= 1 or len(files) == 1:
        return one(files)
    return FileListDataset(files).interleave(one, cycle_length=k, block_length=1,
                                             num_parallel_calls=k, deterministic=True)


@strict_keywords
def FixedLengthRecordDataset(filenames, record_bytes: int, header_bytes: int | None = None,
                             footer_bytes: int | None = None, buffer_size: int | None = None,
                             compression_type: str | None = None,
                             num_parallel_reads: int | None = None,
                             storage_options: Mapping | None = None) -> Dataset:
    """Fixed-size records after a header and before a footer, like tf.data's reader
    (``header_bytes``/``footer_bytes`` None mean 0; ``num_parallel_reads`` as in
    :func:`TFRecordDataset`)."""
    storage_options = storage_options_dict("FixedLengthRecordDataset", storage_options)
    opts = (record_bytes, header_bytes or 0, footer_bytes or 0, buffer_size, compression_type,
            storage_options)
    files = _globbed(_names(filenames), storage_options)
    return _read_in_parallel(files, lambda f: _FixedLengthFiles(_names(f), *opts),
                             num_parallel_reads)


class _TextLineFiles(_RecordFilesDataset):
    def __init__(self, files, compression, buffer_size, storage_options):
        super().__init__(files)
        self.compression = (compression or "").upper()
        self.chunk = buffer_size or (1 << 20)
        self.storage_options = storage_options

    def _open(self, path, offset):
        with open_stream(path, self.compression, start=offset, storage_options=self.storage_options) as f:
            pos = offset
            carry = b""
            while True:
                chunk = f.read(self.chunk)
                data = carry + chunk
                if not data:
                    return
                arr = np.frombuffer(data, dtype=np.uint8)
                nl = np.flatnonzero(arr == 10)
                if not chunk:  # last line without a newline
                    nl = np.append(nl, len(data))
                if not len(nl):
                    carry = data
                    continue
                starts = np.concatenate([[0], nl[:-1] + 1]).astype(np.int64)
                ends = nl.astype(np.int64)
                cr = (ends > starts) & (arr[np.maximum(ends - 1, 0)] == 13)
                lengths = ends - starts - cr
                consumed = int(nl[-1]) + 1 if chunk else len(data)
                batch = RecordBatch(data, starts, lengths, path, 0, framed=False)
                pos += consumed
                carry = data[consumed:]
                yield Block(LEAF, [RecordColumn.from_batch(batch)], len(starts)), pos
                if not chunk:
                    return


@strict_keywords
def TextLineDataset(filenames, compression_type: str | None = None, buffer_size: int | None = None,
                    num_parallel_reads: int | None = None,
                    storage_options: Mapping | None = None) -> Dataset:
    """Lines of text files (without ``\\n`` / ``\\r\\n``), as bytes, like tf.data's reader
    (``num_parallel_reads`` as in :func:`TFRecordDataset`)."""
    storage_options = storage_options_dict("TextLineDataset", storage_options)
    files = _globbed(_names(filenames), storage_options)
    return _read_in_parallel(
        files, lambda f: _TextLineFiles(_names(f), compression_type, buffer_size, storage_options),
        num_parallel_reads)


__all__ = [
    "FileListDataset",
    "FixedLengthRecordDataset",
    "RangeDataset",
    "TFRecordDataset",
    "TensorSlicesDataset",
    "TextLineDataset",
    "list_files",
]

registry.provide(RangeDataset, TensorSlicesDataset, list_files)
