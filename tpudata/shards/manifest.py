"""The manifest written next to a set of shards: names, record counts, sizes, CRC32C, schema.

``{prefix}.manifest.json`` (it does not match the usual ``{prefix}-*`` shard glob) lists every
shard in order with its record count, byte size, the CRC32C of the whole file and the
fingerprint of what went into it, plus the feature schema when known. Readers get exact counts
from it without scanning; :func:`verify_manifest` recomputes every file's CRC32C.

>>> m = Manifest("train", [ShardInfo("train-00000-of-00001", records=2, bytes=40, crc32c=7)])
>>> Manifest.from_json(m.to_json()) == m, m.num_records
(True, 2)
>>> spec_from_schema(schema_from_spec({"label": FixedLenFeature([], np.int64)}))
{'label': FixedLenFeature(shape=(), dtype=dtype('int64'), default_value=None)}
"""

from __future__ import annotations

import base64
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np  # noqa: F401  (used by the doctests)

from tpudata import storage
from tpudata._keywords import storage_options_dict, strict_keywords
from tpudata.example.spec import BYTES, FLOAT32, INT64, FixedLenFeature, VarLenFeature
from tpudata.tfrecord.framing import crc32c

logger = logging.getLogger(__name__)

FORMAT = "tpudata.shards"
VERSION = 1
_READ_BLOCK = 8 << 20
_DTYPE_NAMES = {FLOAT32: "float32", INT64: "int64", BYTES: "bytes"}


def manifest_name(prefix: str) -> str:
    """``{prefix}.manifest.json``."""
    return f"{prefix}.manifest.json"


def journal_name(prefix: str) -> str:
    """The hidden in-progress manifest a build keeps so that a rerun can resume."""
    return f".{prefix}.manifest.partial.json"


@dataclass(frozen=True)
class ShardInfo:
    """One shard: file name, record count, file size in bytes, CRC32C of the file's bytes."""

    name: str
    records: int
    bytes: int
    crc32c: int
    fingerprint: str | None = None

    def to_json(self) -> dict:
        out = {"name": self.name, "records": self.records, "bytes": self.bytes,
               "crc32c": f"{self.crc32c:08x}"}
        if self.fingerprint is not None:
            out["fingerprint"] = self.fingerprint
        return out

    @classmethod
    def from_json(cls, d: Mapping) -> "ShardInfo":
        return cls(str(d["name"]), int(d["records"]), int(d["bytes"]), int(str(d["crc32c"]), 16),
                   d.get("fingerprint"))


@dataclass
class Manifest:
    """What a sharded build produced (see the module doc). ``shards`` are in index order."""

    prefix: str
    shards: list[ShardInfo] = field(default_factory=list)
    compression: str | None = None
    schema: dict | None = None
    metadata: dict = field(default_factory=dict)

    @property
    def num_shards(self) -> int:
        return len(self.shards)

    @property
    def num_records(self) -> int:
        return sum(s.records for s in self.shards)

    @property
    def total_bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    def files(self, base: str) -> list[str]:
        """Full URLs of the shards under the directory ``base``."""
        return [storage.join(base, s.name) for s in self.shards]

    def features(self) -> dict:
        """The schema as ``{name: FixedLenFeature | VarLenFeature}`` for ``parse_examples``."""
        if not self.schema:
            raise ValueError(f"the manifest of {self.prefix!r} has no feature schema")
        return spec_from_schema(self.schema)

    def to_json(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "prefix": self.prefix,
            "num_shards": self.num_shards,
            "num_records": self.num_records,
            "total_bytes": self.total_bytes,
            "compression": self.compression,
            "schema": self.schema,
            "metadata": self.metadata,
            "shards": [s.to_json() for s in self.shards],
        }

    @classmethod
    def from_json(cls, d: Mapping) -> "Manifest":
        if d.get("format") != FORMAT:
            raise ValueError(f"not a tpudata shard manifest (format {d.get('format')!r})")
        if int(d.get("version", 0)) > VERSION:
            raise ValueError(f"manifest version {d['version']} is newer than this tpudata reads")
        return cls(str(d["prefix"]), [ShardInfo.from_json(s) for s in d.get("shards", [])],
                   d.get("compression"), d.get("schema"), dict(d.get("metadata") or {}))

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1) + "\n"


@strict_keywords
def write_manifest(url: str, manifest: Manifest, *, storage_options: Mapping | None = None) -> None:
    """Write ``manifest`` as JSON to ``url``, atomically (``storage_options``: fsspec's)."""
    so = storage_options_dict("write_manifest", storage_options)
    with storage.open_atomic(url, **so) as f:
        f.write(manifest.dumps().encode("utf-8"))


@strict_keywords
def read_manifest(url: str, *, storage_options: Mapping | None = None) -> Manifest:
    """Read a manifest file (``.../train.manifest.json``; ``storage_options``: fsspec's)."""
    so = storage_options_dict("read_manifest", storage_options)
    try:
        data = json.loads(storage.read_bytes(url, **so).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{url}: not a JSON manifest ({exc})") from None
    return Manifest.from_json(data)


def try_read_manifest(url: str, storage_options: Mapping | None = None) -> Manifest | None:
    """:func:`read_manifest`, or ``None`` (with a warning if it is damaged) when unusable."""
    try:  # read, not "exists?" then read: one request either way
        return read_manifest(url, storage_options=storage_options)
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        logger.warning("ignoring unreadable manifest %s: %s", url, exc)
        return None


_SHARD_RE = re.compile(r"^(?P<prefix>.+)-\d{5,}-of-\d{5,}$")


def record_counts(files: list[str], check_sizes: bool = True,
                  storage_options: Mapping | None = None) -> list[int] | None:
    """Exact record counts of shard files from the manifests next to them, without scanning.

    Each file must be named ``{prefix}-NNNNN-of-NNNNN`` and listed in ``{prefix}.manifest.json``
    in its directory, with the file's current size (``check_sizes``); otherwise None.
    """
    so = dict(storage_options or {})
    manifests: dict[str, dict | None] = {}
    counts = []
    for url in files:
        base = url.rstrip("/").rsplit("/", 1)
        directory, name = (base[0], base[1]) if len(base) == 2 else ("", base[0])
        m = _SHARD_RE.match(name)
        if m is None:
            return None
        key = storage.join(directory, manifest_name(m.group("prefix"))) if directory else \
            manifest_name(m.group("prefix"))
        if key not in manifests:
            manifest = try_read_manifest(key, so)
            manifests[key] = None if manifest is None else {s.name: s for s in manifest.shards}
        shards = manifests[key]
        info = None if shards is None else shards.get(name)
        if info is None:
            return None
        if check_sizes and storage.stat(url, **so).size != info.bytes:
            logger.warning("%s does not match its manifest %s (size); counting needs a scan", url, key)
            return None
        counts.append(info.records)
    return counts


def file_crc32c(url: str, use_metadata: bool = True,
                storage_options: Mapping | None = None) -> tuple[int, int]:
    """``(size, crc32c)`` of a file's bytes; object stores that keep a CRC32C are asked for it."""
    so = dict(storage_options or {})
    if use_metadata and not storage.is_local(url):
        fs, path = storage.url_to_fs(url, **so)
        info = fs.info(path)
        stored = info.get("crc32c")
        if isinstance(stored, str) and stored:
            try:
                raw = base64.b64decode(stored)
                if len(raw) == 4:
                    return int(info["size"]), int.from_bytes(raw, "big")
            except ValueError:
                pass
    crc = 0
    n = 0
    with storage.open_read(url, _READ_BLOCK, True, **so) as f:
        while True:
            block = f.read(_READ_BLOCK)
            if not block:
                break
            crc = crc32c(block, crc)
            n += len(block)
    return n, crc


@strict_keywords
def verify_manifest(url: str, *, storage_options: Mapping | None = None) -> list[str]:
    """Recompute every shard's size and CRC32C; returns a list of problems (empty when all good).
    ``storage_options``: fsspec's."""
    so = storage_options_dict("verify_manifest", storage_options)
    manifest = read_manifest(url, storage_options=so)
    base = url.rsplit("/", 1)[0] if "/" in url else "."
    problems = []
    for shard in manifest.shards:
        path = storage.join(base, shard.name)
        try:
            n, crc = file_crc32c(path, use_metadata=False, storage_options=so)
        except FileNotFoundError:
            problems.append(f"{path}: missing")
            continue
        if n != shard.bytes:
            problems.append(f"{path}: {n} bytes, the manifest says {shard.bytes}")
        elif crc != shard.crc32c:
            problems.append(f"{path}: CRC32C {crc:08x}, the manifest says {shard.crc32c:08x}")
    return problems


# -- feature schema -------------------------------------------------------------------------------
def schema_from_spec(spec: Mapping[str, Any], source_dtypes: Mapping[str, str] | None = None) -> dict:
    """A JSON-able schema from ``{name: FixedLenFeature | VarLenFeature}``.

    ``source_dtypes`` optionally records the numpy dtype each feature had before it was widened
    to int64/float32/bytes, so readers can cast back.
    """
    out: dict = {}
    for name, feat in spec.items():
        if isinstance(feat, FixedLenFeature):
            entry = {"type": "fixed", "dtype": _DTYPE_NAMES[feat.dtype], "shape": list(feat.shape)}
        elif isinstance(feat, VarLenFeature):
            entry = {"type": "var", "dtype": _DTYPE_NAMES[feat.dtype]}
        else:
            raise TypeError(f"feature {name!r}: expected FixedLenFeature or VarLenFeature")
        if source_dtypes and name in source_dtypes:
            entry["source_dtype"] = str(source_dtypes[name])
        out[name] = entry
    return out


def spec_from_schema(schema: Mapping[str, Mapping]) -> dict:
    """The inverse of :func:`schema_from_spec` (source dtypes are not part of a spec)."""
    spec = {}
    for name, entry in schema.items():
        if entry.get("type") == "var":
            spec[name] = VarLenFeature(entry["dtype"])
        else:
            spec[name] = FixedLenFeature(tuple(entry.get("shape", ())), entry["dtype"])
    return spec


__all__ = [
    "Manifest",
    "ShardInfo",
    "file_crc32c",
    "journal_name",
    "manifest_name",
    "read_manifest",
    "schema_from_spec",
    "spec_from_schema",
    "try_read_manifest",
    "verify_manifest",
    "write_manifest",
]
