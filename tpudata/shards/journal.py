"""Build state across runs: what a previous run finished, the in-progress journal, finishing up.

A build records each finished shard in a hidden journal next to the shards
(``.{prefix}.manifest.partial.json``, same format as the manifest). A rerun reads the journal
and the final manifest of an earlier complete build, and keeps every shard whose record still
matches (same name and fingerprint, same size and CRC32C on storage). When the build completes,
the manifest is written and the journal removed.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Mapping

from tpudata import storage
from tpudata.shards.manifest import (
    Manifest,
    ShardInfo,
    journal_name,
    manifest_name,
    try_read_manifest,
    write_manifest,
)
from tpudata.shards.planning import shard_name_pattern
from tpudata.shards.writing import cleanup_shard_temporaries

logger = logging.getLogger(__name__)


def previous_shards(output: str, prefix: str,
                    storage_options: Mapping | None = None) -> dict[str, ShardInfo]:
    """``{name: ShardInfo}`` recorded by earlier runs (the journal overrides the manifest)."""
    out: dict[str, ShardInfo] = {}
    for name in (manifest_name(prefix), journal_name(prefix)):
        found = try_read_manifest(storage.join(output, name), storage_options)
        if found is not None and found.prefix == prefix:
            out.update((s.name, s) for s in found.shards)
    return out


class Journal:
    """The in-progress record of a build, rewritten (atomically) as shards finish.

    Writes are at least ``min_interval`` seconds apart, except :meth:`flush` with ``force``;
    shards finished since the last write are rebuilt by a rerun if the build is killed.
    """

    def __init__(self, output: str, template: Manifest, min_interval: float = 0.0,
                 storage_options: Mapping | None = None):
        self.url = storage.join(output, journal_name(template.prefix))
        self.template = template
        self.min_interval = min_interval
        self.entries: dict[str, ShardInfo] = {}
        self._storage_options = dict(storage_options or {})
        self._dirty = False
        self._last = 0.0

    def record(self, info: ShardInfo) -> None:
        self.entries[info.name] = info
        self._dirty = True
        self.flush(force=False)

    def flush(self, force: bool = True) -> None:
        if not self._dirty:
            return
        now = time.monotonic()
        if not force and now - self._last < self.min_interval:
            return
        shards = [self.entries[k] for k in sorted(self.entries)]
        m = Manifest(self.template.prefix, shards, self.template.compression,
                     self.template.schema, self.template.metadata)
        try:
            write_manifest(self.url, m, storage_options=self._storage_options)
        except OSError as exc:  # the journal is an optimisation: never fail a build for it
            logger.warning("could not write the build journal %s: %s", self.url, exc)
            return
        self._dirty = False
        self._last = now

    def remove(self) -> None:
        storage.remove(self.url, **self._storage_options)


def begin(output: str, template: Manifest, carried: dict[str, ShardInfo], min_interval: float,
          storage_options: Mapping | None = None) -> Journal:
    """Start a build: clean temporaries, journal what earlier runs left, drop the old manifest."""
    so = dict(storage_options or {})
    storage.makedirs(output, **so)
    cleanup_shard_temporaries(output, template.prefix, so)
    journal = Journal(output, template, min_interval, so)
    for info in carried.values():
        journal.entries[info.name] = info
        journal._dirty = True
    journal.flush()
    # the old manifest describes files this run may replace: readers must not trust it meanwhile
    storage.remove(storage.join(output, manifest_name(template.prefix)), **so)
    return journal


def finish(output: str, manifest: Manifest, journal: Journal | None,
           storage_options: Mapping | None = None) -> str:
    """Write the final manifest, drop the journal and temporaries, warn about stale shards."""
    url = storage.join(output, manifest_name(manifest.prefix))
    write_manifest(url, manifest, storage_options=storage_options)
    if journal is not None:
        journal.remove()
    cleanup_shard_temporaries(output, manifest.prefix, storage_options)
    warn_stale_shards(output, manifest, storage_options)
    return url


def abandon(output: str, prefix: str, journal: Journal | None,
            storage_options: Mapping | None = None) -> None:
    """After a failed build: keep the journal for resuming and remove temporaries (best effort:
    a store that fails now is swept by the next run)."""
    if journal is not None:
        journal.flush()
        storage_options = {**journal._storage_options, **(storage_options or {})}
    try:
        cleanup_shard_temporaries(output, prefix, storage_options)
    except OSError as exc:
        logger.warning("could not remove the temporaries of %s in %s: %s", prefix, output, exc)


def warn_stale_shards(output: str, manifest: Manifest,
                      storage_options: Mapping | None = None) -> list[str]:
    """Shards of the same prefix but another plan (another ``-of-N``) left by earlier builds."""
    pattern = shard_name_pattern(manifest.prefix)
    current = {s.name for s in manifest.shards}
    try:
        found = storage.glob(storage.join(output, f"{manifest.prefix}-*-of-*"),
                             **(storage_options or {}))
    except OSError:  # pragma: no cover - listing is best effort
        return []
    stale = [u for u in found
             if pattern.fullmatch(os.path.basename(u)) and os.path.basename(u) not in current]
    if stale:
        logger.warning(
            "%d file(s) in %s look like shards of %r from another build (e.g. %s); they are not "
            "in the manifest - delete them if they are no longer wanted",
            len(stale), output, manifest.prefix, os.path.basename(stale[0]),
        )
    return stale


__all__ = ["Journal", "abandon", "begin", "finish", "previous_shards", "warn_stale_shards"]
