"""The packing algorithms, on elements ``{feature: 1-d array (or scalar)}``, as grain and seqio
define them (no dataset machinery here: :mod:`tpudata.text.pack` drives them).

- :class:`Bins`: ``num_bins`` rows filled first-fit (the first row with room for every feature)
  or best-fit (the fitting row with the most cells used, summed over the features; the first
  such row on a tie), as grain's ``FirstFitPackedBatch`` / ``BestFitPackedBatch``: an element that
  fits no row completes the batch.
- :class:`ConcatThenSplit`: grain's ``ConcatThenSplitIterDataset``: elements concatenated, rows
  cut at the target lengths, the cut element's rest starting the next row.
- :func:`seqio_rows`: seqio's ``trim_and_pack_dataset`` (its TF-ops path): one open row, a row
  written when the next element does not fit, and at every ``max(lengths)`` input elements.
"""

from __future__ import annotations

import collections
from typing import Any, Callable

import numpy as np

from tpudata.errors import PackingError

EMPTY = (-1, -1)  # a whole feature (grain's _EMPTY_SLICE)


def length_of(x) -> int:
    if type(x) is np.ndarray:  # the common case, without np.ndim's dispatch
        return len(x) if x.ndim else 1
    return 1 if np.ndim(x) == 0 else len(x)


def _buffer(shape_rows: tuple, x, padding) -> np.ndarray:
    """A (rows..., length, trailing...) buffer of ``x``'s dtype filled with ``padding`` (0)."""
    if np.ndim(x) == 0:
        shape, dtype = (), (np.dtype(np.int64) if isinstance(x, int) else np.asarray(x).dtype)
    else:
        shape, dtype = x.shape[1:], x.dtype
    if padding is None:
        return np.zeros(shape_rows + tuple(shape), dtype=dtype)
    return np.full(shape_rows + tuple(shape), padding, dtype=dtype)


class Bins:
    """One batch of ``num_bins`` rows being packed (buffers shaped by its first element)."""

    def __init__(self, first: tuple, caps: tuple, num_bins: int, best_fit: bool,
                 max_segments: int | None, alignment: tuple, padding: tuple):
        self.caps, self.num_bins, self.best_fit = caps, num_bins, best_fit
        self.max_segments, self.alignment = max_segments, alignment
        nf = len(caps)
        self.values = [_buffer((num_bins, caps[f]), first[f], padding[f]) for f in range(nf)]
        self.segments = [np.zeros((num_bins, caps[f]), np.int32) for f in range(nf)]
        self.positions = [np.zeros((num_bins, caps[f]), np.int32) for f in range(nf)]
        self.used = [[0] * num_bins for _ in range(nf)]  # first free cell, per feature and row
        self.count = [0] * num_bins  # elements per row
        self.opened = 0  # rows [0, opened) hold an element; the others are empty
        self.arange = np.arange(max(caps), dtype=np.int32)

    def _row(self, lens: list) -> int | None:
        caps, count, used, maxseg = self.caps, self.count, self.used, self.max_segments
        nf = len(caps)
        if nf == 1 and lens[0] > 0:  # one feature: the same choice, fewer steps
            return self._row1(lens[0])
        # rows past ``opened`` are empty: the first of them stands for all (grain's argmax)
        last = min(self.opened + 1, self.num_bins)
        if not self.best_fit:
            for b in range(last):
                if maxseg is not None and count[b] >= maxseg:
                    continue
                for f in range(nf):
                    if used[f][b] + lens[f] > caps[f]:
                        break
                else:
                    return b
            return None
        best, best_score = None, -1
        for b in range(last):
            extra = maxseg is not None and count[b] >= maxseg  # grain adds the capacity
            for f in range(nf):
                if used[f][b] + lens[f] + (caps[f] if extra else 0) > caps[f]:
                    break
            else:
                score = sum(used[f][b] for f in range(nf))
                if score > best_score:
                    best, best_score = b, score
        return best

    def _row1(self, n: int) -> int | None:
        """:meth:`_row` for one feature and a non-empty element (a full row never fits it)."""
        used, count, maxseg = self.used[0], self.count, self.max_segments
        room = self.caps[0] - n
        last = min(self.opened + 1, self.num_bins)
        if not self.best_fit:
            for b in range(last):
                if used[b] <= room and (maxseg is None or count[b] < maxseg):
                    return b
            return None
        best, best_used = None, -1
        for b in range(last):
            u = used[b]
            if best_used < u <= room and (maxseg is None or count[b] < maxseg):
                best, best_used = b, u
        return best

    def try_add(self, values: tuple, lens: list) -> bool:
        """Put the element in a row; False when no row has room (the batch is complete)."""
        b = self._row(lens)
        if b is None:
            return False
        segment = self.count[b] + 1
        for f, x in enumerate(values):
            start = self.used[f][b]
            end = start + lens[f]
            self.values[f][b, start:end] = x
            self.segments[f][b, start:end] = segment
            self.positions[f][b, start:end] = self.arange[:end - start]
            a = self.alignment[f]
            self.used[f][b] = -(-end // a) * a
        self.count[b] = segment
        if b >= self.opened:
            self.opened = b + 1
        return True

    def rows(self) -> tuple[int, list]:
        """``(n, [values, segment_ids, positions] per feature)`` of the rows that hold data."""
        n = sum(1 for c in self.count if c > 0)
        out = []
        for f in range(len(self.caps)):
            out += [self.values[f][:n], self.segments[f][:n], self.positions[f][:n]]
        return n, out


def shuffled_rows(n: int, seed: int, rows_before: int) -> np.ndarray:
    """grain's order of a batch's rows: ``default_rng(seed + rows emitted before)``."""
    return np.random.default_rng(seed + rows_before).permuted(np.arange(n))


class _Piece:
    """An element of concat-then-split, whole or the rest of a cut one (grain's _CtsElement)."""

    __slots__ = ("state", "features", "slices")

    def __init__(self, state, features: dict, slices: dict):
        self.state, self.features, self.slices = state, features, slices

    def sliced(self, key: str):
        feature = self.features[key]
        sl = self.slices.get(key, EMPTY)
        if sl != EMPTY and (feature.ndim if type(feature) is np.ndarray else np.ndim(feature)):
            start, stop = sl
            return feature[start:stop]
        return feature

    def split(self, points: dict) -> tuple["_Piece | None", "_Piece"]:
        if all(p == 0 for p in points.values()):
            return None, self
        left, right = {}, {}
        for key, p in points.items():
            sl = self.slices[key]
            start, stop = sl if sl != EMPTY else (0, length_of(self.features[key]))
            left[key], right[key] = (start, p), (p, stop)
        return _Piece(self.state, self.features, left), _Piece(self.state, self.features, right)


class ConcatThenSplit:
    """grain's concat-then-split: :meth:`fill` reads elements (``read() -> (state, element)``
    or None) until a row is full and returns the rows it made; ``remainder`` is the element
    whose rest starts the next row."""

    def __init__(self, lengths: dict, meta: frozenset, split_full_length: bool,
                 bos_id: int | None, bos_features: frozenset):
        self.lengths, self.meta, self.split_full_length = lengths, meta, split_full_length
        self.bos_id, self.bos_features = bos_id, bos_features
        self.remainder: _Piece | None = None
        self.arange = np.arange(max(lengths.values()), dtype=np.int32)

    def empty_slices(self) -> dict:
        return {k: EMPTY for k in self.lengths if k not in self.meta}

    def _full_length(self, piece: _Piece) -> bool:
        full = False
        for key, target in self.lengths.items():
            n = length_of(piece.sliced(key))
            if n > target:
                return False
            full = full or n == target
        return full

    def row(self, pieces: list) -> dict:
        out = {}
        for key, length in self.lengths.items():
            is_meta = key in self.meta
            x = np.asarray(pieces[0].features[key])
            values = np.zeros((length,) + x.shape[1:], dtype=x.dtype)
            segments = None if is_meta else np.zeros(length, np.int32)
            positions = None if is_meta else np.zeros(length, np.int32)
            bos = self.bos_id is not None and key in self.bos_features
            end = 0
            for segment, piece in enumerate(pieces, 1):
                seq = piece.sliced(key)
                start, end = end, end + length_of(seq)
                values[start:end] = seq
                if bos and start < length:
                    values[start] = self.bos_id
                if not is_meta:
                    segments[start:end] = segment
                    positions[start:end] = self.arange[:end - start]
            out[key] = values
            if not is_meta:
                out[f"{key}_segment_ids"] = segments
                out[f"{key}_positions"] = positions
        return out

    def _add(self, piece: _Piece, buffer: list, tokens: dict) -> _Piece | None:
        new, points, cut = {}, {}, False
        for key, target in self.lengths.items():
            n = length_of(piece.sliced(key))
            room = target - tokens[key]
            if key in self.meta:
                if n > room:
                    return piece  # meta features are never cut: the element waits
                new[key] = n
            elif n > room:
                cut = True
                sl = piece.slices[key]
                points[key] = (0 if sl == EMPTY else sl[0]) + room
                new[key] = room
            else:
                points[key] = n
                new[key] = n
        rest = None
        if cut:
            piece, rest = piece.split(points)
        if piece is not None:
            buffer.append(piece)
        for key, n in new.items():
            tokens[key] += n
        return rest

    def fill(self, read: Callable[[], Any]) -> tuple[list, bool]:
        """``(rows, ended)``: the rows up to a full one (all the rest when the input ended)."""
        rows: collections.deque = collections.deque()
        buffer: list = []
        tokens = {k: 0 for k in self.lengths}
        ended = False
        while True:
            if self.remainder is not None:
                self.remainder = self._add(self.remainder, buffer, tokens)
                if self.remainder is not None:
                    break
            item = read()
            if item is None:
                ended = True
                break
            state, features = item
            if not isinstance(features, dict) or set(features) != set(self.lengths):
                keys = sorted(features) if isinstance(features, dict) else type(features)
                raise PackingError(f"concat_then_split needs dict elements with exactly the "
                                   f"features {sorted(self.lengths)} (a length for each), got "
                                   f"{keys}")
            piece = _Piece(state, features, self.empty_slices())
            if not self.split_full_length and self._full_length(piece):
                rows.append(self.row([piece]))
                continue
            self.remainder = self._add(piece, buffer, tokens)
            if self.remainder is not None:
                break
        if buffer:
            rows.appendleft(self.row(buffer))
        if ended and self.remainder is not None:
            rows.append(self.row([self.remainder]))
            self.remainder = None
        if not rows and not ended:
            raise PackingError(f"concat_then_split cannot place an element in an empty row: a "
                               f"meta feature is longer than its length {self.lengths}")
        return list(rows), ended


def seqio_rows(elements: list, lengths: dict) -> list:
    """seqio's ``_pack_with_tf_ops`` over one padded batch of (already trimmed) elements: each
    feature's ids up to its count of non-zero ids, int32; 0 stays padding."""
    keys = list(lengths)
    rows: list = []
    partial = {k: ([], []) for k in keys}  # values, positions

    def write():
        row = {}
        for k in keys:
            values = np.zeros(lengths[k], np.int32)
            positions = np.zeros(lengths[k], np.int32)
            values[:len(partial[k][0])] = partial[k][0]
            positions[:len(partial[k][1])] = partial[k][1]
            row[k], row[f"{k}_positions"] = values, positions
            row[f"{k}_segment_ids"] = (np.cumsum(positions == 0, dtype=np.int32)
                                       * (values != 0).astype(np.int32))
            partial[k] = ([], [])
        rows.append(row)

    for element in elements:
        one = {}
        for k in keys:
            v = np.asarray(element[k]).astype(np.int32).reshape(-1)[:lengths[k]]  # the trim
            one[k] = v[:np.count_nonzero(v)].tolist()
        if not all(len(partial[k][0]) + len(one[k]) <= lengths[k] for k in keys):
            write()
        for k in keys:
            seq = one[k][:lengths[k]]
            partial[k][0].extend(seq)
            partial[k][1].extend(range(len(seq)))
    write()
    return rows


__all__ = ["Bins", "ConcatThenSplit", "EMPTY", "length_of", "seqio_rows", "shuffled_rows"]
