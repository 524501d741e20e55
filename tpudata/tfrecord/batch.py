"""RecordBatch: many records as zero-copy views into one buffer."""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from tpudata.tfrecord import framing


class RecordBatch:
    """Records ``buffer[offsets[i] : offsets[i] + lengths[i]]`` for ``i < len(self)``.

    Readers yield these straight from their read buffers (no per-record copies); parsers consume
    them whole. ``base_offset`` is the stream offset of ``buffer[0]`` in the file named ``path``
    (in the decompressed stream for compressed files), so :attr:`record_offsets` gives each
    record's TFRecord offset and :attr:`end_offset` the offset to resume after the batch.

    >>> b = RecordBatch.from_records([b"ab", b"", b"cde"])
    >>> len(b), b[2], b.to_list(), int(b.nbytes)
    (3, b'cde', [b'ab', b'', b'cde'], 5)
    """

    __slots__ = ("buffer", "offsets", "lengths", "path", "base_offset", "framed")

    def __init__(
        self,
        buffer,
        offsets: np.ndarray,
        lengths: np.ndarray,
        path: str | None = None,
        base_offset: int = 0,
        framed: bool = True,
    ):
        self.buffer = buffer
        self.offsets = offsets
        self.lengths = lengths
        self.path = path
        self.base_offset = base_offset
        self.framed = framed  # records sit inside TFRecord framing (12 bytes before the data)

    @classmethod
    def from_records(cls, records: Sequence) -> "RecordBatch":
        """A batch holding copies of ``records`` (bytes-like objects) back to back."""
        if isinstance(records, RecordBatch):
            return records
        if isinstance(records, np.ndarray):
            records = records.ravel().tolist()
        records = [r if isinstance(r, (bytes, bytearray, memoryview)) else bytes(r) for r in records]
        lengths = np.fromiter((memoryview(r).nbytes for r in records), np.int64, len(records))
        offsets = np.zeros(len(records), dtype=np.int64)
        if len(records) > 1:
            np.cumsum(lengths[:-1], out=offsets[1:])
        return cls(b"".join(records), offsets, lengths, framed=False)

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return RecordBatch(
                self.buffer, self.offsets[i], self.lengths[i], self.path, self.base_offset, self.framed
            )
        o = int(self.offsets[i])
        return bytes(memoryview(self.buffer).cast("B")[o : o + int(self.lengths[i])])

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.to_list())

    def __repr__(self) -> str:
        where = f" from {self.path}" if self.path else ""
        return f"<RecordBatch of {len(self)} records, {self.nbytes} bytes{where}>"

    def to_list(self) -> list[bytes]:
        """The records as a list of bytes objects."""
        return framing.split(self.buffer, self.offsets, self.lengths)

    @property
    def nbytes(self) -> int:
        """Total size of the records' data."""
        return int(self.lengths.sum())

    @property
    def record_offsets(self) -> np.ndarray:
        """Stream offset of each record's frame (what TensorFlow's error messages count)."""
        head = framing.HEADER_SIZE if self.framed else 0
        return self.base_offset + self.offsets - head

    @property
    def end_offset(self) -> int:
        """Stream offset just after the last record: where a reader resumes."""
        if not len(self):
            return self.base_offset
        tail = framing.FOOTER_SIZE if self.framed else 0
        return int(self.base_offset + self.offsets[-1] + self.lengths[-1] + tail)
