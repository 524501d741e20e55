"""Cutting a pipeline into fixed splits for ``ds.distribute(...)``: what one worker task runs.

The pipeline before ``distribute`` is a chain of ops over one source. Its *split source* is cut
into splits of ``split_size`` elements: files (a file list from ``list_files`` or a list of
names; ``TFRecordDataset`` / ``TextLineDataset`` / ``FixedLengthRecordDataset`` files), or rows
(``Dataset.range``, ``from_tensor_slices``). A ``shuffle`` / ``shard`` / ``take`` / ``skip``
directly on a file list or array source belongs to the split source: the consumer runs that
part itself (a file list is small) with the iteration's seeds, so a seeded ``list_files`` shuffle
orders the files as the local pipeline does. Every op above the split source runs on the
workers, once per split, over that split's part of the source only.

A split's output therefore depends only on the split (its files or rows) and the pipeline's
seeds. Ops that combine elements (``batch``, ``shuffle``, ``interleave`` with
``cycle_length > 1``) combine them within a split; ``repeat``, ``take``, ``skip`` and ``shard``
above the split source would act per split, so :func:`cut` refuses them (saying where to put
them), and a source it cannot cut (``zip``, generators).

>>> from tpudata.dataset import Dataset
>>> plan = Plan.of(cut(Dataset.range(10).map(abs)), split_size=4)
>>> plan.num_splits, [int(x) for x in plan.part(2).iterator()]
(3, [8, 9])
"""

from __future__ import annotations

import math

from tpudata.dataset.core.base import Dataset
from tpudata.dataset.core.block import Block
from tpudata.dataset.core.iterator import Cursor, IterContext
from tpudata.dataset.core.graph import inputs, replaced
from tpudata.dataset.ops.repeat import RepeatDataset
from tpudata.dataset.ops.shard import ShardDataset
from tpudata.dataset.ops.shuffle import ShuffleDataset
from tpudata.dataset.ops.take import SkipDataset, TakeDataset
from tpudata.dataset.sources.files import (
    FileListDataset, RangeDataset, TensorSlicesDataset, _ArrayIterator, _RecordFilesDataset,
    _TFRecordFiles,
)

__all__ = ["BlockSource", "Cut", "MAX_LISTED", "OffsetRecords", "Plan", "SplitSource", "cut",
           "instantiate"]

LIST_OPS = (ShuffleDataset, ShardDataset, TakeDataset, SkipDataset)
MAX_LISTED = 1 << 22  # rows of a split source the consumer lists itself (a file list: a few)
DEFAULT_ROWS = 1024  # split_size of a range / from_tensor_slices source


class SplitSource(Dataset):
    """Where a split's part of the source goes in the template sent to the workers."""

    def _make_iterator(self, ctx):
        raise RuntimeError("a distribute() template runs only with its split's source in place")


class BlockSource(Dataset):
    """A split's rows of a listed source (one :class:`Block`), element by element."""

    def __init__(self, block: Block):
        super().__init__()
        self.block = Block(block.tree, block.leaves, block.n)

    def _make_iterator(self, ctx):
        return _ArrayIterator(self.block.slice, self.block.n)

    def cardinality(self) -> int:
        return self.block.n


class OffsetRecords(Dataset):
    """Record files read from byte ``offset`` of the first (a record range's start)."""

    def __init__(self, files: Dataset, offset: int):
        super().__init__()
        self.files, self.offset = files, int(offset)

    def _make_iterator(self, ctx):
        it = self.files._make_iterator(ctx)
        it.set_state({"file": 0, "offset": self.offset})
        return it


def _input_key(node: Dataset, child: Dataset) -> str:
    for key, value in node.__dict__.items():
        if value is child:
            return key
    raise RuntimeError(f"{type(node).__name__} holds its input in no attribute")  # pragma: no cover


def _op(node: Dataset) -> str:
    return node._describe()


class Cut:
    """A pipeline cut above its split source: ``ops`` (top first) run per split on workers."""

    def __init__(self, ops: list, keys: list, source: Dataset, listed: bool):
        self.ops, self.keys, self.source, self.listed = ops, keys, source, listed

    def template(self) -> Dataset:
        """The per-split ops over a :class:`SplitSource` (what is pickled for the workers)."""
        return _rebuild(self.ops, self.keys, SplitSource())

    @property
    def base(self) -> Dataset:
        """The bottom source (a file list, record files, a range or tensor slices)."""
        node = self.source
        while isinstance(node, LIST_OPS):
            node = node.input
        return node


def _rebuild(ops: list, keys: list, child: Dataset) -> Dataset:
    for node, key in zip(reversed(ops), reversed(keys)):
        child = replaced(node, **{key: child})  # a copy: the template stays as it was
    return child


def cut(ds: Dataset) -> Cut:
    """Find ``ds``'s split source; raise ``ValueError`` saying why when it has none."""
    chain, keys = [ds], []
    while True:
        kids = inputs(chain[-1])
        if not kids:
            break
        if len(kids) > 1:
            raise ValueError(
                f"distribute() cuts a chain of ops over one source into splits, but "
                f"{_op(chain[-1])} reads {len(kids)} datasets: apply it after distribute(), or "
                f"distribute each input on its own")
        keys.append(_input_key(chain[-1], kids[0]))
        chain.append(kids[0])
    base = len(chain) - 1
    root = chain[base]
    if isinstance(root, _RecordFilesDataset):
        top = base
    elif isinstance(root, (TensorSlicesDataset, RangeDataset)):
        top = base
        while top > 0 and isinstance(chain[top - 1], LIST_OPS):
            top -= 1
    else:
        raise ValueError(
            f"distribute() cuts the pipeline's source into splits, but {_op(root)} cannot be "
            f"cut: it needs a file list (list_files or names), TFRecord/text/fixed-length record "
            f"files, Dataset.range or from_tensor_slices as the source")
    ops = chain[:top]
    for node in ops:
        if isinstance(node, RepeatDataset):
            raise ValueError(f"{_op(node)} before distribute() would repeat every split on its "
                             f"own: put repeat() after distribute()")
        if isinstance(node, (TakeDataset, SkipDataset, ShardDataset)):
            raise ValueError(
                f"{_op(node)} before distribute() would act within every split (the ops before "
                f"distribute() run per split): put it after distribute(), or on the file list "
                f"(list_files(...).shard(n, i)); distribute(num_consumers=n, consumer_index=i) "
                f"shares the splits among trainers")
    return Cut(ops, keys[:top], chain[top], listed=top < base)


def _listed(source: Dataset, ctx: IterContext) -> Block | None:
    """Every element of a split source with list ops, listed here with the iteration's seeds."""
    cursor = Cursor(source._make_iterator(ctx))
    blocks, n = [], 0
    while True:
        block = cursor.next_block(MAX_LISTED)
        if block is None:
            break
        blocks.append(block)
        n += block.n
        if n > MAX_LISTED:
            raise ValueError(f"distribute(): the split source {_op(source)} has more than "
                             f"{MAX_LISTED} elements to list; shuffle after the split source")
    if not blocks:
        return None
    return Block.concat(blocks).compact()


class Plan:
    """The splits of one epoch: :meth:`part` is split ``k``'s source, :meth:`where` names it."""

    def __init__(self, source: Dataset, n: int, split_size: int, kind: str, block=None):
        self.source, self.n, self.split_size, self.kind, self.block = source, n, split_size, kind, block
        self.num_splits = math.ceil(n / split_size) if n else 0

    @classmethod
    def of(cls, c: Cut, split_size: int | None = None, ctx: IterContext | None = None,
           split: str = "files", sources: dict | None = None) -> "Plan":
        base = c.base
        if split == "records":
            return cls._records(c, split_size, sources if sources is not None else {})
        files = isinstance(base, (_RecordFilesDataset, FileListDataset))
        size = int(split_size) if split_size is not None else (1 if files else DEFAULT_ROWS)
        if size < 1:
            raise ValueError(f"split_size must be >= 1, not {split_size}")
        if c.listed:
            ctx = ctx if ctx is not None else IterContext((0,), in_background=True)
            block = _listed(c.source, ctx)
            return cls(c.source, 0 if block is None else block.n, size, "rows", block)
        if isinstance(base, _RecordFilesDataset):
            return cls(base, len(base.files), size, "files")
        if isinstance(base, RangeDataset):
            return cls(base, base.n, size, "range")
        return cls(base, base.n, size, "rows",
                   Block(base.tree, base.cols, base.n))

    @classmethod
    def _records(cls, c: Cut, split_size: int | None, sources: dict) -> "Plan":
        """Splits of ``split_size`` records over the concatenated TFRecord files (a split may
        span files), from the files' indexes (``{file}.idx``, else one scan here per process)."""
        base = c.base
        if not isinstance(base, _TFRecordFiles) or c.listed:
            raise ValueError(f"distribute(split='records') cuts TFRecordDataset files, not "
                             f"{_op(c.source)}: use split='files' (the default)")
        from tpudata.source import TFRecordSource

        key = tuple(base.files)
        if key not in sources:
            sources[key] = TFRecordSource(list(base.files), progress=False,
                                          storage_options=base.storage_options)
        plan = cls(base, len(sources[key]), DEFAULT_ROWS if split_size is None else
                   int(split_size), "records")
        plan.records = sources[key]
        return plan

    def _span(self, k: int) -> tuple:
        """``(first file, last file, byte offset in the first, records)`` of record split k."""
        a, b = self.bounds(k)
        (fa, fb), (ra, _) = self.records.locate([a, b - 1])
        return int(fa), int(fb), int(self.records.index_of(int(fa))[ra, 0]), b - a

    def bounds(self, k: int) -> tuple[int, int]:
        if not 0 <= k < self.num_splits:
            raise IndexError(f"split {k} of {self.num_splits}")
        return k * self.split_size, min(self.n, (k + 1) * self.split_size)

    def part(self, k: int) -> Dataset:
        """Split ``k``'s part of the source: a small, picklable Dataset."""
        a, b = self.bounds(k)
        if self.kind == "records":
            fa, fb, offset, n = self._span(k)
            return TakeDataset(OffsetRecords(self._with_files(self.source.files[fa:fb + 1]),
                                             offset), n)
        if self.kind == "files":
            return self._with_files(self.source.files[a:b])
        if self.kind == "range":
            s = self.source
            return RangeDataset(s.start + a * s.step, s.start + b * s.step, s.step, dtype=s.dtype)
        return BlockSource(self.block.slice(a, b))

    def _with_files(self, files: list) -> Dataset:
        """A copy of the record-files source reading ``files``."""
        changes = {"files": list(files)}
        if "_count" in self.source.__dict__:
            changes["_count"] = None
        return replaced(self.source, **changes)

    def files(self, k: int) -> list[str]:
        """The files of split ``k`` (empty where the source is not files)."""
        a, b = self.bounds(k)
        if self.kind == "files":
            return list(self.source.files[a:b])
        if self.kind == "records":
            fa, fb, _, _ = self._span(k)
            return list(self.source.files[fa:fb + 1])
        if self.kind == "rows" and self.block is not None and self.block.tree.kind == "leaf":
            out = []
            for v in self.block.slice(a, b).elements():
                if isinstance(v, bytes):
                    out.append(v.decode("utf-8", "replace"))
            return out
        return []

    def where(self, k: int) -> str:
        """Split ``k`` in words (for errors)."""
        a, b = self.bounds(k)
        files = self.files(k)
        if self.kind == "records":
            return f"split {k} (records {a}..{b - 1}, from {files[0]})"
        if files:
            shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
            return f"split {k} (file{'s' if len(files) > 1 else ''} {shown})"
        return f"split {k} (elements {a}..{b - 1} of {_op(self.source)})"


def instantiate(template: Dataset, part: Dataset) -> Dataset:
    """``template`` with its :class:`SplitSource` replaced by ``part`` (copies; the template is
    shared by the splits a worker runs)."""
    ops, keys, node = [], [], template
    while not isinstance(node, SplitSource):
        (child,) = inputs(node)
        ops.append(node)
        keys.append(_input_key(node, child))
        node = child
    return _rebuild(ops, keys, part)
