"""tpudata.shards: planning, atomic shard writes, manifests, resume, executors, stream writing."""

from __future__ import annotations

import logging
import math
import os
from concurrent.futures import ThreadPoolExecutor

import crc32c as crc32c_pkg
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpudata
from tpudata.shards import (
    InlineExecutor,
    build_shards,
    plan_by_count,
    plan_by_size,
    plan_shards,
    read_manifest,
    shard_name,
    verify_manifest,
    write_shards,
)
from tpudata.shards.manifest import journal_name

ITEMS = [f"item-{i}" for i in range(23)]


def encode_item(item: str) -> bytes:
    """A module-level (picklable) encoder: an Example whose size varies with the item."""
    i = int(item.split("-")[1])
    return tpudata.encode_example({"id": i, "name": item, "pad": b"x" * (i * 37 % 500)})


class FailOn:
    """Encoder that raises on one item (picklable)."""

    fingerprint = "test-encoder"  # the same as a good run's, so a rerun can resume

    def __init__(self, bad: str):
        self.bad = bad

    def __call__(self, item):
        if item == self.bad:
            raise KeyError(f"cannot encode {item}")
        return encode_item(item)


class GoodEncoder:
    fingerprint = "test-encoder"

    def __call__(self, item):
        return encode_item(item)


def _files(directory) -> dict[str, bytes]:
    return {n: open(os.path.join(directory, n), "rb").read() for n in sorted(os.listdir(directory))}


def _shards(directory) -> dict[str, bytes]:
    return {n: b for n, b in _files(directory).items() if "-of-" in n}


def _no_leftovers(directory) -> bool:
    return not [n for n in os.listdir(directory) if ".tmp-" in n or n.endswith(".partial.json")]


# -- planning -------------------------------------------------------------------------------------
@given(st.integers(0, 5000), st.integers(1, 300))
def test_plan_by_count_is_contiguous_and_balanced(n, k):
    plan = plan_by_count(n, k)
    assert len(plan) == k
    assert plan[0][0] == 0 and plan[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(plan, plan[1:]))
    sizes = [b - a for a, b in plan]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


@settings(max_examples=200)
@given(st.lists(st.integers(0, 10_000), max_size=300), st.integers(1, 50_000))
def test_plan_by_size_count_and_balance(sizes, target):
    plan = plan_by_size(sizes, target)
    n, total = len(sizes), sum(sizes)
    assert len(plan) == max(1, min(n, math.ceil(total / target))) if n else len(plan) == 1
    assert plan[0][0] == 0 and plan[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(plan, plan[1:]))
    if len(plan) > 1:
        assert all(b > a for a, b in plan)  # no empty shard
        share = total / len(plan)
        biggest = max(sizes)
        assert all(sum(sizes[a:b]) <= share + 2 * biggest for a, b in plan)


def test_plan_shards_arguments():
    assert plan_shards(10, num_shards=2) == [(0, 5), (5, 10)]
    assert plan_shards(3, target_shard_bytes=100, item_sizes=[84, 84, 84]) == [(0, 1), (1, 2), (2, 3)]
    with pytest.raises(ValueError, match="not both"):
        plan_shards(3, num_shards=1, target_shard_bytes=10)
    with pytest.raises(ValueError, match="item sizes up front"):
        plan_shards(3, target_shard_bytes=10)
    with pytest.raises(ValueError, match="positive"):
        plan_by_count(3, 0)
    assert shard_name("train", 3, 1024) == "train-00003-of-01024"
    with pytest.raises(ValueError):
        shard_name("train", 4, 4)
    with pytest.raises(ValueError, match="prefix"):
        build_shards([], encode_item, "memory://x", "a/b", num_shards=1)


# -- building -------------------------------------------------------------------------------------
def test_build_writes_shards_manifest_and_nothing_else(tmp_path):
    out = str(tmp_path)
    result = build_shards(ITEMS, encode_item, out, "train", num_shards=4, workers=1,
                          schema={"id": tpudata.FixedLenFeature([], np.int64)},
                          metadata={"note": "test"})
    names = [f"train-{i:05d}-of-00004" for i in range(4)]
    assert sorted(os.listdir(out)) == sorted(names + ["train.manifest.json"])
    records = [r for n in names for r in tpudata.read_records(os.path.join(out, n))]
    assert records == [encode_item(i) for i in ITEMS]  # in order
    m = read_manifest(os.path.join(out, "train.manifest.json"))
    assert [(s.name, s.records) for s in m.shards] == list(zip(names, [6, 6, 6, 5]))
    for s in m.shards:
        data = open(os.path.join(out, s.name), "rb").read()
        assert (s.bytes, s.crc32c) == (len(data), crc32c_pkg.crc32c(data))
    assert m.num_records == 23 and m.metadata == {"note": "test"}
    assert m.schema == {"id": {"type": "fixed", "dtype": "int64", "shape": []}}
    assert m.features() == {"id": tpudata.FixedLenFeature([], np.int64)}
    assert verify_manifest(os.path.join(out, "train.manifest.json")) == []
    assert result.written == 4 and result.skipped == 0 and result.records_written == 23
    assert result.files == [os.path.join(out, n) for n in names]


def test_target_bytes_plans_the_count_up_front(tmp_path):
    sizes = [len(encode_item(i)) for i in ITEMS]
    target = 2000
    result = build_shards(ITEMS, encode_item, str(tmp_path), "t", target_shard_bytes=target,
                          item_sizes=sizes, workers=1)
    expected = math.ceil(sum(s + 16 for s in sizes) / target)
    assert result.manifest.num_shards == expected
    assert all(s.name.endswith(f"-of-{expected:05d}") for s in result.manifest.shards)
    assert sum(s.bytes for s in result.manifest.shards) == sum(s + 16 for s in sizes)


def test_same_bytes_for_any_worker_count_and_executor(tmp_path):
    one = build_shards(ITEMS, encode_item, str(tmp_path / "one"), "d", num_shards=5, workers=1)
    build_shards(ITEMS, encode_item, str(tmp_path / "procs"), "d", num_shards=5, workers=2)
    with ThreadPoolExecutor(3) as pool:
        build_shards(ITEMS, encode_item, str(tmp_path / "threads"), "d", num_shards=5,
                     executor=pool, max_in_flight=2)
    want = _files(tmp_path / "one")
    assert len(want) == 6 and one.written == 5
    assert _files(tmp_path / "procs") == want
    assert _files(tmp_path / "threads") == want


def test_rerun_keeps_complete_shards_and_rebuilds_damaged_ones(tmp_path):
    out = str(tmp_path)
    build_shards(ITEMS, encode_item, out, "r", num_shards=4, workers=1)
    before = _files(out)
    stamps = {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in before}
    again = build_shards(ITEMS, encode_item, out, "r", num_shards=4, workers=1)
    assert (again.skipped, again.written) == (4, 0)
    assert _files(out) == before
    assert all(os.stat(os.path.join(out, n)).st_mtime_ns == t for n, t in stamps.items()
               if "-of-" in n)  # shards were not rewritten
    # damage one shard (same size), delete another: exactly those two are rebuilt
    damaged = os.path.join(out, "r-00001-of-00004")
    data = bytearray(open(damaged, "rb").read())
    data[40] ^= 0xFF
    open(damaged, "wb").write(bytes(data))
    os.remove(os.path.join(out, "r-00003-of-00004"))
    third = build_shards(ITEMS, encode_item, out, "r", num_shards=4, workers=1)
    assert (third.skipped, third.written) == (2, 2)
    assert _files(out) == before


def test_changed_inputs_are_rebuilt(tmp_path):
    out = str(tmp_path)
    build_shards(ITEMS, encode_item, out, "c", num_shards=2, workers=1)
    changed = ITEMS[:-1] + ["item-99"]  # only the last shard's items differ
    result = build_shards(changed, encode_item, out, "c", num_shards=2, workers=1)
    assert (result.skipped, result.written) == (1, 1)
    assert [r for n in sorted(_shards(out)) for r in tpudata.read_records(os.path.join(out, n))] \
        == [encode_item(i) for i in changed]
    # resume=False rebuilds everything
    assert build_shards(changed, encode_item, out, "c", num_shards=2, workers=1,
                        resume=False).written == 2


def test_a_failing_shard_leaves_no_partial_file_and_resumes(tmp_path):
    out = str(tmp_path / "out")
    with pytest.raises(KeyError, match="item-13") as info:
        build_shards(ITEMS, FailOn("item-13"), out, "f", num_shards=4, workers=1)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "item 1 of shard f-00002-of-00004" in notes and "run the same build again" in notes
    # shards 0 and 1 are complete; shard 2 failed and the rest never started
    assert sorted(_shards(out)) == ["f-00000-of-00004", "f-00001-of-00004"]
    assert not os.path.exists(os.path.join(out, "f.manifest.json"))
    assert [s.name for s in read_manifest(os.path.join(out, journal_name("f"))).shards] == \
        ["f-00000-of-00004", "f-00001-of-00004"]
    assert not [n for n in os.listdir(out) if ".tmp-" in n]
    result = build_shards(ITEMS, GoodEncoder(), out, "f", num_shards=4, workers=1)
    assert (result.skipped, result.written) == (2, 2)
    assert _no_leftovers(out)
    reference = build_shards(ITEMS, GoodEncoder(), str(tmp_path / "ref"), "f", num_shards=4,
                             workers=1)
    assert _shards(out) == _shards(tmp_path / "ref") and reference.written == 4


def test_leftover_temporaries_are_removed_but_not_other_prefixes(tmp_path):
    out = tmp_path
    (out / ".a-00000-of-00002.tmp-123456").write_bytes(b"partial")
    (out / ".a.manifest.json.tmp-abc").write_bytes(b"partial")
    (out / ".b-00000-of-00002.tmp-123456").write_bytes(b"someone else's")
    build_shards(ITEMS, encode_item, str(out), "a", num_shards=2, workers=1)
    assert sorted(os.listdir(out)) == [".b-00000-of-00002.tmp-123456", "a-00000-of-00002",
                                       "a-00001-of-00002", "a.manifest.json"]


def test_stale_shards_of_another_plan_are_reported(tmp_path, caplog):
    build_shards(ITEMS, encode_item, str(tmp_path), "s", num_shards=3, workers=1)
    with caplog.at_level(logging.WARNING, logger="tpudata.shards.journal"):
        build_shards(ITEMS, encode_item, str(tmp_path), "s", num_shards=2, workers=1)
    assert "3 file(s)" in caplog.text and "from another build" in caplog.text
    assert read_manifest(str(tmp_path / "s.manifest.json")).num_shards == 2


def test_memory_filesystem_and_compression(memfs):
    out = "memory://shards/out"
    result = build_shards(ITEMS, encode_item, out, "g", num_shards=3, workers=1,
                          compression="GZIP")
    assert result.manifest.compression == "GZIP"
    files = sorted(memfs.ls("/shards/out", detail=False))
    assert files == ["/shards/out/g-00000-of-00003", "/shards/out/g-00001-of-00003",
                     "/shards/out/g-00002-of-00003", "/shards/out/g.manifest.json"]
    got = [r for u in result.files for r in tpudata.read_records(u)]
    assert got == [encode_item(i) for i in ITEMS]
    assert memfs.cat_file(files[0])[:2] == b"\x1f\x8b"
    assert verify_manifest(out + "/g.manifest.json") == []
    again = build_shards(ITEMS, encode_item, out, "g", num_shards=3, workers=1, compression="GZIP")
    assert again.skipped == 3


def test_inline_executor_reports_errors():
    future = InlineExecutor().submit(int, "x")
    with pytest.raises(ValueError):
        future.result()


# -- streams --------------------------------------------------------------------------------------
RECORDS = [encode_item(i) for i in ITEMS]


def test_write_shards_sequence_by_count_and_by_size(tmp_path):
    r = write_shards(RECORDS, str(tmp_path / "a"), "s", num_shards=4)
    assert [s.records for s in r.manifest.shards] == [6, 6, 6, 5]
    r = write_shards(RECORDS, str(tmp_path / "b"), "s", target_shard_bytes=2500)
    want = math.ceil(sum(len(x) + 16 for x in RECORDS) / 2500)
    assert r.manifest.num_shards == want
    assert [x for u in r.files for x in tpudata.read_records(u)] == RECORDS


def test_write_shards_iterator_needs_a_count(tmp_path):
    with pytest.raises(ValueError, match="num_records"):
        write_shards(iter(RECORDS), str(tmp_path), "s", num_shards=2)
    r = write_shards(iter(RECORDS), str(tmp_path), "s", num_shards=2, num_records=23)
    assert [s.records for s in r.manifest.shards] == [12, 11]
    with pytest.raises(ValueError, match="ended after 23 records"):
        write_shards(iter(RECORDS), str(tmp_path / "short"), "s", num_shards=2, num_records=30)
    assert not os.path.exists(tmp_path / "short" / "s.manifest.json")
    assert sorted(_shards(tmp_path / "short")) == ["s-00000-of-00002"]  # only the complete one
    with pytest.raises(ValueError, match="more than num_records"):
        write_shards(iter(RECORDS), str(tmp_path / "long"), "s", num_shards=2, num_records=20)


@pytest.mark.parametrize("root", ["local", "memory://rolling"])
def test_write_shards_unsized_stream_rolls_over_and_renames(tmp_path, memfs, root):
    out = str(tmp_path) if root == "local" else root
    target = 3000
    r = write_shards((x for x in RECORDS), out, "roll", target_shard_bytes=target)
    n = r.manifest.num_shards
    assert n > 1 and [s.name for s in r.manifest.shards] == [shard_name("roll", i, n) for i in range(n)]
    assert all(s.bytes <= target for s in r.manifest.shards)
    assert [x for u in r.files for x in tpudata.read_records(u)] == RECORDS
    if root == "local":
        assert sorted(os.listdir(out)) == sorted([s.name for s in r.manifest.shards] + ["roll.manifest.json"])
    else:
        assert len(memfs.ls("/rolling", detail=False)) == n + 1


def test_write_shards_resume_compares_content(tmp_path):
    out = str(tmp_path)
    write_shards(RECORDS, out, "w", num_shards=3)
    stamps = {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in _shards(out)}
    again = write_shards(RECORDS, out, "w", num_shards=3)
    assert (again.skipped, again.written) == (3, 0)
    assert {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in _shards(out)} == stamps
    changed = RECORDS[:-1] + [b"different"]
    third = write_shards(changed, out, "w", num_shards=3)
    assert (third.skipped, third.written) == (2, 1)
    assert list(tpudata.read_records(os.path.join(out, "w-00002-of-00003")))[-1] == b"different"
    assert _no_leftovers(out)


# -- orphans --------------------------------------------------------------------------------------
def slow_encoder(item: str) -> bytes:
    """Announces its worker's pid in directory ``item``, then works "forever"."""
    import time

    open(os.path.join(item, str(os.getpid())), "w").close()
    time.sleep(120)
    return b""


_BUILDER = """
import sys
sys.path.insert(0, sys.argv[2])
from tests.test_shards import slow_encoder
import tpudata
tpudata.build_shards([sys.argv[1]] * 2, slow_encoder, sys.argv[1] + "/out", "o", num_shards=2,
                     workers=2, progress=False)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="counts processes through /proc")
def test_pool_workers_die_with_a_killed_builder(tmp_path):
    """SIGKILL the build_shards process: none of its pool workers may live on."""
    import signal
    import subprocess
    import sys
    import time

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parent = subprocess.Popen([sys.executable, "-c", _BUILDER, str(tmp_path), root])
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(workers) < 2 and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.1)
            workers = [int(n) for n in os.listdir(tmp_path) if n.isdigit()]
        assert len(workers) == 2, "the pool workers never started their tasks"
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        survivors = [w for w in workers if _alive(w)]
        assert survivors == []
    finally:
        if parent.poll() is None:
            parent.kill()
        for w in workers:
            if _alive(w):
                os.kill(w, signal.SIGKILL)
