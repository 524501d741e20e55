"""Hostile bodies and headers: bounded memory, exact multipart, strict lengths, 400 not 500."""

from __future__ import annotations

import json
import random
import socket
import time
import tracemalloc
from urllib.parse import urlsplit

import pytest

from fake_gcs import FakeGCSServer, Limits
from tests.gcs.helpers import BUCKET, Raw, object_path

ENDINGS = [b"\r", b"\r\n", b"\n", b"--", b"\r\n--", b"\n--", b"\r\r", b""]


def _connect(server) -> socket.socket:
    parts = urlsplit(server.url)
    return socket.create_connection((parts.hostname, parts.port), timeout=10)


def _exchange(server, data: bytes, wait: float = 10.0) -> bytes:
    """Send raw bytes; everything the server answers until it closes (or ``wait`` passes)."""
    with _connect(server) as sock:
        sock.sendall(data)
        sock.settimeout(wait)
        out = bytearray()
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except (socket.timeout, ConnectionError):
            pass
    return bytes(out)


def _status_lines(data: bytes) -> list[bytes]:
    return [line for line in data.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]


# ------------------------------------------------------------------ bounded memory
def _traced_growth(server, requests: list[bytes], settle: float = 0.6) -> int:
    """Bytes of Python memory the server holds while ``requests`` sit half-sent."""
    socks = []
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for data in requests:
            sock = _connect(server)
            sock.sendall(data)
            socks.append(sock)
        time.sleep(settle)
        return tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
        for sock in socks:
            sock.close()


def test_declared_sizes_allocate_nothing(fake_gcs_server, raw):
    host = urlsplit(fake_gcs_server.url).netloc
    status, headers, _ = raw.json(
        "POST", f"/upload/storage/v1/b/{BUCKET}/o?uploadType=resumable&name=big", {}
    )
    session = urlsplit(headers["location"])
    gib = 1 << 30
    chunk = (
        f"PUT {session.path}?{session.query} HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Range: bytes 0-{gib - 1}/*\r\nContent-Length: {gib}\r\n\r\n"
    ).encode() + b"x" * 100
    assert _traced_growth(fake_gcs_server, [chunk]) < 4 << 20  # was 1 GiB
    media = (
        f"POST /upload/storage/v1/b/{BUCKET}/o?uploadType=media&name=m HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Length: {8 << 20}\r\n\r\n"
    ).encode() + b"y" * 100
    # 64 idle 8 MiB uploads held 512 MiB; now at most one 1 MiB read piece each
    assert _traced_growth(fake_gcs_server, [media] * 64, settle=1.5) < 64 * (5 << 20) // 4
    assert raw("GET", object_path("m"))[0] == 404  # nothing half-sent was committed
    assert raw("GET", f"/storage/v1/b/{BUCKET}")[0] == 200  # and the server is fine


def test_idle_body_times_out(timed):
    with FakeGCSServer(port=0, limits=Limits(body_timeout_s=0.3)) as server:
        raw = Raw(server.url)
        assert raw.json("POST", "/storage/v1/b?project=p", {"name": BUCKET})[0] == 200
        host = urlsplit(server.url).netloc
        head = (
            f"POST /upload/storage/v1/b/{BUCKET}/o?uploadType=media&name=slow HTTP/1.1\r\n"
            f"Host: {host}\r\nContent-Length: 1000\r\n\r\n"
        ).encode()
        t0 = time.monotonic()
        answer = _exchange(server, head + b"z" * 10, wait=10)
        if timed:
            assert time.monotonic() - t0 < 5
        assert _status_lines(answer) == [b"HTTP/1.1 400 Bad Request"]
        assert raw("GET", object_path("slow"))[0] == 404


def test_trickling_body_times_out(timed):
    with FakeGCSServer(port=0, limits=Limits(body_timeout_s=0.5)) as server:
        raw = Raw(server.url)
        assert raw.json("POST", "/storage/v1/b?project=p", {"name": BUCKET})[0] == 200
        host = urlsplit(server.url).netloc
        head = (
            f"POST /upload/storage/v1/b/{BUCKET}/o?uploadType=media&name=trickle HTTP/1.1\r\n"
            f"Host: {host}\r\nContent-Length: 100000\r\n\r\n"
        ).encode()
        with _connect(server) as sock:
            sock.sendall(head)
            t0 = time.monotonic()
            answer = b""
            sock.settimeout(0.2)
            while time.monotonic() - t0 < 10 and not answer:
                try:
                    sock.sendall(b"t")  # a byte every 0.2 s: never idle for 0.5 s, but ~5 bytes/s
                    answer = sock.recv(65536)
                except socket.timeout:
                    continue
                except ConnectionError:
                    break
            if timed:
                assert time.monotonic() - t0 < 5
        assert _status_lines(answer) == [b"HTTP/1.1 400 Bad Request"]
        assert raw("GET", object_path("trickle"))[0] == 404


# ------------------------------------------------------------------ multipart exactness
@pytest.mark.parametrize("ending", ENDINGS)
def test_gcsfs_uploads_keep_every_byte(gcsfs_fs, tmp_path, ending):
    data = b"abc" + ending
    gcsfs_fs.pipe_file(f"{BUCKET}/pipe", data)
    assert gcsfs_fs.cat_file(f"{BUCKET}/pipe") == data
    local = tmp_path / "f"
    local.write_bytes(data)
    gcsfs_fs.put_file(str(local), f"{BUCKET}/put")
    assert gcsfs_fs.cat_file(f"{BUCKET}/put") == data


def test_gcsfs_random_binary_uploads_round_trip(gcsfs_fs):
    rng = random.Random(7)
    for i in range(300):  # one in 256 lost its last byte when it ended in "\r"
        data = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 40))) + bytes(
            [rng.choice([13, 10, 45, 0])]
        )
        gcsfs_fs.pipe_file(f"{BUCKET}/r{i}", data)
        assert gcsfs_fs.cat_file(f"{BUCKET}/r{i}") == data, data


@pytest.mark.parametrize("ending", ENDINGS)
def test_google_cloud_storage_uploads_keep_every_byte(gcs_bucket, tmp_path, ending):
    data = b"abc" + ending
    gcs_bucket.blob("multipart").upload_from_string(data)  # multipart
    assert gcs_bucket.blob("multipart").download_as_bytes() == data
    blob = gcs_bucket.blob("resumable", chunk_size=256 << 10)
    big = b"q" * (300 << 10) + data
    blob.upload_from_string(big)  # resumable, two chunks
    assert gcs_bucket.blob("resumable").download_as_bytes() == big
    local = tmp_path / "f"
    local.write_bytes(data)
    gcs_bucket.blob("file").upload_from_filename(str(local))
    assert gcs_bucket.blob("file").download_as_bytes() == data


def test_multipart_by_declared_boundary(raw):
    for eol in (b"\r\n", b"\n"):
        for ending in ENDINGS:
            payload = b"x" + ending
            body = (
                b"--bnd"
                + eol
                + b"Content-Type: application/json"
                + eol
                + eol
                + b'{"name": "mp"}'
                + eol
                + b"--bnd"
                + eol
                + b"Content-Type: text/plain"
                + eol
                + eol
                + payload
                + eol
                + b"--bnd--"
                + eol
            )
            status, _, meta = raw(
                "POST",
                f"/upload/storage/v1/b/{BUCKET}/o?uploadType=multipart",
                body,
                {"Content-Type": "multipart/related; boundary=bnd"},
            )
            assert status == 200, meta
            assert raw("GET", object_path("mp") + "?alt=media")[2] == payload, (eol, ending)


@pytest.mark.parametrize(
    "body",
    [
        b"no boundary here",
        b"--bnd\r\n\r\n{}\r\n--bnd--",  # one part
        b"--bnd\r\n\r\n{}\r\n--bnd\r\n\r\ndata",  # no closing delimiter
        b"--bnd\r\n\r\n{}\r\n--bnd\r\n\r\nx\r\n--bnd\r\n\r\ny\r\n--bnd--",  # three parts
        b"--bnd\r\n\r\n" + b"[" * 50_000 + b"\r\n--bnd\r\n\r\nx\r\n--bnd--",  # deep metadata
        b"--bnd\r\n" + b"H: v\r\n" * 20_000 + b"\r\n{}\r\n--bnd\r\n\r\nx\r\n--bnd--",  # huge headers
    ],
)
def test_malformed_multipart_is_400(raw, body):
    status, _, answer = raw(
        "POST",
        f"/upload/storage/v1/b/{BUCKET}/o?uploadType=multipart&name=bad",
        body,
        {"Content-Type": "multipart/related; boundary=bnd"},
    )
    assert status == 400 and json.loads(answer)["error"]["code"] == 400
    assert raw("GET", object_path("bad"))[0] == 404


# ------------------------------------------------------------------ strict lengths, 400 not 500
@pytest.mark.parametrize("value", ["+23", "2_3", "", "-0", "0x17", "23 23", "٢٣", "9" * 30])
def test_malformed_content_length_is_400_and_closes(fake_gcs_server, value):
    host = urlsplit(fake_gcs_server.url).netloc
    body = b"GET /storage/v1/b HTTP/1.1\r\nHost: x\r\n\r\n"  # would be a second request
    head = f"POST /storage/v1/b?project=p HTTP/1.1\r\nHost: {host}\r\nContent-Length: {value}\r\n\r\n"
    answer = _exchange(fake_gcs_server, head.encode("utf-8") + body)
    assert _status_lines(answer) == [b"HTTP/1.1 400 Bad Request"]
    assert b"Connection: close" in answer


def test_conflicting_content_lengths_are_400(fake_gcs_server):
    host = urlsplit(fake_gcs_server.url).netloc
    head = f"POST /storage/v1/b?project=p HTTP/1.1\r\nHost: {host}\r\nContent-Length: 2\r\nContent-Length: 20\r\n\r\n{{}}"
    assert _status_lines(_exchange(fake_gcs_server, head.encode())) == [b"HTTP/1.1 400 Bad Request"]


@pytest.mark.parametrize("size", [b"-5", b"0x10", b"1_0", b"+5", b"F" * 17])
def test_bad_chunk_sizes_are_400(fake_gcs_server, size):
    host = urlsplit(fake_gcs_server.url).netloc
    head = (
        f"POST /storage/v1/b?project=p HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    answer = _exchange(fake_gcs_server, head + size + b"\r\n{}\r\n0\r\n\r\n")
    assert _status_lines(answer) == [b"HTTP/1.1 400 Bad Request"]


def test_deep_json_huge_numbers_are_400(raw):
    deep = b"[" * 100_000 + b"]" * 100_000
    nested = b'{"a":' * 50_000 + b"1" + b"}" * 50_000
    for path, method in [
        ("/storage/v1/b?project=p", "POST"),
        (f"/storage/v1/b/{BUCKET}", "PATCH"),
        (f"/upload/storage/v1/b/{BUCKET}/o?uploadType=resumable&name=j", "POST"),
        (f"/storage/v1/b/{BUCKET}/o/x/compose", "POST"),
    ]:
        for body in (deep, nested):
            status, _, answer = raw(method, path, body, {"Content-Type": "application/json"})
            assert status == 400, (path, status)
            assert json.loads(answer)["error"]["code"] == 400
    raw("POST", f"/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name=o", b"data")
    for rng in ("bytes=" + "9" * 5000 + "-", "bytes=0-" + "9" * 5000, "bytes=-" + "9" * 5000):
        status, _, answer = raw("GET", object_path("o") + "?alt=media", headers={"Range": rng})
        assert status == 400 and json.loads(answer)["error"]["code"] == 400
    status, headers, _ = raw.json("POST", f"/upload/storage/v1/b/{BUCKET}/o?uploadType=resumable&name=u", {})
    session = urlsplit(headers["location"])
    for content_range in ("bytes 0-" + "9" * 5000 + "/*", "bytes */" + "9" * 5000, "bytes -1-5/10"):
        status, _, _ = raw("PUT", f"{session.path}?{session.query}", b"", {"Content-Range": content_range})
        assert status == 400, content_range
    for value in ("+5", "5_0", "9" * 5000):
        status, _, _ = raw.json(
            "POST",
            f"/upload/storage/v1/b/{BUCKET}/o?uploadType=resumable&name=v",
            {},
            {"X-Upload-Content-Length": value},
        )
        assert status == 400, value
    for token in ("W" * 10, "WwAAAA=="):
        assert raw("GET", f"/storage/v1/b/{BUCKET}/o?pageToken={token}")[0] == 400
    assert raw("GET", f"/storage/v1/b/{BUCKET}")[0] == 200


def test_cut_resumable_chunk_rolls_back_on_disk(disk_server):
    raw = Raw(disk_server.url)
    assert raw.json("POST", "/storage/v1/b?project=p", {"name": BUCKET})[0] == 200
    status, headers, _ = raw.json(
        "POST", f"/upload/storage/v1/b/{BUCKET}/o?uploadType=resumable&name=cut", {}
    )
    session = urlsplit(headers["location"])
    target = f"{session.path}?{session.query}"
    data = bytes(range(256)) * 16  # 4 KiB
    host = urlsplit(disk_server.url).netloc
    head = (
        f"PUT {target} HTTP/1.1\r\nHost: {host}\r\nContent-Range: bytes 0-{len(data) - 1}/{len(data)}\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    ).encode()
    with _connect(disk_server) as sock:  # half the chunk, then the client vanishes
        sock.sendall(head + data[:1000])
    time.sleep(0.3)
    status, h, _ = raw("PUT", target, b"", {"Content-Range": "bytes */*"})
    assert status == 308 and "range" not in h  # nothing of the cut chunk was kept
    status, _, _ = raw("PUT", target, data[:3000], {"Content-Range": "bytes 0-2999/*"})
    assert status == 308
    status, _, meta = raw(
        "PUT", target, data[2000:], {"Content-Range": f"bytes 2000-{len(data) - 1}/{len(data)}"}
    )
    assert status == 200 and json.loads(meta)["size"] == str(len(data))
    assert raw("GET", object_path("cut") + "?alt=media")[2] == data
