"""cache: keep the elements of the first complete pass, in memory or in files at a URL.

As in tf.data, a pass that stops early leaves no cache, and later passes (e.g. under
``.repeat()``) replay the cached elements in the cached order. A file cache streams: elements
are written in parts of about ``PART_BYTES`` while the first pass runs (memory stays bounded),
and the pass finalises by writing ``_complete.json`` atomically, which names the parts. Only
a complete marker makes a cache; an interrupted pass removes the parts it wrote, and what a
killed pass left (parts no marker names, temporaries) is removed by a later run once an hour old
(younger ones may be a live writer's). Parts are Python pickles behind a format header and a
CRC32C (:mod:`tpudata.dataset.io.checked`), found only by the marker's token in the cache's own
directory and checked once per part (with its element count) when read: only point
``cache(url)`` at storage you trust. A cache written by an older tpudata (no checksums) is
rebuilt, with a warning.

State is element-exact: while filling, the input's position; while replaying, the number of
cached elements read. A replay checkpoint restored where the cache is missing (an in-memory
cache in a new process) re-runs the pass that wrote it and skips to the element.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import threading

from tpudata.dataset.core import registry
from tpudata import storage
from tpudata.dataset.core.base import BlockIterator, Dataset
from tpudata.dataset.core.block import Block
from tpudata.dataset.core.iterator import Cursor, IterContext
from tpudata.dataset.io import checked
from tpudata.errors import DataLossError

logger = logging.getLogger(__name__)

_MARKER = "_complete.json"
PART_BYTES = 8 << 20
FORMAT = "tpudata.cache"
KIND = "cache"
_TOKEN = re.compile(r"[0-9a-f]{1,32}")
_PART = re.compile(r"part-(?P<token>[0-9a-f]{1,32})-\d{5,}\.pkl")


class CacheDataset(Dataset):
    _keeps_state = True  # the filled cache stays on this node: graph rewrites never copy it

    def __init__(self, input_ds: Dataset, url: str | None = None):
        super().__init__()
        self.input = input_ds
        self.url = None if not url else str(url).rstrip("/")
        self._memory: dict | None = None  # {"blocks", "counts", "path"} once complete
        # the iteration path of a writing pass that a restore cut short: later passes re-run it
        # (same order as the cache would replay) and may complete the cache themselves
        self._writer_path: tuple | None = None
        self._cache_lock = threading.Lock()
        self._tidied = False

    def __getstate__(self):
        state = super().__getstate__()
        del state["_cache_lock"]
        state["_memory"] = None  # an in-memory cache stays in its process
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        self._cache_lock = threading.Lock()
        self._tidied = False

    def _complete(self) -> dict | None:
        """``{"counts": [elements per part], "path": ..., "token": ...}`` once complete."""
        if self._memory is not None:
            return self._memory
        if not self.url:
            return None
        url = storage.join(self.url, _MARKER)
        try:
            raw = storage.read_bytes(url)
        except FileNotFoundError:
            return None
        return _read_marker(raw, url)

    def _load(self, info: dict, i: int) -> Block:
        if "blocks" in info:
            return info["blocks"][i]
        url = storage.join(self.url, f"part-{info['token']}-{i:05d}.pkl")
        block = checked.unpack(storage.read_bytes(url), url, KIND, legacy=False)
        if not isinstance(block, Block) or block.n != info["counts"][i]:
            got = block.n if isinstance(block, Block) else type(block).__name__
            raise DataLossError(f"damaged cache part: {got} elements, the cache's marker says "
                                f"{info['counts'][i]} (delete the cache directory to rebuild it)",
                                url)
        return block

    def _tidy(self) -> None:
        """Once per process: remove what killed passes left in the cache directory."""
        if self._tidied or not self.url or not storage.is_local(self.url):
            return
        self._tidied = True
        try:
            remove_orphans(self.url, self._complete())
        except (OSError, DataLossError) as exc:  # best effort: never in the way of a pass
            logger.warning("could not tidy the cache directory %s: %s", self.url, exc)

    def _make_iterator(self, ctx):
        self._tidy()
        info = self._complete()
        if info is not None:
            return _ReplayIterator(self, info)
        if self._writer_path is not None:
            ctx = IterContext(self._writer_path, ctx.in_background, ctx.stop, ctx._on_stop,
                              ctx.origins)
        return _CachingIterator(self, ctx)

    def cardinality(self):
        return self.input.cardinality()

    def _spec(self):
        from tpudata.dataset.core.spec import _static

        return _static(self.input)


def _read_marker(raw: bytes, url: str) -> dict | None:
    """The checked content of a ``_complete.json``; None for an older tpudata's (rebuilt)."""
    try:
        info = json.loads(raw)
        if isinstance(info, dict) and "format" not in info and "token" in info:
            logger.warning("the cache at %s was written by an older tpudata (no checksums): "
                           "rebuilding it", url)
            return None
        if info.get("format") != FORMAT or int(info["version"]) > 1:
            raise ValueError(f"format {info.get('format')!r} version {info.get('version')!r}")
        if not isinstance(info["token"], str) or not _TOKEN.fullmatch(info["token"]):
            raise ValueError(f"token {str(info['token'])[:40]!r} is not a cache token")
        counts = info["counts"]
        if not isinstance(counts, list) or not all(
                type(c) is int and c >= 0 for c in counts):
            raise ValueError("counts are not element counts")
        path = info.get("path")
        if path is not None and not (isinstance(path, list) and
                                     all(type(p) is int for p in path)):
            raise ValueError("path is not an iteration path")
        return info
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DataLossError(f"damaged cache marker ({type(exc).__name__}: {exc}); delete the "
                            "cache directory to rebuild the cache", url) from None


def remove_orphans(url: str, info: dict | None) -> list[str]:
    """Remove the parts in the local cache directory ``url`` that the marker ``info`` does not
    name, once every part of their pass is older than ``checked.STALE_SECONDS`` (a younger pass
    may still be writing), and killed writers' temporaries; returns the removed paths."""
    removed = checked.remove_leftovers(url, ("part-", _MARKER))
    keep = None if info is None or "token" not in info else info["token"]
    passes: dict[str, list[str]] = {}
    for name in os.listdir(storage.local_path(url)):
        m = _PART.fullmatch(name)
        if m and m.group("token") != keep:
            passes.setdefault(m.group("token"), []).append(storage.join(url, name))
    for parts in passes.values():
        ages = [checked.age_seconds(p) for p in parts]
        if all(a is not None and a >= checked.STALE_SECONDS for a in ages):
            for p in parts:
                storage.remove(p)
            removed += parts
    if removed:
        logger.info("removed %d file(s) of killed cache passes from %s", len(removed), url)
    return removed


class _ReplayIterator(BlockIterator):
    def __init__(self, ds: CacheDataset, info: dict):
        self.ds, self.info = ds, info
        self.counts = [int(c) for c in info["counts"]]
        self.part, self.offset, self.element = 0, 0, 0

    def next(self):
        while self.part < len(self.counts):
            if self.offset >= self.counts[self.part]:
                self.part, self.offset = self.part + 1, 0
                continue
            block = self.ds._load(self.info, self.part)
            out = block.slice(self.offset, block.n)
            self.element += out.n
            self.part, self.offset = self.part + 1, 0
            return out
        return None

    def get_state(self):
        return {"mode": "replay", "element": self.element, "path": self.info.get("path")}

    def set_state(self, state):
        if state["mode"] == "fill":
            if list(state["path"]) != list(self.info.get("path") or []):
                raise ValueError("checkpoint was taken during a pass that did not write this cache")
            target = int(state["delivered"])
        else:
            target = int(state["element"])
        self.element, self.part, self.offset = target, 0, target
        while self.part < len(self.counts) and self.offset >= self.counts[self.part]:
            self.offset -= self.counts[self.part]
            self.part += 1


class _Writer:
    """Streams compacted blocks into parts (memory or files) and publishes them at the end."""

    def __init__(self, ds: CacheDataset, path: list):
        self.ds, self.path = ds, path
        self.token = secrets.token_hex(6)
        self.pending: list = []
        self.pending_bytes = 0
        self.counts: list[int] = []
        self.blocks: list = []  # in-memory cache
        self.written: list[str] = []

    def add(self, block: Block) -> None:
        block = block.compact()
        if self.ds.url is None:
            self.blocks.append(block)
            self.counts.append(block.n)
            return
        self.pending.append(block)
        self.pending_bytes += block.nbytes
        if self.pending_bytes >= PART_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        block = Block.concat(self.pending)
        self.pending, self.pending_bytes = [], 0
        if not self.written:
            storage.makedirs(self.ds.url)
        name = storage.join(self.ds.url, f"part-{self.token}-{len(self.counts):05d}.pkl")
        with storage.open_atomic(name) as f:
            checked.write(f, block, KIND)
        self.written.append(name)
        self.counts.append(block.n)

    def publish(self) -> None:
        ds = self.ds
        with ds._cache_lock:
            if ds._complete() is not None:  # another pass finished first
                self.abandon()
                return
            if ds.url is None:
                ds._memory = {"blocks": self.blocks, "counts": self.counts, "path": self.path}
                return
            self._flush()
            storage.makedirs(ds.url)
            info = {"format": FORMAT, "version": 1, "counts": self.counts, "path": self.path,
                    "token": self.token}
            with storage.open_atomic(storage.join(ds.url, _MARKER)) as f:
                f.write(json.dumps(info).encode())
            logger.info("cached %d elements in %d parts at %s", sum(self.counts),
                        len(self.counts), ds.url)

    def abandon(self) -> None:
        """An incomplete pass: remove what it wrote, so no partial cache is left behind."""
        self.pending, self.blocks = [], []
        for name in self.written:
            try:
                storage.remove(name)
            except Exception as exc:  # best effort: without the marker the parts are unused
                logger.warning("could not remove the partial cache file %s: %s", name, exc)
        self.written = []


class _CachingIterator(BlockIterator):
    def __init__(self, ds: CacheDataset, ctx: IterContext):
        self.ds, self.ctx = ds, ctx
        self.path = list(ctx.path)
        self.input_it = ds.input._make_iterator(ctx)
        self.writer: _Writer | None = _Writer(ds, self.path)
        self.delivered = 0
        self.replay_path: list | None = None  # re-running the pass that wrote a lost cache

    def next(self):
        self.input_it.want = self.want  # pass the consumer's demand on
        block = self.input_it.next()
        if block is None:
            if self.writer is not None:
                self.writer.publish()
                self.writer = None
            return None
        self.delivered += block.n
        if self.writer is not None:
            self.writer.add(block)
        return block

    def get_state(self):
        if self.replay_path is not None:
            return {"mode": "replay", "element": self.delivered, "path": self.replay_path}
        return {"mode": "fill", "input": self.input_it.get_state(), "delivered": self.delivered,
                "path": self.path}

    def set_state(self, state):
        if self.writer is not None:  # the part before the checkpoint is missing: no cache
            self.writer.abandon()
            self.writer = None
        if self.ds._writer_path is None:
            self.ds._writer_path = tuple(state["path"] or self.path)
        if state["mode"] == "replay":
            # the cache is not here (in-memory, new process): re-run the pass that wrote it
            self.input_it.close()
            path = tuple(state["path"] or self.path)
            self.input_it = self.ds.input._make_iterator(
                IterContext(path, self.ctx.in_background, self.ctx.stop, self.ctx._on_stop,
                            self.ctx.origins))
            cursor = Cursor(self.input_it)
            cursor.set_state({"before": self.input_it.get_state(), "pos": int(state["element"])})
            self.input_it = _CursorAsIterator(cursor)
            self.delivered = int(state["element"])
            self.replay_path = list(path)
            return
        self.input_it.set_state(state["input"])
        self.delivered = int(state["delivered"])

    def close(self):
        if self.writer is not None:
            self.writer.abandon()
            self.writer = None
        self.input_it.close()


class _CursorAsIterator(BlockIterator):
    """A positioned Cursor seen as a BlockIterator (for a re-run replay)."""

    def __init__(self, cursor: Cursor):
        self.cursor = cursor

    def next(self):
        return self.cursor.next_block()

    def get_state(self):
        return self.cursor.get_state()

    def set_state(self, state):
        self.cursor.set_state(state)

    def close(self):
        self.cursor.it.close()

registry.provide(CacheDataset)
