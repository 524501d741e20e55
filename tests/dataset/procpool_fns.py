"""Module-level functions that tests/dataset/test_procpool.py runs in ProcessMapper workers.

They live apart from the test module so that a worker imports only this small module.
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np


def apply(task):
    """Run one test task ``(op, arg)`` and return its result."""
    op, arg = task
    if op == "echo":
        return arg
    if op == "square":
        return arg * arg
    if op == "sleep":
        time.sleep(arg)
        return arg
    if op == "pid":
        return os.getpid()
    if op == "array":  # a result that travels through shared memory
        return {"x": np.full((arg,), arg % 251, np.uint8), "n": np.int64(arg)}
    if op == "raise":
        raise ValueError(f"bad element {arg!r}")
    if op == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(10)
    raise KeyError(op)


def sleep_forever(x):
    time.sleep(60)
    return x


class LoadsOnlyInParent:
    """A callable that pickles in the parent but refuses to be unpickled in a worker."""

    def __init__(self):
        self.parent = os.getpid()

    def __call__(self, x):
        return x

    def __reduce__(self):
        return (_load_in, (self.parent,))


def _load_in(parent: int) -> LoadsOnlyInParent:
    if os.getpid() != parent:
        raise RuntimeError("this function cannot be loaded in a worker")
    return LoadsOnlyInParent()


def tokens(x):
    """A pure-Python (GIL-holding) element function for Dataset.map(..., use_processes=True)."""
    n = int(x)
    return {"id": np.int64(n), "feat": np.full((3,), n % 7, np.float32), "pid": np.int64(os.getpid())}


def fail_on_five(x):
    if int(x) == 5:
        raise KeyError(f"no token for {int(x)}")
    return x


def half_after_four(x):
    """int64 for x < 4, then float64: a dtype change inside one chunk of a process map."""
    n = int(x)
    return np.int64(n) if n < 4 else np.float64(n + 0.5)


def pair_after_four(x):
    """A scalar for x < 4, then a tuple: a structure change inside one chunk."""
    n = int(x)
    return np.int64(n) if n < 4 else (np.int64(n), np.int64(n))


def ragged(x):
    """A pure-Python function with ragged outputs (object columns) and a bytes leaf."""
    n = int(x)
    return {"ids": np.arange(n % 5, dtype=np.int32), "tag": f"t{n}".encode(), "pid": os.getpid()}


def file_records(path):
    """interleave(use_processes=True)'s per-file function: the file's records, tagged in Python
    with the process that read them."""
    from tpudata.dataset import TFRecordDataset

    name = path.decode() if isinstance(path, bytes) else str(path)
    if name.endswith("bad"):
        raise ValueError(f"cannot open {name}")
    if name.endswith("kill"):
        os.kill(os.getpid(), signal.SIGKILL)
    return TFRecordDataset(name).map(_tag_record)


def _tag_record(record):
    return {"rec": record, "pid": np.int64(os.getpid())}


def fails_at_third(path):
    """A per-file dataset whose third element raises (inside the worker's iteration)."""
    from tpudata.dataset import TFRecordDataset

    return TFRecordDataset(path.decode() if isinstance(path, bytes) else path).map(_third)


_seen = {"n": 0}


def _third(record):
    _seen["n"] += 1
    if _seen["n"] == 3:
        raise RuntimeError("the third record is bad")
    return record


def sleepy_file(path):
    """A per-file dataset whose elements take a minute each (for close() tests)."""
    from tpudata.dataset import Dataset

    return Dataset.range(3).map(sleep_forever)


def plain_file(path):
    """A per-file dataset of the file's raw records (their origins can name them)."""
    from tpudata.dataset import TFRecordDataset

    return TFRecordDataset(path.decode() if isinstance(path, bytes) else str(path))


def same(x):
    """The element itself (a dict): what the worker received, sent back."""
    return x


def fail_at_150(x):
    """Quick, so that element 150 is mapped inside a chunk of many elements."""
    if int(x) == 150:
        raise ValueError(f"bad element {int(x)}")
    return np.int64(int(x) * 2)


def wide(x):
    """2 KB of float32 per element: a chunk's outputs go through shared memory as Rows."""
    n = int(x)
    return {"v": np.full((4, 128), n, np.float32) + np.arange(128, dtype=np.float32), "x": np.int64(n)}


def megabyte(x):
    """1 MiB per element: chunks are capped by bytes (procmap.CHUNK_BYTES), not only by count."""
    return np.full(1 << 20, int(x) % 251, np.uint8)


def die_on_seven(x):
    """SIGKILL the worker process at element 7 (a worker that dies, for Dataset.map)."""
    if int(x) == 7:
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(10)
    return np.int64(x) * 2


def ragged_big(x):
    """Outputs of a shape that changes from element to element and more than 4 KB each (one
    out-of-band buffer per element in the result slot), a bytes leaf and a float32 leaf."""
    n = int(x)
    return {"v": np.arange(600 + 97 * (n % 5), dtype=np.float64) * (n + 1), "tag": f"e{n}".encode(),
            "w": np.full((2, 700), n, np.float32)}


def varied(task):
    """ProcessMapper results of every kind by ``task % 6``: shapes and dtypes that change,
    object arrays, nested tuples, strings and None (the object fallback beside the slots)."""
    n = int(task)
    kind = n % 6
    if kind == 0:
        return np.full((1000 + n, 3), n, np.int16)  # large, shape varies
    if kind == 1:
        return {"f": np.linspace(0, 1, 5000 + n, dtype=np.float32), "s": "x" * n}
    if kind == 2:
        return (np.array([b"ab", n.to_bytes(2, "little")], dtype=object), None, n)
    if kind == 3:
        return [np.zeros(0, np.uint8), np.full(7, n, np.complex64), {"deep": (np.int64(n),)}]
    if kind == 4:
        return np.asfortranarray(np.arange(6000 + n, dtype=np.float64).reshape(2, -1))
    return {"big": np.full(20_000, n % 251, np.uint8), "small": np.arange(3) + n}


def wide_then_die(x):
    """wide(x), except that element 600 kills its worker (SIGKILL)."""
    if int(x) == 600:
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(10)
    return wide(x)
