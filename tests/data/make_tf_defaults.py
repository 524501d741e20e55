"""Write tests/data/golden/tf_defaults.json: the signatures (parameter names, order, defaults) of
the tf.data / tf.io / tf.image calls that TPU input pipelines use, read from live TensorFlow.

Run with a Python that has TensorFlow (never tpudata's test venv):

    /work/tfvenv/bin/python tests/data/make_tf_defaults.py

``tests/dataset/test_tf_defaults.py`` compares tpudata's signatures against this table, and
(where TensorFlow is importable) this table against live TensorFlow.
"""

from __future__ import annotations

import inspect
import json
import os
import sys

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "tf_defaults.json")

# tf.io / tf.image / tf.data calls beyond tf.data.Dataset's methods: (TF path, tpudata path)
CALLS = [
    ("tf.data.TFRecordDataset", "tpudata.TFRecordDataset"),
    ("tf.data.FixedLengthRecordDataset", "tpudata.FixedLengthRecordDataset"),
    ("tf.data.TextLineDataset", "tpudata.TextLineDataset"),
    ("tf.io.FixedLenFeature", "tpudata.FixedLenFeature"),
    ("tf.io.VarLenFeature", "tpudata.VarLenFeature"),
    ("tf.io.FixedLenSequenceFeature", "tpudata.FixedLenSequenceFeature"),
    ("tf.io.SparseFeature", "tpudata.SparseFeature"),
    ("tf.io.RaggedFeature", "tpudata.RaggedFeature"),
    ("tf.io.parse_example", "tpudata.parse_examples"),
    ("tf.io.parse_single_example", "tpudata.parse_single_example"),
    ("tf.io.decode_raw", "tpudata.decode_raw"),
    ("tf.io.TFRecordWriter", "tpudata.TFRecordWriter"),
    ("tf.io.decode_jpeg", "tpudata.image.decode_jpeg"),
    ("tf.io.decode_png", "tpudata.image.decode_png"),
    ("tf.io.decode_image", "tpudata.image.decode_image"),
    ("tf.io.decode_and_crop_jpeg", "tpudata.image.decode_and_crop_jpeg"),
    ("tf.io.extract_jpeg_shape", "tpudata.image.extract_jpeg_shape"),
    ("tf.io.is_jpeg", "tpudata.image.is_jpeg"),
    ("tf.image.central_crop", "tpudata.image.central_crop"),
    ("tf.image.convert_image_dtype", "tpudata.image.convert_image_dtype"),
    ("tf.image.flip_left_right", "tpudata.image.flip_left_right"),
    ("tf.image.random_flip_left_right", "tpudata.image.random_flip_left_right"),
    ("tf.image.resize", "tpudata.image.resize"),
    ("tf.image.sample_distorted_bounding_box", "tpudata.image.sample_distorted_bounding_box"),
    ("tf.compat.v1.image.resize_bilinear", "tpudata.image.resize_bilinear"),
    ("tf.compat.v1.image.resize_bicubic", "tpudata.image.resize_bicubic"),
    ("tf.compat.v1.image.resize_area", "tpudata.image.resize_area"),
    ("tf.compat.v1.image.resize_nearest_neighbor", "tpudata.image.resize_nearest_neighbor"),
]


def encode_default(value):
    """A JSON form of a default: plain values as they are, dtypes by name, others by repr."""
    import tensorflow as tf

    if value is inspect.Parameter.empty:
        return {"required": True}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    if isinstance(value, tf.dtypes.DType):
        return {"dtype": "bytes" if value == tf.string else value.name}
    if isinstance(value, (tuple, list)):
        return {"value": [encode_default(v).get("value", repr(v)) for v in value]}
    return {"repr": repr(value)}


def signature_of(fn) -> list:
    params = []
    for p in inspect.signature(fn).parameters.values():  # a class: its constructor's
        if p.name in ("self", "cls") or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        params.append({"name": p.name, "kind": p.kind.name, **encode_default(p.default)})
    return params


def resolve(path: str):
    import tensorflow as tf

    obj = tf
    for part in path.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def table() -> dict:
    import tensorflow as tf

    out = {"tensorflow": tf.__version__, "dataset_methods": {}, "calls": {}}
    for name in sorted(dir(tf.data.Dataset)):
        if name.startswith("_"):
            continue
        member = inspect.getattr_static(tf.data.Dataset, name)
        if isinstance(member, property):
            continue
        fn = getattr(tf.data.Dataset, name)
        if not callable(fn):
            continue
        out["dataset_methods"][name] = {
            "static": isinstance(member, (staticmethod, classmethod)),
            "params": signature_of(fn)}
    for tf_path, ours in CALLS:
        out["calls"][tf_path] = {"tpudata": ours, "params": signature_of(resolve(tf_path))}
    options = tf.data.Options()
    out["options"] = {
        "deterministic": options.deterministic,
        "autotune.cpu_budget": options.autotune.cpu_budget,
        "threading.private_threadpool_size": options.threading.private_threadpool_size,
    }
    return out


def main() -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    data = table()
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {OUT}: {len(data['dataset_methods'])} Dataset methods, "
          f"{len(data['calls'])} other calls (TensorFlow {data['tensorflow']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
