"""pack: variable-length sequences into rows of fixed lengths, with segment ids and positions.

>>> from tpudata.dataset import Dataset
>>> from tpudata.text import pack
>>> docs = [{"tokens": np.arange(1, n + 1, dtype=np.int32)} for n in (3, 5, 2, 4)]
>>> ds = Dataset.from_generator(lambda: iter(docs), output_signature={
...     "tokens": TensorSpec((None,), np.dtype(np.int32))})
>>> row = next(iter(pack(ds, {"tokens": 8}, method="first_fit", num_bins=2, shuffle_bins=False)))
>>> row["tokens"].tolist(), row["tokens_segment_ids"].tolist(), row["tokens_positions"].tolist()
([1, 2, 3, 1, 2, 3, 4, 5], [1, 1, 1, 2, 2, 2, 2, 2], [0, 1, 2, 0, 1, 2, 3, 4])

Each feature of ``lengths`` becomes a row of that length plus ``<feature>_segment_ids`` (int32,
1 for the row's first sequence, 0 for padding) and ``<feature>_positions`` (int32, 0 at each
sequence's start); other features are dropped. Methods (see :mod:`tpudata.text.packers`):
``"first_fit"`` and ``"best_fit"`` (grain's FirstFit/BestFitPackIterDataset: ``num_bins`` rows
per batch, rows shuffled with grain's generator unless ``shuffle_bins=False``),
``"concat_then_split"`` (grain's ConcatThenSplitIterDataset) and ``"seqio"`` (seqio's
trim_and_pack_dataset). ``loss_mask="tokens"`` adds ``<feature>_loss_mask`` (float32, 1 on real
tokens); ``"next_token"`` 1 where the next token is in the same sequence (the targets of a
causal LM that does not predict across documents).

State: the input position where the batch being delivered began (plus the rows delivered
before it, which seed grain's shuffle); a restore packs that batch again from there, so the
state stays small whatever ``num_bins``; concat-then-split adds the cut element's slices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tpudata._keywords import strict_keywords

from tpudata.dataset.core.base import BlockIterator, Cursor, Dataset
from tpudata.dataset.core.block import Block, leaf_items
from tpudata.dataset.core.common import _Unary
from tpudata.dataset.core.nest import LEAF, Tree, flatten
from tpudata.dataset.core.spec import TensorSpec, _static
from tpudata.errors import PackingError, StateError
from tpudata.text.position import state_after
from tpudata.text.packers import Bins, ConcatThenSplit, _Piece, length_of, seqio_rows, shuffled_rows

METHODS = ("first_fit", "best_fit", "concat_then_split", "seqio")
LOSS_MASKS = (None, "tokens", "next_token")
READ = 256  # input elements read at a time


def loss_mask(segment_ids: np.ndarray, kind: str = "next_token") -> np.ndarray:
    """float32 mask of packed rows (``[..., length]``): ``"tokens"`` 1 on real tokens;
    ``"next_token"`` 1 where token ``t + 1`` is in the same sequence as token ``t``."""
    seg = np.asarray(segment_ids)
    if kind == "tokens":
        return (seg != 0).astype(np.float32)
    out = np.zeros(seg.shape, np.float32)
    out[..., :-1] = (seg[..., :-1] != 0) & (seg[..., 1:] == seg[..., :-1])
    return out


class _Reader:
    """Input elements one at a time (read ``READ`` at a time), each with the input state
    before it: ``(values per feature, lengths)`` tuples, or whole elements."""

    def __init__(self, it: BlockIterator, features: tuple | None):
        self.cursor = Cursor(it)
        self.features = features
        self.rows: list | None = None
        self.i = 0
        self.state0: dict | None = None

    def state(self) -> dict:
        """The input position of the next element."""
        if self.rows is not None and self.i < len(self.rows):
            return state_after(self.state0, self.i)
        return self.cursor.get_state()

    def last_state(self) -> dict:
        """The input position of the element :meth:`read` returned last."""
        return state_after(self.state0, self.i - 1)

    def read(self):
        if self.rows is None or self.i >= len(self.rows):
            self.state0 = self.cursor.get_state()
            block = self.cursor.next_block(READ)
            if block is None:
                self.rows = None
                return None
            self.rows = self._rows(block)
            self.i = 0
        self.i += 1
        return self.rows[self.i - 1]

    def _rows(self, block: Block) -> list:
        if self.features is None:
            return list(block.elements())
        tree = block.tree
        if tree.kind != "dict" or not set(self.features) <= set(tree.keys):
            raise PackingError(f"pack() needs dict elements with the features "
                               f"{list(self.features)}, got {tree}")
        where, pos = {}, 0
        for key, child in zip(tree.keys, tree.children):
            where[key] = pos
            pos += child.num_leaves
        cols = [list(leaf_items(block.leaves[where[f]])) for f in self.features]
        return [(values, [length_of(x) for x in values]) for values in zip(*cols)]

    def set_state(self, state: dict) -> None:
        self.cursor.set_state(state)
        self.rows = None


class PackDataset(_Unary):
    def __init__(self, input_ds: Dataset, features: tuple, lengths: tuple, method: str,
                 num_bins: int | None, seed: int, shuffle_bins: bool, max_segments: int | None,
                 padding: tuple, alignment: tuple, overflow: str, loss_mask: str | None,
                 meta_features: tuple, split_full_length_features: bool, bos_id: int | None,
                 bos_features: tuple):
        super().__init__(input_ds)
        self.features, self.lengths, self.method = features, lengths, method
        self.num_bins, self.seed, self.shuffle_bins = num_bins, seed, shuffle_bins
        self.max_segments, self.padding, self.alignment = max_segments, padding, alignment
        self.overflow, self.loss_mask = overflow, loss_mask
        self.meta_features, self.split_full_length_features = meta_features, split_full_length_features
        self.bos_id, self.bos_features = bos_id, bos_features

    def _make_iterator(self, ctx):
        it = self.input._make_iterator(ctx)
        if self.method == "concat_then_split":
            return _SplitIterator(self, it)
        if self.method == "seqio":
            return _SeqioIterator(self, it)
        return _BinsIterator(self, it)

    def _spec(self):
        spec = _static(self.input)
        if not isinstance(spec, dict) or not all(f in spec for f in self.features):
            return None
        out = {}
        for f, n in zip(self.features, self.lengths):
            s = spec[f]
            dtype = np.dtype(np.int32) if self.method == "seqio" else s.dtype
            out[f] = TensorSpec((n,) + tuple(s.shape[1:]), dtype)
            if f not in self.meta_features:
                out[f"{f}_segment_ids"] = out[f"{f}_positions"] = TensorSpec((n,), np.dtype(np.int32))
                if self.loss_mask:
                    out[f"{f}_loss_mask"] = TensorSpec((n,), np.dtype(np.float32))
        return out

    def block(self, rows: list) -> Block:
        """A block of packed rows (dicts), with the loss masks asked for."""
        if self.loss_mask:
            for row in rows:
                for f in self.features:
                    if f"{f}_segment_ids" in row:
                        row[f"{f}_loss_mask"] = loss_mask(row[f"{f}_segment_ids"], self.loss_mask)
        first = rows[0]
        keys = tuple(sorted(first))
        if all(type(first[k]) is np.ndarray for k in keys):  # the packers' rows: flat, arrays
            if len(rows) == 1:  # the row's own arrays (fresh, not shared) with a leading axis
                leaves = [first[k][None] for k in keys]
            else:
                leaves = [np.stack([r[k] for r in rows]) for k in keys]
            return Block(Tree("dict", keys, [LEAF] * len(keys)), leaves, len(rows))
        tree, _ = flatten(first)
        return Block.from_elements(tree, [flatten(r)[1] for r in rows])


class _PackIterator(BlockIterator):
    """What the packers' iterators share: the input read through a :class:`_Reader`."""

    def __init__(self, ds: PackDataset, it: BlockIterator, features: tuple | None = None):
        self.ds, self.input_it = ds, it
        self.reader = _Reader(it, features)

    def close(self):
        self.input_it.close()


class _BinsIterator(_PackIterator):
    """First-fit / best-fit: a block per packed batch."""

    def __init__(self, ds: PackDataset, it: BlockIterator):
        super().__init__(ds, it, ds.features)
        self.start = self.reader.state()  # where the next batch begins
        self.rows = 0  # rows delivered before it
        self.seen = 0  # input elements before it
        self.pending = None  # (element, its state): read, placed in no row, starts the next batch

    def _checked(self, item, index: int):
        values, lens = item
        ds = self.ds
        for f, (n, cap) in enumerate(zip(lens, ds.lengths)):
            if n > cap:
                if ds.overflow == "error":
                    raise PackingError(
                        f"element {index} of the packed input has {n} {ds.features[f]!r} "
                        f"values, more than a row's {cap}: tokenize(max_length=..., "
                        "overflow='chunk') splits long documents, pack(overflow='truncate') "
                        "keeps their start (seqio's trim)")
                values = values[:f] + (values[f][:cap],) + values[f + 1:]
                lens = lens[:f] + [cap] + lens[f + 1:]
        return values, lens

    def next(self):
        ds = self.ds
        bins, seen, end = None, self.seen, None
        while True:
            if self.pending is not None:
                (item, _), self.pending = self.pending, None
            else:
                item = self.reader.read()
                if item is None:
                    break
            values, lens = self._checked(item, seen)
            if bins is None:
                bins = Bins(values, ds.lengths, ds.num_bins, ds.method == "best_fit",
                            ds.max_segments, ds.alignment, ds.padding)
            if not bins.try_add(values, lens):
                self.pending = (item, self.reader.last_state())
                end = self.pending[1]
                break
            seen += 1
        if bins is None:
            return None
        n, cols = bins.rows()
        order = shuffled_rows(n, ds.seed, self.rows) if ds.shuffle_bins else None
        self.start = end if end is not None else self.reader.state()
        self.rows += n
        self.seen = seen
        out: dict = {}
        for f, feature in enumerate(ds.features):
            values, segments, positions = cols[3 * f: 3 * f + 3]
            out[feature] = values
            out[f"{feature}_segment_ids"] = segments
            out[f"{feature}_positions"] = positions
            if ds.loss_mask:
                out[f"{feature}_loss_mask"] = loss_mask(segments, ds.loss_mask)
        keys = tuple(sorted(out))
        leaves = [out[k] if order is None else out[k][order] for k in keys]
        return Block(Tree("dict", keys, [LEAF] * len(keys)), leaves, n)

    def get_state(self):
        return {"input": self.start, "rows": self.rows, "seen": self.seen}

    def set_state(self, state):
        self.reader.set_state(state["input"])
        self.start = state["input"]
        self.rows, self.seen = int(state["rows"]), int(state["seen"])
        self.pending = None


class _SplitIterator(_PackIterator):
    """Concat-then-split: a block per fill (the rows up to a full one)."""

    def __init__(self, ds: PackDataset, it: BlockIterator):
        super().__init__(ds, it, None)
        self.cts = self._packer()
        self.ended = False

    def _packer(self) -> ConcatThenSplit:
        ds = self.ds
        return ConcatThenSplit(dict(zip(ds.features, ds.lengths)), frozenset(ds.meta_features),
                               ds.split_full_length_features, ds.bos_id,
                               frozenset(ds.bos_features))

    def _read(self):
        item = self.reader.read()
        return None if item is None else (self.reader.last_state(), item)

    def next(self):
        if self.ended:
            return None
        rows, self.ended = self.cts.fill(self._read)
        return self.ds.block(rows) if rows else None

    def get_state(self):
        rest = self.cts.remainder
        if rest is None:
            return {"input": self.reader.state(), "slices": None}
        return {"input": rest.state, "slices": {k: list(v) for k, v in rest.slices.items()}}

    def set_state(self, state):
        self.reader.set_state(state["input"])
        self.cts = self._packer()
        self.ended = False
        if state["slices"] is not None:
            element = self.reader.read()
            if element is None:
                raise StateError("the packed input ended before the element a concat_then_split "
                                 "state names (did the data change?)")
            slices = {k: tuple(int(x) for x in v) for k, v in state["slices"].items()}
            self.cts.remainder = _Piece(state["input"], element, slices)


class _SeqioIterator(_PackIterator):
    """seqio's trim_and_pack: a block per ``max(lengths)`` input elements."""

    def next(self):
        ds = self.ds
        k = max(ds.lengths)
        elements = []
        while len(elements) < k:
            element = self.reader.read()
            if element is None:
                break
            elements.append(element)
        if not elements:
            return None
        return ds.block(seqio_rows(elements, dict(zip(ds.features, ds.lengths))))

    def get_state(self):
        return {"input": self.reader.state()}

    def set_state(self, state):
        self.reader.set_state(state["input"])


def _specials_upstream(ds: Dataset, feature: str) -> int:
    """BOS + EOS tokens a tokenize op upstream puts in ``feature`` (0 when none is found)."""
    from tpudata.text.tokenize import TokenizeDataset

    for _ in range(256):
        if isinstance(ds, TokenizeDataset) and ds.output == feature and ds.stage != "extract":
            return (ds.bos is not None) + (ds.eos is not None)
        ds = ds.__dict__.get("input")
        if not isinstance(ds, Dataset):
            return 0
    return 0


def _per_feature(value, features: tuple, name: str, default) -> tuple:
    if isinstance(value, Mapping):
        unknown = set(value) - set(features)
        if unknown:
            raise ValueError(f"{name} names features that are not packed: {sorted(unknown)}")
        return tuple(value.get(f, default) for f in features)
    return tuple(default if value is None else value for _ in features)


@strict_keywords
def pack(ds: Dataset, lengths: Mapping[str, int], *, method: str = "best_fit",
         num_bins: int | None = None, seed: int = 0, shuffle_bins: bool = True,
         max_segments: int | None = None, padding=None, alignment=None,
         overflow: str = "error", loss_mask: str | None = None,
         meta_features: Sequence[str] = (), split_full_length_features: bool = True,
         bos_id: int | None = None, bos_features: Sequence[str] = ()) -> Dataset:
    """Pack the dict elements of ``ds`` into rows of ``lengths`` (``{feature: row length}``).

    ``num_bins``: rows per batch of first/best fit (grain's ``num_packing_bins``);
    ``max_segments``: at most that many sequences per row (grain's ``max_sequences_per_bin``);
    ``padding`` and ``alignment``: a value or ``{feature: value}`` (grain's ``padding_struct``,
    ``pack_alignment_struct``); ``overflow="truncate"`` cuts sequences longer than a row
    (seqio's trim) instead of raising :class:`~tpudata.errors.PackingError`. Concat-then-split
    takes grain's ``meta_features``, ``split_full_length_features`` and BOS replacement
    (``bos_id`` written over the first token of each row's sequences of ``bos_features``).
    """
    if not isinstance(ds, Dataset):
        raise TypeError(f"pack() needs a Dataset, got {type(ds).__name__}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, not {method!r}")
    if not isinstance(lengths, Mapping) or not lengths:
        raise PackingError(f"lengths must be {{feature: row length}}, not {lengths!r}")
    features = tuple(lengths)
    sizes = tuple(int(lengths[f]) for f in features)
    for f, n in zip(features, sizes):
        special = _specials_upstream(ds, f)
        if n < special + 1:
            raise PackingError(
                f"a row of {n} {f!r} tokens has no room for a token besides BOS and EOS "
                f"({special} special token(s) from tokenize): give lengths[{f!r}] >= {special + 1}")
    bins = method in ("first_fit", "best_fit")
    if bins and (num_bins is None or int(num_bins) < 1):
        raise ValueError(f"method={method!r} needs num_bins >= 1 (rows packed at a time)")
    if max_segments is not None and int(max_segments) < 1:
        raise ValueError(f"max_segments must be a positive integer, not {max_segments}")
    if overflow not in ("error", "truncate"):
        raise ValueError(f"overflow must be 'error' or 'truncate', not {overflow!r}")
    if loss_mask not in LOSS_MASKS:
        raise ValueError(f"loss_mask must be one of {LOSS_MASKS}, not {loss_mask!r}")
    if method != "concat_then_split" and (meta_features or bos_id is not None or bos_features):
        raise ValueError("meta_features, bos_id and bos_features are concat_then_split's")
    if bool(bos_features) != (bos_id is not None):
        raise ValueError("BOS replacement needs both bos_id and bos_features")
    if set(meta_features) & set(bos_features) or not set(meta_features) <= set(features):
        raise ValueError("meta_features must be packed features, none of them in bos_features")
    aligned = tuple(int(a) for a in _per_feature(alignment, features, "alignment", 1))
    return PackDataset(ds, features, sizes, method, None if num_bins is None else int(num_bins),
                       int(seed), bool(shuffle_bins), None if max_segments is None else
                       int(max_segments), _per_feature(padding, features, "padding", None),
                       aligned, overflow, loss_mask, tuple(meta_features),
                       bool(split_full_length_features), bos_id, tuple(bos_features))


__all__ = ["LOSS_MASKS", "METHODS", "PackDataset", "loss_mask", "pack"]
