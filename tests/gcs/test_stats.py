"""``GET /_stats`` and ``server.stats()``: round trips counted by kind, connection and keep-alive."""

from __future__ import annotations

import json

from tests.gcs.helpers import BUCKET, Raw, object_path, upload

DATA = bytes(range(256)) * 1024  # 256 KiB


def _stats(raw: Raw) -> dict:
    status, _, body = raw("GET", "/_stats")
    assert status == 200
    return json.loads(body)


def test_stats_count_requests_by_kind_and_reset(fake_gcs_server, raw):
    assert raw("POST", "/_stats/reset")[0] == 200  # after the fixture's request on this connection
    upload(raw, "a", DATA)
    assert raw("GET", object_path("a"))[0] == 200  # metadata
    assert raw("HEAD", object_path("a"))[0] == 200  # metadata
    assert raw("GET", object_path("a") + "?alt=media")[0] == 200  # media, whole
    assert raw("GET", object_path("a") + "?alt=media", headers={"Range": "bytes=0-99"})[0] == 206
    assert raw("GET", f"/storage/v1/b/{BUCKET}/o")[0] == 200  # list
    assert raw("GET", f"/storage/v1/b/{BUCKET}")[0] == 200  # metadata (bucket)
    assert raw("PATCH", object_path("a"), b"{}", {"Content-Type": "application/json"})[0] == 200
    assert raw("GET", object_path("missing"))[0] == 404
    got = _stats(raw)  # the same keep-alive connection: /_stats itself is not counted
    req = got["requests"]
    assert req["total"] == 9
    assert req["by_kind"] == {
        "metadata": 4, "list": 1, "media": 2, "upload": 1, "batch": 0, "emulator": 0, "other": 1
    }
    assert req["by_method"] == {"POST": 1, "GET": 6, "HEAD": 1, "PATCH": 1}
    assert req["by_api"]["storage.objects.get"] == 5 and req["by_api"]["storage.objects.insert"] == 1
    assert req["by_status"] == {"200": 7, "206": 1, "404": 1}
    assert req["ranged_reads"] == 1
    conns = got["connections"]
    assert conns["opened"] == 0 and conns["open"] == 1  # the connection predates the reset
    assert conns["requests_per_connection"] == {"9": 1} and conns["max_requests_per_connection"] == 9
    assert got["in_flight"] == {"current": 0, "peak": 1, "queued": 0, "peak_queued": 0}
    assert got["bytes"]["received"] == len(DATA) + 2 and got["bytes"]["sent"] >= len(DATA) + 100
    assert fake_gcs_server.stats()["requests"] == req  # the Python view is the same
    status, _, body = raw("POST", "/_stats/reset")
    assert status == 200 and json.loads(body)["requests"]["total"] == 0
    raw("GET", object_path("a"))
    assert _stats(raw)["requests"]["total"] == 1
    assert raw("DELETE", "/_stats")[0] == 200
    assert _stats(raw)["requests"]["total"] == 0


def test_stats_endpoint_errors_are_json_and_say_what_to_use(fake_gcs_server):
    raw = Raw(fake_gcs_server.url)
    status, _, body = raw("PUT", "/_stats", b"x")
    assert status == 405 and "POST /_stats/reset" in json.loads(body)["error"]["message"]
    status, _, body = raw("GET", "/_stats/nope")
    assert status == 404 and "GET /_stats" in json.loads(body)["error"]["message"]
    raw.close()
    assert fake_gcs_server.stats()["requests"]["total"] == 0


def test_each_new_connection_is_counted(fake_gcs_server):
    for n in (1, 3):
        raw = Raw(fake_gcs_server.url)
        for _ in range(n):
            assert raw("GET", "/storage/v1/b")[0] == 200
        raw.close()
    conns = fake_gcs_server.stats()["connections"]
    assert conns["opened"] == 2
    assert conns["requests_per_connection"] == {"1": 1, "3": 1}


def test_gcsfs_ranged_reads_ride_one_keep_alive_connection(gcsfs_fs, fake_gcs_server):
    path = f"{BUCKET}/ranges.bin"
    gcsfs_fs.pipe(path, DATA)
    gcsfs_fs.cat_file(path, start=0, end=10)  # the session's connection is open from here on
    fake_gcs_server.reset_stats()
    n = 12
    for i in range(n):
        start = i * 1000
        assert gcsfs_fs.cat_file(path, start=start, end=start + 500) == DATA[start : start + 500]
    got = fake_gcs_server.stats()
    assert got["requests"]["by_kind"]["media"] == n and got["requests"]["ranged_reads"] == n
    assert got["requests"]["by_kind"]["metadata"] == 0  # no stat before each read
    assert got["connections"]["opened"] == 0  # every read reused the kept-alive connection
    assert got["connections"]["max_requests_per_connection"] == n


def test_listing_pages_are_counted(gcs_client, gcs_bucket, fake_gcs_server):
    for i in range(10):
        gcs_bucket.blob(f"p/{i:02d}").upload_from_string(b"x")
    fake_gcs_server.reset_stats()
    names = [b.name for b in gcs_client.list_blobs(gcs_bucket, prefix="p/", page_size=4)]
    assert names == [f"p/{i:02d}" for i in range(10)]
    req = fake_gcs_server.stats()["requests"]
    assert req["by_kind"]["list"] == 3 and req["by_api"] == {"storage.objects.list": 3}  # 4 + 4 + 2
    assert req["total"] == 3
