"""Pure-Python map work in worker processes (ProcessMapper) against one process, in the same run.

Two CPU-bound functions that hold the GIL, over in-memory elements:

- tokenize: a loop-heavy, tokenizer-like function (lower-casing, splitting on non-alphanumerics,
  hashing each token to an id character by character) over ~50,000 texts of 250 words; returns a
  small int32 array per text (travels inline in the pipe).
- features: a pure-Python loop (~1 ms) that fills a ~100 KB float32 array per element (travels
  through shared memory).

The peer is the same function applied in-line in this process (``[fn(x) for x in elements]``);
the Dataset rows run ``Dataset.from_tensor_slices(elements).map(fn)`` in-line against ``map(fn,
num_parallel_calls=workers, use_processes=True)`` (chunks of elements per task, see
``tpudata.dataset.parallel.processes.map``), rate measured after the first element (start-up printed apart, and
the ratio with it included).
ProcessMapper runs with ``num_workers`` processes (default 2, the cores of the dev machine), with
the default ``max_in_flight`` (2 per worker: one element per message) and with a larger one (room
to send quick elements in chunks); its start-up (first results) is reported apart, and the rate
is measured after it, over the whole input.
Prints throughput and the ratio (best of --repeat, the sides interleaved), and the CPU time per
element of each side (from /proc): on a shared machine, ``cores x in-line CPU / (parent + workers
CPU)`` bounds what the ratio can be on idle cores.

Then interleave's per-file function: 8 TFRecord files of texts, ``interleave(lambda f:
TFRecordDataset(f).map(tokenize), cycle_length=4)`` on threads against ``use_processes=True``.

    python benchmarks/bench_map_processes.py [--workers 2] [--texts 50000] [--arrays 5000]
        [--repeat 3] [--max-in-flight 64] [--only tokenize features interleave]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tpudata.dataset.parallel.processes.pool import ProcessMapper  # noqa: E402

VOCAB = 30_000
WORDS_PER_TEXT = 250  # a paragraph: ~1.3 KB of text
WORDS = ("the of and to in is was for on that with by as at from his her an were are which this "
         "be has had it not or have one their first also new after its who two more other time "
         "year used may over into only some most state world when between during three film "
         "city team known part").split()


def tokenize(text: str) -> np.ndarray:
    """Lower-case, split on non-alphanumerics, hash each token to an id (all in Python loops)."""
    ids = []
    token = []
    for ch in text:
        if ch.isalnum():
            token.append(ch.lower())
        elif token:
            h = 2166136261
            for c in token:
                h = ((h ^ ord(c)) * 16777619) & 0xFFFFFFFF
            ids.append(h % VOCAB)
            token = []
    if token:
        h = 2166136261
        for c in token:
            h = ((h ^ ord(c)) * 16777619) & 0xFFFFFFFF
        ids.append(h % VOCAB)
    return np.asarray(ids, dtype=np.int32)


def features(seed: int) -> dict:
    """~100 KB of float32 features: 2,560 cells by a pure-Python loop (an LCG), tiled 10 times."""
    n = 2_560
    values = [0.0] * n
    x = int(seed) + 1  # a Python int even when the Dataset hands a numpy scalar
    for i in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        values[i] = x / 2147483648.0
    return {"features": np.tile(np.asarray(values, dtype=np.float32), 10), "seed": int(seed)}


def make_texts(n: int) -> list[str]:
    rng = random.Random(0)
    return [" ".join(rng.choice(WORDS).capitalize() if rng.random() < 0.1 else rng.choice(WORDS)
                     for _ in range(WORDS_PER_TEXT)) + "." for _ in range(n)]


def inline_rate(fn, elements) -> tuple[float, float]:
    """(elements/s, CPU s/element) of fn applied in this process."""
    start, cpu = time.perf_counter(), time.process_time()
    for x in elements:
        fn(x)
    return len(elements) / (time.perf_counter() - start), (time.process_time() - cpu) / len(elements)


def cpu_seconds(pids) -> float:
    """CPU time (user + system) of processes, from /proc (0.0 where there is no /proc)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def process_rate(fn, elements, workers: int, max_in_flight: int | None) -> tuple:
    """(elements/s after start-up, start-up s, parent CPU s/element, workers' CPU s/element)."""
    start = time.perf_counter()
    with ProcessMapper(fn, num_workers=workers, max_in_flight=max_in_flight) as mapper:
        list(mapper.imap(elements[: 2 * workers]))  # start-up: first results from every worker
        startup = time.perf_counter() - start
        pids = [p.pid for p in multiprocessing.active_children() if p.name.startswith("tpudata-map")]
        workers_cpu, parent_cpu = cpu_seconds(pids), time.process_time()
        start = time.perf_counter()
        count = 0
        for _ in mapper.imap(elements):
            count += 1
        rate = count / (time.perf_counter() - start)
        parent_cpu = (time.process_time() - parent_cpu) / count
        workers_cpu = (cpu_seconds(pids) - workers_cpu) / count
    assert count == len(elements)
    return rate, startup, parent_cpu, workers_cpu


def check_results(fn, elements, workers: int) -> None:
    with ProcessMapper(fn, num_workers=workers) as mapper:
        for position, value in mapper.imap(elements[:50]):
            expected = fn(elements[position])
            if isinstance(expected, dict):
                assert np.array_equal(value["features"], expected["features"])
            else:
                assert np.array_equal(value, expected)


def dataset_rate(name, fn, elements, workers: int | None) -> tuple:
    """The same work through the Dataset: ``map(fn)`` in-line (``workers`` None) or ``map(fn,
    num_parallel_calls=workers, use_processes=True)``. Returns (elements/s after the first
    element, elements/s start-up included, start-up s, parent CPU s/element, workers' CPU
    s/element)."""
    from tpudata.dataset import Dataset

    source = np.array(elements, dtype=object) if name == "tokenize" else np.array(elements)
    kw = {} if workers is None else {"num_parallel_calls": workers, "use_processes": True}
    ds = Dataset.from_tensor_slices(source).map(fn, **kw)
    start = time.perf_counter()
    with ds.iterator() as it:
        next(it)  # start-up: the workers start and send their first chunk
        startup = time.perf_counter() - start
        pids = [p.pid for p in multiprocessing.active_children() if p.name.startswith("tpudata-map")]
        workers_cpu, parent_cpu = cpu_seconds(pids), time.process_time()
        t0 = time.perf_counter()
        count = 1 + sum(1 for _ in it)
        end = time.perf_counter()
        parent_cpu = (time.process_time() - parent_cpu) / (count - 1)
        workers_cpu = (cpu_seconds(pids) - workers_cpu) / (count - 1)
    assert count == len(elements)
    return ((count - 1) / (end - t0), count / (end - start), startup, parent_cpu, workers_cpu)


def tokenize_file(path) -> "Dataset":
    """interleave's per-file function: a TFRecord file of texts, tokenized in Python."""
    from tpudata.dataset import TFRecordDataset

    return TFRecordDataset(path.decode() if isinstance(path, bytes) else str(path)).map(
        tokenize_record)


def tokenize_record(record: bytes) -> np.ndarray:
    return tokenize(record.decode())


def interleave_case(args) -> None:
    """interleave(tokenize_file, cycle_length=4) over 8 files: the per-file datasets on
    ``workers`` threads (they hold the GIL) against ``use_processes=True``."""
    import tempfile

    import tpudata
    from tpudata.dataset import Dataset

    texts = make_texts(args.texts // 4)
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for k in range(8):
            paths.append(os.path.join(d, f"texts-{k:05d}"))
            tpudata.write_records(paths[-1], [t.encode() for t in texts[k::8]])

        def rate(**kw) -> tuple:
            """(elements/s after the first, start-up s, parent CPU s/element, workers' CPU)."""
            ds = Dataset.from_tensor_slices(paths).interleave(tokenize_file, cycle_length=4, **kw)
            start = time.perf_counter()
            with ds.iterator() as it:
                next(it)
                t0 = time.perf_counter()
                pids = [p.pid for p in multiprocessing.active_children()
                        if p.name.startswith("tpudata-map")]
                workers_cpu, parent_cpu = cpu_seconds(pids), time.process_time()
                n = 1 + sum(1 for _ in it)
                end = time.perf_counter()
                parent_cpu = (time.process_time() - parent_cpu) / (n - 1)
                workers_cpu = (cpu_seconds(pids) - workers_cpu) / (n - 1)
            assert n == len(texts)
            return (n - 1) / (end - t0), t0 - start, parent_cpu, workers_cpu

        inline, threads, procs = [], [], []
        for _ in range(args.repeat):
            inline.append(rate())
            threads.append(rate(num_parallel_calls=args.workers))
            procs.append(rate(num_parallel_calls=args.workers, use_processes=True))
        one, _, one_cpu, _ = max(inline)
        threaded = max(threads)[0]
        many, startup, parent_cpu, workers_cpu = max(procs)
        cores = min(args.workers, os.cpu_count() or 1)
        print(f"interleave {len(texts):6d} texts in 8 files, per-file map(tokenize): in-line "
              f"{one:8.0f}/s (CPU {one_cpu * 1e6:.0f} us/element); {args.workers} threads "
              f"{threaded:8.0f}/s ({threaded / one:.2f}x); use_processes=True {many:8.0f}/s "
              f"({many / one:.2f}x; start-up {startup:.2f} s; CPU us/element: parent "
              f"{parent_cpu * 1e6:.0f}, workers {workers_cpu * 1e6:.0f}; CPU-time bound on "
              f"{cores} idle cores {cores * one_cpu / (parent_cpu + workers_cpu):.2f}x)", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--texts", type=int, default=50_000)
    parser.add_argument("--arrays", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-in-flight", type=int, default=64,
                        help="also measured besides the default (2 * workers): room for chunks")
    parser.add_argument("--only", nargs="*", default=["tokenize", "features", "interleave"])
    args = parser.parse_args(argv)
    print(f"cores: {os.cpu_count()}, workers: {args.workers}, load average: "
          f"{os.getloadavg()[0]:.2f} (other processes on the machine skew both sides)")
    cases = [("tokenize", tokenize, make_texts(args.texts)),
             ("features", features, list(range(args.arrays)))]
    for name, fn, elements in cases:
        if name not in args.only:
            continue
        check_results(fn, elements, args.workers)
        settings = (None, args.max_in_flight)
        inline, procs = [], {m: [] for m in settings}
        ds_inline, ds_procs = [], []
        for _ in range(args.repeat):  # interleaved, so that a change of load hits both sides
            inline.append(inline_rate(fn, elements))
            for max_in_flight in settings:
                procs[max_in_flight].append(process_rate(fn, elements, args.workers, max_in_flight))
            ds_inline.append(dataset_rate(name, fn, elements, None))
            ds_procs.append(dataset_rate(name, fn, elements, args.workers))
        one, one_cpu = max(inline)
        print(f"{name:9s} {len(elements):6d} elements: in-line {one:8.0f}/s   "
              f"(CPU {one_cpu * 1e6:.0f} us/element)", flush=True)
        cores = min(args.workers, os.cpu_count() or 1)
        for max_in_flight in settings:
            best, startup, parent_cpu, workers_cpu = max(procs[max_in_flight])
            label = f"ProcessMapper({args.workers}, max_in_flight={max_in_flight or 2 * args.workers})"
            print(f"    {label:38s} {best:8.0f}/s   ratio {best / one:.2f}x   (start-up "
                  f"{startup:.2f} s; CPU us/element: parent {parent_cpu * 1e6:.0f}, workers "
                  f"{workers_cpu * 1e6:.0f}; CPU-time bound on {cores} idle cores "
                  f"{cores * one_cpu / (parent_cpu + workers_cpu):.2f}x)", flush=True)
        ds_one, _, _, ds_one_cpu, _ = max(ds_inline)
        best, with_startup, startup, parent_cpu, workers_cpu = max(ds_procs)
        print(f"    {'Dataset.map(fn) in-line':38s} {ds_one:8.0f}/s   (CPU {ds_one_cpu * 1e6:.0f} "
              "us/element)", flush=True)
        label = f"Dataset.map(fn, {args.workers}, use_processes)"
        print(f"    {label:38s} {best:8.0f}/s   ratio {best / ds_one:.2f}x vs Dataset in-line, "
              f"{best / one:.2f}x vs fn in-line   (start-up {startup:.2f} s, ratio with it "
              f"{with_startup / ds_one:.2f}x; CPU us/element: parent {parent_cpu * 1e6:.0f}, "
              f"workers {workers_cpu * 1e6:.0f}; CPU-time bound on {cores} idle cores "
              f"{cores * ds_one_cpu / (parent_cpu + workers_cpu):.2f}x)", flush=True)
    if "interleave" in args.only:
        interleave_case(args)


if __name__ == "__main__":
    main()
