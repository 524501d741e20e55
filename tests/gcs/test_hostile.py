"""Hostile input: random and malformed requests, and object names that try to escape --data-dir."""

from __future__ import annotations

import json
import os
import random
import re
import socket
import string
import time
from urllib.parse import quote, urlsplit

import pytest

from fake_gcs import FakeGCSServer
from tests.gcs.helpers import Raw, object_path, upload

KEEP = "keep-bucket"
FUZZ = "fuzz-bucket"
HOSTILE_NAMES = [
    "../../../../etc/passwd",
    "..%2F..%2Fescape",
    "/absolute/path",
    "//double//slash",
    "a\x00nul\x00b",
    "x" * 1024,
    "日本語/ß/🎉/ünïcödé",
    "tab\tand space ",
    "dir/../../up",
    ".hidden",
    "~user",
    "back\\slash\\..\\..",
    "%00%2e%2e%2f",
    "\u202eright-to-left",
]


def _segments(rng: random.Random) -> str:
    choices = [
        "..",
        ".",
        "%2e%2e",
        "%2F",
        "%00",
        "%ZZ",
        "%C3%28",
        "%",
        "a" * rng.randint(1, 3000),
        "日本",
        "%E6%97%A5",
        FUZZ,
        "o",
        "b",
        "x%2Fy",
        "",
        "compose",
        "rewriteTo",
        "copyTo",
        "moveTo",
    ]
    return "/".join(rng.choice(choices) for _ in range(rng.randint(0, 6)))


def _random_request(rng: random.Random, host: str) -> bytes:
    roll = rng.random()
    if roll < 0.05:
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 300)))
    method = rng.choice(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "BREW", "G E T"])
    base = rng.choice(
        [
            "/storage/v1/b",
            f"/storage/v1/b/{FUZZ}/o",
            f"/upload/storage/v1/b/{FUZZ}/o",
            f"/download/storage/v1/b/{FUZZ}/o",
            "/batch/storage/v1",
            "",
            "/storage/v1",
            "/retry_test",
            "/retry_tests",
        ]
    )
    path = base + "/" + _segments(rng)
    params = []
    for _ in range(rng.randint(0, 5)):
        key = rng.choice(
            [
                "uploadType",
                "name",
                "alt",
                "generation",
                "ifGenerationMatch",
                "prefix",
                "delimiter",
                "maxResults",
                "pageToken",
                "fields",
                "upload_id",
                "versions",
                "startOffset",
                "matchGlob",
                "rewriteToken",
                "maxBytesRewrittenPerCall",
                "%ZZ",
            ]
        )
        value = rng.choice(
            [
                "media",
                "multipart",
                "resumable",
                "-1",
                "0",
                "99999999999999999999",
                "true",
                "items(name",
                "a(b(c))",
                "[",
                "{a,b",
                "**",
                "%",
                "x" * 500,
                "media&x=1",
                "",
            ]
        )
        params.append(f"{key}={value}")
    target = path + ("?" + "&".join(params) if params else "")
    body = rng.choice(
        [
            b"",
            b"{",
            b"[]",
            b"{}",
            b'{"name": "' + b"n" * rng.randint(0, 50) + b'"}',
            b'{"sourceObjects": [{"name": 5}]}',
            b'{"sourceObjects": "x"}',
            b'{"instructions": {"storage.objects.get": ["return-503", "stall-for-0s-after-0K"]}}',
            b'{"instructions": {"storage.objects.list": "x"}, "transport": 5}',
            b"--B\r\nContent-Type: application/json\r\n\r\n{}\r\n--B\r\n\r\nxx\r\n--B--",
            bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 2000))),
        ]
    )
    headers = [f"Host: {host}"]
    if rng.random() < 0.3:
        headers.append(
            "Range: "
            + rng.choice(
                [
                    "bytes=0-",
                    "bytes=-5",
                    "bytes=5-1",
                    "bytes=a-b",
                    "bytes=0-1,3-4",
                    "bytes=999999999999-",
                    "bytes=-",
                ]
            )
        )
    if rng.random() < 0.3:
        headers.append(
            "Content-Range: "
            + rng.choice(["bytes */*", "bytes 0-0/1", "bytes 5-1/*", "bytes */-1", "garbage"])
        )
    if rng.random() < 0.2:
        headers.append("Content-Type: multipart/related; boundary=" + rng.choice(["B", "", '"unterminated']))
    if rng.random() < 0.1:
        headers.append("x-goog-hash: crc32c=" + rng.choice(["AAAAAA==", "!!", ""]))
    if rng.random() < 0.05:
        headers.append(
            rng.choice(["x-retry-test-id: ", "x-goog-emulator-instructions: "])
            + rng.choice(
                ["nope", "return-429", "return-broken-stream", "return-corrupted-data", "x" * 300, ""]
            )
        )
    if rng.random() < 0.05:
        headers.append("Transfer-Encoding: chunked")
        body = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n" if rng.random() < 0.7 else b"zz\r\n"
    else:
        headers.append(f"Content-Length: {len(body)}")
    if rng.random() < 0.05:
        headers.append("X-Junk: " + "j" * rng.randint(1, 70000))
    return (
        f"{method} {target} HTTP/1.1\r\n".encode("utf-8", "replace")
        + "\r\n".join(headers).encode()
        + b"\r\n\r\n"
        + body
    )


def _statuses(data: bytes) -> list[int]:
    out = []
    for line in data.split(b"\r\n"):
        if line.startswith(b"HTTP/1.") and len(line) >= 12 and line[9:12].isdigit():
            out.append(int(line[9:12]))
    return out


def test_fuzz_keeps_objects_intact_and_server_alive(fake_gcs_server, caplog, timed):
    raw = Raw(fake_gcs_server.url)
    raw.json("POST", "/storage/v1/b?project=p", {"name": KEEP})
    raw.json("POST", "/storage/v1/b?project=p", {"name": FUZZ})
    kept = {f"k{i}": os.urandom(1000 + i) for i in range(20)}
    gens = {n: upload(raw, n, d, bucket=KEEP)["generation"] for n, d in kept.items()}
    parts = urlsplit(fake_gcs_server.url)
    rng = random.Random(1234)
    statuses: list[int] = []
    deadline = time.monotonic() + (25 if timed else 240)  # the timed run: thousands in 25 s
    sent = 0
    while len(statuses) < 3000 and time.monotonic() < deadline:
        with socket.create_connection((parts.hostname, parts.port), timeout=2) as sock:
            for _ in range(rng.randint(1, 4)):  # several requests per connection, pipelined
                try:
                    sock.sendall(_random_request(rng, parts.netloc))
                except OSError:
                    break
                sent += 1
            data = b""
            try:
                sock.shutdown(socket.SHUT_WR)
                while chunk := sock.recv(65536):
                    data += chunk
            except OSError:
                pass
            statuses += _statuses(data)
    assert len(statuses) >= 3000, (sent, len(statuses))  # thousands answered
    assert statuses and not [s for s in statuses if not 100 <= s < 500]
    assert not [r for r in caplog.records if "internal error" in r.getMessage()]
    raw.close()
    raw = Raw(fake_gcs_server.url)  # the server still answers, and nothing it kept has changed
    for name, data in kept.items():
        status, headers, body = raw("GET", object_path(name, KEEP) + "?alt=media")
        assert status == 200 and body == data and headers["x-goog-generation"] == gens[name]
    assert raw.json("GET", "/storage/v1/b?project=p")[0] == 200


def _files_under(root) -> set[str]:
    out = set()
    for dirpath, _dirs, files in os.walk(root):
        out.update(os.path.join(dirpath, f) for f in files)
    return out


def test_object_names_cannot_escape_data_dir(tmp_path):
    data_dir = tmp_path / "inner" / "data"
    canary = tmp_path / "canary.txt"
    canary.write_text("untouched")
    before = _files_under(tmp_path)
    contents = {name: os.urandom(64) + name.encode("utf-8", "surrogatepass") for name in HOSTILE_NAMES}
    with FakeGCSServer(port=0, data_dir=data_dir) as server:
        raw = Raw(server.url)
        assert raw.json("POST", "/storage/v1/b?project=p", {"name": "safe-bucket"})[0] == 200
        for name, data in contents.items():
            upload(raw, name, data, bucket="safe-bucket")
        for bad_bucket in ["..", "../x", "a/b", "%2e%2e", "x" * 300]:
            status, _, _ = raw.json("POST", "/storage/v1/b?project=p", {"name": bad_bucket})
            assert status == 400, bad_bucket
        for bad in ["x" * 1025, ".", ".."]:
            status, _, _ = raw(
                "POST", f"/upload/storage/v1/b/safe-bucket/o?uploadType=media&name={quote(bad)}", b"z"
            )
            assert status == 400
        raw.close()
    after = _files_under(tmp_path)
    created = after - before
    real_data = os.path.realpath(data_dir)
    assert created and all(os.path.realpath(p).startswith(real_data + os.sep) for p in created)
    assert canary.read_text() == "untouched" and before <= after
    for p in created:  # every stored path component is ours (hex digests), none client-chosen
        rel = os.path.relpath(p, real_data)
        assert all(
            re.fullmatch(r"[0-9a-f]{2,64}|\d+\.(bin|json)|bucket\.json|buckets|o", part)
            for part in rel.split(os.sep)
        ), rel
    with FakeGCSServer(port=0, data_dir=data_dir) as server:  # names survive a restart exactly
        raw = Raw(server.url)
        _, _, page = raw.json("GET", "/storage/v1/b/safe-bucket/o")
        assert sorted(i["name"] for i in page["items"]) == sorted(contents)
        for name, data in contents.items():
            assert raw("GET", object_path(name, "safe-bucket") + "?alt=media")[2] == data
        raw.close()


def test_limits_are_enforced(fake_gcs_server):
    small = FakeGCSServer(port=0, max_object_size=1000)
    with small:
        raw = Raw(small.url)
        raw.json("POST", "/storage/v1/b?project=p", {"name": "limited"})
        status, _, body = raw("POST", "/upload/storage/v1/b/limited/o?uploadType=media&name=x", b"z" * 1001)
        assert status == 413 and json.loads(body)["error"]["code"] == 413
        assert upload(raw, "y", b"z" * 1000, bucket="limited")["size"] == "1000"
        status, _, _ = raw.json("POST", "/storage/v1/b?project=p", {"name": "n" * 20, "pad": "p" * (5 << 20)})
        assert status == 413
        raw.close()


@pytest.mark.parametrize(
    "junk", [b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n"]
)
def test_garbage_connections_do_not_hurt(fake_gcs_server, junk):
    parts = urlsplit(fake_gcs_server.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
        sock.sendall(junk)
        sock.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.") and b'"error"' in reply
    raw = Raw(fake_gcs_server.url)
    assert raw("GET", "/storage/v1/b")[0] == 200
    raw.close()


def test_random_names_round_trip(fake_gcs_server):
    raw = Raw(fake_gcs_server.url)
    raw.json("POST", "/storage/v1/b?project=p", {"name": "names"})
    rng = random.Random(7)
    alphabet = string.printable.replace("\r", "").replace("\n", "") + "日本ßé🎉\x00\x7f"
    names = {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(200)}
    names -= {".", ".."}
    for n in names:
        upload(raw, n, n.encode(), bucket="names")
    listed, token = [], ""
    while True:
        _, _, page = raw.json(
            "GET", "/storage/v1/b/names/o?maxResults=37" + (f"&pageToken={token}" if token else "")
        )
        listed += [i["name"] for i in page.get("items", [])]
        token = page.get("nextPageToken")
        if not token:
            break
    assert listed == sorted(names)
    for n in list(names)[:50]:
        assert raw("GET", object_path(n, "names") + "?alt=media")[2] == n.encode()
    raw.close()
