"""What the shared-memory transport (:mod:`tpudata._shm_transport`) writes into a payload itself
instead of leaving it to pickle: *pieces*, each copied once into place by the sender and rebuilt
by the receiver.

- :class:`Rows`: arrays of one shape and dtype (the outputs of a chunk of elements) that arrive
  as one stacked array; ``Rows.of(array)`` is one array that arrives C-contiguous and writable.
- :class:`Strings`: byte strings (a list of ``bytes``, an object or ``S`` array of them, or a
  parsed column still in the read buffers) that travel as int64 offsets + their bytes and arrive
  as a list of ``bytes`` (nested to the array's shape) or, with ``as_values``, as one
  :class:`StringValues` (a uint8 array and the offsets).

Pieces pickle through persistent ids (:class:`Pickler`, :class:`Unpickler`); pickled any other
way each becomes what it arrives as.

>>> import pickle
>>> s = Strings.of(np.array([b"ab", b"", b"c"], dtype=object))
>>> pickle.loads(pickle.dumps(s)), s.nbytes
([b'ab', b'', b'c'], 35)
>>> v = pickle.loads(pickle.dumps(Strings.of([b"ab", b"c"], as_values=True)))
>>> v.values.tobytes(), v.offsets.tolist()
(b'abc', [0, 2, 3])
"""

from __future__ import annotations

import pickle

import numpy as np

from tpudata._shm import OUT_OF_BAND_MIN

__all__ = ["Pickler", "Rows", "StringValues", "Strings", "Unpickler", "written"]


class Rows:
    """Arrays of one shape and dtype that travel as one stacked array (``len(rows)`` first).

    The sender writes the rows one after the other into the payload; the receiver gets the
    stacked array. :meth:`of` makes one array a piece (arriving with its own shape).
    """

    __slots__ = ("rows", "shape", "dtype", "nbytes")

    def __init__(self, rows: list, shape: tuple | None = None):
        first = rows[0]
        self.rows = rows
        self.shape = (len(rows),) + first.shape if shape is None else shape
        self.dtype = first.dtype
        self.nbytes = first.nbytes * len(rows)

    @classmethod
    def of(cls, array: np.ndarray) -> Rows:
        """One numeric array as a piece: it arrives C-contiguous and writable (or lent)."""
        return cls([array], array.shape)

    def __reduce__(self):
        if len(self.rows) == 1 and self.shape == self.rows[0].shape:
            return (np.array, (self.rows[0],))
        return (np.stack, (self.rows,))

    @staticmethod
    def fit(values: list) -> Rows | None:
        """A Rows of ``values`` when they are numeric arrays (not scalars) of one shape and
        dtype, together at least ``OUT_OF_BAND_MIN`` bytes; else None."""
        first = values[0]
        if type(first) is not np.ndarray or first.ndim == 0 or first.dtype == object:
            return None
        shape, dtype = first.shape, first.dtype
        for v in values:
            if type(v) is not np.ndarray or v.shape != shape or v.dtype != dtype:
                return None
        if first.nbytes * len(values) < OUT_OF_BAND_MIN:
            return None
        return Rows(values)

    def write_to(self, view: memoryview) -> None:
        """Each row into its place in ``view`` (one copy, no stacking first)."""
        out = np.frombuffer(view, dtype=self.dtype)
        if len(self.rows) == 1 and self.shape == self.rows[0].shape:
            out.reshape(self.shape)[...] = self.rows[0]
        else:
            out = out.reshape(self.shape)
            for k, row in enumerate(self.rows):
                out[k] = row
        del out
        view.release()

    def pid(self, index: int) -> tuple:
        return ("R", index, self.shape, self.dtype.str)


class StringValues:
    """Byte strings as one uint8 array ``values`` and int64 ``offsets`` (``n + 1``): string
    ``i`` is ``values[offsets[i]:offsets[i + 1]]``."""

    __slots__ = ("values", "offsets")

    def __init__(self, values: np.ndarray, offsets: np.ndarray):
        self.values, self.offsets = values, offsets

    def tolist(self) -> list[bytes]:
        data, bounds = self.values.tobytes(), self.offsets.tolist()
        return [data[a:b] for a, b in zip(bounds, bounds[1:])]


class Strings:
    """Byte strings that travel as int64 offsets (``n + 1``) then their bytes, each copied once
    (from a parsed column: straight from the read buffers, no ``bytes`` object per value).

    ``shape``: the array's shape they arrive nested to (default: a flat list); ``as_values``:
    they arrive as one :class:`StringValues` instead of ``bytes`` objects.
    """

    __slots__ = ("items", "lengths", "shape", "as_values", "total", "nbytes")

    def __init__(self, items, lengths: np.ndarray, shape: tuple | None = None,
                 as_values: bool = False):
        self.items, self.lengths = items, lengths
        self.shape = (len(lengths),) if shape is None else tuple(shape)
        self.as_values = as_values
        self.total = int(lengths.sum())
        self.nbytes = 8 * (len(lengths) + 1) + self.total

    @classmethod
    def of(cls, value, as_values: bool = False) -> Strings | None:
        """``value`` (a list of bytes, an object or ``S`` array of bytes, or a parsed bytes
        column: anything with ``lengths`` and ``copy_to``) as a piece; None when it holds
        anything but ``bytes``."""
        if hasattr(value, "copy_to"):
            return cls(value, np.asarray(value.lengths, dtype=np.int64), (len(value),), as_values)
        shape = None
        if isinstance(value, np.ndarray):
            shape = value.shape
            value = (value.astype(object) if value.dtype.kind == "S" else value).ravel().tolist()
        if not all(type(x) is bytes for x in value):
            return None
        lengths = np.fromiter(map(len, value), dtype=np.int64, count=len(value))
        return cls(value, lengths, shape, as_values)

    def write_to(self, view: memoryview) -> None:
        """The offsets, then the bytes, into ``view``."""
        out = np.frombuffer(view, dtype=np.uint8)
        n = len(self.lengths)
        offsets = out[: 8 * (n + 1)].view(np.int64)
        offsets[0] = 0
        np.cumsum(self.lengths, out=offsets[1:])
        dst = out[8 * (n + 1):]
        items = self.items
        if hasattr(items, "copy_to"):  # straight from the read buffers
            items.copy_to(dst, offsets[:-1])
        elif self.total and self.total < 64 * n:  # many small strings: one join
            dst[:] = np.frombuffer(b"".join(items), dtype=np.uint8)
        else:
            for o, k, item in zip(offsets[:-1].tolist(), self.lengths.tolist(), items):
                if k:
                    dst[o : o + k] = np.frombuffer(item, dtype=np.uint8)
        del out, offsets, dst
        view.release()

    def pid(self, index: int) -> tuple:
        return ("S", index, len(self.lengths), self.shape, self.as_values)

    def __reduce__(self):
        return (_rebuild_strings, (written(self), len(self.lengths), self.shape, self.as_values))


def written(piece) -> bytearray:
    """A piece's bytes as it writes them into a payload, in memory of this process."""
    out = bytearray(piece.nbytes)
    piece.write_to(memoryview(out))
    return out


def _rebuild_strings(piece, count: int, shape: tuple, as_values: bool):
    """A :class:`Strings` back from its bytes (``piece``: anything with the buffer protocol);
    what is returned never refers to ``piece``."""
    buf = np.frombuffer(piece, dtype=np.uint8)
    head = 8 * (count + 1)
    offsets = buf[:head].view(np.int64)
    if as_values:
        values = np.empty(int(offsets[-1]), dtype=np.uint8)
        values[:] = buf[head : head + len(values)]
        return StringValues(values, offsets.copy())
    bounds = (offsets + head).tolist()
    with memoryview(buf) as mv:
        items = [bytes(mv[a:b]) for a, b in zip(bounds, bounds[1:])]
    if len(shape) == 1:
        return items
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(shape).tolist()


class Pickler(pickle.Pickler):
    """Protocol 5 with out-of-band buffers (``buffer_callback``); pieces become persistent ids
    and are appended to ``pieces``."""

    def __init__(self, file, buffer_callback, pieces: list):
        super().__init__(file, protocol=5, buffer_callback=buffer_callback)
        self.pieces = pieces

    def persistent_id(self, obj):
        if type(obj) is Rows or type(obj) is Strings:
            self.pieces.append(obj)
            return obj.pid(len(self.pieces) - 1)
        return None


class Unpickler(pickle.Unpickler):
    """Rebuilds pieces from ``pieces`` (buffers, in order). ``copy``: Rows come out as copies in
    this process's memory, else as views of their buffer (lent, or already this process's)."""

    def __init__(self, file, buffers: list, pieces: list, copy: bool):
        super().__init__(file, buffers=buffers)
        self.pieces, self.copy = pieces, copy

    def persistent_load(self, pid):
        if pid[0] == "S":
            _, index, count, shape, as_values = pid
            return _rebuild_strings(self.pieces[index], count, shape, as_values)
        _, index, shape, dtype = pid
        out = np.frombuffer(self.pieces[index], dtype=np.dtype(dtype)).reshape(shape)
        return out.copy() if self.copy else out
