"""DataLoader arguments the iterables must see through, with real DataLoader workers: a batch_size
left at its default (the iterables batch already) is refused with a clear error, and set_epoch
reaches workers that persist across epochs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from tests.torch.helpers import ids_of, make_shards, parse_records, shuffle_pipeline  # noqa: E402
from tpudata.errors import DataLoaderConfigError  # noqa: E402
from tpudata.source import TFRecordSource  # noqa: E402
from tpudata.torch import SourceIterable, TFRecordIterable  # noqa: E402


def _make(kind, files, workers):
    if kind == "stream":
        return TFRecordIterable(files, 8, pipeline=shuffle_pipeline, num_workers=workers, rank=0,
                                world_size=1)
    return SourceIterable(TFRecordSource(files, progress=False), 8, transform=parse_records,
                          num_workers=workers, rank=0, world_size=1, seed=3)


@pytest.mark.parametrize("workers", [0, 1])
def test_a_dataloader_that_batches_again_is_refused(tmp_path, workers):
    files, _ = make_shards(str(tmp_path))
    ds = _make("stream", files, workers)
    context = "forkserver" if workers else None
    # without batch_size=None: a TypeError naming PackedBatch (workers), or (1, 8) tensors
    with pytest.raises(DataLoaderConfigError, match=r"batch_size=None") as info:
        next(iter(DataLoader(ds, num_workers=workers, multiprocessing_context=context)))
    assert isinstance(info.value, TypeError) and "TFRecordIterable yields whole batches" in str(info.value)
    assert "PackedBatch" not in str(info.value)
    with pytest.raises(DataLoaderConfigError, match=r"batch_size=None"):
        next(iter(DataLoader(_make("source", files, 0), batch_size=4)))
    # batch_size=None: whole batches, and a collate_fn gets each whole batch
    batch = next(iter(DataLoader(ds, batch_size=None, num_workers=workers,
                                 multiprocessing_context=context)))
    assert batch["x"].shape == (8, 2)
    sizes = next(iter(DataLoader(ds, batch_size=None, collate_fn=lambda b: len(b["id"]))))
    assert sizes == 8


@pytest.mark.parametrize("kind", ["stream", "source"])
def test_set_epoch_reaches_persistent_workers(tmp_path, kind):
    files, n = make_shards(str(tmp_path))
    ds = _make(kind, files, 2)
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True,
                        multiprocessing_context="forkserver")
    first = ids_of(list(loader))
    ds.set_epoch(1)
    second = ids_of(list(loader))
    fresh = _make(kind, files, 2)
    fresh.set_epoch(1)
    expected = ids_of(list(DataLoader(fresh, batch_size=None, num_workers=2,
                                      multiprocessing_context="forkserver")))
    assert sorted(first) == sorted(second) == list(range(n))
    assert second != first and second == expected
