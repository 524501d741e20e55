"""cache: keep the elements of the first complete pass, in memory or in files at a URL.

As in tf.data, a pass that stops early leaves no cache, and later passes (e.g. under
``.repeat()``) replay the cached elements in the cached order. File caches (a directory of
``part-NNNNN.pkl`` files plus ``_complete.json``, written atomically) survive the process; they
are Python pickles, so only point ``cache(url)`` at storage you trust.
"""

from __future__ import annotations

import json
import logging
import pickle
import threading

from tpudata import storage
from tpudata.dataset.base import BlockIterator, Dataset

logger = logging.getLogger(__name__)

_MARKER = "_complete.json"


class CacheDataset(Dataset):
    def __init__(self, input_ds: Dataset, url: str | None = None):
        super().__init__()
        self.input = input_ds
        self.url = None if not url else str(url).rstrip("/")
        self._memory: list | None = None
        self._memory_path: list | None = None
        self._cache_lock = threading.Lock()

    def _complete(self) -> dict | None:
        """``{"parts": n, "path": iteration path of the pass that wrote it}`` once complete."""
        if self._memory is not None:
            return {"parts": len(self._memory), "path": self._memory_path}
        if self.url and storage.exists(storage.join(self.url, _MARKER)):
            return json.loads(storage.read_bytes(storage.join(self.url, _MARKER)))
        return None

    def _complete_parts(self) -> int | None:
        info = self._complete()
        return None if info is None else int(info["parts"])

    def _load(self, i: int):
        if self._memory is not None:
            return self._memory[i]
        return pickle.loads(storage.read_bytes(storage.join(self.url, f"part-{i:05d}.pkl")))

    def _publish(self, blocks: list, path: list) -> None:
        with self._cache_lock:
            if self._complete_parts() is not None:
                return
            if self.url is None:
                self._memory = blocks
                self._memory_path = path
                return
            storage.makedirs(self.url)
            for i, block in enumerate(blocks):
                with storage.open_atomic(storage.join(self.url, f"part-{i:05d}.pkl")) as f:
                    f.write(pickle.dumps(block, protocol=pickle.HIGHEST_PROTOCOL))
            with storage.open_atomic(storage.join(self.url, _MARKER)) as f:
                f.write(json.dumps({"parts": len(blocks), "path": path}).encode())
            logger.info("cached %d blocks at %s", len(blocks), self.url)

    def _make_iterator(self, ctx):
        parts = self._complete_parts()
        if parts is not None:
            return _ReplayIterator(self, parts)
        return _CachingIterator(self, self.input._make_iterator(ctx), list(ctx.path))

    def cardinality(self):
        return self.input.cardinality()


class _ReplayIterator(BlockIterator):
    def __init__(self, ds: CacheDataset, parts: int):
        self.ds, self.parts, self.i = ds, parts, 0

    def next(self):
        if self.i >= self.parts:
            return None
        block = self.ds._load(self.i)
        self.i += 1
        return block

    def get_state(self):
        return {"mode": "replay", "part": self.i}

    def set_state(self, state):
        if state["mode"] == "fill":
            # cached parts are the blocks of the pass that wrote them, one for one
            if list(state["path"]) != list(self.ds._complete()["path"] or []):
                raise ValueError("checkpoint was taken during a pass that did not write this cache")
            self.i = int(state["parts"])
            return
        self.i = int(state["part"])


class _CachingIterator(BlockIterator):
    def __init__(self, ds: CacheDataset, input_it: BlockIterator, path: list):
        self.ds, self.input_it, self.path = ds, input_it, path
        self.blocks: list | None = []
        self.parts = 0

    def next(self):
        block = self.input_it.next()
        if block is None:
            if self.blocks is not None:
                self.ds._publish(self.blocks, self.path)
                self.blocks = None
            return None
        self.parts += 1
        if self.blocks is not None:
            self.blocks.append(block.compact())
        return block

    def get_state(self):
        return {"mode": "fill", "input": self.input_it.get_state(), "parts": self.parts,
                "path": self.path}

    def set_state(self, state):
        if state["mode"] == "replay":
            parts = self.ds._complete_parts()
            if parts is None:
                raise ValueError(
                    "checkpoint points into a cache this process does not have; use cache(url) "
                    "to restore cached pipelines in a new process")
            raise ValueError("restore into a new iterator: the cache is complete now")
        self.input_it.set_state(state["input"])
        self.parts = int(state["parts"])
        self.blocks = None  # the part before the checkpoint is missing: do not cache this pass

    def close(self):
        self.input_it.close()
