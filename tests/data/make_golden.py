"""Write the golden files in tests/data/golden with real TensorFlow.

Run from the repository root with TensorFlow installed (it is never a tpudata dependency):

    pip install tensorflow-cpu && python tests/data/make_golden.py

The contents come from golden_content.py, which the tests import to check every value.
"""

from __future__ import annotations

import gzip
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_content as gc  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")


def feature(kind, values):
    if kind == "bytes":
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
    if kind == "float":
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))
    if kind == "int64":
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Feature()


def example_proto(ex):
    return tf.train.Example(
        features=tf.train.Features(feature={k: feature(*v) for k, v in ex.items()})
    )


def sequence_proto(context, lists):
    return tf.train.SequenceExample(
        context=tf.train.Features(feature={k: feature(*v) for k, v in context.items()}),
        feature_lists=tf.train.FeatureLists(
            feature_list={
                k: tf.train.FeatureList(feature=[feature(*s) for s in steps])
                for k, steps in lists.items()
            }
        ),
    )


def encode_array(a):
    """JSON form: float32 as uint32 bit patterns (exact NaN/-0.0), bytes as hex."""
    if a.dtype.kind == "O":
        values = [v.hex() for v in a.ravel().tolist()]
        dtype = "bytes"
    elif a.dtype == np.float32:
        values = a.view(np.uint32).ravel().tolist()
        dtype = "float32"
    else:
        values = a.astype(np.int64).ravel().tolist()
        dtype = "int64"
    return {"dtype": dtype, "shape": list(a.shape), "values": values}


def write(name, records, compression=None):
    path = os.path.join(OUT, name)
    with tf.io.TFRecordWriter(path, options=compression) as w:
        for r in records:
            w.write(r)
    return path


def tf_error(path):
    try:
        for _ in tf.data.TFRecordDataset(path):
            pass
    except tf.errors.DataLossError as e:
        msg = e.message.split("}}")[-1].strip()
        return msg.split(" [Op:")[0].strip()
    return None


def main():
    os.makedirs(OUT, exist_ok=True)
    recs = gc.plain_records()
    plain = write("plain.tfrecord", recs)
    write("plain.tfrecord.gz", recs, "GZIP")
    write("plain.tfrecord.zlib", recs, "ZLIB")
    write("large.tfrecord.gz", [b"before", gc.large_record(), b"after"], "GZIP")

    serialized = [example_proto(ex).SerializeToString(deterministic=True) for ex in gc.examples()]
    write("examples.tfrecord", serialized)
    write("sequence_examples.tfrecord",
          [sequence_proto(c, l).SerializeToString(deterministic=True)
           for c, l in gc.sequence_examples()])

    # what tf.io.parse_example makes of the examples with a spec covering every feature type
    spec = {
        "bytes_scalar": tf.io.FixedLenFeature([], tf.string),
        "bytes_list": tf.io.FixedLenFeature([3], tf.string),
        "float_scalar": tf.io.FixedLenFeature([], tf.float32),
        "float_matrix": tf.io.FixedLenFeature([2, 3], tf.float32),
        "float_special": tf.io.FixedLenFeature([5], tf.float32),
        "int_scalar": tf.io.FixedLenFeature([], tf.int64, default_value=-7),
        "int_list": tf.io.FixedLenFeature([10], tf.int64),
        "empty_float": tf.io.FixedLenFeature([0], tf.float32),
        "unset": tf.io.FixedLenFeature([2], tf.float32, default_value=[0.5, 0.25]),
        "absent": tf.io.FixedLenFeature([], tf.string, default_value=b"none"),
        "int_var": tf.io.VarLenFeature(tf.int64),
        "float_var": tf.io.VarLenFeature(tf.float32),
        "bytes_var": tf.io.VarLenFeature(tf.string),
        "empty_bytes": tf.io.VarLenFeature(tf.string),
    }
    parsed = tf.io.parse_example(tf.constant(serialized), spec)
    arrays = {}
    for k, v in parsed.items():
        if isinstance(v, tf.SparseTensor):
            arrays[k + ".values"] = encode_array(v.values.numpy())
            arrays[k + ".indices"] = encode_array(v.indices.numpy())
            arrays[k + ".dense_shape"] = encode_array(v.dense_shape.numpy())
        else:
            arrays[k] = encode_array(v.numpy())
    with open(os.path.join(OUT, "examples_parsed.json"), "w") as f:
        json.dump(arrays, f, indent=0, sort_keys=True)

    # TensorFlow's error messages for damaged files
    good = open(plain, "rb").read()
    errors = {}
    small = good[: sum(len(r) + 16 for r in recs[:4])]  # the first four records
    for name, data in gc.corruptions(small).items():
        path = os.path.join(OUT, f"damaged_{name}.tfrecord")
        with open(path, "wb") as f:
            f.write(data)
        errors[name] = tf_error(path)
    # TF treats a partial header at the end as a clean end of file; tpudata reports it.
    with open(os.path.join(OUT, "tf_errors.json"), "w") as f:
        json.dump({"tensorflow": tf.__version__, "errors": errors}, f, indent=1, sort_keys=True)

    with gzip.open(os.path.join(OUT, "plain.tfrecord.gz")) as f:
        assert f.read() == good
    print("wrote", sorted(os.listdir(OUT)))


if __name__ == "__main__":
    main()
