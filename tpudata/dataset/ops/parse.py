"""parse: serialized tf.train.Examples -> feature dicts, batch-level wherever it sits.

Before ``batch`` each element becomes ``{name: value}``; after ``batch`` each batch is parsed
whole (``tf.io.parse_example``). Either way the parser sees whole blocks of records, straight
from the read buffers, on ``num_parallel_calls`` threads (in input order).
"""

from __future__ import annotations

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import Dataset
from tpudata.dataset.core.block import Block, RecordColumn
from tpudata.dataset.core.columns import BytesColumn
from tpudata.dataset.core.common import PartialBlock, _BlockMapIterator, _Unary
from tpudata.dataset.core.options import worker_count
from tpudata.dataset.core.nest import flatten
from tpudata.errors import InvalidExampleError, SpecError
from tpudata.example.features import FixedLenSequenceFeature, RaggedFeature
from tpudata.example.parse import parse_prepared, prepare_spec
from tpudata.example.spec import FixedLenFeature, VarLenFeature, normalize_spec
from tpudata.tfrecord.batch import MultiBatch, RecordBatch


def _records_leaf(block: Block):
    if block.tree.kind != "leaf":
        raise TypeError(
            f"parse() needs serialized tf.train.Example records as elements, got {block.tree}; "
            "parse before building tuples/dicts")
    return block.leaves[0]


def _parse_column(col, spec: dict, base_row: int, views: bool = False) -> dict:
    """Parse a column of records (RecordColumn or array of bytes) into per-record features;
    ``views``: a large scalar bytes feature becomes a zero-copy :class:`BytesColumn`."""
    if not isinstance(col, RecordColumn):
        if len(col) and not isinstance(col.ravel()[0], (bytes, bytearray, memoryview)):
            raise TypeError(f"parse() needs bytes elements, got {type(col.ravel()[0]).__name__}")
        col = RecordColumn.from_bytes(list(col))
    # one pass over the column, however many read buffers its records sit in (a MultiBatch)
    parsed = parse_prepared(col.as_batch(), prepare_spec(spec), base_row, views)
    # a large bytes feature stays in the read buffers: a zero-copy column (see BytesColumn)
    return {k: BytesColumn.from_batch(v) if isinstance(v, (RecordBatch, MultiBatch)) else v
            for k, v in parsed.items()}


def _slice(col, i: int, j: int):
    return col.slice(i, j) if isinstance(col, RecordColumn) else col[i:j]


def _index_in_file(path: str, offset: int) -> int | None:
    """How many records come before the frame at ``offset`` in ``path`` (a scan; error path)."""
    from tpudata.tfrecord.reader import TFRecordFileReader

    try:
        count = 0
        reader = TFRecordFileReader(path, verify=False)
        try:
            for batch in reader:
                offs = batch.record_offsets
                count += int(np.searchsorted(offs, offset))
                if len(offs) and offs[-1] >= offset:
                    return count
        finally:
            reader.close()
    except Exception:  # the file cannot be scanned: the offset alone names the record
        return None
    return None


def _locate(col, spec) -> tuple[int, Exception]:
    """The first record of ``col`` that does not parse, and an error naming where it is."""
    lo, hi = 0, len(col)  # a prefix of lo records parses, one of hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            _parse_column(_slice(col, 0, mid), spec, 0)
            lo = mid
        except (SpecError, InvalidExampleError):
            hi = mid
    bad = hi - 1
    try:
        _parse_column(_slice(col, bad, bad + 1), spec, 0)
        return bad, InvalidExampleError(f"record {bad} of the block does not parse")
    except (SpecError, InvalidExampleError) as exc:
        detail = exc
    path = offset = index = None
    if isinstance(col, RecordColumn):
        batch = _slice(col, bad, bad + 1).as_batch()
        if isinstance(batch, MultiBatch):
            batch = batch.record(0)
        if batch.path is not None and batch.framed:
            path, offset = batch.path, int(batch.record_offsets[0])
            index = _index_in_file(path, offset)
    message = str(detail).replace("record 0 ", "the record ", 1)
    if path is not None:
        message = message.replace(f" ({path} at offset {offset})", "")
        where = f"record {index} of the file" if index is not None else "a record"
        message = f"{path}: {where} (byte offset {offset}): {message}"
    error = type(detail)(message)
    error.path, error.offset, error.record_index = path, offset, index
    return bad, error


class ParseDataset(_Unary):
    """``views``: a scalar bytes feature that is most of each record (an image) stays in the read
    buffers (a :class:`BytesColumn`, zero-copy into batch-level ops, and into a shuffle's
    store)."""

    # the origin its rows carry: "parsed" (a shuffle over them names them by record and needs
    # this parse to rebuild them); "records" where a rewrite moved it under a shuffle written
    # after it, so that the shuffle's checkpoints are those of the graph as written
    _origin_kind = "parsed"
    # a checkpoint describes shuffle(n).parse(spec) and parse(spec).shuffle(n) alike: their
    # elements and states are the same (see tpudata.dataset.core.fingerprint)
    _describe_under = ("shuffle",)

    def __init__(self, input_ds, features, num_parallel_calls=None, views: bool = True):
        super().__init__(input_ds)
        self.spec = normalize_spec(features)
        self.threads = worker_count(num_parallel_calls)
        self.views = bool(views)
        self.tree, _ = flatten({k: 0 for k in self.spec})

    def _parse_block(self, block: Block) -> Block:
        """Parse a block whole; at a malformed record, deliver the rows before it (PartialBlock)
        and then raise an error naming the file, the record's index in it and its offset."""
        col = _records_leaf(block)
        bytes_like = (bytes, bytearray, memoryview)
        if isinstance(col, RecordColumn) or (
            isinstance(col, np.ndarray) and col.dtype == object and col.ndim == 1
            and (not len(col) or isinstance(col[0], bytes_like))
        ):
            self._check_per_record()
            try:
                parsed = _parse_column(col, self.spec, 0, self.views)
            except (SpecError, InvalidExampleError):
                bad, error = _locate(col, self.spec)
                if not bad:
                    raise error from None
                raise PartialBlock(self._parse_block(block.slice(0, bad)), error) from None
            origin = None if block.origin is None else block.origin.with_kind(self._origin_kind)
            return Block(self.tree, [parsed[k] for k in self.tree.keys], block.n, origin)
        if not (isinstance(col, np.ndarray) and col.dtype == object):
            raise TypeError(
                f"parse() needs serialized tf.train.Example records (bytes) as elements, not "
                f"{getattr(col, 'dtype', type(col).__name__)} values")
        # elements are batches of records: parse each batch whole
        rows = []
        for element in (col[i] for i in range(len(col))):
            records = element if isinstance(element, RecordColumn) else np.asarray(element)
            try:
                parsed = _parse_column(records, self.spec, 0, self.views)
            except (SpecError, InvalidExampleError):
                _, error = _locate(records, self.spec)
                if not rows:
                    raise error from None
                raise PartialBlock(Block.from_elements(self.tree, rows), error) from None
            rows.append([parsed[k] for k in self.tree.keys])
        return Block.from_elements(self.tree, rows)

    def _check_per_record(self) -> None:
        """Structured features (SparseFeature, FixedLenSequenceFeature, RaggedFeature with
        partitions) give batch-level values (padded to the batch's longest record, a sparse
        tensor with a batch dimension): parse them after ``batch``, as tf.io.parse_example."""
        for name, feat in self.spec.items():
            if isinstance(feat, (FixedLenFeature, VarLenFeature)):
                continue
            if isinstance(feat, RaggedFeature) and not feat.partitions:
                continue  # one ragged row per record, like VarLenFeature
            raise SpecError(
                f"parse(): feature {name!r} is a {type(feat).__name__}, which tpudata parses a "
                "batch at a time (tf.io.parse_example's semantics): put .parse(...) after "
                ".batch(...), or use VarLenFeature / RaggedFeature without partitions per record")

    def _make_iterator(self, ctx):
        return _BlockMapIterator(self.input._make_iterator(ctx), self._parse_block, self.threads)

    def cardinality(self):
        return self.input.cardinality()

    def _spec(self):
        from tpudata.dataset.core.spec import TensorSpec, VarLenSpec, _static

        inner = _static(self.input)
        if inner is None:
            return None
        lead = inner.shape if isinstance(inner, TensorSpec) else ()
        out = {}
        for name, feat in self.spec.items():
            if isinstance(feat, FixedLenFeature):
                out[name] = TensorSpec(tuple(lead) + feat.shape, feat.dtype)
            elif isinstance(feat, FixedLenSequenceFeature):
                out[name] = TensorSpec(tuple(lead) + (None,) + feat.shape, feat.dtype)
            elif isinstance(feat, (VarLenFeature, RaggedFeature)) and not getattr(feat, "partitions", ()):
                out[name] = VarLenSpec(tuple(lead) + (None,), feat.dtype)
            else:  # sparse / nested ragged values have no declared spec type: read from the data
                return None
        return out


def parse_dataset(input_ds: Dataset, features, num_parallel_calls=None, views: bool = True) -> Dataset:
    """``input.parse(features)``: the graph as written. (Directly after a ``shuffle``, the
    ``parse_before_shuffle`` rewrite runs the parse first when the pipeline is iterated.)"""
    return ParseDataset(input_ds, features, num_parallel_calls, views)


__all__ = ["ParseDataset", "parse_dataset"]

registry.provide(parse_dataset)
