"""Random access over TFRecord shards: ``len``, ``source[i]`` and batched ``__getitems__``.

:class:`TFRecordSource` maps a global record index to ``(shard, record)`` by prefix sums over
per-shard counts (from the shards' manifest when there is one, else from their indexes) and reads
records by byte range (:class:`~tpudata.tfrecord.ranges.RangeReader`: no shared file position, so
any number of threads may read at once). ``__getitems__`` sorts the requested records, merges
neighbouring ones into few range reads (fetched concurrently for ``gs://``), checks both CRCs of
every record it reads, and returns the records in the order asked.

Record offsets come from an index file next to each shard (``{shard}.idx``, DALI's
``tfrecord2idx`` format) or are built by scanning the shard (with a progress bar), once per
process unless ``write_index=True`` stores them. An index is checked against its shard when it is
loaded (once per file): it must tile the whole file and be newer than it
(:func:`~tpudata.tfrecord.index.check_index`); a stale one raises
:class:`~tpudata.errors.StaleIndexError`, or is rebuilt with a warning when
``rebuild_stale_index=True``. The source pickles without open handles (and
with the indexes it has loaded), so it plugs into ``torch.utils.data.DataLoader`` workers and
grain's ``MapDataset.source``.

>>> from tpudata.tfrecord import write_records
>>> _ = write_records("memory://doc/src-0.tfrecord", [b"a", b"b"])
>>> _ = write_records("memory://doc/src-1.tfrecord", [b"c"])
>>> src = TFRecordSource(["memory://doc/src-0.tfrecord", "memory://doc/src-1.tfrecord"], progress=False)
>>> len(src), src[2], src.__getitems__([2, 0, 2])
(3, b'c', [b'c', b'a', b'c'])
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Iterable, Mapping, Sequence

import numpy as np

from tpudata import storage
from tpudata._keywords import storage_options_dict, strict_keywords
from tpudata.errors import CorruptRecordError, DataLossError, TruncatedRecordError
from tpudata.shards.manifest import record_counts
from tpudata.tfrecord import framing
from tpudata.tfrecord.index import build_index, check_index, load_index
from tpudata.tfrecord.ranges import RangeReader
from tpudata.tfrecord.reader import detect_compression

logger = logging.getLogger(__name__)

INDEX_SUFFIX = ".idx"
LOCAL_MAX_GAP = 4 << 10  # local reads are cheap: merge only records on the same page or so
REMOTE_MAX_GAP = 256 << 10  # a request costs a round trip: read (and CRC-check) through gaps


def _manifest_counts(files: list[str], storage_options) -> list[int] | None:
    try:
        return record_counts(files, storage_options=storage_options)
    except (OSError, ValueError) as exc:  # pragma: no cover - unreadable manifest: scan instead
        logger.warning("cannot use the manifest for %s...: %s", files[0], exc)
        return None


class TFRecordSource:
    """Random-access records of uncompressed TFRecord files (paths, URLs or globs).

    ``index``: None (look for ``{file}{index_suffix}``, build it when missing), or one index per
    file (an index file URL or an ``(n, 2)`` array). ``write_index=True`` writes the indexes it
    builds next to the files (and rewrites the stale ones it rebuilds). Every index is checked
    against its file before use; a stale one raises :class:`~tpudata.errors.StaleIndexError`
    unless ``rebuild_stale_index=True`` (then the file is scanned again, with a warning).
    ``verify`` checks every record's CRCs. ``max_gap``: records closer
    than this many bytes are fetched in one range read (default 4 KiB for local files, 256 KiB
    for remote ones).
    """

    @strict_keywords
    def __init__(
        self,
        files: str | Iterable[str],
        index: Sequence | None = None,
        *,
        verify: bool = True,
        index_suffix: str = INDEX_SUFFIX,
        write_index: bool = False,
        progress: bool = True,
        max_gap: int | None = None,
        rebuild_stale_index: bool = False,
        storage_options: Mapping | None = None,
    ):
        storage_options = storage_options_dict("TFRecordSource", storage_options)
        self.files = storage.expand(files, **storage_options) if isinstance(files, str) else [
            os.fspath(f) for f in files]
        if not self.files:
            raise FileNotFoundError(f"no TFRecord files match {files!r}")
        if index is not None and len(index) != len(self.files):
            raise ValueError(f"index: {len(index)} entries for {len(self.files)} files")
        if max_gap is not None and max_gap < 0:
            raise ValueError(f"max_gap must be >= 0, not {max_gap}")
        self.verify = verify
        self.index_suffix = index_suffix
        self.write_index = write_index
        self.progress = progress
        self.max_gap = max_gap
        self.rebuild_stale_index = rebuild_stale_index
        self.storage_options = storage_options
        self._given = list(index) if index is not None else [None] * len(self.files)
        self._indexes: list[np.ndarray | None] = [None] * len(self.files)
        self._lock = threading.Lock()
        self._reader = RangeReader(storage_options=storage_options)
        counts = None if index is not None else _manifest_counts(self.files, storage_options)
        if counts is None:
            self._load_indexes(range(len(self.files)))
            counts = [len(ix) for ix in self._indexes]
        self.counts = np.asarray(counts, dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)

    # -- indexes -------------------------------------------------------------------------------
    def _build(self, k: int) -> np.ndarray:
        url = self.files[k]
        given = self._given[k]
        if given is not None:
            if isinstance(given, (str, os.PathLike)):
                return load_index(url, os.fspath(given), self.rebuild_stale_index, self.verify,
                                  self.storage_options)
            index = np.asarray(given, dtype=np.int64).reshape(-1, 2)
            check_index(index, url, None, self.storage_options)
            return index
        idx_url = url + self.index_suffix
        if storage.listed_exists(idx_url, **self.storage_options):
            return load_index(url, idx_url, self.rebuild_stale_index, self.verify,
                              self.storage_options, write=self.write_index)
        head = bytes(self._reader.read(url, 0, min(framing.HEADER_SIZE, storage.stat(url, **self.storage_options).size)))
        compression = detect_compression(head)
        if compression:
            raise ValueError(
                f"{url} is {compression}-compressed: random access needs uncompressed TFRecord "
                f"files (rewrite them with compression=None, or stream them with TFRecordDataset)")
        logger.info("indexing %s (no %s found)", url, idx_url)
        return build_index(url, idx_url if self.write_index else None, verify=self.verify,
                           storage_options=self.storage_options)

    def _load_indexes(self, ks) -> None:
        todo = [k for k in ks if self._indexes[k] is None]
        if not todo:
            return
        from tqdm.auto import tqdm  # noqa: PLC0415

        bar = tqdm(todo, desc="indexing TFRecord files", unit="file",
                   disable=not self.progress or len(todo) < 2 or not sys.stderr.isatty(),
                   leave=False)  # a bar only on a terminal
        for k in bar:
            ix = self._build(k)
            with self._lock:
                if self._indexes[k] is None:
                    if hasattr(self, "counts") and len(ix) != self.counts[k]:
                        raise DataLossError(
                            f"{self.files[k]} has {len(ix)} records in its index but "
                            f"{self.counts[k]} in its manifest: rebuild the index or the manifest",
                            self.files[k], None)
                    self._indexes[k] = ix

    def index_of(self, k: int) -> np.ndarray:
        """The ``(n, 2)`` (frame offset, frame length) index of file ``k`` (loaded on first use)."""
        if self._indexes[k] is None:
            self._load_indexes([k])
        return self._indexes[k]

    # -- mapping -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.starts[-1])

    def locate(self, indices) -> tuple[np.ndarray, np.ndarray]:
        """``(file, record-in-file)`` arrays for global record ``indices`` (negatives count back)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(self)
        bad = (idx < -n) | (idx >= n)
        if bad.any():
            raise IndexError(f"record {int(idx[bad][0])} out of range for a source of {n} records")
        idx = np.where(idx < 0, idx + n, idx)
        shard = np.searchsorted(self.starts, idx, side="right") - 1
        return shard, idx - self.starts[shard]

    # -- reading -------------------------------------------------------------------------------
    def __getitem__(self, i: int) -> bytes:
        if not isinstance(i, (int, np.integer)):
            raise TypeError(f"record indices are integers, not {type(i).__name__}")
        return self.__getitems__([int(i)])[0]

    def __getitems__(self, indices) -> list[bytes]:
        """Records at ``indices`` (any order, repeats allowed), as a list of bytes."""
        shard, local = self.locate(indices)
        if not len(shard):
            return []
        order = np.lexsort((local, shard))
        s_sorted, l_sorted = shard[order], local[order]
        ranges, firsts, counts, sizes = [], [], [], []  # per range read
        frame_offs = []  # per wanted record (sorted), its frame offset in the file
        for k in np.unique(s_sorted).tolist():
            lo, hi = np.searchsorted(s_sorted, [k, k + 1])
            locs = l_sorted[lo:hi]
            ix = self.index_of(k)
            offs, lens = ix[locs, 0], ix[locs, 1]
            ends = offs + lens
            gap = self.max_gap
            if gap is None:
                gap = LOCAL_MAX_GAP if storage.is_local(self.files[k]) else REMOTE_MAX_GAP
            # a new range starts where the gap from the previous record's end exceeds max_gap
            cut = np.flatnonzero(offs[1:] > np.maximum.accumulate(ends)[:-1] + gap) + 1
            a = np.concatenate([[0], cut]).astype(np.int64)
            b = np.concatenate([cut, [len(locs)]]).astype(np.int64)
            url = self.files[k]
            ranges += [(url, s_, e_) for s_, e_ in zip(offs[a].tolist(), ends[b - 1].tolist())]
            firsts.append(np.repeat(locs[a], b - a))
            counts += (locs[b - 1] - locs[a] + 1).tolist()
            sizes += (b - a).tolist()
            frame_offs.append(offs)
        buffers = self._reader.read_many(ranges)
        first_of = np.concatenate(firsts)
        records: list = []
        data_offs = np.empty(len(order), dtype=np.int64)
        j = 0
        for (url, start, _), buf, count, size in zip(ranges, buffers, counts, sizes):
            offsets, lengths = self._frame(url, buf, start, count)
            if count == 1:  # the common case of scattered reads: no index arithmetic
                o, n = int(offsets[0]), int(lengths[0])
                rec = bytes(memoryview(buf)[o : o + n])
                records += [rec] * size
                data_offs[j : j + size] = start + o
            else:
                want = l_sorted[j : j + size] - first_of[j : j + size]
                records += framing.split(buf, offsets[want], lengths[want])
                data_offs[j : j + size] = start + offsets[want]
            j += size
        expected = np.concatenate(frame_offs) + framing.HEADER_SIZE
        moved = data_offs != expected
        if moved.any():  # the index does not agree with the file's framing
            k = int(np.flatnonzero(moved)[0])
            at = int(expected[k]) - framing.HEADER_SIZE
            url = self.files[int(s_sorted[k])]
            raise CorruptRecordError(
                f"corrupted record at {at}: the index puts a record where the file has none "
                f"(rebuild the index)", url, at)
        out: list = [None] * len(order)
        for pos, rec in zip(order.tolist(), records):
            out[pos] = rec
        return out

    def _frame(self, url: str, buf, start: int, expected: int):
        """Frame (and CRC-check) the ``expected`` records of ``buf``, read from ``start``."""
        res = framing.scan(buf, 0, len(buf), self.verify, expected)
        if res.err != framing.OK:
            raise CorruptRecordError(f"corrupted record at {start + res.err_offset}", url,
                                     start + res.err_offset)
        if res.count != expected or res.pos != len(buf):
            at = start + res.pos
            raise TruncatedRecordError(
                f"truncated record at {at}: the index does not match the file (rebuild the "
                f"index)", url, at)
        return res.offsets, res.lengths

    # -- pickling / lifetime -------------------------------------------------------------------
    def __getstate__(self):
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close this process's file descriptors (later reads reopen them)."""
        self._reader.close()

    def __enter__(self) -> "TFRecordSource":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TFRecordSource({len(self.files)} files, {len(self)} records)"


__all__ = ["INDEX_SUFFIX", "LOCAL_MAX_GAP", "REMOTE_MAX_GAP", "TFRecordSource"]
