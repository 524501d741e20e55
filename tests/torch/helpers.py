"""Data and picklable pipeline functions for the torch tests (spawned workers import them)."""

from __future__ import annotations

import numpy as np

import tpudata

SPEC = {"id": tpudata.FixedLenFeature([], np.int64), "x": tpudata.FixedLenFeature([2], np.float32)}


def make_shards(directory, sizes=(23, 17, 31, 9)) -> tuple[list[str], int]:
    """Shards of Examples ``{"id": i, "x": [i, -i]}`` with ids 0..N-1, plus a manifest."""
    files, start = [], 0
    for k, n in enumerate(sizes):
        url = f"{directory}/d-{k:05d}-of-{len(sizes):05d}"
        tpudata.write_records(url, [tpudata.encode_example({"id": i, "x": [float(i), -float(i)]})
                                    for i in range(start, start + n)])
        files.append(url)
        start += n
    return files, start


def parse_pipeline(ds, split):
    return ds.parse(SPEC)


def shuffle_pipeline(ds, split):
    return ds.shuffle(16, seed=split.epoch * 1000 + split.index).parse(SPEC)


def parse_records(records):
    return tpudata.parse_examples(records, SPEC)


def ids_of(batches) -> list[int]:
    """The real (weight 1) ids of torch batches."""
    out = []
    for b in batches:
        assert set(b) == {"id", "x", "weight"}
        keep = b["weight"].numpy() > 0
        out += b["id"].numpy()[keep].tolist()
        assert (b["id"].numpy()[~keep] == 0).all()
    return out
