"""Progress of a sharded build: a tqdm bar (records/s and MB/s) and the closing summary.

>>> p = Progress("doc", total_records=3, num_shards=1, enabled=False)
>>> p.shard_done(ShardInfo("doc-00000-of-00001", 3, 300, 0), skipped=False)
>>> r = p.result(Manifest("doc"), "memory://doc/doc.manifest.json")
>>> (r.written, r.skipped, r.records_written, r.bytes_written)
(1, 0, 3, 300)
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass

from tqdm import tqdm

from tpudata.shards.manifest import Manifest, ShardInfo

logger = logging.getLogger(__name__)


@dataclass
class BuildResult:
    """The outcome of a build: its manifest and what this run did to get there."""

    manifest: Manifest
    manifest_url: str
    written: int  # shards written by this run
    skipped: int  # shards kept, complete and valid, from a previous run
    records_written: int
    bytes_written: int
    seconds: float

    @property
    def files(self) -> list[str]:
        """URLs of all the shards, in order."""
        base = self.manifest_url.rsplit("/", 1)[0] if "/" in self.manifest_url else "."
        return self.manifest.files(base)

    @property
    def records_per_second(self) -> float:
        return self.records_written / self.seconds if self.seconds > 0 else 0.0

    @property
    def megabytes_per_second(self) -> float:
        return self.bytes_written / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        m = self.manifest
        kept = f", {self.skipped} kept from a previous run" if self.skipped else ""
        return (
            f"{m.prefix}: {m.num_shards} shard(s), {m.num_records} records, "
            f"{m.total_bytes / 1e6:.1f} MB; this run wrote {self.written} shard(s){kept}: "
            f"{self.records_written} records, {self.bytes_written / 1e6:.1f} MB in "
            f"{self.seconds:.2f} s ({self.records_per_second:.0f} records/s, "
            f"{self.megabytes_per_second:.1f} MB/s)"
        )


class Progress:
    """Counts finished shards and drives the progress bar (off unless stderr is a terminal)."""

    def __init__(self, desc: str, total_records: int | None, num_shards: int | None,
                 enabled: bool | None = None):
        if enabled is None:
            enabled = sys.stderr.isatty()
        self.num_shards = num_shards
        self.written = self.skipped = 0
        self.records_written = self.bytes_written = 0
        self._t0 = time.perf_counter()
        self._bar = tqdm(total=total_records, desc=desc, unit="rec", unit_scale=True,
                         disable=not enabled, file=sys.stderr, dynamic_ncols=True, smoothing=0.1)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._t0

    def shard_done(self, info: ShardInfo, skipped: bool) -> None:
        if skipped:
            self.skipped += 1
        else:
            self.written += 1
            self.records_written += info.records
            self.bytes_written += info.bytes
        self._bar.update(info.records)
        done = self.written + self.skipped
        of = f"/{self.num_shards}" if self.num_shards is not None else ""
        mbps = self.bytes_written / 1e6 / max(self.elapsed, 1e-9)
        self._bar.set_postfix_str(f"{mbps:.1f} MB/s, shards {done}{of}", refresh=False)

    def close(self) -> None:
        self._bar.close()

    def result(self, manifest: Manifest, manifest_url: str) -> BuildResult:
        self.close()
        result = BuildResult(manifest, manifest_url, self.written, self.skipped,
                             self.records_written, self.bytes_written, self.elapsed)
        logger.info("%s", result.summary())
        return result


__all__ = ["BuildResult", "Progress"]
