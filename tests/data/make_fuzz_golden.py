"""Record what TensorFlow does with damaged TFRecord files, for tests/test_fuzz.py.

Run from the repository root with TensorFlow installed (never a tpudata dependency):

    python tests/data/make_fuzz_golden.py

It writes, under tests/data/golden/fuzz/:

- ``base-<name>.tfrecord.gz|.zlib``: intact compressed files written by ``tf.io.TFRecordWriter``
  (the uncompressed ones are not kept: the test frames the same records itself);
- ``cases.json``: for every damaged variant of a base file (the edit is stored, so the test
  rebuilds the exact bytes without TensorFlow), what ``tf.data.TFRecordDataset`` delivered:
  the number of records before it stopped, and the error's class and message (or none);
- ``parse-<good>-<kind>.tfrecord`` and ``parse.json``: ``good`` Examples then one bad record,
  and the rows TensorFlow delivers before the error, parsing before and after ``batch``.
"""

from __future__ import annotations

import json
import os
import re
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fuzz_cases import (  # noqa: E402
    BASES,
    PARSE_BATCH,
    PARSE_FILES,
    apply_edit,
    expected_records,
    make_edits,
)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "fuzz")
SUFFIX = {"": ".tfrecord", "GZIP": ".tfrecord.gz", "ZLIB": ".tfrecord.zlib"}


def write_base(name: str, records: list[bytes], compression: str) -> str:
    path = os.path.join(OUT, f"base-{name}{SUFFIX[compression]}")
    options = tf.io.TFRecordOptions(compression_type=compression)
    with tf.io.TFRecordWriter(path, options=options) as w:
        for r in records:
            w.write(r)
    return path


def tf_read(path: str, compression: str) -> dict:
    """Records TensorFlow's reader delivers, and how it stops."""
    ds = tf.data.TFRecordDataset(path, compression_type=compression)
    got = []
    error = None
    try:
        for r in ds:
            got.append(r.numpy())
    except tf.errors.OpError as exc:
        message = exc.message.split("}} ", 1)[-1]  # drop the op's name and the trailer
        message = re.sub(r"\s*\[Op:IteratorGetNext\].*", "", message, flags=re.S)
        error = {"class": type(exc).__name__, "message": message}
    return {"records": got, "error": error}


def _example(feature: dict) -> bytes:
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def bad_record(kind: str) -> bytes:
    if kind == "malformed":  # a features field longer than the record (UTF-8, so TF can quote it)
        return b"\n\x05ab"
    if kind == "missing":
        return _example({"other": tf.train.Feature(int64_list=tf.train.Int64List(value=[1]))})
    return _example({"id": tf.train.Feature(float_list=tf.train.FloatList(value=[1.5]))})


def _rows(ds) -> dict:
    rows, error = [], None
    try:
        for batch in ds:
            rows.extend(int(v) for v in batch["id"].numpy().tolist())
    except tf.errors.OpError as exc:
        error = {"class": type(exc).__name__, "message": exc.message.split("}} ", 1)[-1][:300]}
    return {"rows": rows, "error": error}


def parse_cases() -> list[dict]:
    """Item 3: TensorFlow's rows before a bad record, parsing before and after batching."""
    spec = {"id": tf.io.FixedLenFeature([], tf.int64)}
    out = []
    for good, kind in PARSE_FILES:
        name = f"parse-{good}-{kind}.tfrecord"
        path = os.path.join(OUT, name)
        with tf.io.TFRecordWriter(path) as w:
            for i in range(good):
                w.write(_example({"id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))}))
            w.write(bad_record(kind))
        ds = tf.data.TFRecordDataset(path)
        parse_then_batch = ds.map(lambda x: tf.io.parse_single_example(x, spec)).batch(PARSE_BATCH)
        batch_then_parse = ds.batch(PARSE_BATCH).map(lambda x: tf.io.parse_example(x, spec))
        out.append({"file": name, "good": good, "bad": kind,
                    "parse_then_batch": _rows(parse_then_batch),
                    "batch_then_parse": _rows(batch_then_parse)})
    return out


def main() -> int:
    os.makedirs(OUT, exist_ok=True)
    scratch = os.path.join(OUT, "scratch.bin")
    cases = []
    for name, records in BASES.items():
        for compression in ("", "GZIP", "ZLIB"):
            path = write_base(name, records, compression)
            data = open(path, "rb").read()
            for edit in make_edits(name, compression, data):
                damaged = apply_edit(data, edit)
                with open(scratch, "wb") as f:
                    f.write(damaged)
                res = tf_read(scratch, compression)
                n = len(res["records"])
                if res["records"] != expected_records(name, edit)[:n]:
                    raise SystemExit(f"TensorFlow misread {name} {compression} {edit}")
                cases.append({"base": os.path.basename(path), "name": name,
                              "compression": compression, "edit": edit, "tf_records": n,
                              "tf_error": res["error"]})
            if not compression:
                os.remove(path)
    os.remove(scratch)
    with open(os.path.join(OUT, "parse.json"), "w") as f:
        json.dump({"tensorflow": tf.__version__, "cases": parse_cases()}, f, indent=1)
    with open(os.path.join(OUT, "cases.json"), "w") as f:  # one case a line
        f.write('{"tensorflow": %s, "cases": [\n' % json.dumps(tf.__version__))
        f.write(",\n".join(json.dumps(c, sort_keys=True) for c in cases))
        f.write("\n]}\n")
    print(f"{len(cases)} cases, TensorFlow {tf.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
