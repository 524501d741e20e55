"""Text out of a block of elements: plain lines, dict entries, Example and SequenceExample records.

Every document is checked to be UTF-8 here (decoded to ``str`` for the tokenizer); a bad one
raises :class:`~tpudata.errors.InvalidTextError` naming its file and record, or is dropped (and
logged) when asked. A record without the feature raises :class:`~tpudata.errors.SpecError`
naming the record.
"""

from __future__ import annotations

import logging

import numpy as np

from tpudata.dataset.core.block import Block, RecordColumn, leaf_items
from tpudata.dataset.core.nest import LEAF
from tpudata.errors import InvalidTextError, SpecError
from tpudata.example.codec import decode_sequence_example
from tpudata.example.parse import parse_prepared, prepare_spec
from tpudata.example.spec import FixedLenFeature
from tpudata.tfrecord.framing import HEADER_SIZE

logger = logging.getLogger("tpudata.text")

RECORD_KINDS = (None, "example", "sequence_example")


def where(col, r: int, index: int) -> tuple[str | None, str]:
    """``(path, record)`` of row ``r`` of ``col``, the ``index``-th document of the input."""
    if isinstance(col, RecordColumn):
        b = 0 if col.buf_idx is None else int(col.buf_idx[r])
        path, base = col.sources[b]
        if base is not None:  # a TFRecord frame: TensorFlow's offsets
            return path, f"record at offset {int(base) + int(col.offsets[r]) - HEADER_SIZE}"
        if path is not None:
            return path, f"document {index} of the input"
    return None, f"document {index} of the input"


def _named(path: str | None, record: str) -> str:
    return record if path is None else f"{path}, {record}"


def _texts(values: list, col, start: int, skip_invalid: bool) -> tuple[list, np.ndarray | None]:
    """``values`` (bytes or str) as str, and the rows kept (None: all of them)."""
    try:
        return [v if isinstance(v, str) else v.decode("utf-8") for v in values], None
    except (UnicodeDecodeError, AttributeError):
        pass
    out, keep = [], []
    for r, v in enumerate(values):
        if isinstance(v, (bytes, bytearray, memoryview, np.bytes_)):
            try:
                out.append(bytes(v).decode("utf-8"))
                keep.append(r)
                continue
            except UnicodeDecodeError as exc:
                path, record = where(col, r, start + r)
                message = (f"{_named(path, record)} is not valid UTF-8 text ({exc.reason} at "
                           f"byte {exc.start})")
                if not skip_invalid:
                    raise InvalidTextError(message + "; skip_invalid=True drops such documents",
                                           path, record) from None
                logger.warning("tokenize: skipped %s", message)
                continue
        if isinstance(v, str):
            out.append(v)
            keep.append(r)
            continue
        raise TypeError(f"tokenize() needs text (bytes or str) elements, got "
                        f"{type(v).__name__} in document {start + r} of the input")
    return out, np.asarray(keep, dtype=np.int64)


def _example_texts(col, feature: str, start: int) -> list:
    if not isinstance(col, RecordColumn):
        col = RecordColumn.from_bytes(list(col))
    spec = prepare_spec({feature: FixedLenFeature([], np.dtype(object))})
    return list(parse_prepared(col.as_batch(), spec, start)[feature])


def _sequence_texts(col, feature: str, join: bytes, start: int) -> list:
    records = col.to_list() if isinstance(col, RecordColumn) else list(col)
    out = []
    for r, record in enumerate(records):
        context, lists = decode_sequence_example(record)
        if feature in context:
            values = context[feature].tolist()
        elif feature in lists:
            values = [v for step in lists[feature] for v in step.tolist()]
        else:
            path, rec = where(col, r, start + r)
            raise SpecError(f"feature {feature!r} is missing from the SequenceExample "
                            f"{_named(path, rec)} (neither a context feature nor a feature list)")
        if not all(isinstance(v, bytes) for v in values):
            raise SpecError(f"feature {feature!r} of {_named(*where(col, r, start + r))} holds "
                            "numbers, not text")
        out.append(join.join(values))
    return out


def extract(block: Block, feature: str | None, record: str | None, join: bytes, start: int,
            skip_invalid: bool) -> tuple[list, Block, np.ndarray | None]:
    """``(texts, block, kept rows)`` of ``block`` whose first element is the ``start``-th."""
    if block.tree.kind == "leaf":
        col = block.leaves[0]
        if record == "example":
            values = _example_texts(col, feature, start)
        elif record == "sequence_example":
            values = _sequence_texts(col, feature, join, start)
        else:
            values = col.to_list() if isinstance(col, RecordColumn) else leaf_items(col)
    else:
        if record is not None:
            raise TypeError(f"tokenize(record={record!r}) needs serialized records as elements, "
                            f"got {block.tree}")
        if block.tree.kind != "dict" or feature not in block.tree.keys:
            raise SpecError(f"tokenize(feature={feature!r}): the elements {block.tree} have no "
                            f"such entry (document {start} of the input)")
        k = block.tree.keys.index(feature)
        if block.tree.children[k] != LEAF:
            raise SpecError(f"tokenize(feature={feature!r}) needs text, not {block.tree}")
        col = leaf_column(block, feature)
        values = col.to_list() if isinstance(col, RecordColumn) else leaf_items(col)
    texts, keep = _texts(values, col, start, skip_invalid)
    if keep is not None:
        block = block.take(keep)
    return texts, block, keep


def leaf_column(block: Block, feature: str):
    """The column of the dict entry ``feature`` (a leaf) of ``block``."""
    if block.tree.kind != "dict":
        raise TypeError(f"expected elements with {feature!r}, got {block.tree}")
    pos = 0
    for key, child in zip(block.tree.keys, block.tree.children):
        if key == feature:
            return block.leaves[pos]
        pos += child.num_leaves
    raise TypeError(f"expected elements with {feature!r}, got {block.tree}")


__all__ = ["RECORD_KINDS", "extract", "leaf_column", "where"]
