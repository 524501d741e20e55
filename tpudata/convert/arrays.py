"""Arrays with a common first dimension (a ``.npz`` file) -> one Example per row, and back.

Each array becomes a feature named after its key holding one row: floats as ``float_list``
(float64 is narrowed to float32, with a warning), integers and booleans as ``int64_list``,
strings and bytes as ``bytes_list``. The manifest's schema records every feature's shape and
original dtype, so :func:`load_arrays` gives the arrays back. This is how small end-to-end
datasets are made.

>>> import numpy as np
>>> arrays = {"x": np.arange(6, dtype=np.float32).reshape(3, 2), "y": np.array([1, 0, 1], np.uint8)}
>>> r = convert_arrays(arrays, "memory://doc/npz", "train", num_shards=2)
>>> back = load_arrays("memory://doc/npz", "train")
>>> back["x"].tolist(), back["y"].dtype
([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]], dtype('uint8'))
"""

from __future__ import annotations

import hashlib
import io
import logging
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from tpudata import storage
from tpudata._keywords import storage_options_dict, strict_keywords
from tpudata.errors import SpecError
from tpudata.example import FixedLenFeature, encode_example, parse_examples
from tpudata.shards import BuildResult, build_shards, manifest_name, read_manifest
from tpudata.shards.manifest import schema_from_spec
from tpudata.tfrecord import read_records

logger = logging.getLogger(__name__)

_SIZE_SAMPLE = 64
_CACHE: dict[tuple[str, str], dict[str, np.ndarray]] = {}  # per process: (url, digest) -> arrays


def _feature_dtype(name: str, arr: np.ndarray):
    kind = arr.dtype.kind
    if kind == "f":
        if arr.dtype.itemsize > 4:
            logger.warning("array %r is %s: stored as float32 (Examples hold float32 only)",
                           name, arr.dtype)
        return np.float32
    if kind in "iub":
        if kind == "u" and arr.dtype.itemsize == 8 and arr.size and int(arr.max()) >= 1 << 63:
            raise SpecError(f"array {name!r} has uint64 values beyond the int64 range")
        return np.int64
    if kind in "SU":
        return bytes
    if kind == "O":
        flat = arr.ravel().tolist()
        if all(isinstance(v, (bytes, str)) for v in flat):
            return bytes
    raise SpecError(
        f"array {name!r} of dtype {arr.dtype} cannot be stored in an Example "
        "(use numeric, bool, bytes or str arrays)"
    )


def arrays_schema(arrays: Mapping[str, np.ndarray]) -> dict:
    """The manifest schema for one-row-per-Example ``arrays`` (shapes and original dtypes)."""
    if not arrays:
        raise ValueError("no arrays to convert")
    lengths = {k: (np.asarray(a).shape[:1] or (None,))[0] for k, a in arrays.items()}
    if None in lengths.values() or len(set(lengths.values())) != 1:
        raise ValueError(f"arrays need a common first dimension; got lengths {lengths}")
    spec, source = {}, {}
    for name, arr in arrays.items():
        arr = np.asarray(arr)
        spec[name] = FixedLenFeature(arr.shape[1:], _feature_dtype(name, arr))
        source[name] = arr.dtype.str if arr.dtype.kind != "O" else "object"
    return schema_from_spec(spec, source)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def _load_npz(url: str, digest: str, storage_options: Mapping) -> dict[str, np.ndarray]:
    key = (url, digest)
    arrays = _CACHE.get(key)
    if arrays is None:
        data = storage.read_bytes(url, **storage_options)
        if _digest(data) != digest:
            raise RuntimeError(f"{url} changed while it was being converted")
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        _CACHE.clear()  # one dataset at a time per worker
        _CACHE[key] = arrays
    return arrays


@dataclass(frozen=True)
class NpzRowEncoder:
    """Encodes row ``i`` of every array in an ``.npz`` file as one Example (picklable)."""

    url: str
    digest: str
    keys: tuple
    storage_options: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def fingerprint(self) -> str:
        return f"tpudata.convert.arrays.NpzRowEncoder/1 {self.digest} {','.join(self.keys)}"

    def __call__(self, row: int) -> bytes:
        arrays = _load_npz(self.url, self.digest, self.storage_options)
        return encode_example({k: arrays[k][row] for k in self.keys})


@dataclass(frozen=True)
class _InMemoryRowEncoder:
    arrays: dict
    digest: str

    @property
    def fingerprint(self) -> str:
        return f"tpudata.convert.arrays.rows/1 {self.digest}"

    def __call__(self, row: int) -> bytes:
        return encode_example({k: a[row] for k, a in self.arrays.items()})


def _arrays_digest(arrays: Mapping[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for k, a in arrays.items():
        a = np.ascontiguousarray(a)
        h.update(f"{k}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(a.tobytes() if a.dtype.kind != "O" else repr(a.tolist()).encode())
    return h.hexdigest()[:32]


def _estimated_sizes(encoder, n: int) -> list[int]:
    """Every row's record size, estimated from up to 64 evenly spaced rows."""
    if n == 0:
        return []
    sample = np.unique(np.linspace(0, n - 1, min(n, _SIZE_SAMPLE)).astype(np.int64))
    mean = sum(len(encoder(int(i))) for i in sample) / len(sample)
    return [int(round(mean))] * n


def _build(encoder, n, schema, output, prefix, num_shards, target_shard_bytes, **kw):
    sizes = None if num_shards is not None else _estimated_sizes(encoder, n)
    kw.setdefault("workers", 1)
    return build_shards(range(n), encoder, output, prefix, num_shards=num_shards,
                        target_shard_bytes=target_shard_bytes, item_sizes=sizes, schema=schema,
                        **kw)


def convert_npz(
    path: str,
    output: str,
    prefix: str = "train",
    *,
    num_shards: int | None = None,
    target_shard_bytes: int | None = None,
    workers: int | None = 1,
    executor: Executor | None = None,
    compression: str | None = None,
    resume: bool = True,
    progress: bool | None = None,
    storage_options: Mapping | None = None,
) -> BuildResult:
    """Convert the arrays of the ``.npz`` at ``path`` into shards, one Example per row.

    ``workers`` defaults to 1 (in this process): such datasets are usually small, and every
    worker process loads the whole file.
    """
    so = dict(storage_options or {})
    storage.check_writable(output, **so)  # a bad output fails before any reading
    data = storage.read_bytes(path, **so)
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    schema = arrays_schema(arrays)
    n = len(next(iter(arrays.values())))
    encoder = NpzRowEncoder(path, _digest(data), tuple(arrays), so)
    _CACHE.clear()
    _CACHE[(path, encoder.digest)] = arrays  # the in-process worker needs no second load
    return _build(encoder, n, schema, output, prefix, num_shards, target_shard_bytes,
                  workers=workers, executor=executor, compression=compression, resume=resume,
                  progress=progress, metadata={"source": "npz", "file": path.rsplit("/", 1)[-1]},
                  storage_options=so)


def convert_arrays(
    arrays: Mapping[str, np.ndarray],
    output: str,
    prefix: str = "train",
    *,
    num_shards: int | None = None,
    target_shard_bytes: int | None = None,
    compression: str | None = None,
    resume: bool = True,
    progress: bool | None = None,
    storage_options: Mapping | None = None,
) -> BuildResult:
    """Like :func:`convert_npz` for arrays already in memory (written by this process)."""
    storage.check_writable(output, **dict(storage_options or {}))
    arrays = {str(k): np.asarray(v) for k, v in arrays.items()}
    schema = arrays_schema(arrays)
    n = len(next(iter(arrays.values())))
    encoder = _InMemoryRowEncoder(arrays, _arrays_digest(arrays))
    return _build(encoder, n, schema, output, prefix, num_shards, target_shard_bytes,
                  workers=1, compression=compression, resume=resume, progress=progress,
                  metadata={"source": "arrays"}, storage_options=dict(storage_options or {}))


@strict_keywords
def load_arrays(output: str, prefix: str = "train",
                storage_options: Mapping | None = None) -> dict[str, np.ndarray]:
    """Read shards written by :func:`convert_npz` / :func:`convert_arrays` back into arrays
    (``storage_options``, a dict, goes to fsspec)."""
    storage_options = storage_options_dict("load_arrays", storage_options)
    manifest = read_manifest(storage.join(output, manifest_name(prefix)),
                             storage_options=storage_options)
    spec = manifest.features()
    records = []
    for url in manifest.files(output):
        records.extend(read_records(url, storage_options=storage_options))
    if records:
        parsed = parse_examples(records, spec)
    else:
        parsed = {k: np.empty((0,) + f.shape, f.dtype) for k, f in spec.items()}
    out = {}
    for name, values in parsed.items():
        source = (manifest.schema or {}).get(name, {}).get("source_dtype")
        out[name] = _restore(values, source)
    return out


def _restore(values: np.ndarray, source: str | None) -> np.ndarray:
    if source is None or source == "object":
        return values
    dtype = np.dtype(source)
    if dtype.kind == "U":
        flat = [v.decode("utf-8") for v in values.ravel().tolist()]
        return np.array(flat, dtype=dtype).reshape(values.shape)
    if dtype.kind == "S":
        return np.array(values.ravel().tolist(), dtype=dtype).reshape(values.shape)
    return values.astype(dtype)


__all__ = ["NpzRowEncoder", "arrays_schema", "convert_arrays", "convert_npz", "load_arrays"]
