"""Access control and project resources, enough for client libraries' calls and tests.

ACLs (bucket, default object, object) read and write the resource's ``acl`` /
``defaultObjectAcl`` fields; IAM policies, Pub/Sub notification configs and HMAC keys live in
memory (not in ``--data-dir``). Nothing is enforced: fake_gcs has no principals, every request
acts as the project owner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import base64
import hashlib
import itertools
import logging
import secrets
import threading
import time
from urllib.parse import quote

from fake_gcs.errors import GCSError, bad_request
from fake_gcs.model import Preconditions, rfc3339
from fake_gcs.request import Request, empty_response

if TYPE_CHECKING:  # pragma: no cover
    from fake_gcs.app import App

logger = logging.getLogger(__name__)
MAX_PER_KIND = 10_000
OWNER = {
    "entity": "project-owners-0",
    "role": "OWNER",
    "projectTeam": {"projectNumber": "0", "team": "owners"},
}


class ProjectState:
    """IAM policies, notification configs and HMAC keys of one server."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.policies: dict[str, dict] = {}
        self.notifications: dict[str, dict[str, dict]] = {}
        self.hmac_keys: dict[str, dict] = {}
        self._ids = itertools.count(1)

    def next_id(self) -> str:
        return str(next(self._ids))


def _etag(value) -> str:
    return base64.b64encode(hashlib.md5(repr(value).encode()).digest()[:8]).decode()


# ------------------------------------------------------------------ ACLs
def _acl_target(app: App, bucket: str, name: str | None, field: str):
    if name is None:
        b = app.store.bucket(bucket)
        return list(b.fields.get(field) or [OWNER])
    version = app.store.get(bucket, name)
    return list(version.fields.get("acl") or [OWNER])


def _save_acl(app: App, bucket: str, name: str | None, field: str, acl: list) -> None:
    if name is None:
        app.store.update_bucket(bucket, {field: acl}, False, Preconditions())
    else:
        app.store.update(bucket, name, None, {"acl": acl}, False)


def _entry(entry: dict, bucket: str, name: str | None, kind: str) -> dict:
    out = {"kind": kind, "bucket": bucket, **entry}
    if name is not None:
        out["object"] = name
    out.setdefault("etag", _etag(entry))
    return out


def _acl_kind(name: str | None, field: str) -> str:
    return (
        "storage#objectAccessControl"
        if name is not None or field == "defaultObjectAcl"
        else ("storage#bucketAccessControl")
    )


def acl_endpoint(field: str, with_object: bool, with_entity: bool):
    """The endpoint for one of the ACL URL shapes (list/insert or get/update/patch/delete)."""

    def endpoint(app: App, req: Request, bucket: str, *rest: str):
        rest = list(rest)
        name = rest.pop(0) if with_object else None
        entity = rest.pop(0) if with_entity else None
        kind = _acl_kind(name, field)
        with app.store.lock:
            acl = _acl_target(app, bucket, name, field)
            if entity is None and req.method == "GET":
                return {"kind": kind + "s", "items": [_entry(e, bucket, name, kind) for e in acl]}
            if entity is None:  # insert
                body = req.read_json(app.limits.max_json_bytes)
                if not isinstance(body.get("entity"), str) or not isinstance(body.get("role"), str):
                    raise bad_request("An access control needs an entity and a role.")
                acl = [e for e in acl if e.get("entity") != body["entity"]] + [
                    {"entity": body["entity"], "role": body["role"]}
                ]
                _save_acl(app, bucket, name, field, acl)
                return _entry(acl[-1], bucket, name, kind)
            found = [e for e in acl if e.get("entity") == entity]
            if not found:
                raise GCSError(404, f"No access control for entity {entity[:100]}.")
            if req.method == "GET":
                return _entry(found[0], bucket, name, kind)
            if req.method == "DELETE":
                _save_acl(app, bucket, name, field, [e for e in acl if e.get("entity") != entity])
                return empty_response(204)
            body = req.read_json(app.limits.max_json_bytes)
            updated = {**found[0], **({k: v for k, v in body.items() if k == "role"})}
            _save_acl(app, bucket, name, field, [updated if e is found[0] else e for e in acl])
            return _entry(updated, bucket, name, kind)

    return endpoint


# ------------------------------------------------------------------ IAM, retention lock
def get_iam_policy(app: App, req: Request, bucket: str) -> dict:
    app.store.bucket(bucket)
    with app.project.lock:
        policy = app.project.policies.get(bucket) or {
            "bindings": [{"role": "roles/storage.legacyBucketOwner", "members": ["projectOwner:p"]}]
        }
    return {
        "kind": "storage#policy",
        "resourceId": f"projects/_/buckets/{bucket}",
        "version": int(policy.get("version") or 1),
        "etag": _etag(policy),
        "bindings": policy.get("bindings", []),
    }


def set_iam_policy(app: App, req: Request, bucket: str) -> dict:
    body = req.read_json(app.limits.max_json_bytes)
    if not isinstance(body.get("bindings", []), list):
        raise bad_request("bindings must be a list.")
    current = get_iam_policy(app, req, bucket)
    if body.get("etag") not in (None, "", current["etag"]):
        raise GCSError(412, "The policy's etag does not match the current policy.")
    with app.project.lock:
        app.project.policies[bucket] = {"bindings": body.get("bindings", []), "version": body.get("version")}
    return get_iam_policy(app, req, bucket)


def test_iam_permissions(app: App, req: Request, bucket: str) -> dict:
    app.store.bucket(bucket)
    wanted = [p for p in req.param_values("permissions") if p]
    return {"kind": "storage#testIamPermissionsResponse", "permissions": wanted}


def lock_retention_policy(app: App, req: Request, bucket: str) -> dict:
    pre = Preconditions.from_params(req.params)
    if pre.metageneration_match is None:
        raise bad_request("lockRetentionPolicy needs ifMetagenerationMatch.")
    with app.store.lock:
        b = app.store.bucket(bucket)
        policy = b.fields.get("retentionPolicy")
        if not isinstance(policy, dict):
            raise bad_request("The bucket has no retention policy to lock.")
        locked = {**policy, "isLocked": True}
        return app.store.update_bucket(bucket, {"retentionPolicy": locked}, False, pre).resource(req.base_url)


# ------------------------------------------------------------------ notifications
def _notifications(app: App, bucket: str) -> dict[str, dict]:
    app.store.bucket(bucket)
    return app.project.notifications.setdefault(bucket, {})


def insert_notification(app: App, req: Request, bucket: str) -> dict:
    body = req.read_json(app.limits.max_json_bytes)
    if not isinstance(body.get("topic"), str) or not body["topic"]:
        raise bad_request("A notification config needs a topic.")
    with app.project.lock:
        configs = _notifications(app, bucket)
        if len(configs) >= 100:
            raise bad_request("A bucket has at most 100 notification configs.")
        nid = app.project.next_id()
        config = {
            **{
                k: v
                for k, v in body.items()
                if k in ("topic", "event_types", "custom_attributes", "object_name_prefix")
            },
            "payload_format": body.get("payload_format") or "NONE",
            "kind": "storage#notification",
            "id": nid,
            "etag": nid,
            "selfLink": f"{req.base_url}/storage/v1/b/{bucket}/notificationConfigs/{nid}",
        }
        configs[nid] = config
    return config


def list_notifications(app: App, req: Request, bucket: str) -> dict:
    with app.project.lock:
        items = list(_notifications(app, bucket).values())
    return {"kind": "storage#notifications", "items": items}


def notification(app: App, req: Request, bucket: str, nid: str):
    with app.project.lock:
        configs = _notifications(app, bucket)
        if nid not in configs:
            raise GCSError(404, f"Notification config {nid[:50]} does not exist.")
        if req.method == "DELETE":
            del configs[nid]
            return empty_response(204)
        return configs[nid]


# ------------------------------------------------------------------ HMAC keys, service account
def service_account(app: App, req: Request, project: str) -> dict:
    return {
        "kind": "storage#serviceAccount",
        "email_address": f"service-{app.project_number}@gs-project-accounts.iam.gserviceaccount.com",
    }


def _hmac_view(meta: dict) -> dict:
    return {k: v for k, v in meta.items() if k != "secret"}


def create_hmac_key(app: App, req: Request, project: str) -> dict:
    email = req.params.get("serviceAccountEmail")
    if not email:
        raise bad_request("serviceAccountEmail is required.")
    now = rfc3339(time.time())
    access_id = "GOOG1" + secrets.token_hex(16).upper()
    meta = {
        "kind": "storage#hmacKeyMetadata",
        "id": f"{project}/{access_id}",
        "accessId": access_id,
        "projectId": project,
        "serviceAccountEmail": email,
        "state": "ACTIVE",
        "timeCreated": now,
        "updated": now,
        "etag": _etag((access_id, "ACTIVE")),
        "selfLink": f"{req.base_url}/storage/v1/projects/{quote(project)}/hmacKeys/{access_id}",
    }
    with app.project.lock:
        if len(app.project.hmac_keys) >= MAX_PER_KIND:
            raise bad_request("Too many HMAC keys.")
        app.project.hmac_keys[access_id] = meta
    secret = base64.b64encode(secrets.token_bytes(30)).decode()
    return {"kind": "storage#hmacKey", "metadata": dict(meta), "secret": secret}


def list_hmac_keys(app: App, req: Request, project: str) -> dict:
    email = req.params.get("serviceAccountEmail")
    with app.project.lock:
        items = [
            _hmac_view(m)
            for m in app.project.hmac_keys.values()
            if m["projectId"] == project and (email is None or m["serviceAccountEmail"] == email)
        ]
    return {"kind": "storage#hmacKeysMetadata", "items": items}


def hmac_key(app: App, req: Request, project: str, access_id: str):
    with app.project.lock:
        meta = app.project.hmac_keys.get(access_id)
        if meta is None or meta["projectId"] != project:
            raise GCSError(404, f"HMAC key {access_id[:60]} does not exist.")
        if req.method == "GET":
            return _hmac_view(meta)
        if req.method == "DELETE":
            if meta["state"] != "INACTIVE":
                raise bad_request("Only an INACTIVE HMAC key can be deleted.")
            del app.project.hmac_keys[access_id]  # gone: later calls get 404, as storage-testbench
            return empty_response(204)
    body = req.read_json(app.limits.max_json_bytes)
    state = body.get("state")
    if state not in ("ACTIVE", "INACTIVE"):
        raise bad_request("An HMAC key's state must be ACTIVE or INACTIVE.")
    with app.project.lock:
        if body.get("etag") not in (None, "", meta["etag"]):
            raise GCSError(412, "The HMAC key's etag does not match.")
        meta.update(state=state, updated=rfc3339(time.time()), etag=_etag((access_id, state, time.time())))
        return _hmac_view(meta)


__all__ = ["ProjectState", "acl_endpoint"]
