"""load: read a dataset written by ``Dataset.save`` (``Dataset.load``).

The metadata gives the element spec, the shards and the element count (so ``cardinality()`` is
known). It is data only: its structure's namedtuples are resolved from the classes the caller
passes (``namedtuples=`` or an ``element_spec`` built with them), never imported by name. Every
shard is checked against it once: its byte size when the dataset is opened (its CRC32C too with
``verify=True``), its record count when it has been read to its end. By default the shards are read back in the order they were written (round-robin
shards are interleaved one element at a time), so ``load(path)`` yields the saved dataset's
order; ``reader_func(datasets)`` (a Dataset of per-shard Datasets, in shard-id order) chooses
another. The state is element-exact like every other source.

>>> import tempfile
>>> from tpudata.dataset import Dataset
>>> tmp = tempfile.TemporaryDirectory()
>>> path = tmp.name
>>> Dataset.range(3).save(path)
>>> ds = Dataset.load(path)
>>> ds.cardinality(), ds.element_spec, [int(x) for x in ds]
(3, TensorSpec(shape=(), dtype=int64), [0, 1, 2])
>>> tmp.cleanup()
"""

from __future__ import annotations

import json
import logging
import os
import time
import weakref
from typing import Callable

from tpudata.dataset.core import registry
from tpudata import storage
from tpudata.dataset.core.base import UNKNOWN, Dataset
from tpudata.dataset.core.block import Block
from tpudata.dataset.core.columns import leaf_items
from tpudata.dataset.core.common import _BlockMapIterator
from tpudata.dataset.core.iterator import BlockIterator
from tpudata.dataset.core.nest import flatten, leaf_paths, tree_from_json, unflatten
from tpudata.dataset.io.save import SHARD_NAME
from tpudata.dataset.io.saved_format import (
    FORMAT, METADATA, VERSION, Leaf, decode_columns, decode_element,
)
from tpudata.errors import (
    MissingExtraError, SavedDatasetError, SavedDatasetNotFoundError, SpecError, UntrustedTypeError,
)
from tpudata.tfrecord.compression import normalize_compression

logger = logging.getLogger(__name__)

WAIT_POLL_SECONDS = 1.0


def read_metadata(path: str, storage_options: dict, types: dict | None = None) -> dict:
    """The metadata of the save at ``path``, checked; clear errors when it is missing or damaged.
    ``types`` (``{"module:qualname": class}``) are the namedtuples its structure may use."""
    url = storage.join(path, METADATA)
    try:
        raw = storage.read_bytes(url, **storage_options)
    except FileNotFoundError:
        raw = None
    if raw is None:
        raise SavedDatasetNotFoundError(
            f"no saved dataset at {path!r}: {METADATA} is missing. Write one with "
            "Dataset.save(path) first; a save that was interrupted leaves no metadata (run it "
            "again). A directory written by TensorFlow's tf.data save is not readable by "
            "tpudata: re-save it with tpudata", url)
    try:
        meta = json.loads(raw)
        if meta.get("format") != FORMAT:
            raise ValueError(f"format is {meta.get('format')!r}, not {FORMAT!r}")
        if int(meta["version"]) > VERSION:
            raise ValueError(f"version {meta['version']} is newer than this tpudata reads "
                             f"({VERSION}); upgrade tpudata")
        meta["tree"] = tree_from_json(meta["structure"], types)
        meta["leaf_specs"] = [Leaf.from_json(x) for x in meta["leaves"]]
        if len(meta["leaf_specs"]) != meta["tree"].num_leaves:
            raise ValueError("the structure and the leaves disagree")
        meta["compression"] = normalize_compression(meta["compression"]) or ""
        _check_shards(meta)
    except MissingExtraError:
        raise  # a dtype that needs an optional package (bfloat16): the save is fine
    except UntrustedTypeError as exc:
        raise UntrustedTypeError(
            f"{url}: the saved elements are namedtuples {exc.type_name!r}; tpudata never imports "
            f"a class named in a file: pass it, Dataset.load({path!r}, namedtuples=[...]) (or an "
            "element_spec built with it)", exc.type_name) from None
    except (ValueError, KeyError, TypeError, AttributeError, ImportError) as exc:
        raise SavedDatasetError(
            f"{url} is damaged or not a tpudata save ({type(exc).__name__}: {exc}); save the "
            "dataset again with Dataset.save", url) from None
    return meta


def _check_shards(meta: dict) -> None:
    """Every shard entry well formed, and the counts adding up to the cardinality."""
    if not isinstance(meta["shards"], list):
        raise ValueError("shards is not a list")
    for s in meta["shards"]:
        if not isinstance(s.get("file"), str) or not SHARD_NAME.fullmatch(s["file"]):
            raise ValueError(f"shard name {str(s.get('file'))[:200]!r} is not a shard's file name")
        s["records"] = _count(s["records"], "records")
        if "bytes" in s:
            s["bytes"] = _count(s["bytes"], "bytes")
        if "crc32c" in s:
            s["crc32c"] = int(str(s["crc32c"]), 16)
    meta["cardinality"] = _count(meta["cardinality"], "cardinality")
    total = sum(s["records"] for s in meta["shards"])
    if total != meta["cardinality"]:
        raise ValueError(f"the shards hold {total} records, but the cardinality is "
                         f"{meta['cardinality']}")


def _count(value, what: str) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"{what} is {str(value)[:40]!r}, not a count")
    return value


def _spec_of(leaf: Leaf):
    from tpudata.dataset.core.spec import RaggedSpec, SparseSpec, TensorSpec, VarLenSpec

    if leaf.kind == "varlen":
        return VarLenSpec(leaf.shape, leaf.dtype)
    if leaf.kind == "sparse":
        return SparseSpec(leaf.shape, leaf.dtype)
    if leaf.kind == "ragged":
        return RaggedSpec(leaf.shape, leaf.dtype, leaf.ragged_rank)
    return TensorSpec(leaf.shape, leaf.dtype)


def _check_given_spec(given, saved, url: str) -> None:
    """``element_spec`` passed to load must fit the saved one; a mismatch names the feature."""
    from tpudata.dataset.core.spec import TensorSpec

    gtree, gleaves = flatten(given)
    stree, sleaves = flatten(saved)
    if gtree != stree:
        raise SpecError(f"load({url!r}): element_spec has the structure {gtree}, but the saved "
                        f"elements have {stree}; pass the saved structure or leave element_spec "
                        "out (it is read from the metadata)")
    for name, g, s in zip(leaf_paths(stree), gleaves, sleaves):
        if not isinstance(g, TensorSpec):
            raise TypeError(f"load(): element_spec at {name!r} is {type(g).__name__}, not a "
                            "TensorSpec")
        if g.dtype != s.dtype or type(g) is not type(s) or len(g.shape) != len(s.shape) or any(
                a is not None and b is not None and a != b for a, b in zip(g.shape, s.shape)):
            raise SpecError(f"load({url!r}): element_spec says {g!r} at {name!r}, but the saved "
                            f"elements are {s!r} there")


class _DecodeShard(Dataset):
    """The elements of one saved shard (its records decoded)."""

    def __init__(self, records: Dataset, tree, leaves: list, spec, where: dict):
        super().__init__()
        self.input, self.tree, self.leaves, self.spec = records, tree, leaves, spec
        self.where = where  # {"path", "file"}: how a checkpoint names this shard

    def __jsonable__(self):
        return {"__saved_shard__": self.where}

    def _decode(self, block: Block) -> Block:
        records = leaf_items(block.leaves[0])
        columns = decode_columns(self.leaves, records)  # tensors: all records at once
        if columns is not None:
            return Block(self.tree, columns, len(records))
        rows = []
        for record in records:
            try:
                rows.append(decode_element(self.leaves, record))
            except (ValueError, IndexError) as exc:
                raise SavedDatasetError(f"a saved record does not match the saved element spec "
                                        f"({exc}); the save is damaged: save it again") from None
        return Block.from_elements(self.tree, rows) if rows else None

    def _make_iterator(self, ctx):
        url = storage.join(self.where["path"], self.where["file"])
        records = _CountedRecords(self.input._make_iterator(ctx), self.input._count, url)
        return _BlockMapIterator(records, self._decode, 0)

    def _spec(self):
        return self.spec

    def cardinality(self) -> int:
        return self.input.cardinality()


class _CountedRecords(BlockIterator):
    """A shard's records, counted: at its end the count must be the metadata's (once per file)."""

    def __init__(self, it: BlockIterator, expected: int, url: str):
        self.it, self.expected, self.url = it, expected, url
        self.read: int | None = 0  # None: restored from a state that did not count

    def next(self):
        self.it.want = self.want
        block = self.it.next()
        if block is None:
            if self.read is not None and self.expected >= 0 and self.read != self.expected:
                raise SavedDatasetError(
                    f"{self.url}: the shard holds {self.read} records, but the saved dataset's "
                    f"metadata says {self.expected}; the save was modified after it was written "
                    "- save it again", self.url)
            return None
        if self.read is not None:
            self.read += block.n
        return block

    def get_state(self):
        return {"shard_records": self.it.get_state(), "read": self.read}

    def set_state(self, state):
        if isinstance(state, dict) and "shard_records" in state:
            self.it.set_state(state["shard_records"])
            self.read = None if state["read"] is None else int(state["read"])
        else:  # a state of an older tpudata: the reader's own
            self.it.set_state(state)
            self.read = None

    def close(self):
        self.it.close()


class _OpenShard:
    """Picklable ``file name -> Dataset of that shard's elements``."""

    def __init__(self, path, compression, tree, leaves, spec, counts, storage_options):
        self.path, self.compression, self.tree, self.leaves = path, compression, tree, leaves
        self.spec, self.counts, self.storage_options = spec, counts, storage_options

    def __setstate__(self, state):  # in a worker process: a checkpoint may name its shards
        self.__dict__.update(state)
        _register(self)

    def __call__(self, name) -> Dataset:
        from tpudata.dataset.sources.files import _TFRecordFiles
        from tpudata.tfrecord.reader import DEFAULT_BUFFER_SIZE

        name = name.decode() if isinstance(name, bytes) else str(name)
        records = _TFRecordFiles([storage.join(self.path, name)], self.compression,
                                 DEFAULT_BUFFER_SIZE, True, "raise", self.storage_options)
        records._count = self.counts.get(name, UNKNOWN)
        return _DecodeShard(records, self.tree, self.leaves, self.spec,
                            {"path": self.path, "file": name})


def opener_for(path: str, meta: dict, spec, storage_options: dict) -> _OpenShard:
    opener = _OpenShard(path, meta["compression"], meta["tree"], meta["leaf_specs"], spec,
                        {s["file"]: s["records"] for s in meta["shards"]}, storage_options)
    _register(opener)
    return opener


# the saves the live Dataset.load objects of this process read: the only ones a state may name
_OPENED: dict[str, list] = {}  # path -> weak references to its openers, newest last


def _register(opener: _OpenShard) -> None:
    refs = [r for r in _OPENED.get(opener.path, ()) if r() is not None]
    _OPENED[opener.path] = refs + [weakref.ref(opener)]


def _opener(path, name) -> _OpenShard | None:
    """The newest live opener of the save at ``path`` that has the shard ``name``."""
    if not isinstance(path, str) or not isinstance(name, str):
        return None
    for ref in reversed(_OPENED.get(path, ())):
        opener = ref()
        if opener is not None and name in opener.counts:
            return opener
    return None


def shard_from_jsonable(where: dict) -> Dataset:
    """A shard dataset named in a checkpoint (a ``reader_func`` pipeline's element), opened again
    by the ``Dataset.load`` of this process that reads that save (its metadata, its namedtuples
    and storage options): a checkpoint cannot name a save the pipeline does not load."""
    from tpudata.errors import StateError

    path = where.get("path") if isinstance(where, dict) else None
    name = where.get("file") if isinstance(where, dict) else None
    opener = _opener(path, name)
    if opener is None:
        raise StateError(f"the state names the saved shard {str(name)[:200]!r} of "
                         f"{str(path)[:200]!r}, which no Dataset.load of this pipeline reads: "
                         "restore it into the pipeline that took it")
    return opener(name)


class LoadDataset(Dataset):
    """A saved dataset; iterating it runs the reader pipeline built from the metadata."""

    def __init__(self, path: str, element_spec=None, compression: str | None = None,
                 reader_func: Callable | None = None, wait: bool = False, *,
                 storage_options: dict | None = None, namedtuples=(), verify: bool = False):
        super().__init__()
        so = dict(storage_options or {})
        path = os.fspath(path).rstrip("/") or "/"
        types = _allowed_types(namedtuples, element_spec)
        while True:
            try:
                meta = read_metadata(path, so, types)
                break
            except SavedDatasetNotFoundError:
                if not wait:
                    raise
                logger.info("load(): no saved dataset at %s yet; waiting", path)
                time.sleep(WAIT_POLL_SECONDS)
        if compression is not None and (normalize_compression(compression) or "") != \
                meta["compression"]:
            raise ValueError(f"load({path!r}, compression={compression!r}): the dataset was "
                             f"saved with compression {meta['compression'] or None!r}; leave "
                             "compression out (it is read from the metadata)")
        saved = unflatten(meta["tree"], [_spec_of(x) for x in meta["leaf_specs"]])
        if element_spec is not None:
            _check_given_spec(element_spec, saved, path)
        self.path, self.spec, self.n = path, saved, int(meta["cardinality"])
        self.custom_reader = reader_func is not None
        names = [s["file"] for s in meta["shards"]]
        _check_files(path, meta["shards"], so, verify)
        opener = opener_for(path, meta, saved, so)
        from tpudata.dataset.sources.files import FileListDataset, TensorSlicesDataset

        if not names:  # an empty save
            self.inner = TensorSlicesDataset(unflatten(
                meta["tree"], [_empty(x) for x in meta["leaf_specs"]]))
        elif reader_func is None:
            cycle = len(names) if meta["round_robin"] else min(len(names), os.cpu_count() or 1)
            self.inner = FileListDataset(names).interleave(opener, cycle_length=cycle,
                                                           block_length=1)
        else:
            out = reader_func(FileListDataset(names).map(opener))
            if not isinstance(out, Dataset):
                raise TypeError(f"load(): reader_func must return a Dataset, not "
                                f"{type(out).__name__}")
            self.inner = out

    def _make_iterator(self, ctx):
        return self.inner._make_iterator(ctx)

    def _spec(self):
        return self.spec

    def cardinality(self) -> int:
        return self.inner.cardinality() if self.custom_reader else self.n

    def _describe(self) -> str:
        return f"load({self.path!r}, n={self.n})"


def _allowed_types(namedtuples, element_spec) -> dict:
    """The namedtuple classes a saved structure may use: those passed, those of the spec."""
    from tpudata.dataset.core.nest import namedtuple_types

    classes = list(namedtuples or ())
    for cls in classes:
        if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
            raise TypeError(f"load(): namedtuples must be namedtuple classes, not {cls!r}")
    return namedtuple_types(*classes, *([element_spec] if element_spec is not None else []))


def _check_files(path: str, shards: list, so: dict, verify: bool) -> None:
    """Every shard is there, with the byte size (and with ``verify`` the CRC32C) the metadata
    records: one stat per shard (on GCS, from the listing), no read unless ``verify``."""
    missing = []
    for s in shards:
        url = storage.join(path, s["file"])
        try:
            size = storage.stat(url, **so).size
        except FileNotFoundError:
            missing.append(s["file"])
            continue
        if "bytes" in s and size != s["bytes"]:
            raise SavedDatasetError(
                f"{url}: the shard has {size} bytes, but the saved dataset's metadata says "
                f"{s['bytes']}; it was modified after saving - save it again", url)
        if verify and "crc32c" in s:
            from tpudata.shards.manifest import file_crc32c

            _, crc = file_crc32c(url, storage_options=so)
            if crc != s["crc32c"]:
                raise SavedDatasetError(
                    f"{url}: the shard's CRC32C is {crc:08x}, but the saved dataset's metadata "
                    f"says {s['crc32c']:08x}; it was modified after saving - save it again", url)
    if missing:
        raise SavedDatasetError(
            f"the saved dataset at {path!r} is incomplete: {len(missing)} of its {len(shards)} "
            f"shards are missing (first: {missing[0]!r}); it was modified after saving - "
            "save it again", storage.join(path, missing[0]))


def _empty(leaf: Leaf):
    import numpy as np

    shape = (0,) + tuple(0 if d is None else d for d in leaf.shape)
    return np.empty(shape, dtype=leaf.dtype) if leaf.kind == "tensor" else \
        np.empty(0, dtype=object)


__all__ = ["LoadDataset", "read_metadata"]

registry.provide(LoadDataset, shard_from_jsonable)
