"""Dataset.save / Dataset.load against tf.data's save / load, same data, same run.

Elements ``{"id": int64, "x": float32[64], "tag": bytes}`` (from_tensor_slices), saved
uncompressed and with GZIP, then loaded and batched by 256. TensorFlow runs in a subprocess
(TF_PYTHON=/path/to/python picks the interpreter that has it, e.g. /work/tfvenv/bin/python);
without it only tpudata's figures print.

    TF_PYTHON=/work/tfvenv/bin/python python benchmarks/bench_save_load.py [--n 50000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np

from tpudata import Dataset

MAKE_DATA = """
def make_data(n):
    rng = np.random.default_rng(0)
    return {"id": np.arange(n), "x": rng.standard_normal((n, 64)).astype(np.float32),
            "tag": np.array([b"tag%d" % i for i in range(n)], dtype=object)}
"""
exec(MAKE_DATA)  # the same data on both sides

TF_PEER = textwrap.dedent("""
    import json, os, shutil, sys, tempfile, time
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import numpy as np
    import tensorflow as tf
    """) + MAKE_DATA + textwrap.dedent("""
    n = int(sys.argv[1])
    ds = tf.data.Dataset.from_tensor_slices(make_data(n))
    out = {}
    for comp in (None, "GZIP"):
        d = tempfile.mkdtemp()
        t = time.perf_counter(); ds.save(d, compression=comp); out[f"save {comp}"] = time.perf_counter() - t
        t = time.perf_counter()
        k = sum(len(b["id"]) for b in tf.data.Dataset.load(d, compression=comp).batch(256).as_numpy_iterator())
        out[f"load {comp}"] = time.perf_counter() - t
        assert k == n
        shutil.rmtree(d, ignore_errors=True)
    print(json.dumps(out))
""")


def run_tpudata(n: int) -> dict:
    ds = Dataset.from_tensor_slices(make_data(n))  # noqa: F821 - defined by exec above
    out = {}
    for comp in (None, "GZIP"):
        with tempfile.TemporaryDirectory() as d:
            t = time.perf_counter()
            ds.save(d, compression=comp, progress=False)
            out[f"save {comp}"] = time.perf_counter() - t
            t = time.perf_counter()
            k = sum(len(b["id"]) for b in Dataset.load(d).batch(256))
            out[f"load {comp}"] = time.perf_counter() - t
            assert k == n
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50_000)
    args = ap.parse_args()
    ours = run_tpudata(args.n)
    peer = None
    python = os.environ.get("TF_PYTHON")
    if python:
        proc = subprocess.run([python, "-c", TF_PEER, str(args.n)], capture_output=True, text=True)
        if proc.returncode == 0:
            peer = json.loads(proc.stdout.strip().splitlines()[-1])
        else:
            print("tf.data peer failed:", proc.stderr.strip().splitlines()[-1:])
    print(f"{args.n} elements {{id: int64, x: float32[64], tag: bytes}}; elements per second")
    for key, secs in ours.items():
        line = f"  {key:10s} tpudata {args.n / secs:10,.0f}"
        if peer:
            line += f"   tf.data {args.n / peer[key]:10,.0f}   ratio {peer[key] / secs:5.2f}x"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
