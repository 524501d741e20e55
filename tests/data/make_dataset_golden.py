"""Write tests/data/golden/dataset_ops.json: element orders of the pipelines in
dataset_op_cases.py, produced by live tf.data. Run from the repository root with TensorFlow
(never a tpudata dependency):

    /path/to/tf/python tests/data/make_dataset_golden.py
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from dataset_op_cases import CASES, SAMPLED  # noqa: E402


def plain(x):
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return [plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return [plain(v) for v in x.tolist()] if x.dtype == object else x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, bytes):
        return x.decode("latin-1")
    return x


def main() -> None:
    out = {"tensorflow": tf.__version__, "orders": {}}
    for name, build in sorted(CASES.items()):
        ds = build(tf.data.Dataset, tf.TensorSpec, tf.string)
        out["orders"][name] = {
            "elements": [plain(e) for e in ds.as_numpy_iterator()],
            "cardinality": int(ds.cardinality()),
            "spec": [[s.shape.as_list(), s.dtype.name]
                     for s in tf.nest.flatten(ds.element_spec)],
        }
    for name, build in sorted(SAMPLED.items()):  # random picks: only the multiset is TF's
        ds = build(tf.data.Dataset, tf.TensorSpec, tf.string)
        out["orders"][name] = {
            "sorted_elements": sorted(plain(e) for e in ds.as_numpy_iterator()),
            "spec": [[s.shape.as_list(), s.dtype.name] for s in tf.nest.flatten(ds.element_spec)],
        }
    path = os.path.join(HERE, "golden", "dataset_ops.json")
    with open(path, "w") as f:  # one line per pipeline: small diffs when a case changes
        f.write('{"tensorflow": %s, "orders": {\n' % json.dumps(out["tensorflow"]))
        f.write(",\n".join(f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}"
                            for k, v in sorted(out["orders"].items())))
        f.write("\n}}\n")
    print(f"wrote {path} ({len(CASES) + len(SAMPLED)} pipelines)")


if __name__ == "__main__":
    main()
