"""Data and functions for the ds.distribute() tests (importable by worker processes)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np

import tpudata
from tpudata import Dataset, TFRecordDataset
from tpudata.tfrecord import write_records

SPEC = {"i": tpudata.FixedLenFeature([], np.int64), "x": tpudata.FixedLenFeature([8], np.float32)}
SIZES = (37, 12, 40, 5, 29, 21)  # records per file (uneven on purpose)


def make_files(directory, sizes=SIZES) -> list[str]:
    files, i = [], 0
    for k, n in enumerate(sizes):
        path = os.path.join(str(directory), f"d-{k:05d}-of-{len(sizes):05d}")
        records = []
        for _ in range(n):
            x = np.arange(8, dtype=np.float32) + i
            records.append(tpudata.encode_example({"i": i, "x": x}))
            i += 1
        write_records(path, records)
        files.append(path)
    return files


def features(f):
    return {"i": f["i"], "x": f["x"] * 2, "big": np.full((64, 64), f["i"], np.int32)}


def pipeline(files) -> Dataset:
    """Record-wise ops only: distributed, its output equals the local pipeline's."""
    return TFRecordDataset(files).parse(SPEC).map(features)


def ids(elements) -> list[int]:
    return [int(e["i"]) for e in elements]


def slow(x):
    time.sleep(0.004)
    return {"i": x, "v": np.full((256,), x, np.int64)}


def jitter(x):
    time.sleep(0.002 * int(x * 7919 % 5))  # chunks finish out of order
    return x


def fail_at(x):
    if int(x) == 17:
        raise ValueError(f"cannot handle element {int(x)}")
    return x


STUCK = threading.Event()  # set by a test to release a straggler
_SEEN: set = set()


def straggle_once(x):
    """The first run of element 40 hangs until STUCK is set (a straggling worker)."""
    if int(x) == 40 and 40 not in _SEEN:
        _SEEN.add(40)
        STUCK.wait(60)
    return x


def straggle_on_file(x, marker: str):
    """Element 40 hangs for 10 s the first time (``marker`` not there yet): a straggling worker."""
    if int(x) == 40 and not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(10)
    return x


IMAGE_SPEC = {"i": tpudata.FixedLenFeature([], np.int64), "img": tpudata.FixedLenFeature([], bytes)}


def image(i: int, repeat: int = 800) -> bytes:
    """4-10 KB (a shuffle keeps it in its store); ``repeat=100``: 0.5-1.1 KB (bytes objects)."""
    return (b"%05d" % i) * (repeat + repeat // 8 * (i % 13))


def make_image_files(directory, sizes=(120, 100, 140), repeat: int = 800) -> list[str]:
    files, i = [], 0
    for k, n in enumerate(sizes):
        path = os.path.join(str(directory), f"img-{k:05d}-of-{len(sizes):05d}")
        write_records(path, [tpudata.encode_example({"i": j, "img": image(j, repeat)})
                             for j in range(i, i + n)])
        files.append(path)
        i += n
    return files


def image_pipeline(files) -> Dataset:
    """A shuffle over parsed image values: what leaves a split is a BytesColumn over the
    shuffle's store, which must travel as its values only."""
    return TFRecordDataset(files).parse(IMAGE_SPEC).shuffle(16, seed=3).batch(8)
