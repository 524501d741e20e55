"""Helpers for dataset tests: comparable element values and the checkpoint-everywhere check."""

from __future__ import annotations

import json
import os
import threading

import numpy as np

import tpudata
from tpudata.example.parse import VarLenValues


def plain(x):
    """A comparable Python value for an element (arrays -> lists, VarLenValues -> rows)."""
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return [plain(v) for v in x]
    if isinstance(x, VarLenValues):
        return [plain(r) for r in x.to_list()]
    if isinstance(x, np.ndarray):
        if x.dtype == object:
            return [plain(v) for v in x.tolist()]
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    return x


def outputs(ds) -> list:
    with ds.iterator() as it:
        return [plain(e) for e in it]


def check_restore_everywhere(make_ds, stride: int = 1) -> list:
    """Save state before every element; restoring each (into a fresh Dataset object, as a new
    process would) must give exactly the rest of an uninterrupted run. Returns that run."""
    it = make_ds().iterator()
    states, out = [], []
    while True:
        states.append(json.loads(json.dumps(it.get_state())))  # JSON-serialisable
        try:
            out.append(plain(next(it)))
        except StopIteration:
            break
    it.close()
    for k in range(0, len(states), stride):
        with make_ds().iterator(states[k]) as resumed:
            rest = [plain(e) for e in resumed]
        assert rest == out[k:], f"restoring before element {k} of {len(out)} diverged"
    return out


def write_shards(directory, num_files: int, per_file, make_example=None) -> list[str]:
    """Small TFRecord shards of Examples {"id": int, "x": float32[3], "tag": bytes}."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    ident = 0
    for s in range(num_files):
        n = per_file if isinstance(per_file, int) else per_file[s]
        path = os.path.join(str(directory), f"train-{s:05d}-of-{num_files:05d}")
        records = []
        for _ in range(n):
            ex = make_example(ident) if make_example else {
                "id": ident, "x": np.full(3, ident, np.float32), "tag": f"t{ident}".encode()}
            records.append(tpudata.encode_example(ex))
            ident += 1
        tpudata.write_records(path, records)
        paths.append(path)
    return paths


SPEC = {
    "id": tpudata.FixedLenFeature([], np.int64),
    "x": tpudata.FixedLenFeature([3], np.float32),
    "tag": tpudata.FixedLenFeature([], bytes),
}


def tpudata_threads() -> list[str]:
    """The threads of tpudata's pipelines: not the process's shared gs:// read pool
    (tpudata._ranged), whose idle workers outlive a pipeline by design."""
    return [t.name for t in threading.enumerate()
            if t.name.startswith("tpudata") and not t.name.startswith("tpudata-gcs-read")]


def tf_interleave_reference(inputs, make_sub, cycle_length, block_length):
    """TensorFlow's InterleaveDatasetOp loop, element by element (the ordering oracle)."""
    inputs = iter(inputs)
    slots = [None] * cycle_length
    cycle = block = 0
    end_of_input = False
    out = []
    while not end_of_input or any(s is not None for s in slots):
        if slots[cycle] is not None:
            try:
                out.append(next(slots[cycle]))
                block += 1
                if block == block_length:
                    cycle, block = (cycle + 1) % cycle_length, 0
                continue
            except StopIteration:
                slots[cycle] = None
                cycle, block = (cycle + 1) % cycle_length, 0
        elif not end_of_input:
            try:
                slots[cycle] = iter(make_sub(next(inputs)))
            except StopIteration:
                end_of_input = True
        else:
            cycle, block = (cycle + 1) % cycle_length, 0
    return out


def evil_pickle(path) -> bytes:
    """Pickle bytes that, when loaded, create the file ``path``: proof that loading ran code (any
    code could run there)."""
    import pickle

    class Opens:
        def __reduce__(self):
            return (open, (str(path), "w"))

    return pickle.dumps(Opens())
