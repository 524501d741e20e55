"""Golden results of tf.io.parse_example for the structured features and of tf.io.decode_raw.

Run from the repository root with TensorFlow installed (never a tpudata dependency):

    python tests/data/make_structured_golden.py

It writes tests/data/golden/structured.json: the serialized records (as TensorFlow wrote them),
each spec (as plain data) and TensorFlow's output, which tests/test_example_structured.py
compares with tpudata's.
"""

from __future__ import annotations

import base64
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "structured.json")


def feature(values, kind):
    if kind == "bytes":
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
    if kind == "float":
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def records(seed: int, n: int) -> list:
    """Random Examples with sequences, sparse indices and ragged partitions that fit together."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        f = {}
        if rng.random() < 0.8:
            f["seq"] = feature(rng.normal(size=2 * int(rng.integers(0, 4))).astype(np.float32).tolist(), "float")
        if rng.random() < 0.8:
            f["words"] = feature([bytes(rng.integers(97, 123, size=int(rng.integers(0, 4))).astype(np.uint8))
                                  for _ in range(int(rng.integers(0, 3)))], "bytes")
        k = int(rng.integers(0, 4))
        if k or rng.random() < 0.5:
            f["ix"] = feature(rng.integers(0, 5, size=k).tolist(), "int64")
            f["iy"] = feature(rng.integers(0, 7, size=k).tolist(), "int64")
            f["sv"] = feature(rng.normal(size=k).astype(np.float32).tolist(), "float")
        lengths = rng.integers(0, 3, size=int(rng.integers(0, 4)))
        total = int(lengths.sum())
        if total or rng.random() < 0.5:
            f["rv"] = feature(rng.integers(-50, 50, size=total).tolist(), "int64")
            f["rl"] = feature(lengths.tolist(), "int64")
            f["rs"] = feature(np.concatenate([[0], np.cumsum(lengths)]).tolist(), "int64")
            f["ids"] = feature(np.repeat(np.arange(len(lengths)), lengths).tolist(), "int64")
            f["starts"] = feature(np.concatenate([[0], np.cumsum(lengths)])[:-1].tolist(), "int64")
            f["limits"] = feature(np.cumsum(lengths).tolist(), "int64")
        outer = int(rng.integers(0, 3))
        f["u"] = feature(rng.integers(0, 9, size=6 * outer).tolist(), "int64")
        f["ul"] = feature([outer], "int64")
        out.append(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())
    return out


RF = tf.io.RaggedFeature
SPECS = {
    "seq": ({"kind": "fixed_sequence", "shape": [2], "dtype": "float32", "default": -1.0},
            tf.io.FixedLenSequenceFeature([2], tf.float32, allow_missing=True, default_value=-1.0)),
    "seq_flat": ({"kind": "fixed_sequence", "key": "seq", "shape": [], "dtype": "float32"},
                 tf.io.FixedLenSequenceFeature([], tf.float32, allow_missing=True)),
    "words": ({"kind": "fixed_sequence", "shape": [], "dtype": "bytes"},
              tf.io.FixedLenSequenceFeature([], tf.string, allow_missing=True)),
    "sparse1": ({"kind": "sparse", "index": "ix", "value": "sv", "dtype": "float32", "size": 5},
                tf.io.SparseFeature("ix", "sv", tf.float32, 5)),
    "sparse2": ({"kind": "sparse", "index": ["ix", "iy"], "value": "sv", "dtype": "float32", "size": [5, 7]},
                tf.io.SparseFeature(["ix", "iy"], "sv", tf.float32, [5, 7])),
    "sparse_sorted": ({"kind": "sparse", "index": "ix", "value": "sv", "dtype": "float32", "size": 5,
                       "already_sorted": True},
                      tf.io.SparseFeature("ix", "sv", tf.float32, 5, already_sorted=True)),
    "ragged_words": ({"kind": "ragged", "value": "words", "dtype": "bytes", "partitions": []},
                     RF(tf.string, value_key="words")),
}
for part, cls in (("row_lengths", RF.RowLengths, ), ("row_splits", RF.RowSplits), ("row_starts", RF.RowStarts),
                  ("row_limits", RF.RowLimits), ("value_rowids", RF.ValueRowIds)):
    key = {"row_lengths": "rl", "row_splits": "rs", "row_starts": "starts", "row_limits": "limits",
           "value_rowids": "ids"}[part]
    SPECS[f"ragged_{part}"] = ({"kind": "ragged", "value": "rv", "dtype": "int64", "partitions": [[part, key]]},
                               RF(tf.int64, value_key="rv", partitions=[cls(key)]))
SPECS["ragged_uniform"] = ({"kind": "ragged", "value": "u", "dtype": "int64",
                            "partitions": [["row_lengths", "ul"], ["uniform", 3], ["uniform", 2]],
                            "row_splits_dtype": "int64"},
                           RF(tf.int64, value_key="u", partitions=[RF.RowLengths("ul"), RF.UniformRowLength(3),
                                                                  RF.UniformRowLength(2)],
                              row_splits_dtype=tf.int64))


def plain(v):
    if isinstance(v, tf.SparseTensor):
        return {"indices": v.indices.numpy().tolist(), "values": plain_values(v.values.numpy()),
                "dense_shape": v.dense_shape.numpy().tolist()}
    if isinstance(v, tf.RaggedTensor):
        return {"nested_row_splits": [s.numpy().tolist() for s in v.nested_row_splits],
                "row_splits_dtype": v.row_splits.dtype.name,
                "flat_values": plain_values(v.flat_values.numpy())}
    arr = v.numpy()
    return {"shape": list(arr.shape), "values": plain_values(arr.reshape(-1))}


def plain_values(arr):
    if arr.dtype == object:
        return [base64.b64encode(b).decode() for b in arr.tolist()]
    return arr.tolist()


def main():
    cases = []
    for seed, n in ((1, 12), (2, 1), (3, 40)):
        recs = records(seed, n)
        case = {"records": [base64.b64encode(r).decode() for r in recs], "results": {}}
        for name, (plain_spec, tf_spec) in SPECS.items():
            key = plain_spec.get("key", name if plain_spec["kind"] == "fixed_sequence" else None)
            spec = {key or name: tf_spec}
            got = tf.io.parse_example(tf.constant(recs), spec)[key or name]
            single = tf.io.parse_single_example(tf.constant(recs[0]), spec)[key or name]
            case["results"][name] = {"spec": plain_spec, "batch": plain(got), "single": plain(single)}
        cases.append(case)
    raw = []
    for dtype, data, little, fixed in (
        ("int16", [b"\x01\x00\x02\x00", b"\xff\x7f\x00\x80"], True, None),
        ("int16", [b"\x01\x00\x02\x00"], False, None),
        ("float32", [np.arange(3, dtype=np.float32).tobytes()], True, None),
        ("float64", [np.arange(2, dtype=">f8").tobytes()], False, None),
        ("uint8", [b"abc", b"xyz"], True, None),
        ("int32", [b"\x01\x00\x00\x00\x02", b"\x03"], True, 8),
        ("bool", [b"\x00\x01\x02"], True, None),
        ("int64", [b""], True, None),
    ):
        tf_dtype = getattr(tf, dtype)
        got = tf.io.decode_raw(tf.constant(data), tf_dtype, little_endian=little,
                               **({"fixed_length": fixed} if fixed else {}))
        raw.append({"dtype": dtype, "input": [base64.b64encode(b).decode() for b in data],
                    "little_endian": little, "fixed_length": fixed, "shape": list(got.shape),
                    "values": got.numpy().reshape(-1).tolist()})
    with open(OUT, "w") as f:
        json.dump({"tensorflow": tf.__version__, "cases": cases, "decode_raw": raw}, f, indent=0)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
