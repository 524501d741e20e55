"""Fixed-size batches of parsed Examples straight from reader chunks.

Readers yield :class:`RecordBatch` chunks whose sizes follow the read buffer, not the batch size.
:func:`rebatch` cuts them into batches of exactly ``batch_size`` records as lists of zero-copy
slices (a batch may span chunks), and :func:`parse_batches` parses each slice where it lies and
joins the parsed arrays - records are never copied into a new buffer.

>>> from tpudata.example.codec import encode_example
>>> from tpudata.example.spec import FixedLenFeature
>>> chunks = [RecordBatch.from_records([encode_example({"y": i}) for i in range(j, j + 3)])
...           for j in (0, 3)]
>>> [b["y"].tolist() for b in parse_batches(chunks, {"y": FixedLenFeature([], "int64")}, 4)]
[[0, 1, 2, 3], [4, 5]]
"""

from __future__ import annotations

from typing import Iterable, Iterator, Mapping

import numpy as np

from tpudata.example.parse import VarLenValues, parse_examples
from tpudata.example.spec import normalize_spec
from tpudata.tfrecord.batch import RecordBatch


def rebatch(
    chunks: Iterable[RecordBatch], batch_size: int, drop_remainder: bool = False
) -> Iterator[list[RecordBatch]]:
    """Group the records of ``chunks`` into lists of slices holding ``batch_size`` records each."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, not {batch_size}")
    pieces: list[RecordBatch] = []
    have = 0
    for chunk in chunks:
        start = 0
        n = len(chunk)
        while start < n:
            take = min(batch_size - have, n - start)
            pieces.append(chunk if (start == 0 and take == n) else chunk[start : start + take])
            have += take
            start += take
            if have == batch_size:
                yield pieces
                pieces, have = [], 0
    if have and not drop_remainder:
        yield pieces


def concat_parsed(parts: list[dict]) -> dict:
    """Join parsed batches along the batch dimension (VarLenValues included)."""
    if len(parts) == 1:
        return parts[0]
    out = {}
    for name, first in parts[0].items():
        if isinstance(first, VarLenValues):
            values = np.concatenate([p[name].values for p in parts])
            splits = [first.row_splits]
            offset = first.row_splits[-1]
            for p in parts[1:]:
                splits.append(p[name].row_splits[1:] + offset)
                offset += p[name].row_splits[-1]
            out[name] = VarLenValues(values, np.concatenate(splits))
        else:
            out[name] = np.concatenate([p[name] for p in parts])
    return out


def parse_batches(
    chunks: Iterable[RecordBatch],
    spec: Mapping,
    batch_size: int,
    drop_remainder: bool = False,
) -> Iterator[dict]:
    """Parsed batches of exactly ``batch_size`` records (the last one smaller unless dropped)."""
    spec = normalize_spec(spec)
    row = 0
    for pieces in rebatch(chunks, batch_size, drop_remainder):
        parts = []
        for piece in pieces:
            parts.append(parse_examples(piece, spec, base_row=row))
            row += len(piece)
        yield concat_parsed(parts)
