"""The batch endpoint: ``multipart/mixed`` of ``application/http`` requests, answered alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

import io
import logging
import uuid
from http import HTTPStatus
from urllib.parse import urlsplit

from fake_gcs.errors import GCSError, bad_request
from fake_gcs.multipart import parse_related, split_head
from fake_gcs.request import Headers, Request, Response, error_response

if TYPE_CHECKING:  # pragma: no cover
    from fake_gcs.app import App

logger = logging.getLogger(__name__)
MAX_BATCH_PARTS = 1000


def _parse_http(payload: memoryview) -> tuple[str, str, str, list[tuple[str, str]], bytes]:
    """``(method, path, query, headers, body)`` of one embedded HTTP request."""
    raw = bytes(payload)
    line_end = raw.find(b"\n")
    if line_end < 0:
        raise bad_request("Batch part without a request line.")
    request_line = raw[:line_end].decode("latin-1").strip()
    parts = request_line.split()
    if len(parts) < 2:
        raise bad_request("Batch part with a malformed request line.")
    method, target = parts[0].upper(), parts[1]
    headers, body = split_head(memoryview(raw)[line_end + 1 :])
    url = urlsplit(target)
    return method, url.path, url.query, list(headers.items()), bytes(body)


def _status_line(status: int) -> str:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Client Closed Request" if status == 499 else "Unknown"
    return f"HTTP/1.1 {status} {phrase}"


def _render(resp: Response, content_id: str | None) -> bytes:
    body = resp.body_bytes()
    resp.close()
    lines = ["Content-Type: application/http"]
    if content_id:
        cid = content_id.strip("<>")
        lines.append(f"Content-ID: <response-{cid}>")
    lines += ["", _status_line(resp.status)]
    for name, value in resp.headers:
        if name.lower() != "content-length":
            lines.append(f"{name}: {value}")
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + body


def handle_batch(app: App, req: Request) -> Response:
    """Run each embedded request through the app, in order, and bundle the answers."""
    if req.in_batch:
        raise bad_request("Nested batch requests are not allowed.")
    body = req.read_body(app.limits.max_batch_bytes)
    parts = parse_related(body, req.header("Content-Type", ""))
    if len(parts) > MAX_BATCH_PARTS:
        raise bad_request(f"A batch may hold at most {MAX_BATCH_PARTS} requests.")
    boundary = "batch_" + uuid.uuid4().hex
    out = io.BytesIO()
    for part_headers, payload in parts:
        try:
            method, path, query, headers, sub_body = _parse_http(payload)
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
            headers.append(("Content-Length", str(len(sub_body))))
            rfile = io.BytesIO(sub_body)
            sub = Request(method, path, query, Headers(headers), rfile, req.base_url, in_batch=True)
            resp = app.handle(sub)
        except GCSError as err:
            resp = error_response(err)
        out.write(f"--{boundary}\r\n".encode())
        out.write(_render(resp, part_headers.get("content-id")))
        out.write(b"\r\n")
    out.write(f"--{boundary}--\r\n".encode())
    return Response(200, [("Content-Type", f"multipart/mixed; boundary={boundary}")], out.getvalue())
