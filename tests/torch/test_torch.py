"""tpudata.torch with real DataLoader workers (spawn and fork), StatefulDataLoader resume, and two
ranks over torch.distributed (gloo) on 127.0.0.1."""

from __future__ import annotations

import multiprocessing
import os
import socket
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from tests.torch.helpers import (  # noqa: E402
    ids_of,
    make_shards,
    parse_pipeline,
    parse_records,
    shuffle_pipeline,
)
from tpudata.errors import SplitError  # noqa: E402
from tpudata.source import TFRecordSource  # noqa: E402
from tpudata.torch import MapDataset, SourceIterable, TFRecordIterable, collate_batch  # noqa: E402


@pytest.mark.parametrize("context,kind", [("spawn", "stream"), ("fork", "stream"), ("fork", "source")])
def test_dataloader_workers_deliver_every_record_once(tmp_path, context, kind, isolate_fork):
    if context == "fork" and isolate_fork():
        return
    files, n = make_shards(str(tmp_path))
    if kind == "stream":
        ds = TFRecordIterable(files, 8, pipeline=parse_pipeline, num_workers=2, rank=0, world_size=1)
    else:
        ds = SourceIterable(TFRecordSource(files, progress=False), 8, transform=parse_records,
                            num_workers=2, rank=0, world_size=1, seed=4)
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=context)
    batches = list(loader)
    assert len(batches) == len(ds)
    assert Counter(ids_of(batches)) == Counter(range(n))
    b = batches[0]
    assert b["x"].dtype == torch.float32 and b["x"].shape == (8, 2) and b["id"].dtype == torch.int64
    assert torch.equal(b["x"][:, 0].long() * b["weight"].long(), b["id"] * b["weight"].long())


def test_from_numpy_without_a_copy():
    from tpudata.torch import to_torch

    arr = np.arange(6, dtype=np.float32)
    t = to_torch({"a": arr})["a"]
    arr[0] = 42.0
    assert t[0].item() == 42.0
    assert to_torch(np.array([b"a", b"bc"], dtype=object)) == [b"a", b"bc"]
    with pytest.raises(ValueError, match="bytes_as"):
        to_torch(arr, "bytes")


def test_byte_strings_cross_from_workers_in_shared_memory(tmp_path):
    from tpudata.torch import ByteStrings

    files, n = make_shards(str(tmp_path))
    ds = SourceIterable(TFRecordSource(files, progress=False), 8, num_workers=2, rank=0,
                        world_size=1, bytes_as="tensor", shuffle=False)
    batches = list(DataLoader(ds, batch_size=None, num_workers=2,
                              multiprocessing_context="forkserver"))
    got = [r for b in batches for r, w in zip(b["record"], b["weight"].tolist()) if w]
    src = TFRecordSource(files, progress=False)
    assert sorted(got) == sorted(src[i] for i in range(n))
    strings = batches[0]["record"]
    # copied out of the worker's reused shared-memory block: owned by this process
    assert isinstance(strings, ByteStrings) and not strings.values.is_shared()
    assert bytes(strings.tensor(1).numpy()) == strings[1] and strings.values.dtype == torch.uint8


def test_epochs_reshuffle_and_len_is_known(tmp_path):
    files, n = make_shards(str(tmp_path))
    ds = TFRecordIterable(files, 8, pipeline=shuffle_pipeline, num_workers=0, rank=0, world_size=1)
    assert len(ds) == 10  # ceil(80 / 8), from the manifest
    first = ids_of(list(DataLoader(ds, batch_size=None)))
    ds.set_epoch(1)
    second = ids_of(list(DataLoader(ds, batch_size=None)))
    assert sorted(first) == sorted(second) == list(range(n)) and first != second


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
def test_bad_worker_splits_say_what_to_do(tmp_path):
    files, _ = make_shards(str(tmp_path))
    with pytest.raises(SplitError, match="split='records'"):
        TFRecordIterable(files, 8, split="files", num_workers=3, rank=0, world_size=1)
    ds = TFRecordIterable(files, 8, pipeline=parse_pipeline, num_workers=2, rank=0, world_size=1)
    with pytest.raises(SplitError, match="num_workers"):
        next(iter(DataLoader(ds, batch_size=None, num_workers=0)))
    with pytest.raises(TypeError, match="num_workers"):
        len(TFRecordIterable(files, 8, rank=0, world_size=1))
    # 3 workers on 4 files: not refused, dealt record by record instead
    ds3 = TFRecordIterable(files, 8, pipeline=parse_pipeline, num_workers=3, rank=0, world_size=1)
    got = list(DataLoader(ds3, batch_size=None, num_workers=3,
                          multiprocessing_context="forkserver"))
    assert sorted(ids_of(got)) == list(range(80)) and len(got) == len(ds3) == 3 * 4


@pytest.mark.parametrize("kind", ["stream", "source"])
def test_stateful_dataloader_resumes_mid_epoch(tmp_path, kind):
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    files, n = make_shards(str(tmp_path))

    def make():
        if kind == "stream":
            return TFRecordIterable(files, 4, pipeline=shuffle_pipeline, num_workers=2, rank=0,
                                    world_size=1)
        return SourceIterable(TFRecordSource(files, progress=False), 4, transform=parse_records,
                              num_workers=2, rank=0, world_size=1, seed=2)

    def loader(ds):
        return sdl.StatefulDataLoader(ds, batch_size=None, num_workers=2,
                                      multiprocessing_context="forkserver")

    whole = ids_of(list(loader(make())))
    dl = loader(make())
    it = iter(dl)
    head = [next(it) for _ in range(7)]
    state = dl.state_dict()
    del it
    dl2 = loader(make())
    dl2.load_state_dict(state)
    rest = list(dl2)
    assert ids_of(head) + ids_of(rest) == whole
    assert len(head) + len(rest) == len(make())


def test_map_style_dataset_batches_through_getitems(tmp_path):
    files, n = make_shards(str(tmp_path))
    mds = MapDataset(TFRecordSource(files, progress=False), batch_transform=parse_records)
    loader = DataLoader(mds, batch_size=16, shuffle=True, num_workers=2,
                        multiprocessing_context="forkserver", collate_fn=collate_batch)
    ids = [i for b in loader for i in b["id"].tolist()]
    assert sorted(ids) == list(range(n))
    raw = MapDataset(TFRecordSource(files, progress=False))
    assert len(raw) == n and list(DataLoader(raw, batch_size=3, collate_fn=collate_batch))[0][0] == raw[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, world, port, files, out):
    import torch.distributed as dist

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        results = {}
        for kind, workers in (("stream", 2), ("source", 0)):
            if kind == "stream":
                ds = TFRecordIterable(files, 4, pipeline=parse_pipeline, num_workers=workers)
            else:
                ds = SourceIterable(TFRecordSource(files, progress=False), 4,
                                    transform=parse_records, num_workers=workers, seed=1)
            steps = 0
            ids = []
            # gloo started threads in this process: workers come from a forkserver, never a fork
            loader = DataLoader(ds, batch_size=None, num_workers=workers,
                                multiprocessing_context="forkserver" if workers else None)
            for batch in loader:
                total = batch["weight"].sum()
                dist.all_reduce(total)  # a real collective every step: a rank that ran out hangs
                ids += ids_of([batch])
                steps += 1
            results[kind] = (ds.rank, ds.world_size, steps, len(ds), ids)
        out.put((rank, results))
    finally:
        dist.destroy_process_group()


def test_two_ranks_with_gloo_get_disjoint_halves_and_equal_steps(tmp_path):
    files, n = make_shards(str(tmp_path), sizes=(40, 3, 21))  # 3 files on 4 readers: by records
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, 2, port, files, out)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=240) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    for kind in ("stream", "source"):
        (rk0, w0, s0, l0, ids0), (rk1, w1, s1, l1, ids1) = results[0][kind], results[1][kind]
        assert (rk0, rk1, w0, w1) == (0, 1, 2, 2)  # taken from torch.distributed
        assert s0 == s1 == l0 == l1
        assert not set(ids0) & set(ids1) and Counter(ids0 + ids1) == Counter(range(n))
