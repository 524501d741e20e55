"""save: write a dataset's elements to TFRecord shards with its element spec (``Dataset.save``).

Like ``tf.data.Dataset.save``: elements go to shards round-robin (or by ``shard_func``), and
``Dataset.load`` reads them back. The directory is published atomically: each shard appears
complete, and the metadata naming them (:data:`~tpudata.dataset.io.saved_format.METADATA`) is
written last, so an interrupted save is never loadable; a save over an earlier one replaces it
when it completes and then removes every shard the new metadata does not name (the earlier
save's, and those of a save that was killed), and a save starts by removing the temporaries a
killed save left (one save at a time per directory). The metadata holds each shard's record
count, byte size and CRC32C, which ``Dataset.load`` checks. The format is tpudata's own (see
:mod:`tpudata.dataset.io.saved_format`), not TensorFlow's.

>>> import tempfile
>>> from tpudata.dataset import Dataset
>>> tmp = tempfile.TemporaryDirectory()
>>> path = tmp.name
>>> Dataset.range(5).map(lambda x: {"x": x, "sq": x * x}).save(path)
>>> [int(e["sq"]) for e in Dataset.load(path)]
[0, 1, 4, 9, 16]
>>> tmp.cleanup()
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
from typing import Callable

import numpy as np

from tpudata.dataset.core import registry
from tpudata import storage
from tpudata.dataset.core.nest import flatten, leaf_paths, tree_to_json
from tpudata.dataset.io.saved_format import (
    FORMAT, METADATA, VERSION, Leaf, check_leaf, encode_columns, encode_element, leaf_of,
)
from tpudata.errors import SpecError
from tpudata.tfrecord.compression import normalize_compression
from tpudata.tfrecord.framing import crc32c
from tpudata.tfrecord.writer import TFRecordWriter

logger = logging.getLogger(__name__)

_SUFFIX = {"": ".tfrecord", "GZIP": ".tfrecord.gz", "ZLIB": ".tfrecord.zz"}
SHARD_NAME = re.compile(r"shard-[0-9a-f]{1,32}-\d{5,}\.tfrecord(\.gz|\.zz)?")


class _Summed:
    """An atomic file that counts and CRC32Cs the bytes written to it (the shard's checksum)."""

    def __init__(self, url: str, storage_options: dict):
        self.name = url
        self.sink = storage.open_atomic(url, **storage_options)
        self.size = 0
        self.crc = 0

    def write(self, data) -> int:
        self.size += memoryview(data).nbytes
        self.crc = crc32c(data, self.crc)
        return self.sink.write(data)

    def flush(self) -> None:
        self.sink.flush()


def _declared_leaves(spec) -> tuple:
    from tpudata.dataset.core.spec import DatasetSpec

    tree, declared = flatten(spec)
    for name, leaf in zip(leaf_paths(tree), declared):
        if isinstance(leaf, DatasetSpec):
            raise TypeError(f"save(): the element at {name!r} is a Dataset (from window()); "
                            "flat_map it into elements or batches before saving")
    return tree, declared


def _spec_leaf(declared) -> Leaf:
    """The saved Leaf for a declared spec leaf (used when no element shows the value kind)."""
    from tpudata.dataset.core.spec import RaggedSpec, SparseSpec, VarLenSpec

    kind = ("sparse" if isinstance(declared, SparseSpec) else "ragged"
            if isinstance(declared, RaggedSpec) else "varlen" if isinstance(declared, VarLenSpec)
            else "tensor")
    return Leaf(kind, declared.dtype, declared.shape, getattr(declared, "ragged_rank", 0))


def _first_leaves(element, declared: list, names: list) -> list:
    """The saved Leaf of each leaf, from the first element and the declared spec."""
    _, values = flatten(element)
    leaves = [leaf_of(v, d) for v, d in zip(values, declared)]
    for leaf, d, name in zip(leaves, declared, names):
        if leaf.kind == "tensor" and leaf.dtype != np.dtype(d.dtype):
            raise SpecError(f"save(): element 0 has dtype {leaf.dtype} at {name!r}, but the "
                            f"dataset's element spec says {d.dtype}")
    return leaves


def _shard_of(shard_func, element, index: int) -> int:
    if isinstance(element, tuple) and not hasattr(element, "_fields"):
        out = shard_func(*element)
    else:
        out = shard_func(element)
    arr = np.asarray(out)
    if arr.shape != () or arr.dtype.kind not in "iu" or int(arr) < 0:
        raise ValueError(f"save(): shard_func returned {out!r} for element {index}; it must "
                         "return a non-negative integer scalar (the shard id)")
    return int(arr)


def save(ds, path: str, compression: str | None = None, shard_func: Callable | None = None,
         checkpoint_args=None, *, num_shards: int | None = None, progress: bool | None = None,
         storage_options: dict | None = None) -> None:
    """Write ``ds`` to the directory ``path`` (see :meth:`tpudata.dataset.Dataset.save`)."""
    if checkpoint_args is not None:
        raise NotImplementedError(
            "save(checkpoint_args=...) (TF's resumable save through tf.train.CheckpointManager) "
            "is not supported: a tpudata save is atomic; run it again from the start if it is "
            "interrupted")
    if shard_func is not None and not callable(shard_func):
        raise TypeError(f"save(): shard_func must be callable, not {type(shard_func).__name__}")
    comp = normalize_compression(compression) or ""
    if num_shards is None:
        num_shards = os.cpu_count() or 1  # TF's default: round-robin over the CPU budget
    if int(num_shards) < 1:
        raise ValueError(f"save(): num_shards must be at least 1, not {num_shards}")
    num_shards = int(num_shards)
    so = dict(storage_options or {})
    path = os.fspath(path).rstrip("/") or "/"
    tree, declared = _declared_leaves(ds.element_spec)
    names = leaf_paths(tree)
    storage.check_writable(path, **so)  # makes the directory; fails fast on a bad URL
    storage.cleanup_temporaries(path, prefix=("shard-", METADATA), **so)  # of a killed save
    token = secrets.token_hex(4)
    writers: dict[int, TFRecordWriter] = {}
    sinks: dict[int, _Summed] = {}
    leaves: list | None = None
    total = ds.cardinality()
    from tqdm.auto import tqdm

    bar = tqdm(total=total if total >= 0 else None, unit=" elements", desc=f"save {path}",
               disable=None if progress is None else not progress, leave=False)
    published: list[str] = []
    try:
        index = 0

        def writer(sid: int) -> TFRecordWriter:
            w = writers.get(sid)
            if w is None:
                url = storage.join(path, f"shard-{token}-{sid:05d}{_SUFFIX[comp]}")
                sinks[sid] = _Summed(url, so)
                w = writers[sid] = TFRecordWriter(sinks[sid], comp)
            return w

        with ds.iterator() as it:
            while True:
                block = it._next_block()
                if block is None:
                    break
                if not block.n:
                    continue
                if block.tree != tree:
                    raise SpecError(f"save(): element {index} has the structure {block.tree}, "
                                    f"but the dataset's element spec has {tree}")
                if leaves is None:  # the kinds (sparse, ragged) show in the values
                    leaves = _first_leaves(block.element(0), declared, names)
                records = None if shard_func is not None else \
                    encode_columns(leaves, block.leaves, block.n)
                if records is not None:  # whole columns, round-robin
                    for sid in range(num_shards):
                        first = (sid - index) % num_shards
                        if first < block.n:
                            writer(sid).write_many(records[first::num_shards])
                else:
                    for k, element in enumerate(block.elements()):
                        _, values = flatten(element)
                        for leaf, value, name in zip(leaves, values, names):
                            check_leaf(leaf, value, name, index + k)
                        sid = (index + k) % num_shards if shard_func is None else \
                            _shard_of(shard_func, element, index + k)
                        writer(sid).write(encode_element(leaves, values))
                index += block.n
                bar.update(block.n)
        if leaves is None:
            leaves = [_spec_leaf(d) for d in declared]
        shards = []
        for sid in sorted(writers):
            w, sink = writers[sid], sinks[sid]
            w.close()
            sink.sink.close()
            published.append(sink.name)
            shards.append({"file": sink.name.rsplit("/", 1)[-1], "shard_id": sid,
                           "records": w.records_written, "bytes": sink.size,
                           "crc32c": f"{sink.crc:08x}"})
        meta = {"format": FORMAT, "version": VERSION, "compression": comp,
                "structure": tree_to_json(tree), "leaves": [x.to_json() for x in leaves],
                "leaf_names": names, "cardinality": sum(s["records"] for s in shards),
                "round_robin": shard_func is None, "shards": shards}
        with storage.open_atomic(storage.join(path, METADATA), **so) as f:
            f.write(json.dumps(meta, indent=1).encode())
    except BaseException:
        for sid, w in writers.items():
            if not w.closed:
                w.abort()
            sinks[sid].sink.abort()  # a no-op once published
        for url in published:  # shards no metadata names: never loadable, removed
            try:
                storage.remove(url, **so)
            except Exception as exc:  # keep the original error
                logger.warning("save(): could not remove the unfinished shard %s: %s", url, exc)
        raise
    finally:
        bar.close()
    for url in _unnamed_shards(path, published, so):  # an earlier or a killed save's
        try:
            storage.remove(url, **so)
        except Exception as exc:  # best effort: the new metadata does not name them
            logger.warning("save(): could not remove %s of an earlier save: %s", url, exc)
    logger.info("saved %d elements in %d shards to %s", meta["cardinality"], len(shards), path)


def _unnamed_shards(path: str, published: list, so: dict) -> list[str]:
    """The shard files at ``path`` that the metadata just written does not name."""
    try:
        found = storage.glob(storage.join(path, "shard-*"), **so)
    except Exception as exc:  # best effort: leftovers stay, the save is complete
        logger.warning("save(): could not list %s for leftover shards: %s", path, exc)
        return []
    names = {url.rsplit("/", 1)[-1] for url in published}
    return [url for url in found if SHARD_NAME.fullmatch(url.rsplit("/", 1)[-1])
            and url.rsplit("/", 1)[-1] not in names]


__all__ = ["save"]

registry.provide(save)
