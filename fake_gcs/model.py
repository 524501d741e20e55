"""The data model: buckets, immutable object versions, preconditions, and their JSON resources.

An :class:`ObjectVersion` is never mutated: a metadata change makes a new one sharing the same
blob, so a reader holding a version always sees one consistent generation.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from fake_gcs.checksums import crc32c_b64, md5_b64
from fake_gcs.errors import bad_request, not_modified, precondition_failed

logger = logging.getLogger(__name__)

# Object fields a client may set on insert/patch/update (the rest are computed).
WRITABLE_OBJECT_FIELDS = (
    "contentType",
    "contentEncoding",
    "contentDisposition",
    "contentLanguage",
    "cacheControl",
    "customTime",
    "metadata",
    "storageClass",
    "temporaryHold",
    "eventBasedHold",
    "retention",
    "kmsKeyName",
    "acl",
)
WRITABLE_BUCKET_FIELDS = (
    "versioning",
    "labels",
    "billing",
    "iamConfiguration",
    "lifecycle",
    "cors",
    "website",
    "logging",
    "retentionPolicy",
    "defaultEventBasedHold",
    "encryption",
    "autoclass",
    "softDeletePolicy",
    "hierarchicalNamespace",
    "objectRetention",
    "storageClass",
    "location",
    "locationType",
    "rpo",
    "acl",
    "defaultObjectAcl",
    "customPlacementConfig",
)
DEFAULT_CONTENT_TYPE = "application/octet-stream"
MAX_NAME_BYTES = 1024
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")


def rfc3339(ts: float) -> str:
    """``2024-05-01T12:00:00.123Z`` (milliseconds, UTC), as GCS formats times."""
    dt = datetime.fromtimestamp(ts, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def validate_bucket_name(name: str) -> None:
    """Raise 400 unless ``name`` follows GCS's bucket naming rules."""
    if not isinstance(name, str) or not _BUCKET_RE.match(name) or ".." in name:
        raise bad_request(f"Invalid bucket name: {name!r}")
    if "." not in name and len(name) > 63:
        raise bad_request(f"Invalid bucket name: {name!r}")


def validate_object_name(name: Any) -> str:
    """Return ``name`` if GCS accepts it as an object name, else raise 400."""
    if not isinstance(name, str) or not name:
        raise bad_request("Object name is required.")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise bad_request("Object name is not valid UTF-8.") from None
    if len(encoded) > MAX_NAME_BYTES:
        raise bad_request("Object name is longer than 1024 bytes.")
    if name in (".", "..") or "\r" in name or "\n" in name:
        raise bad_request(f"Object name {name!r} is not allowed.")
    return name


class GenerationClock:
    """Generations are microsecond timestamps, strictly increasing across the server."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def observe(self, generation: int) -> None:
        """Never hand out a generation at or below one already in use (after a reload)."""
        with self._lock:
            self._last = max(self._last, generation)

    def next(self) -> int:
        """A fresh generation number."""
        with self._lock:
            self._last = max(self._last + 1, int(time.time() * 1_000_000))
            return self._last


@dataclass(frozen=True)
class ObjectVersion:
    """One generation of an object: its data handle plus metadata."""

    bucket: str
    name: str
    generation: int
    metageneration: int
    blob: Any  # fake_gcs.blobs.Blob
    crc32c: int
    md5: bytes | None
    fields: dict  # writable fields (contentType, metadata, ...)
    time_created: float
    updated: float
    time_deleted: float | None = None
    component_count: int | None = None

    @property
    def size(self) -> int:
        return self.blob.size

    @property
    def content_type(self) -> str:
        return self.fields.get("contentType") or DEFAULT_CONTENT_TYPE

    def replace(self, **changes) -> "ObjectVersion":
        return dataclasses.replace(self, **changes)

    def etag(self) -> str:
        return base64.b64encode(f"{self.generation}/{self.metageneration}".encode()).decode()

    def resource(self, base_url: str) -> dict:
        """The object resource as GCS's JSON API returns it."""
        quoted = quote(self.name, safe="")
        out = {
            "kind": "storage#object",
            "id": f"{self.bucket}/{self.name}/{self.generation}",
            "selfLink": f"{base_url}/storage/v1/b/{self.bucket}/o/{quoted}",
            "mediaLink": f"{base_url}/download/storage/v1/b/{self.bucket}/o/{quoted}"
            f"?generation={self.generation}&alt=media",
            "name": self.name,
            "bucket": self.bucket,
            "generation": str(self.generation),
            "metageneration": str(self.metageneration),
            "contentType": self.content_type,
            "storageClass": self.fields.get("storageClass") or "STANDARD",
            "size": str(self.size),
            "crc32c": crc32c_b64(self.crc32c),
            "etag": self.etag(),
            "timeCreated": rfc3339(self.time_created),
            "updated": rfc3339(self.updated),
            "timeStorageClassUpdated": rfc3339(self.time_created),
            "timeFinalized": rfc3339(self.time_created),
        }
        if self.md5 is not None:
            out["md5Hash"] = md5_b64(self.md5)
        if self.component_count is not None:
            out["componentCount"] = self.component_count
        if self.time_deleted is not None:
            out["timeDeleted"] = rfc3339(self.time_deleted)
        for key, value in self.fields.items():
            if key not in ("contentType", "storageClass", "acl") and value is not None:
                out[key] = value
        return out

    def to_state(self) -> dict:
        """Everything but the blob, for the on-disk backend."""
        return {
            "bucket": self.bucket,
            "name": self.name,
            "generation": self.generation,
            "metageneration": self.metageneration,
            "crc32c": self.crc32c,
            "md5": self.md5.hex() if self.md5 is not None else None,
            "fields": self.fields,
            "time_created": self.time_created,
            "updated": self.updated,
            "time_deleted": self.time_deleted,
            "component_count": self.component_count,
        }

    @classmethod
    def from_state(cls, state: dict, blob) -> "ObjectVersion":
        md5 = state.get("md5")
        return cls(
            bucket=state["bucket"],
            name=state["name"],
            generation=int(state["generation"]),
            metageneration=int(state["metageneration"]),
            blob=blob,
            crc32c=int(state["crc32c"]),
            md5=bytes.fromhex(md5) if md5 else None,
            fields=dict(state.get("fields") or {}),
            time_created=float(state["time_created"]),
            updated=float(state["updated"]),
            time_deleted=state.get("time_deleted"),
            component_count=state.get("component_count"),
        )


@dataclass
class BucketState:
    """A bucket: its metadata plus live and noncurrent object versions."""

    name: str
    fields: dict
    metageneration: int = 1
    time_created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    live: dict = field(default_factory=dict)  # name -> ObjectVersion
    noncurrent: dict = field(default_factory=dict)  # name -> [ObjectVersion] by generation
    names: list = field(default_factory=list)  # sorted names having any version

    @property
    def versioning(self) -> bool:
        return bool((self.fields.get("versioning") or {}).get("enabled"))

    def resource(self, base_url: str, project_number: str = "0") -> dict:
        """The bucket resource as GCS's JSON API returns it."""
        out = {
            "kind": "storage#bucket",
            "id": self.name,
            "selfLink": f"{base_url}/storage/v1/b/{self.name}",
            "projectNumber": project_number,
            "name": self.name,
            "timeCreated": rfc3339(self.time_created),
            "updated": rfc3339(self.updated),
            "metageneration": str(self.metageneration),
            "location": "US",
            "locationType": "multi-region",
            "storageClass": "STANDARD",
            "etag": base64.b64encode(f"b/{self.metageneration}".encode()).decode(),
            "versioning": {"enabled": False},
        }
        for key, value in self.fields.items():
            if key not in ("acl", "defaultObjectAcl") and value is not None:
                out[key] = value
        return out

    def to_state(self) -> dict:
        return {
            "name": self.name,
            "fields": self.fields,
            "metageneration": self.metageneration,
            "time_created": self.time_created,
            "updated": self.updated,
        }


def _int_param(params: dict, key: str) -> int | None:
    value = params.get(key)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise bad_request(f"Invalid value for {key}: {value!r}") from None


@dataclass(frozen=True)
class Preconditions:
    """``ifGenerationMatch`` & co.; ``prefix`` selects e.g. the ``ifSource...`` variants."""

    generation_match: int | None = None
    generation_not_match: int | None = None
    metageneration_match: int | None = None
    metageneration_not_match: int | None = None

    @classmethod
    def from_params(cls, params: dict, prefix: str = "if") -> "Preconditions":
        return cls(
            _int_param(params, prefix + "GenerationMatch"),
            _int_param(params, prefix + "GenerationNotMatch"),
            _int_param(params, prefix + "MetagenerationMatch"),
            _int_param(params, prefix + "MetagenerationNotMatch"),
        )

    def __bool__(self) -> bool:
        return any(v is not None for v in dataclasses.astuple(self))

    def check(self, current: ObjectVersion | None, read: bool = False) -> None:
        """Raise 412 (or 304 for a failed ``NotMatch`` on a read) unless all conditions hold.

        ``current`` is the version the request acts on (None: no live object); generation 0
        stands for "does not exist".
        """
        gen = current.generation if current is not None else 0
        if self.generation_match is not None and gen != self.generation_match:
            raise precondition_failed()
        if self.metageneration_match is not None and (
            current is None or current.metageneration != self.metageneration_match
        ):
            raise precondition_failed()
        if self.generation_not_match is not None and gen == self.generation_not_match:
            raise not_modified() if read else precondition_failed()
        if self.metageneration_not_match is not None and (
            current is None or current.metageneration == self.metageneration_not_match
        ):
            raise not_modified() if read else precondition_failed()
