"""Uploads: ``uploadType=media``, ``multipart`` and ``resumable`` (sessions, chunks, cancel).

Every upload is hashed as it arrives; a CRC32C or MD5 the client sent (``x-goog-hash`` or the
metadata's ``crc32c``/``md5Hash``) is checked before the object is committed, and a mismatch
answers 400 without creating anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
import logging
import re
import threading
import uuid
from collections import OrderedDict
from urllib.parse import quote

from fake_gcs.checksums import Hasher, crc32c_b64, decode_crc32c, decode_md5, md5_b64, parse_goog_hash
from fake_gcs.errors import GCSError, bad_request
from fake_gcs.model import Preconditions, validate_object_name
from fake_gcs.multipart import MultipartStream, boundary_of
from fake_gcs.request import Request, Response, empty_response, json_response, parse_json_object
from fake_gcs.store import writable_fields

if TYPE_CHECKING:  # pragma: no cover
    from fake_gcs.app import App

logger = logging.getLogger(__name__)
_CONTENT_RANGE_RE = re.compile(
    r"^\s*bytes\s+(?:([0-9]{1,19})-([0-9]{1,19})|\*)/([0-9]{1,19}|\*)\s*$", re.IGNORECASE
)


def _expected_hashes(req: Request, resource: dict) -> tuple[int | None, bytes | None]:
    """CRC32C and MD5 the client claims, from ``x-goog-hash`` or the object resource."""
    claimed = parse_goog_hash(req.header("x-goog-hash"))
    crc_text = claimed.get("crc32c") or resource.get("crc32c")
    md5_text = claimed.get("md5") or resource.get("md5Hash")
    crc = md5 = None
    if crc_text:
        crc = decode_crc32c(str(crc_text))
        if crc is None:
            raise bad_request(f"Invalid crc32c value: {crc_text!r}")
    if md5_text:
        md5 = decode_md5(str(md5_text))
        if md5 is None:
            raise bad_request(f"Invalid md5Hash value: {md5_text!r}")
    return crc, md5


def _verify(hasher: Hasher, expected: tuple[int | None, bytes | None]) -> bytes:
    """The MD5 digest, after checking both claimed hashes; 400 on a mismatch."""
    crc, md5 = expected
    digest = hasher.md5.digest()
    if crc is not None and crc != hasher.crc:
        raise bad_request(
            f'Provided CRC32C "{crc32c_b64(crc)}" doesn\'t match calculated CRC32C '
            f'"{crc32c_b64(hasher.crc)}".'
        )
    if md5 is not None and md5 != digest:
        raise bad_request(
            f'Provided MD5 hash "{md5_b64(md5)}" doesn\'t match calculated MD5 hash "{md5_b64(digest)}".'
        )
    return digest


def _resource_fields(resource: dict, content_type: str | None) -> dict:
    fields = writable_fields(resource)
    if content_type and "contentType" not in fields:
        fields["contentType"] = content_type
    return fields


def _object_name(req: Request, resource: dict) -> str:
    return validate_object_name(resource.get("name") or req.params.get("name"))


def upload(app: App, req: Request, bucket: str) -> Response:
    """``POST /upload/storage/v1/b/{bucket}/o``: start or continue an upload."""
    if "upload_id" in req.params:
        return resumable_chunk(app, req, bucket)
    kind = req.params.get("uploadType", "")
    app.store.bucket(bucket)  # 404 before reading a body
    if kind == "media":
        return media_upload(app, req, bucket)
    if kind == "multipart":
        return multipart_upload(app, req, bucket)
    if kind == "resumable":
        return start_resumable(app, req, bucket)
    if req.method == "POST" and not kind and "/upload/" not in req.path:
        raise bad_request("Uploads go to /upload/storage/v1/b/{bucket}/o with an uploadType.")
    raise bad_request(f"Invalid uploadType: {kind!r}")


def _commit(
    app: App,
    req: Request,
    bucket: str,
    name: str,
    blob,
    hasher: Hasher,
    expected,
    fields: dict,
    pre: Preconditions,
) -> Response:
    try:
        digest = _verify(hasher, expected)
    except GCSError:
        app.store.backend.discard(blob)
        raise
    version = app.store.commit(bucket, name, blob, hasher.crc, digest, fields, pre)
    return json_response(version.resource(req.base_url))


def _single_shot_fault(app: App, req: Request, size: int, writer) -> None:
    """A Retry Test ``return-NNN-after-NK`` / ``stall-for-Ts-after-NK`` on a one-request upload."""
    fault = req.fault
    if fault is None or fault.consumed or fault.kind not in ("status_after", "stall"):
        return
    if size < fault.instruction.after:
        return
    fault.consume()
    if fault.kind == "stall":
        (req.pause or app.stopping.wait)(fault.instruction.stall_s)
        return
    writer.abort()
    raise GCSError(fault.instruction.status, "Fault injected during a single-shot upload")


def media_upload(app: App, req: Request, bucket: str) -> Response:
    """``uploadType=media``: the body is the object, streamed to the store."""
    name = validate_object_name(req.params.get("name"))
    pre = Preconditions.from_params(req.params)
    expected = _expected_hashes(req, {})
    fields = _resource_fields(
        {"contentEncoding": req.params.get("contentEncoding")}, req.header("Content-Type")
    )
    writer = app.store.backend.writer()
    hasher = Hasher()
    try:
        for piece in req.iter_body(app.limits.max_object_size):
            hasher.update(piece)
            writer.write(piece)
        _single_shot_fault(app, req, hasher.size, writer)
    except BaseException:
        writer.abort()
        raise
    return _commit(app, req, bucket, name, writer.finish(), hasher, expected, fields, pre)


def multipart_upload(app: App, req: Request, bucket: str) -> Response:
    """``uploadType=multipart``: a metadata part and a media part, the media streamed to the store."""
    stream = MultipartStream(req.read_some, boundary_of(req.header("Content-Type", "")))
    two_parts = "A multipart upload needs exactly two parts: metadata and media."
    if stream.next_headers() is None:
        raise bad_request(two_parts)
    meta_raw = stream.read_payload(app.limits.max_json_bytes, "metadata")
    resource = parse_json_object(meta_raw, "the metadata part") if meta_raw.strip() else {}
    name = _object_name(req, resource)
    pre = Preconditions.from_params(req.params)
    expected = _expected_hashes(req, resource)
    media_headers = stream.next_headers()
    if media_headers is None:
        raise bad_request(two_parts)
    fields = _resource_fields(resource, media_headers.get("content-type"))
    writer = app.store.backend.writer()
    hasher = Hasher()
    try:
        for piece in stream.iter_payload():
            hasher.update(piece)
            if hasher.size > app.limits.max_object_size:
                raise GCSError(413, "The object is larger than the maximum object size.")
            writer.write(piece)
        if stream.next_headers() is not None:
            raise bad_request(two_parts)
        _single_shot_fault(app, req, hasher.size, writer)
    except BaseException:
        writer.abort()
        raise
    return _commit(app, req, bucket, name, writer.finish(), hasher, expected, fields, pre)


# ------------------------------------------------------------------ resumable
class Session:
    """A resumable upload in progress."""

    def __init__(self, bucket, name, fields, pre, expected, writer, total) -> None:
        self.bucket = bucket
        self.name = name
        self.fields = fields
        self.pre = pre
        self.expected = expected
        self.writer = writer
        self.total = total
        self.hasher = Hasher()
        self.lock = threading.Lock()
        self.result_body: bytes | None = None  # the object resource, once finished

    @property
    def received(self) -> int:
        return self.hasher.size


class Sessions:
    """Open resumable uploads, oldest evicted first past ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._d: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, session: Session) -> str:
        upload_id = uuid.uuid4().hex
        with self._lock:
            self._d[upload_id] = session
            while len(self._d) > self.limit:
                _, old = self._d.popitem(last=False)
                old.writer.abort()
        return upload_id

    def get(self, upload_id: str) -> Session:
        with self._lock:
            session = self._d.get(upload_id)
        if session is None:
            raise GCSError(
                404, "No such upload session (it was cancelled, finished long ago, or never existed)."
            )
        return session

    def pop(self, upload_id: str) -> Session | None:
        with self._lock:
            return self._d.pop(upload_id, None)


def start_resumable(app: App, req: Request, bucket: str) -> Response:
    """``uploadType=resumable``: open a session; its URI is in ``Location``."""
    resource = req.read_json(app.limits.max_json_bytes)
    name = _object_name(req, resource)
    pre = Preconditions.from_params(req.params)
    with app.store.lock:
        current = app.store.bucket(bucket).live.get(name)
    pre.check(current)
    total = req.header("X-Upload-Content-Length")
    if total not in (None, "") and not re.fullmatch(r"[0-9]{1,19}", total.strip()):
        raise bad_request("Invalid X-Upload-Content-Length.")
    total = int(total) if total not in (None, "") else None
    if total is not None and total > app.limits.max_object_size:
        raise GCSError(413, "The object is larger than the maximum object size.")
    fields = _resource_fields(resource, req.header("X-Upload-Content-Type"))
    session = Session(
        bucket, name, fields, pre, _expected_hashes(req, resource), app.store.backend.writer(), total
    )
    upload_id = app.sessions.add(session)
    location = (
        f"{req.base_url}/upload/storage/v1/b/{quote(bucket, safe='')}/o?uploadType=resumable"
        f"&name={quote(name, safe='')}&upload_id={upload_id}"
    )
    return empty_response(200, [("Location", location), ("X-GUploader-UploadID", upload_id)])


def _incomplete(session: Session) -> Response:
    headers = []
    if session.received:
        headers.append(("Range", f"bytes=0-{session.received - 1}"))
    return empty_response(308, headers)


def _finish(app: App, req: Request, session: Session, upload_id: str) -> Response:
    expected = session.expected
    claimed = _expected_hashes(req, {})
    expected = (
        claimed[0] if claimed[0] is not None else expected[0],
        claimed[1] if claimed[1] is not None else expected[1],
    )
    blob = session.writer.finish()
    try:
        resp = _commit(
            app,
            req,
            session.bucket,
            session.name,
            blob,
            session.hasher,
            expected,
            session.fields,
            session.pre,
        )
    except GCSError:
        app.sessions.pop(upload_id)
        raise
    session.result_body = resp.body
    return resp


def _receive(app: App, req: Request, session: Session, first: int, size: int | None) -> None:
    """Append the body (which starts at object offset ``first``) to the session, in bounded pieces.

    Bytes the session already holds are skipped. All or nothing: when the body is cut short or
    does not have ``size`` bytes, the session is rolled back to what it held before. A Retry Test
    ``return-NNN-after-NK`` keeps only the object's first N KiB, then answers NNN; a
    ``stall-for-Ts-after-NK`` pauses T seconds before answering a chunk that crosses N KiB.
    """
    fault = req.fault
    if fault is not None and (fault.consumed or fault.kind not in ("status_after", "stall")):
        fault = None
    keep_until = fault.instruction.after if fault is not None and fault.kind == "status_after" else None
    before = session.received
    saved = (session.hasher.copy(), session.writer.size)
    pos = first  # object offset of the next body byte
    try:
        for piece in req.iter_body(app.limits.max_object_size if size is None else size):
            end = pos + len(piece)
            lo = max(session.received, pos)
            hi = end if keep_until is None else min(end, keep_until)
            if hi > lo:
                new = piece[lo - pos : hi - pos] if (lo > pos or hi < end) else piece
                if session.received + len(new) > app.limits.max_object_size:
                    raise GCSError(413, "The object is larger than the maximum object size.")
                session.hasher.update(new)
                session.writer.write(new)
            pos = end
        if size is not None and pos - first != size:
            raise bad_request("Content-Range does not match the request body length.")
    except BaseException:
        session.hasher = saved[0]
        session.writer.truncate(saved[1])
        raise
    if fault is None:
        return
    after = fault.instruction.after
    if fault.kind == "stall":
        if before <= after < session.received:
            fault.consume()
            (req.pause or app.stopping.wait)(fault.instruction.stall_s)
        return
    if session.received >= after:
        fault.consume()
        raise GCSError(fault.instruction.status, "Fault injected during a resumable upload")


def resumable_chunk(app: App, req: Request, bucket: str) -> Response:
    """A ``PUT``/``POST`` to a session URI: a chunk, a status query, or the last chunk."""
    upload_id = req.params["upload_id"]
    session = app.sessions.get(upload_id)
    with session.lock:
        if session.result_body is not None:
            return json_response(json.loads(session.result_body))
        header = req.header("Content-Range")
        length = req.declared_length
        if header is None:  # the whole object in one request
            if length is not None and length > app.limits.max_object_size:
                raise GCSError(413, "The object is larger than the maximum object size.")
            _receive(app, req, session, 0, None)
            total = session.received
        else:
            m = _CONTENT_RANGE_RE.match(header)
            if not m:
                raise bad_request(f"Invalid Content-Range: {header[:100]!r}")
            first = int(m.group(1)) if m.group(1) is not None else None
            last = int(m.group(2)) if m.group(2) is not None else None
            total = int(m.group(3)) if m.group(3) != "*" else None
            if first is not None and last < first:
                raise bad_request(f"Invalid Content-Range: {header[:100]!r}")
            if total is not None and total > app.limits.max_object_size:
                raise GCSError(413, "The object is larger than the maximum object size.")
            if first is not None:
                size = last - first + 1
                if length is not None and length != size:
                    raise bad_request("Content-Range does not match the request body length.")
                if first > session.received:
                    raise bad_request(
                        f"Invalid request: the chunk starts at byte {first} but only "
                        f"{session.received} bytes were received."
                    )
                if last + 1 > app.limits.max_object_size:
                    raise GCSError(413, "The object is larger than the maximum object size.")
                if total is not None and last + 1 > total:
                    raise bad_request("Upload is larger than the declared total size.")
                _receive(app, req, session, first, size)
        if total is None:
            return _incomplete(session)
        if session.received < total:
            return _incomplete(session)
        if session.received > total:
            raise bad_request("Declared total size is smaller than the bytes already received.")
        return _finish(app, req, session, upload_id)


def cancel(app: App, req: Request, bucket: str) -> Response:
    """``DELETE`` on a session URI: abandon the upload (GCS answers 499)."""
    upload_id = req.params.get("upload_id")
    if not upload_id:
        raise GCSError(405, "DELETE needs an upload_id.")
    session = app.sessions.pop(upload_id)
    if session is None:
        raise GCSError(404, "No such upload session.")
    with session.lock:
        if session.result_body is None:
            session.writer.abort()
    return empty_response(499)
