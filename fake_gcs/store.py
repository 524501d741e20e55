"""The store: buckets and object versions, with preconditions, versioning and atomic commits.

All metadata changes happen under one lock and are quick; object data is written before the
lock is taken, and a commit only swaps in the new immutable :class:`ObjectVersion`.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time

from fake_gcs.blobs import Blob, BlobReader, MemoryBackend
from fake_gcs.errors import GCSError, bad_request, no_such_bucket, no_such_object
from fake_gcs.model import (
    BucketState,
    GenerationClock,
    ObjectVersion,
    Preconditions,
    WRITABLE_BUCKET_FIELDS,
    WRITABLE_OBJECT_FIELDS,
    validate_bucket_name,
)

logger = logging.getLogger(__name__)
NO_PRECONDITIONS = Preconditions()


def merge_metadata(old: dict | None, patch: dict | None) -> dict | None:
    """PATCH semantics for custom metadata: keys set to null are removed."""
    if patch is None:
        return None
    out = dict(old or {})
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = str(value)
    return out or None


def writable_fields(resource: dict | None) -> dict:
    """The client-settable fields of an object resource (metadata values become strings)."""
    out = {k: v for k, v in (resource or {}).items() if k in WRITABLE_OBJECT_FIELDS}
    if isinstance(out.get("metadata"), dict):
        out["metadata"] = {k: str(v) for k, v in out["metadata"].items() if v is not None}
    return {k: v for k, v in out.items() if v is not None}


class Store:
    """Buckets and objects; thread-safe."""

    def __init__(self, backend=None) -> None:
        self.backend = backend or MemoryBackend()
        self.lock = threading.RLock()
        self.clock = GenerationClock()
        self.buckets: dict[str, BucketState] = {}
        self._load()

    def _load(self) -> None:
        for bstate, objects in self.backend.load():
            bucket = BucketState(
                name=bstate["name"],
                fields=bstate.get("fields") or {},
                metageneration=int(bstate.get("metageneration", 1)),
                time_created=float(bstate.get("time_created", time.time())),
                updated=float(bstate.get("updated", time.time())),
            )
            self.buckets[bucket.name] = bucket
            for ostate, blob in objects:
                version = ObjectVersion.from_state(ostate, blob)
                self.clock.observe(version.generation)
                if version.time_deleted is None:
                    bucket.live[version.name] = version
                else:
                    bucket.noncurrent.setdefault(version.name, []).append(version)
            for versions in bucket.noncurrent.values():
                versions.sort(key=lambda v: v.generation)
            bucket.names = sorted(set(bucket.live) | set(bucket.noncurrent))
        if self.buckets:
            logger.info("loaded %d bucket(s) from disk", len(self.buckets))

    # ----------------------------------------------------------------- buckets
    def bucket(self, name: str) -> BucketState:
        """The bucket, or 404."""
        try:
            return self.buckets[name]
        except KeyError:
            raise no_such_bucket(name) from None

    def create_bucket(self, name: str, resource: dict) -> BucketState:
        validate_bucket_name(name)
        fields = {k: v for k, v in resource.items() if k in WRITABLE_BUCKET_FIELDS}
        with self.lock:
            if name in self.buckets:
                raise GCSError(
                    409,
                    "Your previous request to create the named bucket succeeded and you already own it.",
                    "conflict",
                )
            bucket = BucketState(name=name, fields=fields)
            self.buckets[name] = bucket
            self.backend.save_bucket(bucket)
            return bucket

    def update_bucket(self, name: str, resource: dict, replace: bool, pre: Preconditions) -> BucketState:
        with self.lock:
            bucket = self.bucket(name)
            if pre.metageneration_match is not None and pre.metageneration_match != bucket.metageneration:
                raise GCSError(412, "At least one of the pre-conditions you specified did not hold.")
            changes = {k: v for k, v in resource.items() if k in WRITABLE_BUCKET_FIELDS}
            fields = {} if replace else dict(bucket.fields)
            for key, value in changes.items():
                if key == "labels" and not replace and isinstance(value, dict):
                    fields["labels"] = merge_metadata(fields.get("labels"), value)
                elif value is None:
                    fields.pop(key, None)
                else:
                    fields[key] = value
            bucket.fields = {k: v for k, v in fields.items() if v is not None}
            bucket.metageneration += 1
            bucket.updated = time.time()
            self.backend.save_bucket(bucket)
            return bucket

    def delete_bucket(self, name: str, pre: Preconditions) -> None:
        with self.lock:
            bucket = self.bucket(name)
            if pre.metageneration_match is not None and pre.metageneration_match != bucket.metageneration:
                raise GCSError(412, "At least one of the pre-conditions you specified did not hold.")
            if bucket.live:
                raise GCSError(409, "The bucket you tried to delete is not empty.", "conflict")
            # Noncurrent versions do not block the delete (fake-gcs-server does the same and
            # gcsfs's test fixtures rely on it; real GCS wants them deleted first).
            for versions in bucket.noncurrent.values():
                for version in versions:
                    self.backend.delete_object(version)
                    self.backend.discard(version.blob)
            del self.buckets[name]
            self.backend.delete_bucket(name)

    # ----------------------------------------------------------------- objects
    def _select(self, bucket: BucketState, name: str, generation: int | None) -> ObjectVersion:
        live = bucket.live.get(name)
        if generation is None:
            if live is None:
                raise no_such_object(bucket.name, name)
            return live
        if live is not None and live.generation == generation:
            return live
        for version in bucket.noncurrent.get(name, ()):
            if version.generation == generation:
                return version
        raise no_such_object(bucket.name, name, generation)

    def get(
        self, bucket: str, name: str, generation: int | None = None, pre: Preconditions = NO_PRECONDITIONS
    ) -> ObjectVersion:
        """The live version (or ``generation``) of an object; 404, 412 or 304."""
        with self.lock:
            version = self._select(self.bucket(bucket), name, generation)
            pre.check(version, read=True)
            return version

    def open(
        self, bucket: str, name: str, generation: int | None = None, pre: Preconditions = NO_PRECONDITIONS
    ) -> tuple[ObjectVersion, BlobReader]:
        """Select a version and open its data in one step, so the data cannot vanish.

        The caller closes the reader.
        """
        with self.lock:
            version = self._select(self.bucket(bucket), name, generation)
            pre.check(version, read=True)
            return version, version.blob.open()

    def _add_name(self, bucket: BucketState, name: str) -> None:
        i = bisect.bisect_left(bucket.names, name)
        if i == len(bucket.names) or bucket.names[i] != name:
            bucket.names.insert(i, name)

    def _drop_name_if_unused(self, bucket: BucketState, name: str) -> None:
        if name in bucket.live or bucket.noncurrent.get(name):
            return
        bucket.noncurrent.pop(name, None)
        i = bisect.bisect_left(bucket.names, name)
        if i < len(bucket.names) and bucket.names[i] == name:
            del bucket.names[i]

    def _retire(self, bucket: BucketState, version: ObjectVersion, now: float) -> None:
        """Make the live ``version`` noncurrent (versioned bucket) or delete it."""
        del bucket.live[version.name]
        if bucket.versioning:
            old = version.replace(time_deleted=now)
            bucket.noncurrent.setdefault(version.name, []).append(old)
            self.backend.save_object(old)
        else:
            self.backend.delete_object(version)
            self.backend.discard(version.blob)

    def commit(
        self,
        bucket: str,
        name: str,
        blob: Blob,
        crc32c: int,
        md5: bytes | None,
        fields: dict,
        pre: Preconditions = NO_PRECONDITIONS,
        component_count: int | None = None,
        shared: bool = False,
    ) -> ObjectVersion:
        """Publish ``blob`` as the new live generation of ``bucket/name``.

        ``shared``: the blob belongs to another version (copy), so the backend must give the
        new version its own handle. On any failure a non-shared blob is discarded.
        """
        try:
            with self.lock:
                b = self.bucket(bucket)
                current = b.live.get(name)
                pre.check(current)
                generation = self.clock.next()
                placed = (self.backend.share if shared else self.backend.place)(
                    blob, bucket, name, generation
                )
                now = time.time()
                version = ObjectVersion(
                    bucket=bucket,
                    name=name,
                    generation=generation,
                    metageneration=1,
                    blob=placed,
                    crc32c=crc32c,
                    md5=md5,
                    fields=fields,
                    time_created=now,
                    updated=now,
                    component_count=component_count,
                )
                if current is not None:
                    self._retire(b, current, now)
                b.live[name] = version
                self._add_name(b, name)
                self.backend.save_object(version)
                return version
        except BaseException:
            if not shared:
                self.backend.discard(blob)
            raise

    def update(
        self,
        bucket: str,
        name: str,
        generation: int | None,
        resource: dict,
        replace: bool,
        pre: Preconditions = NO_PRECONDITIONS,
    ) -> ObjectVersion:
        """PATCH (merge) or PUT (replace) an object's writable metadata."""
        with self.lock:
            b = self.bucket(bucket)
            version = self._select(b, name, generation)
            pre.check(version)
            changes = (
                writable_fields(resource)
                if replace
                else {k: v for k, v in resource.items() if k in WRITABLE_OBJECT_FIELDS}
            )
            fields = {} if replace else dict(version.fields)
            for key, value in changes.items():
                if key == "metadata" and not replace:
                    if value is not None and not isinstance(value, dict):
                        raise bad_request("Invalid value for metadata: expected an object.")
                    merged = merge_metadata(fields.get("metadata"), value)
                    if merged:
                        fields["metadata"] = merged
                    else:
                        fields.pop("metadata", None)
                elif value is None:
                    fields.pop(key, None)
                else:
                    fields[key] = value
            new = version.replace(
                fields=fields, metageneration=version.metageneration + 1, updated=time.time()
            )
            if b.live.get(name) is version:
                b.live[name] = new
            else:
                versions = b.noncurrent[name]
                versions[versions.index(version)] = new
            self.backend.save_object(new)
            return new

    def delete(
        self, bucket: str, name: str, generation: int | None, pre: Preconditions = NO_PRECONDITIONS
    ) -> None:
        """Delete the live object (noncurrent in a versioned bucket) or one generation."""
        with self.lock:
            b = self.bucket(bucket)
            version = self._select(b, name, generation)
            pre.check(version)
            if generation is None or b.live.get(name) is version:
                if generation is None:
                    self._retire(b, version, time.time())
                else:  # an explicit generation is deleted for good
                    del b.live[name]
                    self.backend.delete_object(version)
                    self.backend.discard(version.blob)
            else:
                b.noncurrent[name].remove(version)
                self.backend.delete_object(version)
                self.backend.discard(version.blob)
            self._drop_name_if_unused(b, name)

    def delete_exact(self, bucket: str, versions: list[ObjectVersion]) -> None:
        """Delete these exact generations for good (compose's ``deleteSourceObjects``).

        A generation that is gone already is skipped; a newer generation written under the same
        name since is left alone. Nothing is kept as noncurrent, even in a versioned bucket.
        """
        with self.lock:
            b = self.bucket(bucket)
            for version in versions:
                if b.live.get(version.name) is version:
                    del b.live[version.name]
                else:
                    old = b.noncurrent.get(version.name, [])
                    kept = [v for v in old if v.generation != version.generation]
                    if len(kept) == len(old):
                        continue
                    b.noncurrent[version.name] = kept
                    version = old[[v.generation for v in old].index(version.generation)]
                self.backend.delete_object(version)
                self.backend.discard(version.blob)
                self._drop_name_if_unused(b, version.name)

    def move(
        self,
        bucket: str,
        src: str,
        dst: str,
        src_pre: Preconditions,
        dst_pre: Preconditions,
        source_generation: int | None = None,
    ) -> ObjectVersion:
        """Atomically rename the live ``src`` to ``dst`` within one bucket."""
        with self.lock:
            b = self.bucket(bucket)
            source = self._select(b, src, None)
            if source_generation is not None and source.generation != source_generation:
                raise no_such_object(bucket, src, source_generation)
            src_pre.check(source)
            if src == dst:
                raise bad_request("Source and destination object names must be different.")
            version = self.commit(
                bucket,
                dst,
                source.blob,
                source.crc32c,
                source.md5,
                dict(source.fields),
                dst_pre,
                source.component_count,
                shared=True,
            )
            self._retire(b, b.live[src], time.time())
            self._drop_name_if_unused(b, src)
            return version

    def versions_of(self, bucket: BucketState, name: str, all_versions: bool) -> list[ObjectVersion]:
        """The versions a listing shows for ``name``, oldest generation first."""
        out = list(bucket.noncurrent.get(name, ())) if all_versions else []
        live = bucket.live.get(name)
        if live is not None:
            out.append(live)
        return out
