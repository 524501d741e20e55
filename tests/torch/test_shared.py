"""Batches out of DataLoader workers through reused shared memory (tpudata.torch.shared): what
arrives equals what to_torch gives in process, stays intact while the worker reuses its blocks,
and large byte strings really take the shared-memory path."""

from __future__ import annotations

import errno
import os
import pickle
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

import tpudata  # noqa: E402
from tpudata.torch import ByteStrings, SourceIterable, TFRecordIterable, to_torch  # noqa: E402
from tpudata import _shm_transport  # noqa: E402
from tpudata.torch import shared  # noqa: E402


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(a, b))
    if isinstance(a, ByteStrings):
        return isinstance(b, ByteStrings) and a.tolist() == b.tolist()
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _batch(rng) -> dict:
    big = [rng.bytes(int(n)) for n in rng.integers(0, 40_000, 6)]
    return {
        "f32": rng.standard_normal((6, 3)).astype(np.float32),
        "i64": np.arange(6, dtype=np.int64),
        "u8": np.arange(6, dtype=np.uint8),
        "bool": np.array([True, False] * 3),
        "f16": np.ones((6, 2), dtype=np.float16),
        "scalar": np.array(7, dtype=np.int32),
        "empty": np.zeros((0, 4), dtype=np.float64),
        "strided": np.arange(24, dtype=np.int64).reshape(6, 4)[:, ::2],
        "readonly": np.frombuffer(b"\x01\x00\x00\x00" * 6, dtype=np.int32),
        "big": np.array(big, dtype=object),
        "small": np.array([b"a", b"", b"bc", b"d", b"e", b"f"], dtype=object),
        "grid": np.array([[b"x" * 30_000, b""], [b"y", b"z" * 50_000]] * 3, dtype=object),
        "fixed": np.array([b"ab", b"c\x00", b"", b"d", b"e", b"f"], dtype="S2"),
        "text": np.array(["x", "yz"] * 3),
        "mixed": np.array([b"a", None] * 3, dtype=object),
        "nested": {"inner": np.arange(3.0), "items": [np.arange(2), (np.arange(1), "s")]},
        "plain": 3,
    }


@pytest.mark.parametrize("bytes_as", ["list", "tensor"])
@pytest.mark.parametrize("threshold", [0, shared.BYTES_THRESHOLD, 1 << 40])
def test_pack_then_unpickle_equals_to_torch(bytes_as, threshold):
    batch = _batch(np.random.default_rng(threshold % 7))
    if bytes_as == "tensor":
        with pytest.raises(TypeError):  # as in process: ByteStrings hold bytes only
            shared.pack(batch, bytes_as, threshold=threshold)
        del batch["mixed"]
    want = to_torch(batch, bytes_as, _shared=False)
    packed = shared.pack(batch, bytes_as, threshold=threshold)
    assert _same(packed.unpack(), want)
    assert _same(pickle.loads(pickle.dumps(packed)), want)


@pytest.mark.parametrize("bytes_as", ["list", "tensor"])
@pytest.mark.parametrize("threshold", [0, 1 << 40])
def test_a_parsed_bytes_column_packs_straight_from_the_read_buffers(bytes_as, threshold):
    # parse -> batch leaves a large bytes feature in the read buffers (BytesColumn); to_torch and
    # pack copy each value once from there, and give what the same values as bytes would give
    from tpudata.dataset.core.columns import BytesColumn

    rng = np.random.default_rng(5)
    values = [rng.bytes(int(n)) for n in rng.integers(0, 30_000, 7)]
    parts = [BytesColumn.from_bytes(values[:3]), BytesColumn.from_bytes(values[3:])]
    col = BytesColumn.concat(parts).take(np.array([6, 0, 3, 1, 5, 2, 4]))  # two buffers, reordered
    assert isinstance(col, BytesColumn) and col.buf_idx is not None
    expect = [values[i] for i in (6, 0, 3, 1, 5, 2, 4)]
    plain = {"blob": np.array(expect, dtype=object), "id": np.arange(7)}
    want = to_torch(plain, bytes_as, _shared=False)
    got = to_torch({"blob": col, "id": np.arange(7)}, bytes_as, _shared=False)
    assert _same(got, want)
    packed = shared.pack({"blob": col, "id": np.arange(7)}, bytes_as, threshold=threshold)
    assert _same(packed.unpack(), want)


def _fresh_sender(monkeypatch):
    """This process's sender as a new worker's (its slots are unlinked by the test)."""
    monkeypatch.setattr(shared, "_sender", None)


def _slot_segments(prefix: str) -> list[str]:
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefix))


def _mine() -> list[str]:
    """The slots of this process's sender."""
    return _slot_segments(shared._sender.prefix)


@pytest.fixture
def own_sender(monkeypatch):
    _fresh_sender(monkeypatch)
    yield
    if shared._sender is not None:
        prefix = shared._sender.prefix
        shared._sender.close()
        assert _slot_segments(prefix) == []


def test_a_slot_is_reused_only_after_the_batch_was_copied_out(own_sender):
    rng = np.random.default_rng(0)
    first = {"s": np.array([rng.bytes(100_000) for _ in range(4)], dtype=object)}
    second = {"s": np.array([rng.bytes(100_000) for _ in range(4)], dtype=object)}
    p1 = shared.pack(first)
    p2 = shared.pack(second)  # p1 not copied out yet: another slot
    assert p1.payload[0] == p2.payload[0] == "f" and p1.payload[2] != p2.payload[2]
    out1 = pickle.loads(pickle.dumps(p1))  # copied out; slot 1 is free again
    p3 = shared.pack(second)
    assert p3.payload[2] == p1.payload[2]
    assert out1["s"] == first["s"].tolist()  # what was handed out is its own memory
    assert p2.unpack()["s"] == p3.unpack()["s"] == second["s"].tolist()
    assert _mine() == sorted([p1.payload[2], p2.payload[2]])
    held = tpudata.info().pooled_bytes["dataloader_shared_memory"]
    assert held >= shared._sender.slot_bytes() >= 2 * 400_000  # the two slots, and mapped here


def test_while_the_main_process_holds_every_slot_batches_still_arrive_whole(own_sender):
    rng = np.random.default_rng(1)
    batches = [{"x": rng.standard_normal((64, 100)), "s": [rng.bytes(70_000)]}
               for _ in range(shared.MAX_SLOTS + 3)]
    packed = [shared.pack(b) for b in batches]
    kinds = [p.payload[0] for p in packed]
    assert kinds == ["f"] * shared.MAX_SLOTS + ["i"] * 3  # then inline, never more memory
    assert len(_mine()) == shared.MAX_SLOTS
    for b, p in zip(batches, packed):
        out = pickle.loads(pickle.dumps(p))
        assert torch.equal(out["x"], torch.from_numpy(b["x"])) and out["s"] == b["s"]
        assert out["x"].numpy().flags.writeable and out["x"].numpy().flags.c_contiguous
    assert shared.pack(batches[0]).payload[0] == "f"  # all free again


@pytest.mark.skipif(not hasattr(os, "posix_fallocate"), reason="no posix_fallocate here")
def test_without_shared_memory_pack_says_so_and_the_batch_goes_the_ordinary_way(
        own_sender, monkeypatch, caplog):
    def no_room(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", no_room)
    assert shared.pack({"n": np.arange(100_000)}) is None
    assert "pickling it instead" in caplog.text and "/dev/shm" in caplog.text
    assert _mine() == []


_NO_TRACKER = textwrap.dedent("""
    import os, pickle, signal, sys
    import numpy as np
    from multiprocessing import resource_tracker
    from tpudata.torch import shared

    p = shared.pack({"x": np.arange(1 << 16), "s": np.array([b"y" * 70_000], dtype=object)})
    out = pickle.loads(pickle.dumps(p))
    assert out["x"].sum().item() == sum(range(1 << 16)) and out["s"] == [b"y" * 70_000]
    assert resource_tracker._resource_tracker._pid is None, "a resource tracker was started"
    print(p.payload[2], flush=True)
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
""")


def test_slots_need_no_resource_tracker_and_are_gone_when_the_worker_exits_or_is_killed():
    ended = subprocess.run([sys.executable, "-c", _NO_TRACKER, "exit"], capture_output=True,
                           text=True, timeout=120)
    assert ended.returncode == 0, ended.stderr
    assert not os.path.exists(f"/dev/shm/{ended.stdout.strip()}")  # unlinked at exit
    killed = subprocess.run([sys.executable, "-c", _NO_TRACKER, "kill"], capture_output=True,
                            text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL
    name = killed.stdout.strip()
    assert os.path.exists(f"/dev/shm/{name}")  # a killed worker could not unlink its slot ...
    receiver = _shm_transport.Receiver(sweep_prefix=shared.PREFIX)
    sender = _shm_transport.Sender(f"{shared.PREFIX}{os.getpid()}_test_", flag=True)
    try:
        payload, _ = sender.encode({"x": np.arange(1 << 16)})
        assert receiver.decode(payload)["x"].sum() == sum(range(1 << 16))
        assert not os.path.exists(f"/dev/shm/{name}")  # ... the main process removes it
    finally:
        receiver.close()
        sender.close()


def _write_big(directory, n=48, seed=0) -> tuple[list[str], list[bytes]]:
    rng = np.random.default_rng(seed)
    payloads = [rng.bytes(int(k)) for k in rng.integers(10_000, 60_000, n)]
    files = []
    for k in range(4):
        url = f"{directory}/big-{k:05d}-of-00004"
        tpudata.write_records(url, [tpudata.encode_example({"id": i, "blob": payloads[i]})
                                    for i in range(k, n, 4)])
        files.append(url)
    return files, payloads


SPEC = {"id": tpudata.FixedLenFeature([], np.int64), "blob": tpudata.FixedLenFeature([], bytes)}


def _parse(ds, split):
    return ds.parse(SPEC)


def _parse_records(records):
    return tpudata.parse_examples(records, SPEC)


@pytest.mark.parametrize("bytes_as", ["list", "tensor"])
@pytest.mark.parametrize("kind", ["stream", "source"])
def test_big_records_from_workers_stay_intact(tmp_path, bytes_as, kind):
    files, payloads = _write_big(str(tmp_path))
    if kind == "stream":
        ds = TFRecordIterable(files, 4, pipeline=_parse, num_workers=2, rank=0, world_size=1,
                              progress=False, bytes_as=bytes_as)
    else:
        ds = SourceIterable(tpudata.TFRecordSource(files, progress=False), 4,
                            transform=_parse_records, num_workers=2, rank=0, world_size=1,
                            bytes_as=bytes_as, seed=3)
    before = _slot_segments(shared.PREFIX)
    # all batches are kept while the workers reuse their slots for later ones
    it = iter(DataLoader(ds, batch_size=None, num_workers=2,
                         multiprocessing_context="forkserver", prefetch_factor=4))
    batches = [next(it)]
    assert len(_slot_segments(shared.PREFIX)) > len(before)  # the workers' slots
    batches += list(it)
    got = {}
    for b in batches:
        blobs = b["blob"]
        assert isinstance(blobs, ByteStrings if bytes_as == "tensor" else list)
        if bytes_as == "tensor":
            assert not blobs.values.is_shared()  # owned by this process, not a view of a block
        for i, w, blob in zip(b["id"].tolist(), b["weight"].tolist(), list(blobs)):
            if w:
                got[i] = blob
    assert got == dict(enumerate(payloads))
    assert _slot_segments(shared.PREFIX) == before  # the workers unlinked theirs as they exited


def _collate_sees(batch):
    assert isinstance(batch, dict), type(batch)
    return batch


def test_shared_memory_false_gives_plain_dicts_in_the_worker(tmp_path):
    files, payloads = _write_big(str(tmp_path), n=16)
    ds = TFRecordIterable(files, 4, pipeline=_parse, num_workers=2, rank=0, world_size=1,
                          progress=False, shared_memory=False)
    loader = DataLoader(ds, batch_size=None, num_workers=2, collate_fn=_collate_sees,
                        multiprocessing_context="forkserver")
    ids = [i for b in loader for i, w in zip(b["id"].tolist(), b["weight"].tolist()) if w]
    assert sorted(ids) == list(range(16))
