"""``tpudata count | verify | head | index``: look at TFRecord files."""

from __future__ import annotations

import os
import sys
from typing import Iterator

import numpy as np
from tqdm import tqdm

from tpudata import storage
from tpudata.errors import DataLossError, InvalidExampleError, StorageError
from tpudata.example import wire
from tpudata.example.codec import decode_example, decode_sequence_example
from tpudata.tfrecord import framing
from tpudata.tfrecord.index import build_index
from tpudata.tfrecord.reader import TFRecordFileReader

_RESYNC_WINDOW = 8 << 20


def _common(p) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH_OR_GLOB", help="files, URLs or globs")
    p.add_argument("--compression", default=None, choices=["GZIP", "ZLIB", "NONE"],
                   help="default: detected from the data")


def _files(args) -> list[str]:
    """Files named by the arguments. Globs skip tpudata's sidecars (manifests, build journals,
    index files); one whose ending asks for them (``*.json``) has them skipped here with a note;
    a file named explicitly is always read."""
    out, skipped = [], []
    for pattern in args.paths:
        found = storage.expand(pattern)
        if storage.has_glob(pattern):
            skipped += [f for f in found if storage.is_side_file(f)]
            found = [f for f in found if not storage.is_side_file(f)]
            if not found:
                raise StorageError(f"{pattern!r} matches only manifests/index files, no TFRecord file")
        out.extend(found)
    if skipped:
        shown = ", ".join(os.path.basename(f) for f in skipped[:3]) + (" ..." if len(skipped) > 3 else "")
        print(f"skipping {len(skipped)} file(s) that are not TFRecords by name: {shown}", file=sys.stderr)
    return out


def _progress(files: list[str], desc: str):
    return tqdm(files, desc=desc, unit="file", disable=len(files) < 2 or not sys.stderr.isatty(),
                file=sys.stderr)


def register(sub) -> None:
    p = sub.add_parser("count", help="count records per file and in total")
    _common(p)
    p.add_argument("--no-verify", action="store_true", help="do not check CRCs (faster)")
    p.add_argument("--manifest", action="store_true",
                   help="take the counts from the shards' manifests when they match (no scan)")
    p.set_defaults(func=cmd_count)

    p = sub.add_parser("verify", help="check every record's CRCs")
    _common(p)
    p.add_argument("--all", action="store_true",
                   help="report every bad record (resynchronising after damage), not just the first")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("head", help="print the first records as decoded Examples")
    _common(p)
    p.add_argument("-n", type=int, default=3, help="records to print per file (default 3)")
    p.add_argument("--values", type=int, default=8, help="values shown per feature (default 8)")
    p.set_defaults(func=cmd_head)

    p = sub.add_parser("index", help="write a DALI-style index (offset length per record)")
    _common(p)
    p.add_argument("--output-dir", help="where to write NAME.idx (default: next to each file, "
                   "where a glob like train-* would then match the index too)")
    p.set_defaults(func=cmd_index)


# -- count ----------------------------------------------------------------------------------------
def cmd_count(args) -> int:
    files = _files(args)
    total = 0
    if args.manifest:
        from tpudata.shards.manifest import record_counts

        counts = record_counts(files)
        if counts is not None:
            for path, n in zip(files, counts):
                print(f"{n}\t{path}")
            if len(files) > 1:
                print(f"{sum(counts)}\ttotal ({len(files)} files, from manifests)")
            return 0
        print("no matching manifest for every file: scanning", file=sys.stderr)
    for path in _progress(files, "count"):
        reader = TFRecordFileReader(path, args.compression, verify=not args.no_verify)
        try:
            n = sum(len(b) for b in reader)
        except DataLossError as exc:
            print(f"{path}:{exc.offset}: {exc.message}", file=sys.stderr)
            return 1
        total += n
        print(f"{n}\t{path}")
    if len(files) > 1:
        print(f"{total}\ttotal ({len(files)} files)")
    return 0


# -- verify ---------------------------------------------------------------------------------------
def _resync(path: str, start: int) -> int:
    """Offset of the next valid frame at or after ``start`` in an uncompressed file, or -1."""
    keep = framing.HEADER_SIZE - 1  # a header may straddle two windows
    with storage.open_read(path) as f:
        f.seek(start)
        pos = start
        carry = b""
        while True:
            chunk = f.read(_RESYNC_WINDOW)
            buf = carry + chunk
            hit = framing.find_frame(buf, 0, len(buf))
            if hit >= 0:
                return pos + hit
            if not chunk:
                return -1
            carry = buf[-keep:]
            pos += len(buf) - len(carry)


def _verify_file(path: str, compression, report_all: bool) -> Iterator[tuple[int, int, str]]:
    """Yield ``(good_records, offset, message)`` per damaged spot, then ``(good, -1, "")``."""
    start = 0
    good = 0
    while True:
        reader = TFRecordFileReader(path, compression, start_offset=start)
        try:
            for batch in reader:
                good += len(batch)
            yield good, -1, ""
            return
        except DataLossError as exc:
            yield good, exc.offset if exc.offset is not None else -1, exc.message
            if not report_all or reader.compression or exc.offset is None:
                return
            record_start = reader.offset
            start = _resync(path, record_start + 1)
            if start < 0:
                yield good, -1, ""
                return


def cmd_verify(args) -> int:
    files = _files(args)
    errors = 0
    good_total = 0
    for path in _progress(files, "verify"):
        for good, offset, message in _verify_file(path, args.compression, args.all):
            if offset >= 0 or message:
                errors += 1
                print(f"{path}:{offset}: {message}")
                if not args.all:
                    print(f"FAILED: damaged record in {path} (use --all to check everything)",
                          file=sys.stderr)
                    return 1
            else:
                good_total += good
    status = "ok" if not errors else "FAILED"
    print(f"{status}: {good_total} good records in {len(files)} file(s), {errors} damaged spot(s)",
          file=sys.stderr)
    return 1 if errors else 0


# -- head -----------------------------------------------------------------------------------------
def _fmt_values(arr: np.ndarray, limit: int) -> str:
    kind = "bytes" if arr.dtype == object else str(arr.dtype)
    shown = []
    for v in arr[:limit].tolist():
        if isinstance(v, bytes):
            text = repr(v[:40]) + (f"...({len(v)} bytes)" if len(v) > 40 else "")
        elif isinstance(v, float):
            text = f"{v:.6g}"
        else:
            text = str(v)
        shown.append(text)
    more = f", ... ({arr.size} values)" if arr.size > limit else ""
    return f"{kind}[{arr.size}] [{', '.join(shown)}{more}]"


def _is_sequence_example(record: bytes) -> bool:
    try:
        return any(f == 2 and wt == wire.WT_LEN for f, wt, *_ in wire.iter_fields(record, 0, len(record)))
    except wire.Malformed:
        return False


def _describe(record: bytes, limit: int) -> list[str]:
    if not _is_sequence_example(record):
        try:
            features = decode_example(record)
            if not features:
                return ["  (an Example with no features)"]
            return [f"  {name}: {_fmt_values(v, limit)}" for name, v in sorted(features.items())]
        except InvalidExampleError:
            pass
    try:
        context, lists = decode_sequence_example(record)
        lines = ["  (SequenceExample)"]
        lines += [f"  context {n}: {_fmt_values(v, limit)}" for n, v in sorted(context.items())]
        for n, steps in sorted(lists.items()):
            lines.append(f"  feature_list {n}: {len(steps)} steps")
            lines += [f"    [{i}] {_fmt_values(v, limit)}" for i, v in enumerate(steps[:limit])]
        return lines
    except InvalidExampleError:
        return [f"  (not a tf.train.Example) {record[:48].hex()}" + ("..." if len(record) > 48 else "")]


def cmd_head(args) -> int:
    status = 0
    for path in _files(args):
        reader = TFRecordFileReader(path, args.compression)
        shown = 0
        try:
            for batch in reader:
                offsets = batch.record_offsets
                for i in range(min(len(batch), args.n - shown)):
                    rec = batch[i]
                    print(f"{path} record {shown} at offset {int(offsets[i])} ({len(rec)} bytes)")
                    print("\n".join(_describe(rec, args.values)))
                    shown += 1
                if shown >= args.n:
                    break
        except DataLossError as exc:
            print(f"{path}:{exc.offset}: {exc.message}", file=sys.stderr)
            status = 1
        finally:
            reader.close()
    return status


# -- index ----------------------------------------------------------------------------------------
def cmd_index(args) -> int:
    files = _files(args)
    for path in _progress(files, "index"):
        if args.output_dir:
            storage.makedirs(args.output_dir)
            out = storage.join(args.output_dir, os.path.basename(path.rstrip("/")) + ".idx")
        else:
            out = path + ".idx"
        try:
            index = build_index(path, out)
        except DataLossError as exc:
            print(f"{path}:{exc.offset}: {exc.message}", file=sys.stderr)
            return 1
        print(f"{len(index)}\t{out}")
    return 0
