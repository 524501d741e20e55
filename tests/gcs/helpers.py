"""Helpers for the fake_gcs tests: raw HTTP access and small upload shortcuts."""

from __future__ import annotations

import http.client
import json
from urllib.parse import quote, urlencode, urlsplit

BUCKET = "tpudata-test"


class Raw:
    """Plain HTTP/1.1 requests (one keep-alive connection) for protocol-level assertions."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)

    def __call__(self, method: str, path: str, body=None, headers=None):
        self.conn.request(method, path, body=body, headers=headers or {})
        resp = self.conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data

    def json(self, method: str, path: str, obj=None, headers=None):
        body = json.dumps(obj).encode() if obj is not None else None
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        status, h, data = self(method, path, body, hdrs)
        return status, h, (json.loads(data) if data else None)

    def close(self) -> None:
        self.conn.close()


def upload(raw: Raw, name: str, data: bytes, bucket: str = BUCKET, **params) -> dict:
    """Media upload of ``data`` as ``bucket/name``; returns the object resource."""
    query = urlencode({"uploadType": "media", "name": name, **params})
    status, _, body = raw("POST", f"/upload/storage/v1/b/{quote(bucket)}/o?{query}", data)
    assert status == 200, body
    return json.loads(body)


def object_path(name: str, bucket: str = BUCKET) -> str:
    return f"/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}"


def bucket_with_object(url: str, bucket: str, name: str, data: bytes) -> None:
    """Create ``bucket`` on the server at ``url`` and upload ``data`` as ``name``."""
    raw = Raw(url)
    assert raw.json("POST", "/storage/v1/b?project=p", {"name": bucket})[0] == 200
    upload(raw, name, data, bucket=bucket)
    raw.close()
