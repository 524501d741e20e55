"""tokenize: text -> token ids, a block of documents per tokenizer call.

>>> from tpudata.dataset import Dataset
>>> from tpudata.text import tokenize
>>> def chars(texts):  # any function texts -> token id lists is a tokenizer
...     return [[ord(c) for c in t] for t in texts]
>>> ds = tokenize(Dataset.from_tensor_slices([b"hello", b"hi"]), chars, add_eos=0, max_length=4)
>>> [e["tokens"].tolist() for e in ds]
[[104, 101, 108, 0], [108, 111, 0], [104, 105, 0]]

Documents come in blocks (``block_docs`` at a time) and each block is one ``encode_batch``
call: Hugging Face ``tokenizers`` and SentencePiece release the GIL inside it, so reading,
packing and the consumer go on in other threads meanwhile (``num_parallel_calls=N`` encodes N
blocks at once). A tokenizer that holds the GIL (a Python function) runs with
``use_processes=True`` in worker processes through the process map instead; text is checked and
taken out of the records in the main process either way, so errors name the file and record.

``max_length`` bounds each output sequence, BOS and EOS included: ``overflow="chunk"``
(TokenizeAndChunk, the default) splits a longer document into pieces, each with its own BOS and
EOS; ``"truncate"`` (TokenizeAndTrim) keeps the first tokens (and BOS/EOS); ``"error"`` raises.
State: the input position of the next block to tokenize (plus a document count for messages).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from tpudata._keywords import strict_keywords

from tpudata.dataset.core.base import BlockIterator, Cursor, Dataset
from tpudata.dataset.core.block import Block
from tpudata.dataset.core.common import _BlockMapIterator, _Unary
from tpudata.dataset.core.nest import LEAF, Tree
from tpudata.dataset.core.options import worker_count
from tpudata.dataset.core.spec import TensorSpec, _static
from tpudata.errors import PackingError, TokenizerError
from tpudata.text.extract import RECORD_KINDS, extract, leaf_column, where
from tpudata.text.tokenizer import Tokenizer, load_tokenizer

OVERFLOW = ("chunk", "truncate", "error")
BLOCK_DOCS = 512  # documents per encode_batch call


class TokenizeDataset(_Unary):
    """One stage of :func:`tokenize`: ``"all"`` (text -> ids in this process), ``"extract"``
    (text checked, for a process map to encode) or ``"shape"`` (ids -> BOS/EOS, trim, chunk)."""

    def __init__(self, input_ds: Dataset, tokenizer: Tokenizer, stage: str, feature: str | None,
                 output: str, record: str | None, join: bytes, bos: int | None,
                 eos: int | None, max_length: int | None, overflow: str, skip_invalid: bool,
                 threads: int, block_docs: int):
        super().__init__(input_ds)
        self.tokenizer = tokenizer
        self.stage, self.feature, self.output, self.record = stage, feature, output, record
        self.join, self.bos, self.eos = join, bos, eos
        self.max_length, self.overflow, self.skip_invalid = max_length, overflow, skip_invalid
        self.threads, self.block_docs = threads, block_docs
        self.backend = tokenizer.backend

    def _make_iterator(self, ctx):
        return _TokenizeIterator(self, self.input._make_iterator(ctx))

    def cardinality(self):
        c = self.input.cardinality()
        chunks = self.overflow == "chunk" and self.max_length is not None and self.stage != "extract"
        return c if c < 0 or not (chunks or self.skip_invalid) else -2  # -2: UNKNOWN

    def _spec(self):
        spec = _static(self.input)
        ids = TensorSpec((None,), np.dtype(np.int32)) if self.stage != "extract" else \
            TensorSpec((), np.dtype(object))
        if self.record is not None or (spec is not None and not isinstance(spec, dict)):
            return {self.output: ids}
        if spec is None:
            return None
        out = {k: v for k, v in spec.items() if k != self.feature}
        out[self.output] = ids
        return out

    # -- the work on one block -------------------------------------------------------------------
    def process(self, block: Block, start: int) -> Block | None:
        if self.stage == "shape":
            col = leaf_column(block, self.output)
            return self._shaped(block, _items(col), start, self.output)
        texts, block, _ = extract(block, self.feature, self.record, self.join, start,
                                  self.skip_invalid)
        key = self.feature if block.tree.kind == "dict" else None
        if self.stage == "extract":
            col = np.empty(len(texts), dtype=object)
            col[:] = [t.encode("utf-8") for t in texts]
            return _replaced(block, key, self.output, col)
        ids = self.tokenizer.encode_ids(texts) if texts else []
        return self._shaped(block, ids, start, key)

    def _shaped(self, block: Block, ids: list, start: int, key: str | None) -> Block | None:
        column, reps = shaped_column(ids, self.bos, self.eos, self.max_length, self.overflow,
                                     lambda r: where(None, r, start + r))
        if not len(column):
            return None
        if reps is not None:
            block = block.take(np.repeat(np.arange(block.n), reps))
        return _replaced(block, key, self.output, column)


def _too_long(ids: list, room: int, max_length: int, named) -> None:
    for r, x in enumerate(ids):
        if len(x) > room:
            where_ = named(r)[1] if named else f"document {r}"
            raise PackingError(
                f"{where_} has {len(x)} tokens: more than max_length={max_length} holds with "
                f"BOS/EOS; overflow='chunk' splits it, 'truncate' keeps its start")


def shaped_column(ids: list, bos: int | None, eos: int | None, max_length: int | None,
                  overflow: str, named=None) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`shape_ids` then :func:`pieces_column` in one pass (the same column and counts,
    except None for the counts when every document gave one sequence): int32 arrays are joined
    with ``np.concatenate`` and lists into one list, never an element at a time."""
    pre = [] if bos is None else [bos]
    post = [] if eos is None else [eos]
    room = None if max_length is None else max_length - len(pre) - len(post)
    if room is not None and overflow == "error":
        _too_long(ids, room, max_length, named)
        room = None
    chunk = room is not None and overflow == "chunk"
    reps = None
    if chunk and any(len(x) > room for x in ids):
        reps = np.fromiter((max(1, -(-len(x) // room)) for x in ids), np.int64, len(ids))
    arrays = all(type(x) is np.ndarray and x.dtype == np.int32 and x.ndim == 1 for x in ids)
    lengths: list = []
    if arrays:
        parts: list = []
        head, tail = np.asarray(pre, np.int32), np.asarray(post, np.int32)
        for x in ids:
            n = len(x)
            if room is None or n <= room:
                parts += (head, x, tail)
                lengths.append(n)
            elif not chunk:
                parts += (head, x[:room], tail)
                lengths.append(room)
            else:
                for i in range(0, n, room):
                    parts += (head, x[i:i + room], tail)
                    lengths.append(min(room, n - i))
        flat = np.concatenate(parts) if parts else np.empty(0, np.int32)
    else:
        values: list = []
        for x in ids:
            if isinstance(x, np.ndarray):
                x = x.tolist()
            n = len(x)
            if room is None or n <= room:
                values += pre
                values += x
                values += post
                lengths.append(n)
            elif not chunk:
                values += pre
                values += x[:room]
                values += post
                lengths.append(room)
            else:
                for i in range(0, n, room):
                    values += pre
                    values += x[i:i + room]
                    values += post
                    lengths.append(min(room, n - i))
        flat = np.fromiter(values, np.int32, len(values))
    extra = len(pre) + len(post)
    ends = np.cumsum(np.asarray(lengths, np.int64) + extra).tolist()
    col = np.empty(len(lengths), dtype=object)
    col[:] = [flat[a:b] for a, b in zip([0] + ends[:-1], ends)]
    return col, reps


def shape_ids(ids: list, bos: int | None, eos: int | None, max_length: int | None,
              overflow: str, named=None) -> tuple[list, np.ndarray | None]:
    """The sequences of each document's ids with BOS/EOS, within ``max_length``; and how many
    sequences each document gave (None: one each)."""
    pre = [] if bos is None else [bos]
    post = [] if eos is None else [eos]
    if max_length is None:
        return ([pre + list(x) + post for x in ids] if pre or post else list(ids)), None
    room = max_length - len(pre) - len(post)
    if overflow == "truncate":
        return [pre + list(x[:room]) + post for x in ids], None
    if overflow == "error":
        _too_long(ids, room, max_length, named)
        return [pre + list(x) + post for x in ids], None
    out, reps = [], np.empty(len(ids), dtype=np.int64)
    for r, x in enumerate(ids):
        n = len(x)
        if n <= room:
            out.append(pre + list(x) + post)
            reps[r] = 1
            continue
        for i in range(0, n, room):
            out.append(pre + list(x[i:i + room]) + post)
        reps[r] = -(-n // room)
    return out, reps


def pieces_column(pieces: list) -> np.ndarray:
    """An object column of int32 arrays, views into one flat array."""
    lengths = np.fromiter((len(p) for p in pieces), np.int64, len(pieces))
    flat = np.fromiter(itertools.chain.from_iterable(pieces), np.int32, int(lengths.sum()))
    ends = np.cumsum(lengths).tolist()
    col = np.empty(len(pieces), dtype=object)
    col[:] = [flat[a:b] for a, b in zip([0] + ends[:-1], ends)]
    return col


def _items(col) -> list:
    from tpudata.dataset.core.block import leaf_items

    return list(leaf_items(col))


def _replaced(block: Block, key: str | None, output: str, column) -> Block:
    """``block`` with the entry ``key`` (the whole element when None) replaced by ``output``."""
    entries: dict[str, tuple[Tree, list]] = {}
    if key is not None:
        pos = 0
        for k, child in zip(block.tree.keys, block.tree.children):
            if k != key:
                entries[k] = (child, block.leaves[pos:pos + child.num_leaves])
            pos += child.num_leaves
    entries[output] = (LEAF, [column])
    keys = tuple(sorted(entries))
    tree = Tree("dict", keys, [entries[k][0] for k in keys])
    return Block(tree, [leaf for k in keys for leaf in entries[k][1]], len(column))


class _TokenizeIterator(_BlockMapIterator):
    """Blocks of ``block_docs`` documents, processed in order (on ``threads`` threads, each
    block one task). State: the input position of the oldest block not yet returned, and the
    documents before it (they number documents in errors)."""

    def __init__(self, ds: TokenizeDataset, input_it: BlockIterator):
        super().__init__(input_it, lambda item: ds.process(*item), ds.threads)
        self.ds = ds
        self.cursor = Cursor(input_it)
        self.seen = 0

    def _submit(self) -> bool:
        before = {"cursor": self.cursor.get_state(), "seen": self.seen}
        block = self.cursor.next_block(self.ds.block_docs)
        if block is None:
            return False
        item = (block, self.seen)
        self.seen += block.n
        fut = self.pool.submit(self.fn, item) if self.pool else None
        self.pending.append((before, fut, item))
        return True

    def get_state(self):
        if self.pending:
            return self.pending[0][0]
        return {"cursor": self.cursor.get_state(), "seen": self.seen}

    def set_state(self, state):
        self._drain()
        self.cursor.set_state(state["cursor"])
        self.seen = int(state["seen"])


class _EncodeOne:
    """The process map's function: one checked document -> its token ids."""

    def __init__(self, tokenizer: Tokenizer, key: str):
        self.tokenizer, self.key = tokenizer, key

    def __call__(self, element: dict) -> dict:
        out = dict(element)
        ids = self.tokenizer.encode_ids([element[self.key].decode("utf-8")])[0]
        out[self.key] = np.asarray(ids, dtype=np.int32)
        return out


@strict_keywords
def tokenize(ds: Dataset, tokenizer: Any, *, feature: str | None = None,
             output: str | None = None, record: str | None = None, join: bytes | str = b"\n",
             add_bos: int | str | bool | None = None, add_eos: int | str | bool | None = None,
             max_length: int | None = None, overflow: str = "chunk",
             skip_invalid: bool = False, num_parallel_calls: int | None = None,
             use_processes: bool = False, block_docs: int = BLOCK_DOCS,
             storage_options: dict | None = None) -> Dataset:
    """Token ids (int32) of each document of ``ds``.

    Elements are text (bytes or str: ``TextLineDataset``, :func:`JsonLinesDataset` with one
    field), dicts holding text under ``feature`` (the other entries are kept), or serialized
    records with ``record="example"`` / ``"sequence_example"`` whose bytes ``feature`` holds
    the text (a feature list's steps are joined with ``join``). The output is a dict with the
    ids under ``output`` (default: ``feature``, else ``"tokens"``).

    ``tokenizer``: see :func:`~tpudata.text.load_tokenizer`. ``add_bos`` / ``add_eos``: an id,
    a token string, or True for the tokenizer's own. ``max_length`` and ``overflow``: see the
    module doc. ``skip_invalid=True`` drops (and logs) documents that are not UTF-8 instead of
    raising :class:`~tpudata.errors.InvalidTextError`.
    """
    if not isinstance(ds, Dataset):
        raise TypeError(f"tokenize() needs a Dataset, got {type(ds).__name__}")
    tok = load_tokenizer(tokenizer, storage_options=storage_options)
    if record not in RECORD_KINDS:
        raise ValueError(f"record must be one of {RECORD_KINDS}, not {record!r}")
    if record is not None and not feature:
        raise ValueError(f"tokenize(record={record!r}) needs the bytes feature: feature='text'")
    if overflow not in OVERFLOW:
        raise ValueError(f"overflow must be one of {OVERFLOW}, not {overflow!r}")
    bos, eos = tok.resolve(add_bos, "bos"), tok.resolve(add_eos, "eos")
    special = (bos is not None) + (eos is not None)
    if max_length is not None and int(max_length) < special + 1:
        raise TokenizerError(
            f"max_length={max_length} leaves no room for a token besides BOS and EOS "
            f"({special} special token(s)): give max_length >= {special + 1}")
    out = output or feature or "tokens"
    join = join.encode("utf-8") if isinstance(join, str) else bytes(join)
    args = dict(feature=feature, record=record, join=join, bos=bos, eos=eos,
                max_length=None if max_length is None else int(max_length), overflow=overflow,
                skip_invalid=bool(skip_invalid), block_docs=int(block_docs))
    if not use_processes:
        threads = worker_count(num_parallel_calls)
        return TokenizeDataset(ds, tok, "all", output=out, threads=threads, **args)
    texts = TokenizeDataset(ds, tok, "extract", output=out, threads=0, **args)
    spec = texts._spec()
    signature = None if spec is None else {**spec, out: TensorSpec((None,), np.dtype(np.int32))}
    ids = texts.map(_EncodeOne(tok, out), num_parallel_calls, use_processes=True,
                    output_signature=signature)
    args.update(feature=out, record=None, skip_invalid=False)
    return TokenizeDataset(ids, tok, "shape", output=out, threads=0, **args)


__all__ = ["OVERFLOW", "TokenizeDataset", "pieces_column", "shape_ids", "shaped_column",
           "tokenize"]
