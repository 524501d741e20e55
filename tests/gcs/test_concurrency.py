"""Many threads writing and reading one object: every read is one whole generation, never a mix."""

from __future__ import annotations

import os
import threading

import pytest

from fake_gcs import FakeGCSServer
from tests.gcs.helpers import Raw, bucket_with_object, object_path, upload

SIZE = 256 * 1024 + 3


def _content(token: int) -> bytes:
    return token.to_bytes(8, "big") * (SIZE // 8) + token.to_bytes(8, "big")[: SIZE % 8]


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_readers_never_see_torn_objects(tmp_path, backend):
    data_dir = tmp_path / "d" if backend == "disk" else None
    with FakeGCSServer(port=0, data_dir=data_dir) as server:
        setup = Raw(server.url)
        setup.json("POST", "/storage/v1/b?project=p", {"name": "race-bucket"})
        upload(setup, "hot", _content(0), bucket="race-bucket")
        written: dict[int, str] = {}  # token -> generation
        errors: list[str] = []
        seen: list[tuple[str, int]] = []
        stop = threading.Event()

        def writer(wid: int) -> None:
            raw = Raw(server.url)
            for i in range(12):
                token = wid * 1000 + i + 1
                gen = upload(raw, "hot", _content(token), bucket="race-bucket")["generation"]
                written[token] = gen
            raw.close()

        def reader(rid: int) -> None:
            raw = Raw(server.url)
            path = object_path("hot", "race-bucket") + "?alt=media"
            while not stop.is_set():
                ranged = rid % 2 == 1
                headers = {"Range": f"bytes={rid * 7}-{SIZE - 1 - rid}"} if ranged else {}
                status, h, body = raw("GET", path, headers=headers)
                first = (-rid * 7) % 8 if ranged else 0  # where the first whole token starts
                token = int.from_bytes(body[first : first + 8], "big")
                expect = _content(token)
                want = expect[rid * 7 : SIZE - rid] if ranged else expect
                if status not in (200, 206) or body != want:
                    errors.append(f"reader {rid}: torn or wrong body (status {status})")
                    return
                seen.append((h["x-goog-generation"], token))
            raw.close()

        writers = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
        readers = [threading.Thread(target=reader, args=(r,)) for r in range(10)]
        for t in readers + writers:
            t.start()
        for t in writers:
            t.join(60)
        stop.set()
        for t in readers:
            t.join(60)
        setup.close()
    assert not errors, errors[:3]
    assert len(written) == 72 and len(seen) > 50
    gen_of = {0: None, **written}
    for gen, token in seen:  # the generation header names the bytes that were served
        assert gen_of[token] in (None, gen)
    assert len({token for _, token in seen}) > 3  # readers really overlapped with writers


def test_64_concurrent_range_reads(fake_gcs_server):
    """64 connections reading ranges at once all get their bytes (the peer drops some here)."""
    data = bytes(range(256)) * 4096  # 1 MiB
    bucket_with_object(fake_gcs_server.url, "many-bucket", "o", data)
    results: dict[int, bool] = {}
    barrier = threading.Barrier(64)

    def read(i: int) -> None:
        raw = Raw(fake_gcs_server.url)
        barrier.wait(10)
        start = i * 16_001
        status, _, body = raw(
            "GET", object_path("o", "many-bucket") + "?alt=media", headers={"Range": f"bytes={start}-{start + 9999}"}
        )
        results[i] = status == 206 and body == data[start : start + 10_000]
        raw.close()

    threads = [threading.Thread(target=read, args=(i,)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 64 and all(results.values())


def test_pointed_at_sets_and_restores_environment(monkeypatch):
    from fake_gcs.pytest_plugin import pointed_at

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://elsewhere:1")
    monkeypatch.delenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", raising=False)
    with FakeGCSServer(port=0) as server, pointed_at(server):
        assert os.environ["STORAGE_EMULATOR_HOST"] == server.url
        assert os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] == "false"
        assert Raw(server.url)("GET", "/storage/v1/b")[0] == 200
    assert os.environ["STORAGE_EMULATOR_HOST"] == "http://elsewhere:1"
    assert "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT" not in os.environ
    with pytest.raises(OSError):  # a stopped server no longer answers
        Raw(server.url)("GET", "/storage/v1/b")
