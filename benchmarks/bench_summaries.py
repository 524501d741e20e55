"""What TensorBoard summaries cost the executor: the same training with summaries off and on.

For a local directory, memory:// and gs:// (the embedded fake GCS server), trains a softmax
regression on 8 replicas (loops of 10 steps) with ``save_summary_steps=None`` and with
``save_summary_steps=10`` (every loop, plus a host_call writing a histogram), and prints the
extra milliseconds per loop (each remote flush uploads the event file whole) and the ratio.

    python benchmarks/bench_summaries.py [--steps 300] [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import shutil
import tempfile
import time

import numpy as np

from tpudata import Dataset, storage, tpu

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4096, 32)).astype(np.float32)
Y = (X @ RNG.standard_normal((32, 10))).argmax(1).astype(np.int32)


def input_fn(params):
    return Dataset.from_tensor_slices(({"x": X}, Y)).repeat().batch(params["batch_size"],
                                                                     drop_remainder=True)


def host_fn(logits):
    tpu.summaries.histogram("logits", logits)


def model_fn(features, labels, mode, params):
    spec = tpu.models.softmax_regression(10, learning_rate=0.1)(features, labels, mode, params)
    return dataclasses.replace(spec, host_call=(host_fn, [features["x"][:, :10]]))


def run(model_dir: str, every: int | None, steps: int) -> float:
    cfg = tpu.RunConfig(model_dir=model_dir, save_summary_steps=every,
                        tpu_config=tpu.TPUConfig(iterations_per_loop=10, num_shards=8))
    est = tpu.TPUEstimator(model_fn if every else tpu.models.softmax_regression(10, learning_rate=0.1),
                           cfg, train_batch_size=256)
    t0 = time.perf_counter()
    est.train(input_fn, steps=steps)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from fake_gcs import FakeGCSServer, pointed_at

    local = tempfile.mkdtemp(prefix="tpudata-bench-summaries-")
    loops = args.steps // 10
    print(f"{args.steps} steps, 8 replicas, loops of 10; best of {args.repeats}")
    print(f"{'model_dir':<10} {'off (s)':>8} {'on (s)':>8} {'ms/loop':>8} {'on/off':>7}")
    try:
        with FakeGCSServer(port=0) as server, pointed_at(server):
            storage.gcs_filesystem().mkdir("bench")
            for name, base in (("local", local), ("memory", "memory://bench"), ("gs", "gs://bench")):
                times = {}
                for every in (None, 10):
                    best = float("inf")
                    for r in range(args.repeats):
                        best = min(best, run(storage.join(base, f"{every}-{r}"), every, args.steps))
                    times[every] = best
                extra = (times[10] - times[None]) / loops * 1e3
                print(f"{name:<10} {times[None]:8.3f} {times[10]:8.3f} {extra:8.2f} "
                      f"{times[10] / times[None]:7.3f}")
    finally:
        shutil.rmtree(local, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
