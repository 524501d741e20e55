"""Exception hierarchy for tpudata.

Every error raised on purpose by tpudata is a :class:`TpuDataError`, and each one also subclasses
the builtin that fits (``ValueError`` for bad arguments or specs, ``OSError`` for storage problems,
``TypeError`` for unsupported dtypes), so generic ``except ValueError`` code keeps working.

>>> try:
...     raise CorruptRecordError("corrupted record at 12", path="a.tfrecord", offset=12)
... except DataLossError as e:
...     (e.path, e.offset)
('a.tfrecord', 12)
"""

from __future__ import annotations

import pickle


class TpuDataError(Exception):
    """Base class of every tpudata error."""


class DataLossError(TpuDataError, IOError):
    """Unrecoverable loss or corruption of stored data (TensorFlow's ``DataLossError``).

    ``path`` names the file and ``offset`` the byte offset (in the decompressed stream for
    compressed files) where the problem was found; either may be ``None`` when unknown.
    """

    def __init__(self, message: str, path: str | None = None, offset: int | None = None):
        self.message = message
        self.path = path
        self.offset = offset
        full = message if path is None else f"{path}: {message}"
        super().__init__(full)

    def __reduce__(self):  # keep path/offset when pickled across processes
        return (type(self), (self.message, self.path, self.offset))


class CorruptRecordError(DataLossError):
    """A record whose masked CRC32C does not match its bytes."""


class TruncatedRecordError(DataLossError):
    """A record cut short by the end of the file."""


class SpecError(TpuDataError, ValueError):
    """A feature spec that does not fit the data (missing feature, wrong type or size)."""


class InvalidExampleError(TpuDataError, ValueError):
    """A record that is not a well-formed tf.train.Example / SequenceExample protocol buffer."""


class DecodeError(TpuDataError, ValueError):
    """Bytes that cannot be decoded as asked (e.g. ``decode_raw`` lengths); ``index`` names the
    element when known."""

    def __init__(self, message: str, index: int | None = None):
        self.message = message
        self.index = index
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.message, self.index))


class StaticShapeError(TpuDataError, ValueError):
    """A tensor whose shape differs from the static shape fixed earlier."""


class BatchError(TpuDataError, ValueError):
    """Elements that cannot be stacked into one batch: their shapes (or dtypes) differ
    (tf.data's "Cannot batch tensors with different shapes"). ``component`` names the structure
    leaf (``"x"``, ``"0/label"``), ``index`` the input element that differs from the batch's
    first one (``None`` when unknown)."""

    def __init__(self, message: str, component: str | None = None, index: int | None = None):
        self.message = message
        self.component = component
        self.index = index
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.message, self.component, self.index))


class MissingExtraError(TpuDataError, ImportError):
    """An optional dependency that a feature needs is not installed; ``extra`` names the
    ``pip install 'tpudata[extra]'`` that brings it."""

    def __init__(self, message: str, extra: str | None = None, name: str | None = None):
        self.message = message
        self.extra = extra
        super().__init__(message, name=name)

    def __reduce__(self):
        return (type(self), (self.message, self.extra, self.name))


class InvalidTextError(TpuDataError, ValueError):
    """A document that is not valid UTF-8 text (or a JSON line that does not parse); ``path``
    names its file and ``record`` the record (``"line 12"``, ``"record at offset 4096"``, or
    its number in the input when the file does not say), either ``None`` when unknown."""

    def __init__(self, message: str, path: str | None = None, record: str | None = None):
        self.message = message
        self.path = path
        self.record = record
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.message, self.path, self.record))


class TokenizerError(TpuDataError, ValueError):
    """A tokenizer that cannot be used: an unknown name (the message lists what is installed),
    a file that is not a tokenizer, or a special token it does not have."""


class PackingError(TpuDataError, ValueError):
    """Packing asked for what cannot be: a row length that leaves no room for BOS + EOS and a
    token, a document longer than a row (with ``overflow="error"``), an element without a
    feature to pack."""


class UnsupportedDtypeError(TpuDataError, TypeError):
    """A dtype the target (e.g. the TPU executor) does not support."""


class InputFnError(TpuDataError, TypeError):
    """An estimator's ``input_fn`` returned what an infeed cannot read; ``returned`` is the type's
    name of what it returned."""

    def __init__(self, message: str, returned: str | None = None):
        self.returned = returned
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.args[0], self.returned))


class HostCallError(TpuDataError, RuntimeError):
    """A ``host_call`` function that raised on the host; the original error is ``__cause__``
    (its traceback is shown above this one), ``fn_name`` the function, ``step`` the global step."""

    def __init__(self, message: str, fn_name: str | None = None, step: int | None = None):
        self.fn_name = fn_name
        self.step = step
        super().__init__(message)


class MainGuardError(TpuDataError, RuntimeError):
    """Worker processes asked for from a script's top level without an
    ``if __name__ == "__main__":`` guard; ``script`` and ``line`` name the call."""

    def __init__(self, message: str, script: str | None = None, line: int | None = None):
        self.message = message
        self.script = script
        self.line = line
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.message, self.script, self.line))


class StorageError(TpuDataError, OSError):
    """A storage URL that cannot be opened, listed or written; ``url`` names it when known."""

    def __init__(self, message: str, url: str | None = None):
        self.message = message
        self.url = url
        super().__init__(message)

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):
        return (type(self), (self.message, self.url))


class SavedDatasetError(TpuDataError, OSError):
    """A ``Dataset.save`` directory that cannot be loaded (damaged or foreign metadata, missing
    shards); ``path`` names the file or directory."""

    def __init__(self, message: str, path: str | None = None):
        self.message = message
        self.path = path
        super().__init__(message)

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):
        return (type(self), (self.message, self.path))


class SavedDatasetNotFoundError(SavedDatasetError, FileNotFoundError):
    """No complete ``Dataset.save`` at ``path`` (never saved there, or the save was interrupted)."""


class StaleIndexError(DataLossError):
    """A record index (``.idx``) that does not describe its TFRecord file as it is now: it does not
    cover the whole file, or the file changed after the index was written. ``path`` names the
    data file, ``index_path`` the index (``None`` for an index given as an array)."""

    def __init__(self, message: str, path: str | None = None, index_path: str | None = None):
        self.index_path = index_path
        super().__init__(message, path, None)

    def __reduce__(self):
        return (type(self), (self.message, self.path, self.index_path))


class StateError(TpuDataError, ValueError):
    """An iterator state that cannot be restored into this pipeline: it was taken from another
    pipeline, it is damaged, or it names a file or a type the pipeline does not allow."""


class UntrustedTypeError(TpuDataError, TypeError):
    """A saved structure (metadata or iterator state) names a type that is not on the allow-list:
    tpudata never imports a class named in a file. ``type_name`` is the ``module:qualname`` asked
    for; pass the class itself (e.g. ``Dataset.load(path, namedtuples=[Point])``)."""

    def __init__(self, message: str, type_name: str | None = None):
        self.type_name = type_name
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.args[0], self.type_name))


class InvalidImageError(TpuDataError, ValueError):
    """Image bytes that cannot be decoded, or a crop window outside the image (``index``: batch position)."""

    def __init__(self, message: str, index: int | None = None):
        super().__init__(message)
        self.index = index

    def __reduce__(self):
        return (type(self), (self.args[0], self.index))


class SplitError(TpuDataError, ValueError):
    """Data cannot be split as asked over ranks x DataLoader workers (or hosts): a file split that
    cannot be even, a DataLoader with another worker count than the dataset was made for, or a
    state restored by another reader than the one that saved it. The message says what to do."""


class DataLoaderConfigError(TpuDataError, TypeError):
    """A ``torch.utils.data.DataLoader`` set up in a way the dataset cannot work with (e.g. a
    ``batch_size`` for a dataset that yields whole batches); the message says what to pass."""


class NotPicklableError(TpuDataError, TypeError, pickle.PicklingError):
    """An object (a user function, an element) that must be pickled to reach a worker process.
    The message names the user's function (module and qualname, never an engine wrapper) and
    what to do; also a ``pickle.PicklingError``, so code catching that keeps working."""


class SharedMemoryFullError(TpuDataError, MemoryError):
    """Shared memory (``/dev/shm`` on Linux) cannot hold a segment that moves elements between
    processes. ``size`` is the segment's size in bytes; ``free`` what the file system had left
    (``None`` where unknown). A container's default ``/dev/shm`` is often 64 MB: give it more
    (``docker run --shm-size=2g``), or use fewer workers or smaller elements."""

    def __init__(self, message: str, size: int | None = None, free: int | None = None):
        self.message = message
        self.size = size
        self.free = free
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.message, self.size, self.free))


class WorkerError(TpuDataError, RuntimeError):
    """A worker process failed: the user function raised there, or the process died.

    ``pid`` names the worker process; ``position`` the input element it was working on (``None``
    if none); ``exitcode`` how the process ended (negative: the signal's number; ``None`` while it
    lives); ``worker_traceback`` the traceback text from the worker (``None`` when it died).
    """

    def __init__(self, message: str, pid: int | None = None, position: int | None = None,
                 exitcode: int | None = None, worker_traceback: str | None = None):
        self.message = message
        self.pid = pid
        self.position = position
        self.exitcode = exitcode
        self.worker_traceback = worker_traceback
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.message, self.pid, self.position, self.exitcode,
                             self.worker_traceback))


class RemoteSplitError(WorkerError):
    """A split of ``ds.distribute(...)`` failed on a remote worker (bad data, a failing function,
    a package missing there). ``split`` is the split's number, ``path`` / ``offset`` the file and
    byte offset being read (``None`` where unknown), ``worker`` the worker's address, and
    ``worker_traceback`` the traceback text from the worker. Elements delivered before it stay
    delivered: the iterator's state restores from there."""

    def __init__(self, message: str, split: int | None = None, path: str | None = None,
                 offset: int | None = None, worker: str | None = None,
                 worker_traceback: str | None = None):
        super().__init__(message, worker_traceback=worker_traceback)
        self.split, self.path, self.offset, self.worker = split, path, offset, worker

    def __reduce__(self):
        return (type(self), (self.message, self.split, self.path, self.offset, self.worker,
                             self.worker_traceback))


class ExecutorLostError(TpuDataError, RuntimeError):
    """The executor behind ``ds.distribute(...)`` went away (the dask scheduler stopped answering,
    a process pool broke, every worker left for too long). Elements delivered so far stay
    delivered: restore the iterator's state with a new executor to go on from there."""


__all__ = [
    "BatchError",
    "CorruptRecordError",
    "DataLoaderConfigError",
    "DataLossError",
    "DecodeError",
    "ExecutorLostError",
    "HostCallError",
    "InputFnError",
    "InvalidExampleError",
    "InvalidImageError",
    "InvalidTextError",
    "MainGuardError",
    "MissingExtraError",
    "NotPicklableError",
    "PackingError",
    "RemoteSplitError",
    "SavedDatasetError",
    "SavedDatasetNotFoundError",
    "SharedMemoryFullError",
    "SpecError",
    "SplitError",
    "StaleIndexError",
    "StateError",
    "StaticShapeError",
    "StorageError",
    "TokenizerError",
    "TpuDataError",
    "TruncatedRecordError",
    "UnsupportedDtypeError",
    "UntrustedTypeError",
    "WorkerError",
]
