"""Read executor event files back with TensorBoard's own loader (local or any fsspec URL)."""

from __future__ import annotations

import os
import tempfile

from tpudata import storage


def load(url: str):
    """An ``EventAccumulator`` loaded with the event files at ``url`` (copied first if remote)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with tempfile.TemporaryDirectory(prefix="tpudata-test-events-") as local:
        if storage.is_local(url):
            local = url
        else:
            for path in storage.glob(storage.join(url, "events.out.tfevents.*")):
                with open(os.path.join(local, path.rsplit("/", 1)[-1]), "wb") as f:
                    f.write(storage.read_bytes(path))
        acc = EventAccumulator(local, size_guidance={"scalars": 0, "histograms": 0})
        acc.Reload()  # reads everything into memory
    return acc


def series(acc, tag: str) -> list[tuple[int, float]]:
    """``[(step, value), ...]`` of a scalar tag."""
    return [(e.step, e.value) for e in acc.Scalars(tag)]
