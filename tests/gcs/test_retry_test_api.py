"""storage-testbench's Retry Test API: resources, accounting, and each instruction's effect."""

from __future__ import annotations

import http.client
import json
import socket
import time
from urllib.parse import urlsplit

import pytest

from tests.gcs.helpers import BUCKET, Raw, object_path, upload

DATA = bytes(range(256)) * 4096  # 1 MiB


def create(raw: Raw, instructions: dict, **extra) -> tuple[int, dict]:
    status, _, body = raw.json("POST", "/retry_test", {"instructions": instructions, **extra})
    return status, body


def media_get(url: str, name: str, test_id: str | None = None, header: str | None = None):
    """GET alt=media on a fresh connection: (status, bytes received, error name or None)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    headers = {}
    if test_id:
        headers["x-retry-test-id"] = test_id
    if header:
        headers["x-goog-emulator-instructions"] = header
    try:
        conn.request("GET", object_path(name) + "?alt=media", headers=headers)
        resp = conn.getresponse()
        got = bytearray()
        try:
            while chunk := resp.read1(65536):
                got += chunk
        except (http.client.IncompleteRead, ConnectionError) as exc:
            return resp.status, bytes(got), type(exc).__name__
        if resp.length:  # declared more than arrived
            return resp.status, bytes(got), "IncompleteRead"
        return resp.status, bytes(got), None
    except (ConnectionError, http.client.RemoteDisconnected) as exc:
        return None, b"", type(exc).__name__
    finally:
        conn.close()


@pytest.fixture
def obj(raw):
    upload(raw, "obj", DATA)
    return "obj"


def test_create_get_list_delete(raw):
    status, body = create(
        raw, {"storage.objects.get": ["return-503", "return-reset-connection"]}, transport="HTTP"
    )
    assert status == 200
    assert set(body) == {"id", "instructions", "completed", "transport"}
    assert body["instructions"] == {"storage.objects.get": ["return-503", "return-reset-connection"]}
    assert body["completed"] is False and body["transport"] == "HTTP"
    status, _, got = raw.json("GET", f"/retry_test/{body['id']}")
    assert status == 200 and got == body
    status, _, listed = raw.json("GET", "/retry_tests")
    assert status == 200 and listed == {"retry_test": [body]}
    status, _, text = raw("DELETE", f"/retry_test/{body['id']}")
    assert status == 200 and body["id"].encode() in text
    assert raw.json("GET", f"/retry_test/{body['id']}")[0] == 404
    assert raw.json("GET", "/retry_tests")[2] == {"retry_test": []}


@pytest.mark.parametrize(
    "instructions, status, word",
    [
        ({}, 400, "instructions"),
        ({"storage.objects.get": ["return-foo"]}, 400, "return-foo"),
        ({"storage.objects.get": ["return-200"]}, 400, "return-200"),
        ({"storage.objects.get": "return-503"}, 400, "list"),
        ({"storage.nothing": ["return-503"]}, 400, "storage.nothing"),
        ({"storage.objects.get": ["stall-for-1s-after-K"]}, 400, "stall-for-1s-after-K"),
        ({"storage.folders.get": ["return-503"]}, 501, "storage.folders.get"),
        ({"storage.objects.get": ["redirect-send-token-abc"]}, 501, "redirect-send-token-abc"),
        ({"storage.objects.insert": ["return-broken-stream-final-chunk-after-10B"]}, 501, "final-chunk"),
    ],
)
def test_bad_instructions_are_json_errors(raw, instructions, status, word):
    got, body = create(raw, instructions)
    assert got == status
    assert body["error"]["code"] == status and word in body["error"]["message"]
    assert raw.json("GET", "/retry_tests")[2] == {"retry_test": []}


def test_transport_grpc_is_501_and_unknown_transport_400(raw):
    got, body = create(raw, {"storage.objects.get": ["return-503"]}, transport="GRPC")
    assert got == 501 and "gRPC" in body["error"]["message"]
    assert create(raw, {"storage.objects.get": ["return-503"]}, transport="SMOKE")[0] == 400


def test_malformed_and_deep_bodies_are_400(raw):
    status, _, body = raw("POST", "/retry_test", b"{not json", {"Content-Type": "application/json"})
    assert status == 400 and json.loads(body)["error"]["code"] == 400
    deep = b"[" * 100_000 + b"]" * 100_000
    status, _, body = raw("POST", "/retry_test", deep, {"Content-Type": "application/json"})
    assert status == 400 and json.loads(body)["error"]["code"] == 400


def test_unknown_test_id_is_404_and_no_header_is_unaffected(fake_gcs_server, raw, obj):
    assert media_get(fake_gcs_server.url, obj, test_id="nope")[0] == 404
    _, body = create(raw, {"storage.objects.get": ["return-503"]})
    for _ in range(3):  # requests without the header never consume or see it
        assert media_get(fake_gcs_server.url, obj) == (200, DATA, None)
    assert raw.json("GET", f"/retry_test/{body['id']}")[2]["completed"] is False


def test_instructions_are_consumed_in_order_per_method(fake_gcs_server, raw, obj):
    _, body = create(
        raw, {"storage.objects.get": ["return-503", "return-429"], "storage.objects.list": ["return-500"]}
    )
    tid = body["id"]
    # another method with no instructions left is unaffected
    assert raw("GET", f"/storage/v1/b/{BUCKET}", headers={"x-retry-test-id": tid})[0] == 200
    status, _, err = raw("GET", object_path(obj), headers={"x-retry-test-id": tid})
    assert status == 503 and json.loads(err)["error"]["message"] == "Retry Test: Caused a 503"
    assert raw("GET", object_path(obj), headers={"x-retry-test-id": tid})[0] == 429
    assert raw("GET", object_path(obj), headers={"x-retry-test-id": tid})[0] == 200
    state = raw.json("GET", f"/retry_test/{tid}")[2]
    assert state["instructions"] == {"storage.objects.get": [], "storage.objects.list": ["return-500"]}
    assert state["completed"] is False
    assert raw("GET", f"/storage/v1/b/{BUCKET}/o", headers={"x-retry-test-id": tid})[0] == 500
    assert raw.json("GET", f"/retry_test/{tid}")[2]["completed"] is True


def test_reset_connection(fake_gcs_server, raw, obj):
    _, body = create(raw, {"storage.objects.get": ["return-reset-connection"]})
    status, got, err = media_get(fake_gcs_server.url, obj, test_id=body["id"])
    assert status is None and got == b"" and err in ("ConnectionResetError", "RemoteDisconnected")
    assert media_get(fake_gcs_server.url, obj, test_id=body["id"]) == (200, DATA, None)
    assert raw.json("GET", f"/retry_test/{body['id']}")[2]["completed"] is True


@pytest.mark.parametrize(
    "instruction, cut",
    [
        ("return-broken-stream", 4),
        ("return-broken-stream-after-256K", 256 << 10),
        ("return-503-after-512K", 512 << 10),
    ],
)
def test_broken_stream_sends_exactly_n_bytes(fake_gcs_server, raw, obj, instruction, cut):
    _, body = create(raw, {"storage.objects.get": [instruction]})
    status, got, err = media_get(fake_gcs_server.url, obj, test_id=body["id"])
    assert status == 200 and got == DATA[:cut] and err == "IncompleteRead"
    assert raw.json("GET", f"/retry_test/{body['id']}")[2]["completed"] is True
    assert media_get(fake_gcs_server.url, obj, test_id=body["id"]) == (200, DATA, None)


def test_broken_stream_longer_than_the_body_is_kept(fake_gcs_server, raw, obj):
    _, body = create(raw, {"storage.objects.get": ["return-broken-stream-after-2048K"]})
    assert media_get(fake_gcs_server.url, obj, test_id=body["id"]) == (200, DATA, None)
    assert raw.json("GET", f"/retry_test/{body['id']}")[2]["completed"] is False


def test_stall_after_bytes(fake_gcs_server, raw, obj, timed):
    _, body = create(raw, {"storage.objects.get": ["stall-for-1s-after-128K"]})
    t0 = time.monotonic()
    assert media_get(fake_gcs_server.url, obj, test_id=body["id"]) == (200, DATA, None)
    assert time.monotonic() - t0 >= 0.95
    assert raw.json("GET", f"/retry_test/{body['id']}")[2]["completed"] is True  # used once
    t0 = time.monotonic()
    assert media_get(fake_gcs_server.url, obj, test_id=body["id"]) == (200, DATA, None)
    if timed:
        assert time.monotonic() - t0 < 0.9


def test_stall_longer_than_client_timeout(fake_gcs_server, raw, obj):
    _, body = create(raw, {"storage.objects.get": ["stall-for-30s-after-64K"]})
    parts = urlsplit(fake_gcs_server.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=0.5)
    conn.request("GET", object_path(obj) + "?alt=media", headers={"x-retry-test-id": body["id"]})
    resp = conn.getresponse()
    with pytest.raises(socket.timeout):
        resp.read()
    conn.close()
    assert media_get(fake_gcs_server.url, obj, test_id=body["id"]) == (200, DATA, None)


def test_emulator_instructions_header_applies_to_each_request(fake_gcs_server, raw, obj):
    for _ in range(2):  # no accounting: every request with the header gets it
        status, got, err = media_get(fake_gcs_server.url, obj, header="return-broken-stream-after-100K")
        assert got == DATA[: 100 << 10] and err == "IncompleteRead"
    assert media_get(fake_gcs_server.url, obj, header="return-503")[0] == 503
    status, got, _ = media_get(fake_gcs_server.url, obj, header="return-corrupted-data")
    assert status == 200 and len(got) == len(DATA) and got[:1] != DATA[:1] and got[1:] == DATA[1:]
    # storage-testbench's /retry-N suffix: attempts 1 and 2 fail, the third succeeds
    assert media_get(fake_gcs_server.url, obj, header="return-503/retry-2")[0] == 503
    assert media_get(fake_gcs_server.url, obj, header="return-503/retry-3") == (200, DATA, None)
    assert media_get(fake_gcs_server.url, obj, header="return-nonsense")[0] == 400


def test_resumable_upload_503_after_bytes_keeps_the_prefix(raw):
    status, headers, _ = raw.json("POST", f"/upload/storage/v1/b/{BUCKET}/o?uploadType=resumable&name=up", {})
    session = urlsplit(headers["location"])
    target = session.path + "?" + session.query
    _, body = create(raw, {"storage.objects.insert": ["return-503-after-256K"]})
    tid = {"x-retry-test-id": body["id"]}
    chunk = DATA[: 512 << 10]
    status, _, _ = raw("PUT", target, chunk, {"Content-Range": f"bytes 0-{len(chunk) - 1}/*", **tid})
    assert status == 503
    status, h, _ = raw("PUT", target, b"", {"Content-Range": "bytes */*", **tid})
    assert status == 308 and h["range"] == f"bytes=0-{(256 << 10) - 1}"
    rest = DATA[256 << 10 :]
    status, _, meta = raw(
        "PUT", target, rest, {"Content-Range": f"bytes {256 << 10}-{len(DATA) - 1}/{len(DATA)}", **tid}
    )
    assert status == 200 and json.loads(meta)["size"] == str(len(DATA))
    assert raw("GET", object_path("up") + "?alt=media")[2] == DATA
    assert raw.json("GET", f"/retry_test/{body['id']}")[2]["completed"] is True


def test_single_shot_upload_status_after_bytes_creates_nothing(raw):
    _, body = create(raw, {"storage.objects.insert": ["return-503-after-10K"]})
    tid = {"x-retry-test-id": body["id"]}
    path = f"/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name=small"
    assert raw("POST", path, b"x" * 100, tid)[0] == 200  # under 10 KiB: not consumed
    assert raw("POST", path.replace("small", "big"), DATA, tid)[0] == 503
    assert raw("GET", object_path("big"))[0] == 404
    assert raw.json("GET", f"/retry_test/{body['id']}")[2]["completed"] is True


def test_google_cloud_storage_retries_through_instructions(fake_gcs_server, gcs_bucket, gcs_client):
    raw = Raw(fake_gcs_server.url)
    blob = gcs_bucket.blob("payload")
    blob.upload_from_string(DATA)
    _, body = create(
        raw,
        {"storage.objects.get": ["return-503", "return-reset-connection", "return-broken-stream-after-256K"]},
    )
    gcs_client._http.headers.update({"x-retry-test-id": body["id"]})
    try:
        assert gcs_bucket.blob("payload").download_as_bytes() == DATA
    finally:
        gcs_client._http.headers.pop("x-retry-test-id")
    assert raw.json("GET", f"/retry_test/{body['id']}")[2]["completed"] is True


def test_extensions_query_parameter_and_download_only(fake_gcs_server, raw, obj):
    _, body = create(raw, {"storage.objects.download": ["return-503"], "storage.objects.get": ["return-500"]})
    tid = body["id"]
    # metadata reads and HEAD are storage.objects.get, never storage.objects.download
    assert raw("HEAD", object_path(obj) + f"?alt=media&x-retry-test-id={tid}")[0] == 500
    assert raw("GET", object_path(obj) + f"?x-retry-test-id={tid}")[0] == 200
    # a media read takes storage.objects.download instructions first; the id may ride on the URL
    assert raw("GET", object_path(obj) + f"?alt=media&x-retry-test-id={tid}")[0] == 503
    assert raw("GET", object_path(obj) + f"?alt=media&x-retry-test-id={tid}")[0] == 200
    assert raw.json("GET", f"/retry_test/{tid}")[2]["completed"] is True
