"""gs:// writes as parallel composite uploads (tpudata._upload) against fake_gcs.

Behaviour only, no timings: the object appears whole or not at all (a reader listing during the
upload never sees its name early), several parts are uploaded at once, the parts are gone
afterwards, transient 429/503s are retried and a final failure names the object, and a build
killed mid-upload leaves no partial shard and completes when run again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest
import requests

from fake_gcs import Knobs
from fake_gcs.pytest_plugin import fake_gcs_server  # noqa: F401  (fixture)
from tpudata import _upload, storage
from tpudata.errors import StorageError

BUCKET = "upload-bucket"
KIB = 1024
PART = 256 * KIB  # the smallest part size: small objects still make many parts


@pytest.fixture
def fs(fake_gcs_server):  # noqa: F811
    fs = storage.gcs_filesystem()
    fs.mkdir(BUCKET)
    return fs


@pytest.fixture
def fast_retries(monkeypatch):
    monkeypatch.setattr(_upload, "BACKOFF", _upload.Backoff(initial=0.01, maximum=0.05, attempts=4))


def _names(fs, prefix: str = "") -> list[str]:
    fs.invalidate_cache()
    return sorted(p.split("/", 1)[1] for p in fs.find(f"{BUCKET}/{prefix}"))


def _write(url: str, data: bytes, piece: int = 100_000, **options) -> None:
    with storage.open_atomic(url, **options) as f:
        for i in range(0, len(data), piece):
            f.write(data[i:i + piece])


def _retry_test(server, instructions: dict) -> dict:
    r = requests.post(f"{server.url}/retry_test", json={"instructions": instructions}, timeout=10)
    assert r.status_code == 200, r.text
    # every request of this filesystem carries the id; only the named methods are affected
    return {"session_kwargs": {"headers": {"x-retry-test-id": r.json()["id"]}}}


def _completed(server, options: dict) -> bool:
    tid = options["session_kwargs"]["headers"]["x-retry-test-id"]
    return requests.get(f"{server.url}/retry_test/{tid}", timeout=10).json()["completed"]


@pytest.mark.parametrize("size", [0, 7, PART - 1, PART, PART + 1, 3 * PART + 5, 40 * PART + 3])
def test_round_trip_leaves_only_the_object(fake_gcs_server, fs, size):  # noqa: F811
    data = os.urandom(size)
    url = f"gs://{BUCKET}/d/obj"
    _write(url, data, parallel=3, part_size=PART)
    assert storage.read_bytes(url) == data
    assert _names(fs) == ["d/obj"]  # the parts went with the compose
    composes = fake_gcs_server.stats()["requests"]["by_api"].get("storage.objects.compose", 0)
    # under one part: one upload straight to the name; 40 parts: a tree (2 of 32 + 1)
    assert composes == (0 if size < PART else 3 if size > 32 * PART else 1)
    info = fs.info(f"{BUCKET}/d/obj")
    assert int(info["size"]) == size and info.get("crc32c")


def test_readers_never_see_the_name_before_it_is_complete(fake_gcs_server, fs):  # noqa: F811
    fake_gcs_server.knobs = Knobs(latency_ms=5, bandwidth_mbps=8)  # ~1 s of uploads
    data = os.urandom(8 << 20)
    url = f"gs://{BUCKET}/out/train-00000-of-00001"
    seen: list[tuple[str, int]] = []  # (name, size) of every listing entry
    closed = threading.Event()
    listed_after_close = threading.Event()
    listings = []

    def lister() -> None:
        lfs = storage.gcs_filesystem(skip_instance_cache=True)
        while not listed_after_close.is_set():
            after = closed.is_set()
            lfs.invalidate_cache()
            found = lfs.find(f"{BUCKET}/out", detail=True)
            seen.extend((path.rsplit("/", 1)[1], int(e["size"])) for path, e in found.items())
            listings.append(after)
            if after:
                listed_after_close.set()

    thread = threading.Thread(target=lister)
    thread.start()
    try:
        _write(url, data, parallel=4, part_size=1 << 20)
    finally:
        closed.set()
        thread.join()
    finals = [size for name, size in seen if name == "train-00000-of-00001"]
    temps = {name for name, _ in seen if name != "train-00000-of-00001"}
    assert listings.count(False) > 1  # it really listed during the upload
    assert finals and all(size == len(data) for size in finals)  # never a partial object
    assert temps and all(name.startswith(".train-00000-of-00001.tmp-") for name in temps)
    assert storage.glob(f"gs://{BUCKET}/out/train-*") == [url]  # the temporaries are hidden


def test_parts_are_uploaded_at_once(fake_gcs_server, fs):  # noqa: F811
    fake_gcs_server.knobs = Knobs(latency_ms=20, bandwidth_mbps=20)
    fake_gcs_server.reset_stats()
    _write(f"gs://{BUCKET}/big", os.urandom(6 << 20), parallel=4, part_size=1 << 20)
    stats = fake_gcs_server.stats()
    assert stats["in_flight"]["peak"] > 1  # several parts on their way together
    assert stats["requests"]["by_api"]["storage.objects.insert"] >= 6
    assert stats["requests"]["by_api"]["storage.objects.compose"] == 1
    assert _names(fs) == ["big"]


def test_parallel_zero_is_gcsfs_own_upload(fake_gcs_server, fs):  # noqa: F811
    data = os.urandom(6 << 20)
    _write(f"gs://{BUCKET}/seq", data, parallel=0)
    assert storage.read_bytes(f"gs://{BUCKET}/seq") == data
    assert "storage.objects.compose" not in fake_gcs_server.stats()["requests"]["by_api"]


def test_transient_errors_are_retried(fake_gcs_server, fs, fast_retries):  # noqa: F811
    options = _retry_test(fake_gcs_server, {
        "storage.objects.insert": ["return-503", "return-429", "return-reset-connection"],
        "storage.objects.compose": ["return-503", "return-429"],
    })
    data = os.urandom(5 * PART + 11)
    _write(f"gs://{BUCKET}/retried", data, parallel=2, part_size=PART, **options)
    assert storage.read_bytes(f"gs://{BUCKET}/retried") == data
    assert _completed(fake_gcs_server, options)
    assert _names(fs) == ["retried"]


def test_a_compose_whose_answer_was_lost_is_found_done(fake_gcs_server, fs, fast_retries):  # noqa: F811
    # the first try composes and deletes the sources, but the client never hears back (503 on
    # the retry path is what reaches it): the retry's 404 on the sources finds the object whole
    for name in ("a", "b"):
        fs.pipe_file(f"{BUCKET}/{name}", name.encode() * 10)
    first = _upload._run(fs, _upload._compose(fs, BUCKET, ["a", "b"], "ab", 20, None))
    options = _retry_test(fake_gcs_server, {"storage.objects.compose": ["return-503"]})
    lfs = storage.gcs_filesystem(**options)
    crc = _upload._crc_of(first)
    again = _upload._run(lfs, _upload._compose(lfs, BUCKET, ["a", "b"], "ab", 20, crc))
    assert again["generation"] == first["generation"]
    with pytest.raises(FileNotFoundError):  # a different object under the name is not "done"
        _upload._run(fs, _upload._compose(fs, BUCKET, ["a", "b"], "ab", 21, crc))


def test_a_final_failure_names_the_object_and_leaves_nothing(fake_gcs_server, fs, fast_retries):  # noqa: F811
    options = _retry_test(fake_gcs_server, {"storage.objects.compose": ["return-503"] * 4})
    url = f"gs://{BUCKET}/out/failed"
    with pytest.raises(StorageError) as info:
        _write(url, os.urandom(3 * PART), parallel=2, part_size=PART, **options)
    assert url in str(info.value) and info.value.url == url
    assert "503" in str(info.value)
    assert _names(fs) == []  # no object, and the parts were deleted

    options = _retry_test(fake_gcs_server, {"storage.objects.insert": ["return-503"] * 20})
    with pytest.raises(StorageError) as info:
        _write(url, os.urandom(3 * PART), parallel=2, part_size=PART, **options)
    assert url in str(info.value) and ".part-" in str(info.value)
    assert _names(fs) == []


def test_a_missing_bucket_is_named(fake_gcs_server, fs):  # noqa: F811
    url = "gs://no-such-bucket-here/x"
    with pytest.raises(StorageError, match="no-such-bucket-here"):
        _write(url, os.urandom(3 * PART), parallel=2, part_size=PART)


def test_an_error_in_the_block_deletes_the_parts(fake_gcs_server, fs):  # noqa: F811
    with pytest.raises(KeyError):
        with storage.open_atomic(f"gs://{BUCKET}/aborted", parallel=2, part_size=PART) as f:
            f.write(os.urandom(5 * PART))
            raise KeyError("stop")
    assert _names(fs) == []


_BUILD = textwrap.dedent("""
    import sys
    from tpudata.shards import build_shards

    def encode(i):
        return (b"%08d" % i) * 4096  # 32 KiB records, the same in every run

    build_shards(range(512), encode, sys.argv[1], "train", num_shards=4, workers=1,
                 progress=False)
""")


def _run_build(out: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _BUILD, out], env=env)


def test_a_killed_build_leaves_no_partial_shard_and_resumes(fake_gcs_server, fs, tmp_path):  # noqa: F811
    out = f"gs://{BUCKET}/built"
    local = str(tmp_path / "local")
    env = {**os.environ, "TPUDATA_GCS_UPLOAD_PARALLEL": "2", "TPUDATA_GCS_UPLOAD_PART_MIB": "1"}
    assert _run_build(local, env).wait(60) == 0  # the same build on local disk, to compare with
    expected = {os.path.basename(p): open(p, "rb").read() for p in storage.glob(f"{local}/train-*")}
    assert len(expected) == 4 and all(len(b) > 3 << 20 for b in expected.values())

    fake_gcs_server.knobs = Knobs(latency_ms=10, bandwidth_mbps=6)  # ~0.4 s a shard
    proc = _run_build(out, env)
    try:
        while True:  # until parts of the second shard are on the server: killed mid-upload
            names = _names(fs, "built/")
            if any(n.startswith("built/.train-00001-of-00004.tmp-") for n in names):
                break
            assert proc.poll() is None, "the build finished before it could be killed"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    fake_gcs_server.knobs = Knobs()
    left = _names(fs, "built/")
    assert any(".tmp-" in n for n in left)  # the killed upload's parts are still there...
    for name in left:  # ...but every shard under its final name is whole
        base = name.rsplit("/", 1)[1]
        if base in expected:
            assert fs.cat_file(f"{BUCKET}/{name}") == expected[base]
    assert "built/train-00003-of-00004" not in left

    assert _run_build(out, env).wait(60) == 0  # the rerun sweeps the parts and finishes
    after = _names(fs, "built/")
    assert [n for n in after if n.startswith("built/train-")] == [f"built/{k}" for k in sorted(expected)]
    assert not any(".tmp-" in n for n in after) and "built/train.manifest.json" in after
    for base, data in expected.items():
        assert fs.cat_file(f"{BUCKET}/built/{base}") == data


# ------------------------------------------------------------ fake_gcs: compose deleteSourceObjects
def test_compose_can_delete_its_sources(raw):
    from tests.gcs.helpers import object_path, upload

    for name, data in (("s1", b"hello "), ("s2", b"world")):
        upload(raw, name, data)
    status, _, out = raw.json("POST", object_path("joined") + "/compose", {
        "sourceObjects": [{"name": "s1"}, {"name": "s2"}, {"name": "s1"}],
        "deleteSourceObjects": True})
    assert status == 200 and out["componentCount"] == 3
    assert raw("GET", object_path("joined") + "?alt=media")[2] == b"hello worldhello "
    assert raw("GET", object_path("s1"))[0] == 404 and raw("GET", object_path("s2"))[0] == 404
    # a versioned bucket keeps no noncurrent copy of them either
    raw.json("POST", "/storage/v1/b?project=p", {"name": "vbucket-up", "versioning": {"enabled": True}})
    upload(raw, "v1", b"abc", bucket="vbucket-up")
    assert raw.json("POST", object_path("vj", "vbucket-up") + "/compose", {
        "sourceObjects": [{"name": "v1"}], "deleteSourceObjects": True})[0] == 200
    _, _, listing = raw.json("GET", "/storage/v1/b/vbucket-up/o?versions=true")
    assert [i["name"] for i in listing["items"]] == ["vj"]
    # without it (or false) the sources stay; a non-boolean is a bad request
    upload(raw, "k", b"k")
    assert raw.json("POST", object_path("kj") + "/compose",
                    {"sourceObjects": [{"name": "k"}], "deleteSourceObjects": False})[0] == 200
    assert raw("GET", object_path("k"))[0] == 200
    status, _, _ = raw.json("POST", object_path("kj") + "/compose",
                            {"sourceObjects": [{"name": "k"}], "deleteSourceObjects": "yes"})
    assert status == 400 and raw("GET", object_path("k"))[0] == 200


# ------------------------------------------------------------ builds: lanes
def test_lane_sizes():
    from tpudata.shards.builder import lane_size

    assert lane_size("/tmp/x", 100, 4) == 1 and lane_size("memory://x", 100, 1) == 1
    assert lane_size("gs://b/x", 100, 4) == 4 and lane_size("gs://b/x", 8, 4) == 2
    assert lane_size("gs://b/x", 3, 4) == 1 and lane_size("gs://b/x", 1024, 1024) == 1


def _encode(i: int) -> bytes:
    return (b"%08d" % i) * 8192  # 64 KiB


def test_a_build_publishes_a_shard_while_writing_the_next(fake_gcs_server, fs, monkeypatch):  # noqa: F811
    from tpudata.shards import build_shards, read_manifest

    monkeypatch.setenv("TPUDATA_GCS_UPLOAD_PARALLEL", "2")
    monkeypatch.setenv("TPUDATA_GCS_UPLOAD_PART_MIB", "1")
    fake_gcs_server.knobs = Knobs(latency_ms=20, bandwidth_mbps=10)
    fake_gcs_server.reset_stats()
    out = f"gs://{BUCKET}/lanes"
    build_shards(range(192), _encode, out, "train", num_shards=4, workers=1, progress=False)
    stats = fake_gcs_server.stats()
    # one writer has at most 2 parts in flight: more means the next shard's parts went up while
    # the previous shard was still being published
    assert stats["in_flight"]["peak"] > 2
    assert stats["requests"]["by_api"]["storage.objects.compose"] == 4
    m = read_manifest(f"{out}/train.manifest.json")
    assert [s.records for s in m.shards] == [48] * 4
    assert not [n for n in _names(fs, "lanes/") if ".tmp-" in n]


class _FailOn:
    def __init__(self, bad: int):
        self.bad = bad

    def __call__(self, i: int) -> bytes:
        if i == self.bad:
            raise ValueError(f"cannot encode {i}")
        return _encode(i)


def test_a_failing_shard_in_a_lane_leaves_no_partial_object(fake_gcs_server, fs, monkeypatch):  # noqa: F811
    from tpudata.shards import build_shards

    monkeypatch.setenv("TPUDATA_GCS_UPLOAD_PART_MIB", "1")
    out = f"gs://{BUCKET}/failing"
    with pytest.raises(ValueError, match="cannot encode 100"):  # shard 2 of 4 (items 96..143)
        build_shards(range(192), _FailOn(100), out, "train", num_shards=4, workers=1,
                     progress=False)
    names = _names(fs, "failing/")
    assert not [n for n in names if ".tmp-" in n]  # the aborted shard's parts are gone
    assert "failing/train-00002-of-00004" not in names
    build_shards(range(192), _encode, out, "train", num_shards=4, workers=1, progress=False)
    names = _names(fs, "failing/")
    assert [n for n in names if "/train-" in n] == [
        f"failing/train-0000{i}-of-00004" for i in range(4)]
