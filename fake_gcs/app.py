"""Routing from JSON API paths to the endpoint functions, plus the bucket endpoints."""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import Callable
from urllib.parse import unquote

from fake_gcs import access, batch, objects, retry_test, uploads
from fake_gcs.errors import GCSError, bad_request
from fake_gcs.fields import apply_fields, parse_fields
from fake_gcs.model import Preconditions
from fake_gcs.request import Request, Response, empty_response, error_response, json_response
from fake_gcs.store import Store

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """Bounds on what one request may make the server hold."""

    max_object_size: int = 64 << 30
    max_json_bytes: int = 4 << 20
    max_batch_bytes: int = 32 << 20
    max_upload_sessions: int = 10_000
    body_timeout_s: float = 60.0  # a body idle this long, or slower than 1 KiB/s past it, is dropped
    max_retry_tests: int = retry_test.MAX_TESTS
    max_retry_test_bytes: int = retry_test.MAX_BYTES  # all Retry Tests' instructions together

    def __post_init__(self) -> None:
        names = (
            "max_object_size",
            "max_json_bytes",
            "max_batch_bytes",
            "max_upload_sessions",
            "body_timeout_s",
            "max_retry_tests",
            "max_retry_test_bytes",
        )
        for name in names:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")


# ------------------------------------------------------------------ buckets
def list_buckets(app: "App", req: Request) -> dict:
    prefix = req.params.get("prefix", "")
    names = sorted(n for n in app.store.buckets if n.startswith(prefix))
    token = req.params.get("pageToken")
    if token:
        names = [n for n in names if n > token]
    limit = objects.max_results(req, 1000)
    page, more = names[:limit], len(names) > limit
    out: dict = {
        "kind": "storage#buckets",
        "items": [app.store.buckets[n].resource(req.base_url) for n in page],
    }
    if more:
        out["nextPageToken"] = page[-1]
    return out


def insert_bucket(app: "App", req: Request) -> dict:
    body = req.read_json(app.limits.max_json_bytes)
    name = body.get("name") or req.params.get("name")
    if not name:
        raise bad_request("Bucket name is required.")
    return app.store.create_bucket(name, body).resource(req.base_url)


def get_bucket(app: "App", req: Request, bucket: str) -> dict:
    b = app.store.bucket(bucket)
    pre = Preconditions.from_params(req.params)
    if pre.metageneration_match is not None and pre.metageneration_match != b.metageneration:
        raise GCSError(412, "At least one of the pre-conditions you specified did not hold.")
    return b.resource(req.base_url)


def patch_bucket(app: "App", req: Request, bucket: str) -> dict:
    body = req.read_json(app.limits.max_json_bytes)
    pre = Preconditions.from_params(req.params)
    return app.store.update_bucket(bucket, body, req.method == "PUT", pre).resource(req.base_url)


def delete_bucket(app: "App", req: Request, bucket: str) -> Response:
    app.store.delete_bucket(bucket, Preconditions.from_params(req.params))
    return empty_response(204)


# ------------------------------------------------------------------ routing
_SEG = r"([^/]+)"
_REST = r"(.+)"
_B = "storage.buckets."
_O = "storage.objects."
_N = "storage.notifications."
_H = "storage.hmacKey."


def _acl_routes(prefix: str, field: str, with_object: bool, api: str) -> list:
    """The two URL shapes of one ACL collection: ``.../acl`` and ``.../acl/{entity}``."""
    many = access.acl_endpoint(field, with_object, False)
    one = access.acl_endpoint(field, with_object, True)
    return [
        (re.compile(prefix + "/?$"), {"GET": (many, api + "list"), "POST": (many, api + "insert")}),
        (
            re.compile(prefix + "/([^/]+)$"),
            {
                "GET": (one, api + "get"),
                "PUT": (one, api + "update"),
                "PATCH": (one, api + "patch"),
                "DELETE": (one, api + "delete"),
            },
        ),
    ]


# path pattern -> {HTTP method: (endpoint, JSON API method name for the Retry Test API)}
ROUTES: list[tuple[re.Pattern, dict[str, tuple[Callable, str | None]]]] = [
    (re.compile(r"^/retry_tests/?$"), {"GET": (retry_test.list_tests, None)}),
    (re.compile(r"^/retry_test/?$"), {"POST": (retry_test.create_test, None)}),
    (
        re.compile(rf"^/retry_test/{_SEG}/?$"),
        {"GET": (retry_test.get_test, None), "DELETE": (retry_test.delete_test, None)},
    ),
    (
        re.compile(r"^/storage/v1/b/?$"),
        {"GET": (list_buckets, _B + "list"), "POST": (insert_bucket, _B + "insert")},
    ),
    (
        re.compile(rf"^/storage/v1/b/{_SEG}/?$"),
        {
            "GET": (get_bucket, _B + "get"),
            "PATCH": (patch_bucket, _B + "patch"),
            "PUT": (patch_bucket, _B + "update"),
            "DELETE": (delete_bucket, _B + "delete"),
        },
    ),
    (
        re.compile(rf"^/storage/v1/b/{_SEG}/iam/?$"),
        {
            "GET": (access.get_iam_policy, _B + "getIamPolicy"),
            "PUT": (access.set_iam_policy, _B + "setIamPolicy"),
        },
    ),
    (
        re.compile(rf"^/storage/v1/b/{_SEG}/iam/testPermissions$"),
        {"GET": (access.test_iam_permissions, _B + "testIamPermissions")},
    ),
    (
        re.compile(rf"^/storage/v1/b/{_SEG}/lockRetentionPolicy$"),
        {"POST": (access.lock_retention_policy, _B + "lockRetentionPolicy")},
    ),
    *_acl_routes(rf"^/storage/v1/b/{_SEG}/acl", "acl", False, "storage.bucket_acl."),
    *_acl_routes(
        rf"^/storage/v1/b/{_SEG}/defaultObjectAcl", "defaultObjectAcl", False, "storage.default_object_acl."
    ),
    *_acl_routes(rf"^/storage/v1/b/{_SEG}/o/{_SEG}/acl", "acl", True, "storage.object_acl."),
    (
        re.compile(rf"^/storage/v1/b/{_SEG}/notificationConfigs/?$"),
        {
            "GET": (access.list_notifications, _N + "list"),
            "POST": (access.insert_notification, _N + "insert"),
        },
    ),
    (
        re.compile(rf"^/storage/v1/b/{_SEG}/notificationConfigs/{_SEG}$"),
        {"GET": (access.notification, _N + "get"), "DELETE": (access.notification, _N + "delete")},
    ),
    (
        re.compile(rf"^/storage/v1/projects/{_SEG}/serviceAccount$"),
        {"GET": (access.service_account, "storage.serviceaccount.get")},
    ),
    (
        re.compile(rf"^/storage/v1/projects/{_SEG}/hmacKeys/?$"),
        {"GET": (access.list_hmac_keys, _H + "list"), "POST": (access.create_hmac_key, _H + "create")},
    ),
    (
        re.compile(rf"^/storage/v1/projects/{_SEG}/hmacKeys/{_SEG}$"),
        {
            "GET": (access.hmac_key, _H + "get"),
            "PUT": (access.hmac_key, _H + "update"),
            "DELETE": (access.hmac_key, _H + "delete"),
        },
    ),
    (
        re.compile(rf"^/storage/v1/b/{_SEG}/o/?$"),
        {"GET": (objects.list_objects, _O + "list"), "POST": (uploads.upload, _O + "insert")},
    ),
    (re.compile(rf"^/storage/v1/b/{_SEG}/o/{_SEG}/compose$"), {"POST": (objects.compose, _O + "compose")}),
    (
        re.compile(rf"^/storage/v1/b/{_SEG}/o/{_SEG}/copyTo/b/{_SEG}/o/{_REST}$"),
        {"POST": (objects.copy_to, _O + "copy")},
    ),
    (
        re.compile(rf"^/storage/v1/b/{_SEG}/o/{_SEG}/rewriteTo/b/{_SEG}/o/{_REST}$"),
        {"POST": (objects.rewrite_to, _O + "rewrite")},
    ),
    (
        re.compile(rf"^/storage/v1/b/{_SEG}/o/{_SEG}/moveTo/o/{_REST}$"),
        {"POST": (objects.move_to, _O + "move")},
    ),
    (
        re.compile(rf"^/storage/v1/b/{_SEG}/o/{_REST}$"),
        {
            "GET": (objects.get_object, _O + "get"),
            "PATCH": (objects.patch_object, _O + "patch"),
            "PUT": (objects.patch_object, _O + "update"),
            "DELETE": (objects.delete_object, _O + "delete"),
        },
    ),
    (
        re.compile(rf"^/upload/storage/v1/b/{_SEG}/o/?$"),
        {
            "POST": (uploads.upload, _O + "insert"),
            "PUT": (uploads.upload, _O + "insert"),
            "DELETE": (uploads.cancel, _O + "delete"),  # as storage-testbench names it
        },
    ),
    (re.compile(rf"^/download/storage/v1/b/{_SEG}/o/{_REST}$"), {"GET": (objects.download, _O + "get")}),
    (re.compile(r"^/batch(?:/storage/v1)?/?$"), {"POST": (batch.handle_batch, None)}),
    (re.compile(rf"^/{_SEG}/{_REST}$"), {"GET": (objects.download, _O + "get")}),  # XML-API style URL
]


def _decode(segment: str) -> str:
    try:
        return unquote(segment, errors="strict")
    except UnicodeDecodeError:
        raise bad_request("Path is not valid percent-encoded UTF-8.") from None


def route(method: str, path: str) -> tuple[Callable, list[str], str | None]:
    """The endpoint, decoded path arguments and JSON API method name; 404/405 JSON errors otherwise."""
    lookup = "GET" if method == "HEAD" else method
    allowed = False
    for pattern, methods in ROUTES:
        m = pattern.match(path)
        if not m:
            continue
        entry = methods.get(lookup)
        if entry is None:
            allowed = True
            continue
        return entry[0], [_decode(g) for g in m.groups()], entry[1]
    if allowed:
        raise GCSError(405, f"Method {method} is not allowed for {path[:200]}")
    raise GCSError(404, f"Not Found: {path[:200]}")


def api_method(method: str, path: str) -> str | None:
    """The JSON API method name (``storage.objects.get``...) a request calls, or None."""
    try:
        return route(method, path)[2]
    except GCSError:
        return None


class App:
    """The API: turns a :class:`Request` into a :class:`Response`, never raising."""

    def __init__(self, store: Store, limits: Limits | None = None, project_number: str = "0") -> None:
        self.store = store
        self.limits = limits or Limits()
        self.project_number = project_number
        self.sessions = uploads.Sessions(self.limits.max_upload_sessions)
        self.retry_tests = retry_test.RetryTests(
            self.limits.max_retry_tests, self.limits.max_retry_test_bytes
        )
        self.project = access.ProjectState()
        self.stopping = threading.Event()  # set when the server stops: wakes injected stalls

    def handle(self, req: Request) -> Response:
        try:
            if getattr(req, "bad_length", False):
                raise bad_request("Invalid Content-Length header.")
            fn, args, _ = route(req.method, req.path)
            result = fn(self, req, *args)
            if isinstance(result, Response):
                return result
            fields = req.params.get("fields")
            if fields:
                result = apply_fields(result, parse_fields(fields))
            return json_response(result)
        except GCSError as err:
            return error_response(err)
        except OSError as exc:  # the client stalled or vanished while sending its body
            logger.debug("reading %s %s failed: %s", req.method, req.path[:200], exc)
            return error_response(GCSError(400, "The request body could not be read."))
        except Exception:  # a bug: answer 500 and keep serving
            logger.exception("internal error on %s %s", req.method, req.path[:200])
            return error_response(GCSError(500, "Internal error in fake_gcs."))
