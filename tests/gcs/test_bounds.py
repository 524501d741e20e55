"""Bounded servers: Retry Tests within a memory budget; a request's thread freed when its client leaves."""

from __future__ import annotations

import socket
import time

import pytest

from fake_gcs import FakeGCSServer, Knobs, Limits
from fake_gcs.retry_test import (
    MAX_BYTES,
    MAX_INSTRUCTIONS,
    RetryTests,
    instructions_cost,
    supported_methods,
)
from tests.gcs.helpers import BUCKET, Raw, object_path, upload

LONG = "stall-for-999999s-after-999999999K"  # 34 characters


def _create(raw: Raw, instructions: dict) -> tuple[int, dict]:
    status, _, body = raw.json("POST", "/retry_test", {"instructions": instructions})
    return status, body


def test_retry_tests_share_a_byte_budget():
    limits = Limits(max_retry_test_bytes=200_000)
    with FakeGCSServer(port=0, limits=limits) as server:
        raw = Raw(server.url)
        one = {"storage.objects.get": [LONG] * 300}  # 300 x (34 + 128) + 1,683 = 50,283 bytes charged
        ids = []
        while True:
            status, body = _create(raw, one)
            if status != 200:
                break
            ids.append(body["id"])
        assert len(ids) == 3  # the 4th would pass 200,000 bytes
        assert status == 429 and "DELETE /retry_test/" in body["error"]["message"]
        assert "POST /retry_test" in body["error"]["message"]
        assert raw("DELETE", f"/retry_test/{ids[0]}")[0] == 200  # deleting gives the budget back
        assert _create(raw, one)[0] == 200
        big = {"storage.objects.get": [LONG] * 1000, "storage.objects.list": [LONG] * 1000}
        status, body = _create(raw, big)
        assert status == 413 and "split it" in body["error"]["message"]  # alone larger than the budget
        assert _create(raw, one)[0] == 429  # still full
        raw.close()


def test_default_budget_bounds_the_worst_case():
    """The largest test the API accepts (every method, 1,000 long instructions each) costs ~8 MB:
    the default budget holds 4 of them, where 10,000 would have been ~78 GB."""
    worst = {m: [LONG] * MAX_INSTRUCTIONS for m in sorted(supported_methods())}
    cost = instructions_cost(worst)
    assert cost >= 7 << 20 and MAX_BYTES // cost == 4
    tests = RetryTests()
    assert tests.max_bytes == MAX_BYTES <= 64 << 20
    tests.create({"instructions": worst})
    assert tests.bytes == cost  # what the budget charges is what the server holds


def _stalled_client(server: FakeGCSServer, headers: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(
        f"GET {object_path('obj')}?alt=media HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode()
    )
    return sock


def _wait_for(check, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.mark.parametrize("how", ["stall", "latency", "queued"])
def test_a_request_thread_is_freed_when_its_client_leaves(how):
    with FakeGCSServer(port=0) as server:
        raw = Raw(server.url)
        raw.json("POST", "/storage/v1/b?project=p", {"name": BUCKET})
        upload(raw, "obj", b"x" * 100_000)
        headers = ""
        if how == "stall":
            _, tid = _create(raw, {"storage.objects.get": ["stall-for-600s-after-0K"]})
            headers = f"x-retry-test-id: {tid['id']}\r\n"
        raw.close()
        _wait_for(lambda: server.connection_threads() == 0, "setup connections to close")
        if how == "latency":
            server.knobs = Knobs(latency_ms=600_000)
        holder = None
        if how == "queued":  # one request holds the only slot (a long latency); ours queues behind it
            server.knobs = Knobs(latency_ms=600_000, max_in_flight=1)
            holder = _stalled_client(server, "")
            _wait_for(lambda: server.stats()["in_flight"]["current"] == 1, "the holder to be served")
        sock = _stalled_client(server, headers)
        if how == "stall":
            assert sock.recv(1 << 16).startswith(b"HTTP/1.1 200")  # headers sent, then the stall
        _wait_for(
            lambda: server.stats()["in_flight"]["queued" if how == "queued" else "current"] == 1,
            "the request to wait",
        )
        busy = server.connection_threads()
        assert busy == (2 if holder else 1)
        sock.close()  # the client gives up
        _wait_for(lambda: server.connection_threads() == busy - 1, "the server thread to end")
        got = server.stats()
        assert got["requests"]["abandoned"] == 1
        if holder is not None:
            assert got["in_flight"] == {"current": 1, "peak": 1, "queued": 0, "peak_queued": 1}
            holder.close()
            _wait_for(lambda: server.connection_threads() == 0, "the holder's thread to end")
        got = server.stats()["in_flight"]
        assert got["current"] == 0 and got["queued"] == 0


def test_upload_stall_ends_when_the_client_leaves():
    with FakeGCSServer(port=0) as server:
        raw = Raw(server.url)
        raw.json("POST", "/storage/v1/b?project=p", {"name": BUCKET})
        _, tid = _create(raw, {"storage.objects.insert": ["stall-for-600s-after-1K"]})
        raw.close()
        body = b"y" * 4096
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        sock.sendall(
            f"POST /upload/storage/v1/b/{BUCKET}/o?uploadType=media&name=u HTTP/1.1\r\nHost: x\r\n"
            f"x-retry-test-id: {tid['id']}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
        )
        _wait_for(lambda: server.stats()["in_flight"]["current"] == 1, "the upload to stall")
        sock.close()
        _wait_for(lambda: server.connection_threads() == 0, "the server thread to end")
        assert server.stats()["requests"]["abandoned"] == 1
        raw = Raw(server.url)
        assert raw("GET", object_path("u"))[0] == 404  # the abandoned upload was not committed
        status, _, got = raw.json("GET", f"/retry_test/{tid['id']}")
        assert status == 200 and got["completed"] is True
        raw.close()


def test_limits_reject_a_bad_retry_test_budget():
    with pytest.raises(ValueError, match="max_retry_test_bytes"):
        Limits(max_retry_test_bytes=0)
    assert Limits().max_retry_test_bytes == MAX_BYTES and Limits().max_retry_tests == 10_000
