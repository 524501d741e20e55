"""ResNet train preprocessing on dask workers (``ds.distribute(client)``) vs in the trainer's process.

Data: --images photo-like JPEGs (~500x375, ~100 KB, q90) as imagenet_to_gcs Examples in 8 shards
(bench_image.py's). The pipeline, batches of 128 (uint8 0-255 output: the model normalises):

    list_files(seed=0) -> flat_map(TFRecordDataset) -> batch(128, drop_remainder) -> parse ->
    map(resnet_preprocess_batch(train, 224, num_threads=1))

  local        the pipeline in this process, one thread (what the trainer would spend)
  distributed  the same pipeline .distribute(client): a split per file on --workers dask worker
               processes (threads_per_worker=1) of a LocalCluster started in another process
               (its scheduler too), so this process's CPU is the consumer's only

Prints, per contender, images/s (best of --rounds, each after a warm-up epoch), the speedup, the
consumer's CPU per batch and that CPU as a fraction of the CPU per batch the local pipeline
spends (the work offloaded). The outputs are checked equal (same batches, same order). Then the
transport alone: 200 ready uint8 batches (3.9 GB) from the workers, with and without shared
memory: GB/s and the consumer's cores (CPU time / wall).

    python benchmarks/bench_distributed.py [--images 2048] [--workers 2] [--rounds 3] [--quiet-wait 60]

Scaling (a machine with many cores): --scaling 12,8,4,2,1 runs the distributed pipeline on a
fresh LocalCluster of each size over --shards files (one split per file; use a multiple of every
size) and prints, row by row, images/s and the speedup over the local pipeline against N, beside
N independent local pipelines run at once (what the machine itself gives N busy cores):

    python benchmarks/bench_distributed.py --scaling 12,8,4,2,1 --images 12288 --shards 96 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import textwrap
import time
import zlib

import numpy as np

import tpudata.image as ti
from tpudata import Dataset, TFRecordDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_image import BATCH, SIZE, SPEC, make_shards, wait_for_quiet  # noqa: E402

CLUSTER = textwrap.dedent("""
    import sys
    from distributed import LocalCluster
    if __name__ == "__main__":
        cluster = LocalCluster(n_workers=int(sys.argv[1]), threads_per_worker=1, processes=True,
                               host="127.0.0.1", dashboard_address="127.0.0.1:0")
        print(cluster.scheduler_address, flush=True)
        sys.stdin.read()  # until the benchmark closes our stdin
        cluster.close()
""")


def prep(features):
    encoded = features["image/encoded"]
    seed = zlib.crc32(bytes(encoded[0][:256]))  # a batch's own seed: the same wherever it runs
    images = ti.resnet_preprocess_batch(encoded, True, SIZE, seed=(0, seed), dtype=np.uint8,
                                        output="0-255", num_threads=1)
    return images, features["image/class/label"] - 1


_BATCH: dict = {}


def same_batch(_):
    """A ready uint8 batch (the transport alone: no work, no fresh pages on the worker)."""
    if "a" not in _BATCH:
        _BATCH["a"] = np.full((BATCH, SIZE, SIZE, 3), 7, np.uint8)
    return _BATCH["a"]


def transport(client, batches: int, shared_memory: bool) -> tuple[float, float]:
    """(GB/s, consumer cores) moving ``batches`` uint8 batches from the workers."""
    ds = Dataset.range(batches).map(same_batch).distribute(client, split_size=10,
                                                            shared_memory=shared_memory)
    t0, c0, n = time.perf_counter(), _cpu(), 0
    with ds.iterator() as it:
        for a in it:
            n += a.nbytes
    wall = time.perf_counter() - t0
    return n / wall / 1e9, (_cpu() - c0) / wall


def pipeline(pattern: str, shard: tuple | None = None) -> Dataset:
    files = Dataset.list_files(pattern, shuffle=True, seed=0)
    if shard is not None:
        files = files.shard(*shard)
    return (files
            .flat_map(TFRecordDataset)
            .batch(BATCH, drop_remainder=True)
            .parse(SPEC)
            .map(prep))


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def epoch(ds: Dataset) -> tuple[float, float, int, list, float]:
    """(wall, this process's CPU, images, each batch's checksum and labels, wall to the first)."""
    t0, c0, n, sums, first = time.perf_counter(), _cpu(), 0, [], None
    with ds.iterator() as it:
        for images, labels in it:
            if first is None:
                first = time.perf_counter() - t0
            n += len(images)
            sums.append((int(images[:, ::7, ::7].sum()), labels.tolist()))
    return time.perf_counter() - t0, _cpu() - c0, n, sums, first


def start_cluster(workers: int):
    proc = subprocess.Popen([sys.executable, "-c", CLUSTER, str(workers)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    address = proc.stdout.readline().strip()
    if not address:
        raise RuntimeError("the LocalCluster process did not start")
    return proc, address


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=2048)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="timed epochs per contender (alternating)")
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "tpudata-bench", "images"))
    ap.add_argument("--quiet-wait", type=float, default=0.0, metavar="S",
                    help="on a shared machine, wait up to S seconds for idle cores before each epoch")
    ap.add_argument("--shards", type=int, default=8, help="files (one split each)")
    ap.add_argument("--scaling", default="", metavar="N,N,...",
                    help="instead: images/s on LocalClusters of these sizes against the local pipeline")
    args = ap.parse_args()
    from distributed import Client

    pattern = make_shards(args.dir, args.images, args.shards, processes=os.cpu_count() or 1)
    if args.scaling:
        return scaling(pattern, [int(n) for n in args.scaling.split(",")], args)
    proc, address = start_cluster(args.workers)
    try:
        with Client(address) as client:
            client.wait_for_workers(args.workers)
            # one Dataset each, iterated once per epoch as a trainer does (list_files reshuffles
            # every iteration, so epoch r of one equals epoch r of the other)
            local, distributed = pipeline(pattern), pipeline(pattern).distribute(client)
            contenders = {"local": lambda: local, "distributed": lambda: distributed}
            best: dict = {}
            outputs: dict = {}
            for r in range(args.rounds + 1):  # round 0 warms up (page cache, imports, workers)
                for name, make in contenders.items():
                    wait_for_quiet(args.quiet_wait)
                    wall, cpu, n, sums, _ = epoch(make())
                    outputs[name] = sums
                    if r and (name not in best or wall < best[name][0]):
                        best[name] = (wall, cpu, n)
                assert outputs["local"] == outputs["distributed"], "the distributed batches differ"
            moved: dict = {}
            for r in range(args.rounds):
                for shm in (True, False):
                    wait_for_quiet(args.quiet_wait)
                    rate, cores = transport(client, 200, shm)
                    if rate > moved.get(shm, (0, 0))[0]:
                        moved[shm] = (rate, cores)
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    batches = best["local"][2] // BATCH
    local_cpu = best["local"][1] / batches
    print(f"{args.images} images, {batches} batches of {BATCH} per epoch, {args.workers} dask workers; "
          f"outputs equal: yes")
    print("| pipeline | images/s | speedup | consumer CPU per batch | consumer CPU / offloaded work |")
    print("|---|---|---|---|---|")
    for name, (wall, cpu, n) in best.items():
        speed = best["local"][0] / wall
        per_batch = cpu / batches
        share = f"{per_batch / local_cpu * 100:.1f}%" if name != "local" else "(all of it)"
        print(f"| {name} | {n / wall:,.0f} | {speed:.2f}x | {per_batch * 1e3:.1f} ms | {share} |")
    print()
    print(f"transport: 200 ready uint8 batches of {BATCH}x{SIZE}x{SIZE}x3 from {args.workers} workers")
    print("| chunks travel | GB/s | consumer cores |")
    print("|---|---|---|")
    for shm, (rate, cores) in moved.items():
        print(f"| {'shared memory (slots)' if shm else 'dask TCP, direct'} | {rate:.2f} | {cores:.2f} |")


def _control_process(pattern: str, n: int, i: int, barrier, results) -> None:
    ds = lambda: pipeline(pattern, shard=(n, i))  # noqa: E731
    epoch(ds())  # warm-up
    barrier.wait()
    t0, c0 = time.perf_counter(), _cpu()
    images = epoch(ds())[2]
    results.put((time.perf_counter() - t0, _cpu() - c0, images))


def control(pattern: str, n: int) -> tuple[float, float, int]:
    """N independent local pipelines, each over 1/N of the files, in N processes at once: what
    the machine itself gives N busy cores (wall of the slowest, CPU of all, images)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_control_process, args=(pattern, n, i, barrier, results))
             for i in range(n)]
    for p in procs:
        p.start()
    got = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return max(g[0] for g in got), sum(g[1] for g in got), sum(g[2] for g in got)


def scaling(pattern: str, sizes: list, args) -> None:
    """Images/s of the distributed pipeline on LocalClusters of ``sizes`` workers; each row is
    printed as soon as it is measured."""
    from distributed import Client

    local, reference, ds = None, [], pipeline(pattern)
    for r in range(args.rounds + 1):
        wall, cpu, n, sums, first = epoch(ds)
        reference.append(sums)  # epoch r's batches (list_files reshuffles every iteration)
        if r and (local is None or wall < local[0]):
            local = (wall, cpu, n, first)
    batches = local[2] // BATCH
    print(f"{local[2]} images in {args.shards} shards, {batches} batches of {BATCH} per epoch, "
          f"{os.cpu_count()} cpus; best of {args.rounds} epochs after a warm-up; every distributed "
          "epoch's batches are checked equal to the local pipeline's")
    print("| workers | images/s | speedup over local | speedup / N | CPU per batch | workers busy | "
          "first batch after | consumer cores | N local pipelines at once: images/s, CPU per batch | "
          "distributed / that |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(f"| local (1 thread) | {local[2] / local[0]:,.0f} | 1.00x | | {local[1] / batches * 1e3:.0f} ms | "
          f"| {local[3] * 1e3:.0f} ms | {local[1] / local[0]:.2f} | | |", flush=True)
    for workers in sizes:
        proc, address = start_cluster(workers)
        try:
            with Client(address) as client:
                client.wait_for_workers(workers)
                best = None
                distributed = pipeline(pattern).distribute(client)  # as a trainer's epochs do
                for r in range(args.rounds + 1):
                    wait_for_quiet(args.quiet_wait)
                    busy = sum(client.run(_cpu).values())
                    wall, cpu, n, sums, first = epoch(distributed)
                    busy = sum(client.run(_cpu).values()) - busy
                    if sums != reference[r]:
                        raise AssertionError(f"{workers} workers: the distributed batches differ")
                    if r and (best is None or wall < best[0]):
                        best = (wall, cpu, n, busy, first)
        finally:
            proc.stdin.close()
            proc.wait(timeout=60)
        ctl = control(pattern, workers) if workers > 1 else None
        wall, cpu, n, busy, first = best
        speed = local[0] / wall
        if ctl is None:
            ctl_cells = "| | |"
        else:
            ctl_cells = (f"| {ctl[2] / ctl[0]:,.0f}, {ctl[1] / batches * 1e3:.0f} ms | "
                         f"{(n / wall) / (ctl[2] / ctl[0]):.2f} |")
        print(f"| {workers} | {n / wall:,.0f} | {speed:.2f}x | {speed / workers:.2f} | "
              f"{busy / batches * 1e3:.0f} ms | {busy / wall / workers:.0%} | {first * 1e3:.0f} ms | "
              f"{cpu / wall:.2f} {ctl_cells}", flush=True)
    print("CPU per batch: the workers' CPU time (all their threads) per batch; workers busy: that CPU "
          "over N x wall; first batch after: the wall time from the epoch's start to its first "
          "batch. N local pipelines at once: N processes, each the local pipeline over 1/N of the "
          "files, started together (what the machine gives N busy cores, without tpudata's "
          "distribution)")


if __name__ == "__main__":
    main()
