"""Object endpoints: get/download, list, patch/update, delete, copy/rewrite/move, compose."""

from __future__ import annotations

from typing import TYPE_CHECKING

import base64
import json
import logging
from email.utils import formatdate

from fake_gcs.checksums import Hasher, crc32c_b64, md5_b64
from fake_gcs.errors import GCSError, bad_request
from fake_gcs.listing import ListQuery, list_page
from fake_gcs.model import ObjectVersion, Preconditions, validate_object_name
from fake_gcs.request import Media, Request, Response, empty_response, parse_range
from fake_gcs.store import writable_fields

if TYPE_CHECKING:  # pragma: no cover
    from fake_gcs.app import App

logger = logging.getLogger(__name__)
MAX_COMPOSE_SOURCES = 32
REWRITE_UNIT = 1 << 20


def int_param(req: Request, key: str) -> int | None:
    raw = req.params.get(key)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise bad_request(f"Invalid value for {key}: {raw!r}") from None


def _as_int(value, what: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise bad_request(f"Invalid value for {what}: {value!r}") from None


def max_results(req: Request, cap: int) -> int:
    """``maxResults`` capped at ``cap`` (0 or absent: ``cap``)."""
    raw = req.params.get("maxResults")
    if raw in (None, ""):
        return cap
    try:
        value = int(raw)
    except ValueError:
        raise bad_request(f"Invalid value for maxResults: {raw!r}") from None
    if value < 0:
        raise bad_request(f"Invalid value for maxResults: {raw!r}")
    return min(value or cap, cap)


def _bool_param(req: Request, key: str) -> bool:
    return req.params.get(key, "").lower() in ("true", "1", "yes")


# ------------------------------------------------------------------ reads
def get_object(app: App, req: Request, bucket: str, name: str) -> dict | Response:
    """Object metadata (or its data with ``alt=media``)."""
    if req.params.get("alt") == "media":
        return download(app, req, bucket, name)
    pre = Preconditions.from_params(req.params)
    return app.store.get(bucket, name, int_param(req, "generation"), pre).resource(req.base_url)


def media_headers(version: ObjectVersion) -> list[tuple[str, str]]:
    """The headers GCS sends with object data."""
    hashes = f"crc32c={crc32c_b64(version.crc32c)}"
    if version.md5 is not None:
        hashes += f",md5={md5_b64(version.md5)}"
    headers = [
        ("Content-Type", version.content_type),
        ("Accept-Ranges", "bytes"),
        ("ETag", f'"{version.etag()}"'),
        ("Last-Modified", formatdate(version.updated, usegmt=True)),
        ("x-goog-generation", str(version.generation)),
        ("x-goog-metageneration", str(version.metageneration)),
        ("x-goog-stored-content-length", str(version.size)),
        ("x-goog-stored-content-encoding", version.fields.get("contentEncoding") or "identity"),
        ("x-goog-storage-class", version.fields.get("storageClass") or "STANDARD"),
        ("x-goog-hash", hashes),
    ]
    for key, header in (
        ("cacheControl", "Cache-Control"),
        ("contentDisposition", "Content-Disposition"),
        ("contentLanguage", "Content-Language"),
    ):
        if version.fields.get(key):
            headers.append((header, str(version.fields[key])))
    for key, value in (version.fields.get("metadata") or {}).items():
        headers.append((f"x-goog-meta-{key}", str(value).replace("\r", " ").replace("\n", " ")))
    return headers


def download(app: App, req: Request, bucket: str, name: str) -> Response:
    """Object data, honouring ``Range`` (206/416) and ``generation``; streamed, not copied."""
    pre = Preconditions.from_params(req.params)
    version, reader = app.store.open(bucket, name, int_param(req, "generation"), pre)
    try:
        rng = parse_range(req.header("Range"), version.size)
    except BaseException:
        reader.close()
        raise
    headers = media_headers(version)
    if version.fields.get("contentEncoding"):
        headers.append(("Content-Encoding", str(version.fields["contentEncoding"])))
    if rng is None:
        return Response(200, headers, media=Media(reader, 0, version.size))
    start, length = rng
    headers.append(("Content-Range", f"bytes {start}-{start + length - 1}/{version.size}"))
    return Response(206, headers, media=Media(reader, start, length))


def list_objects(app: App, req: Request, bucket: str) -> dict:
    """One page of the bucket's objects."""
    q = ListQuery(
        prefix=req.params.get("prefix", ""),
        delimiter=req.params.get("delimiter") or None,
        start_offset=req.params.get("startOffset") or None,
        end_offset=req.params.get("endOffset") or None,
        versions=_bool_param(req, "versions"),
        include_trailing_delimiter=_bool_param(req, "includeTrailingDelimiter"),
        match_glob=req.params.get("matchGlob") or None,
        max_results=max_results(req, 1000),
        page_token=req.params.get("pageToken") or None,
    )
    with app.store.lock:
        b = app.store.bucket(bucket)
        items, prefixes, token = list_page(b, q, app.store.versions_of)
    out: dict = {"kind": "storage#objects"}
    if prefixes:
        out["prefixes"] = prefixes
    if items:
        out["items"] = [v.resource(req.base_url) for v in items]
    if token:
        out["nextPageToken"] = token
    return out


# ------------------------------------------------------------------ writes
def patch_object(app: App, req: Request, bucket: str, name: str) -> dict:
    """PATCH (merge) or PUT (replace) the object's metadata."""
    body = req.read_json(app.limits.max_json_bytes)
    pre = Preconditions.from_params(req.params)
    replace = req.method == "PUT"
    version = app.store.update(bucket, name, int_param(req, "generation"), body, replace, pre)
    return version.resource(req.base_url)


def delete_object(app: App, req: Request, bucket: str, name: str) -> Response:
    """Delete the live object or one ``generation``."""
    pre = Preconditions.from_params(req.params)
    app.store.delete(bucket, name, int_param(req, "generation"), pre)
    return empty_response(204)


def _copy(
    app: App, req: Request, sbucket: str, sname: str, dbucket: str, dname: str, body: dict
) -> ObjectVersion:
    validate_object_name(dname)
    src_pre = Preconditions.from_params(req.params, prefix="ifSource")
    dst_pre = Preconditions.from_params(req.params)
    with app.store.lock:  # the source cannot change or vanish between read and commit
        source = app.store.get(sbucket, sname, int_param(req, "sourceGeneration"))
        src_pre.check(source)
        fields = writable_fields(body) if writable_fields(body) else dict(source.fields)
        return app.store.commit(
            dbucket,
            dname,
            source.blob,
            source.crc32c,
            source.md5,
            fields,
            dst_pre,
            source.component_count,
            shared=True,
        )


def copy_to(app: App, req: Request, sbucket: str, sname: str, dbucket: str, dname: str) -> dict:
    """``copyTo``: copy in one call."""
    body = req.read_json(app.limits.max_json_bytes)
    return _copy(app, req, sbucket, sname, dbucket, dname, body).resource(req.base_url)


def _rewrite_token(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode()


def rewrite_to(app: App, req: Request, sbucket: str, sname: str, dbucket: str, dname: str) -> dict:
    """Copy in one or more calls: ``maxBytesRewrittenPerCall`` makes it hand out tokens."""
    body = req.read_json(app.limits.max_json_bytes)
    per_call = int_param(req, "maxBytesRewrittenPerCall")
    if per_call is not None and (per_call <= 0 or per_call % REWRITE_UNIT):
        raise bad_request("maxBytesRewrittenPerCall must be a positive multiple of 1048576.")
    token = req.params.get("rewriteToken")
    done_bytes = 0
    if token:
        try:
            state = json.loads(base64.urlsafe_b64decode(token.encode()))
            done_bytes = int(state["done"])
            src_gen = int(state["gen"])
            if state["src"] != [sbucket, sname] or state["dst"] != [dbucket, dname]:
                raise ValueError
        except (ValueError, KeyError, TypeError, RecursionError):
            raise bad_request("Invalid rewriteToken.") from None
        source = app.store.get(sbucket, sname, src_gen)
    else:
        source = app.store.get(sbucket, sname, int_param(req, "sourceGeneration"))
        Preconditions.from_params(req.params, prefix="ifSource").check(source)
    size = source.size
    if per_call is not None and size - done_bytes > per_call:
        done_bytes += per_call
        next_token = {
            "src": [sbucket, sname],
            "dst": [dbucket, dname],
            "gen": source.generation,
            "done": done_bytes,
        }
        return {
            "kind": "storage#rewriteResponse",
            "totalBytesRewritten": str(done_bytes),
            "objectSize": str(size),
            "done": False,
            "rewriteToken": _rewrite_token(next_token),
        }
    req.params["sourceGeneration"] = str(source.generation)
    version = _copy(app, req, sbucket, sname, dbucket, dname, body)
    return {
        "kind": "storage#rewriteResponse",
        "totalBytesRewritten": str(size),
        "objectSize": str(size),
        "done": True,
        "resource": version.resource(req.base_url),
    }


def move_to(app: App, req: Request, bucket: str, src: str, dst: str) -> dict:
    """``moveTo``: atomic rename within a bucket (gcsfs's ``mv``)."""
    req.read_json(app.limits.max_json_bytes)
    validate_object_name(dst)
    version = app.store.move(
        bucket,
        src,
        dst,
        Preconditions.from_params(req.params, prefix="ifSource"),
        Preconditions.from_params(req.params),
        int_param(req, "sourceGeneration"),
    )
    return version.resource(req.base_url)


def compose(app: App, req: Request, bucket: str, name: str) -> dict:
    """Concatenate up to 32 source objects of ``bucket`` into ``name``.

    ``"deleteSourceObjects": true`` in the request deletes the composed source generations for
    good once the destination is committed (GCS: no soft delete, no noncurrent versions; a
    source overwritten meanwhile keeps its new generation).
    """
    body = req.read_json(app.limits.max_json_bytes)
    validate_object_name(name)
    sources = body.get("sourceObjects")
    if not isinstance(sources, list) or not sources:
        raise bad_request("compose needs sourceObjects.")
    if len(sources) > MAX_COMPOSE_SOURCES:
        raise bad_request(f"compose takes at most {MAX_COMPOSE_SOURCES} source objects.")
    delete_sources = body.get("deleteSourceObjects", False)
    if not isinstance(delete_sources, bool):
        raise bad_request(f"Invalid value for deleteSourceObjects: {delete_sources!r}")
    readers, versions = [], []
    try:
        with app.store.lock:
            for src in sources:
                if not isinstance(src, dict) or not isinstance(src.get("name"), str):
                    raise bad_request("Each source object needs a name.")
                gen = _as_int(src.get("generation"), "generation")
                version, reader = app.store.open(bucket, src["name"], gen or None)
                readers.append(reader)
                versions.append(version)
                cond = _as_int(
                    (src.get("objectPreconditions") or {}).get("ifGenerationMatch"), "ifGenerationMatch"
                )
                if cond is not None and cond != version.generation:
                    raise GCSError(412, "At least one of the pre-conditions you specified did not hold.")
        writer = app.store.backend.writer()
        hasher = Hasher(md5=False)  # a composite object has a CRC32C and no MD5
        try:
            for reader in readers:
                for offset in range(0, reader.size, 8 << 20):
                    piece = reader.read(offset, min(8 << 20, reader.size - offset))
                    hasher.update(piece)
                    writer.write(piece)
        except BaseException:
            writer.abort()
            raise
        blob = writer.finish()
    finally:
        for reader in readers:
            reader.close()
    if hasher.size > app.limits.max_object_size:
        app.store.backend.discard(blob)
        raise GCSError(413, "Composed object exceeds the maximum object size.")
    dest = body.get("destination") or {}
    fields = writable_fields(dest)
    if "contentType" not in fields and versions[0].fields.get("contentType"):
        fields["contentType"] = versions[0].fields["contentType"]
    count = sum(v.component_count or 1 for v in versions)
    with app.store.lock:  # the destination appears and its sources go in one step
        version = app.store.commit(
            bucket, name, blob, hasher.crc, None, fields, Preconditions.from_params(req.params), count
        )
        if delete_sources:
            app.store.delete_exact(bucket, versions)
    return version.resource(req.base_url)
