"""RecordBatch: many records as zero-copy views into one buffer (MultiBatch: into several)."""

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

    @classmethod
    def of_source(cls, buffer, source: tuple, offsets: np.ndarray, lengths: np.ndarray) -> "RecordBatch":
        """Records of ``buffer`` whose ``source`` is ``(path, base_offset)``, as a RecordColumn or
        a MultiBatch names its buffers (``base_offset`` None: the records are not framed)."""
        path, base = source
        if base is None:
            return cls(buffer, offsets, lengths, None, 0, framed=False)
        return cls(buffer, offsets, lengths, path, base)

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


class MultiBatch:
    """Records gathered from several buffers, parsed in one pass like a :class:`RecordBatch`:
    record ``i`` is ``buffers[bidx[i]][offsets[i] : offsets[i] + lengths[i]]``.

    ``sources[k]`` is ``(path, base_offset)`` of ``buffers[k]`` as in :class:`RecordBatch`
    (``base_offset`` None: the records are not framed, e.g. values cut from records), so an error
    names each record's own file and offset.

    >>> m = MultiBatch((b"abc", b"xy"), [1, 0, 1], [0, 1, 1], [2, 2, 1], [(None, None)] * 2)
    >>> len(m), m.to_list()
    (3, [b'xy', b'bc', b'y'])
    """

    __slots__ = ("buffers", "bidx", "offsets", "lengths", "sources")

    def __init__(self, buffers: Sequence, bidx, offsets, lengths, sources: Sequence):
        self.buffers = tuple(buffers)
        self.bidx = np.ascontiguousarray(bidx, dtype=np.int32)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.sources = list(sources)
        if not (len(self.bidx) == len(self.offsets) == len(self.lengths)):
            raise ValueError("MultiBatch: bidx, offsets and lengths differ in length")
        if len(self.sources) != len(self.buffers):
            raise ValueError("MultiBatch: one source per buffer is needed")

    def __len__(self) -> int:
        return len(self.offsets)

    def __repr__(self) -> str:
        return f"<MultiBatch of {len(self)} records in {len(self.buffers)} buffers>"

    def record(self, i: int) -> RecordBatch:
        """Record ``i`` alone, as a RecordBatch of its own buffer (its file and offset)."""
        k = int(self.bidx[i])
        return RecordBatch.of_source(self.buffers[k], self.sources[k], self.offsets[i : i + 1],
                                     self.lengths[i : i + 1])

    def split(self, offsets, lengths, bidx) -> list[bytes]:
        """Copies of ``buffers[bidx[j]][offsets[j] : offsets[j] + lengths[j]]`` (e.g. values)."""
        bidx = np.asarray(bidx)
        out: list = [None] * len(bidx)
        for k in np.unique(bidx).tolist():
            pos = np.flatnonzero(bidx == k)
            for p, v in zip(pos.tolist(), framing.split(self.buffers[k], offsets[pos], lengths[pos])):
                out[p] = v
        return out

    def to_list(self) -> list[bytes]:
        """The records as a list of bytes objects."""
        return self.split(self.offsets, self.lengths, self.bidx)

    @property
    def nbytes(self) -> int:
        """Total size of the records' data."""
        return int(self.lengths.sum())
