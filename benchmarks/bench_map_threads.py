"""A cheap per-element Python function on threads: ``map(fn, num_parallel_calls=N).batch(128)``.

tf.data ports write ``num_parallel_calls=AUTOTUNE`` on every map, whatever the function costs.
This measures what a thread map costs per element when the function itself is cheap, against
the same map run in the consumer's thread (no threads: the floor) and against grain 0.2's
``MapDataset.map`` on its read threads (``ReadOptions(num_threads=N)``), the same function and
batching. Two functions: ``x + 1`` on a numpy int64 (about a microsecond) and a ~5 us one (a
small numpy computation on a 256-value array). Elements come from memory (``Dataset.range``;
grain: a list). Prints microseconds of wall time and of process CPU per element (every thread
counted), best of --repeat, the contenders interleaved.

    python benchmarks/bench_map_threads.py [--elements 200000] [--threads 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tpudata import AUTOTUNE, Dataset  # noqa: E402

_W = np.linspace(0.0, 1.0, 256)


def cheap(x):
    return x + 1


def small(x):
    return float(np.dot(_W, np.sin(_W * float(x))))


def tpudata_run(fn, n: int, calls) -> int:
    count = 0
    for b in Dataset.range(n).map(fn, num_parallel_calls=calls).batch(128):
        count += len(b)
    return count


def grain_run(fn, n: int, threads: int) -> int:
    import grain

    options = grain.ReadOptions(num_threads=threads, prefetch_buffer_size=max(128, 64 * threads))
    ds = grain.MapDataset.source(range(n)).map(fn).to_iter_dataset(options).batch(128)
    return sum(len(b) for b in ds)


def timed(run) -> tuple[float, float, int]:
    t0, c0 = time.perf_counter(), time.process_time()
    count = run()
    return time.perf_counter() - t0, time.process_time() - c0, count


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=int, default=200_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    n, k = args.elements, args.threads
    try:
        import grain  # noqa: F401

        have_grain = True
    except ImportError:
        have_grain = False
    print(f"{n:,} elements, batch 128, {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}")
    for name, fn in (("x + 1", cheap), ("a small numpy computation (~5 us)", small)):
        contenders = {
            "tpudata map(fn) (consumer's thread)": lambda: tpudata_run(fn, n, None),
            f"tpudata map(fn, num_parallel_calls={k})": lambda: tpudata_run(fn, n, k),
            "tpudata map(fn, num_parallel_calls=AUTOTUNE)": lambda: tpudata_run(fn, n, AUTOTUNE),
        }
        if have_grain:
            contenders[f"grain map(fn), ReadOptions(num_threads={k})"] = lambda: grain_run(fn, n, k)
        for run in contenders.values():  # warm-up
            run()
        best: dict = {}
        for _ in range(args.repeat):
            for label, run in contenders.items():
                wall, cpu, count = timed(run)
                assert count == n, (label, count)
                if label not in best or wall < best[label][0]:
                    best[label] = (wall, cpu)
        print(f"{name}:")
        for label, (wall, cpu) in best.items():
            print(f"  {label:<48} {wall / n * 1e6:7.2f} us/element wall  {cpu / n * 1e6:7.2f} us CPU")


if __name__ == "__main__":
    main()
