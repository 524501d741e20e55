"""Which HTTP client should serve tpudata's hot ranged-read path: five clients read the same
objects from fake_gcs with 8 MiB ranged GETs, C requests at a time.

    python benchmarks/bench_gcs_clients.py                       # 8 x 64 MiB, C in 1 8 16 32, (50 ms, 50 MB/s/conn)
    python benchmarks/bench_gcs_clients.py --setting 50:50 --setting 20:none   # one table per setting
    python benchmarks/bench_gcs_clients.py --quick               # 4 x 16 MiB, C in 1 8
    python benchmarks/bench_gcs_clients.py --clients http.client obstore --conc 8

One fake_gcs server per setting (``python -m fake_gcs`` in its own process, 127.0.0.1, a free
port, ``--latency-ms``/``--bandwidth-mbps`` from ``--setting MS:MBPS``, ``none`` for no cap),
N objects of random bytes uploaded to it, then one row per (client, C), each in its OWN
subprocess (its own interpreter, event loop, connection pool), reading every object fully in
``--block-mib`` ranges (8 MiB) with C requests in flight:

- ``gcsfs-file``: gcsfs as a user gets it: ``fs.open(path, "rb")`` (default cache and block
  size) and ``f.read(8 MiB)`` in C threads; the ranges are cut into C contiguous spans (C files
  when C = N; part of a file each when C > N), each thread opens, seeks and reads its span.
- ``gcsfs-cat``: ``fs.cat_ranges(paths, starts, ends, batch_size=C)``: gcsfs's ``_cat_file``
  coroutines, C at a time, on gcsfs's own event loop thread.
- ``obstore``: obstore (Rust object_store) ``get_range_async`` in C coroutines on one asyncio
  loop (``get_ranges`` would coalesce adjacent ranges into one request). object_store's GCS
  backend is pointed at fake_gcs with a service-account JSON holding ``"gcs_base_url"`` and
  ``"disable_oauth": true`` (what object_store's own tests do against fake-gcs-server) and
  ``allow_http``; it reads with XML-API URLs (``GET /BUCKET/OBJECT``), which fake_gcs serves.
- ``gcloud-aio``: gcloud-aio-storage ``Storage(api_root=URL).download(bucket, name,
  headers={"Range": ...})`` in C asyncio tasks (its default aiohttp session).
- ``http.client``: the stdlib: C threads, one keep-alive ``HTTPConnection`` each, ``GET
  /download/storage/v1/b/B/o/NAME?alt=media`` with a Range header, ``resp.readinto`` into a
  preallocated bytearray per object (``gcs_bench_common.ranged_pool``).

A client whose package is missing is skipped with a line saying so (``pip install -e '.[bench]'``
brings obstore and gcloud-aio-storage). Every row's bytes are checked afterwards (CRC32 of each
object against the uploaded data, outside the timed window): a wrong row says ``WRONG`` and gets
no ratio.

Columns: ``MB/s`` = object bytes / wall time of the read (10**6 bytes); ``CPU-s/GB`` = user+sys
CPU seconds of the client process (all its threads: getrusage in the child) per 10**9 object
bytes; ``in flight`` = mean (and peak) requests the server was serving during the read, sampled
from fake_gcs's ``GET /_stats`` (``in_flight.current``) every 20 ms; ``reqs``/``conns``/
``req/conn`` = requests the server counted (metadata ones included), connections that carried
them and their ratio (connection reuse); ``sent/read`` = body bytes the server sent per object
byte (> 1.00: the client fetched bytes it did not need, e.g. read-ahead past a span);
``vs best`` = MB/s against the fastest correct row of the table. One connection cannot beat
8.39 MB / (L + 8.39 MB / B) at (L ms, B MB/s per connection): 38 MB/s at (50 ms, 50 MB/s), so
rows should scale with C until the machine's cores run out (server, client and sampler share
them; the title gives the load average, as other work on the machine makes rows noisy;
``--repeat N`` keeps each row's fastest of N runs). Imports and client construction happen
before the timed window, the first connection inside it. fake_gcs counts a body's bytes as sent
when it finished pacing it: a request whose client went away before that (a cancelled
read-ahead, or a hang-up within ~5 ms of the last byte) counts as abandoned, its bytes as not
sent; ``sent/read`` then ends in ``*N``, N such requests (and may be under 1.00).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import itertools
import json
import os
import sys
import threading
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gcs_bench_common as common  # noqa: E402

BUCKET = "clients-bench"
CLIENTS = {  # key: (what the row is, modules it needs)
    "gcsfs-file": ("gcsfs open+read, threads", ("gcsfs",)),
    "gcsfs-cat": ("gcsfs cat_ranges", ("gcsfs",)),
    "obstore": ("obstore get_range_async", ("obstore",)),
    "gcloud-aio": ("gcloud-aio-storage download", ("gcloud.aio.storage",)),
    "http.client": ("http.client pool, readinto", ()),
}


def missing(client: str) -> list[str]:
    """The modules ``client`` needs that this interpreter cannot import."""
    out = []
    for mod in CLIENTS[client][1]:
        try:
            found = importlib.util.find_spec(mod) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            out.append(mod)
    return out


# ----------------------------------------------------------------------- the clients (child)
# Each prepare_* imports its package and builds its client (no request yet) before the timed
# window, and returns read(pieces), which does every request: pieces[i] gets (offset, buffer).
def _gcsfs(url: str):
    import gcsfs

    return gcsfs.GCSFileSystem(endpoint_url=url, token="anon", skip_instance_cache=True)


def prepare_gcsfs_file(url, names, sizes, conc, block):
    fs = _gcsfs(url)
    ranges = common.ranges_of(sizes, block)
    spans = [ranges[k * len(ranges) // conc:(k + 1) * len(ranges) // conc] for k in range(conc)]

    def read(pieces):
        errors = []

        def worker(span):
            try:
                for i, group in itertools.groupby(span, key=lambda r: r[0]):
                    group = list(group)
                    with fs.open(f"{BUCKET}/{names[i]}", "rb") as f:
                        f.seek(group[0][1])
                        for _, off, n in group:
                            pieces[i].append((off, f.read(n)))
            except BaseException as exc:  # noqa: BLE001 - raised again by the main thread
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(s,)) for s in spans if s]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    return read


def prepare_gcsfs_cat(url, names, sizes, conc, block):
    fs = _gcsfs(url)
    ranges = common.ranges_of(sizes, block)

    def read(pieces):
        out = fs.cat_ranges([f"{BUCKET}/{names[i]}" for i, _, _ in ranges], [off for _, off, _ in ranges],
                            [off + n for _, off, n in ranges], batch_size=conc, on_error="raise")
        for (i, off, _), data in zip(ranges, out):
            pieces[i].append((off, data))

    return read


async def _coroutines(fetch, ranges, conc, pieces):
    """C coroutines on this loop, each taking the next range from a shared iterator."""
    todo = iter(ranges)

    async def worker():
        for i, off, n in todo:
            pieces[i].append((off, await fetch(i, off, n)))

    await asyncio.gather(*(worker() for _ in range(conc)))


def prepare_obstore(url, names, sizes, conc, block):
    import obstore
    from obstore.store import GCSStore

    key = json.dumps({"gcs_base_url": url, "disable_oauth": True, "client_email": "",
                      "private_key": "", "private_key_id": ""})
    store = GCSStore(BUCKET, service_account_key=key, client_options={"allow_http": True})

    def fetch(i, off, n):
        return obstore.get_range_async(store, names[i], start=off, length=n)

    return lambda pieces: asyncio.run(_coroutines(fetch, common.ranges_of(sizes, block), conc, pieces))


def prepare_gcloud_aio(url, names, sizes, conc, block):
    from gcloud.aio.storage import Storage

    async def main(pieces):
        async with Storage(api_root=url) as storage:
            def fetch(i, off, n):
                return storage.download(BUCKET, names[i], headers={"Range": f"bytes={off}-{off + n - 1}"},
                                        timeout=600)

            await _coroutines(fetch, common.ranges_of(sizes, block), conc, pieces)

    return lambda pieces: asyncio.run(main(pieces))


def prepare_http_client(url, names, sizes, conc, block):
    def read(pieces):
        got = common.ranged_pool(url, BUCKET, names, sizes, conc, block, keep=True)
        for i, buf in enumerate(got["buffers"]):
            pieces[i].append((0, buf))

    return read


PREPARE = {"gcsfs-file": prepare_gcsfs_file, "gcsfs-cat": prepare_gcsfs_cat, "obstore": prepare_obstore,
           "gcloud-aio": prepare_gcloud_aio, "http.client": prepare_http_client}


def crcs(pieces, sizes) -> list:
    """CRC32 of each object as read (None where the pieces do not tile it exactly)."""
    out = []
    for parts, size in zip(pieces, sizes):
        crc, at = 0, 0
        for off, buf in sorted(parts, key=lambda p: p[0]):
            if off != at:
                break
            crc, at = zlib.crc32(buf, crc), at + memoryview(buf).nbytes
        out.append(crc if at == size else None)
    return out


def child(spec: dict) -> None:
    run = PREPARE[spec["client"]](spec["url"], spec["names"], spec["sizes"], spec["conc"], spec["block"])

    def read(t0):
        pieces = [[] for _ in spec["names"]]
        run(pieces)
        return {}, pieces

    common.child_timed(read, lambda pieces: {"crcs": crcs(pieces, spec["sizes"])})


# ---------------------------------------------------------------------------------- parent
def make_objects(n: int, size: int) -> dict[str, bytes]:
    import numpy as np

    return {f"obj-{i:03d}.bin": np.random.default_rng(i).bytes(size) for i in range(n)}


def bench_setting(latency_ms, cap, objects, args) -> list[dict]:
    names, sizes = list(objects), [len(b) for b in objects.values()]
    expected = [zlib.crc32(b) for b in objects.values()]
    total = sum(sizes)
    results = []
    with common.FakeGCSProcess(latency_ms, cap, buckets=[BUCKET]) as server:
        common.upload(server.url, BUCKET, objects)
        env = dict(os.environ, GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false")
        env.pop("STORAGE_EMULATOR_HOST", None)  # every client is given the endpoint explicitly
        for client in args.clients:
            if missing(client):
                print(f"  {client}: skipped, {', '.join(missing(client))} not installed "
                      f"(pip install -e '.[bench]')", flush=True)
                continue
            for conc in args.conc:
                spec = {"client": client, "url": server.url, "names": names, "sizes": sizes,
                        "conc": conc, "block": args.block_mib << 20}
                res = common.run_row(server, [os.path.abspath(__file__), "--child", json.dumps(spec)], env=env,
                                     repeat=args.repeat)
                res.update(client=client, conc=conc, total=total)
                res["ok"] = res.get("crcs") == expected
                results.append(res)
                common.progress(f"{client} C={conc}", res, total)
        title = (f"{server.setting}; {len(names)} objects x {sizes[0] / (1 << 20):g} MiB, "
                 f"{args.block_mib} MiB ranges; {common.load_note()}")
    print_results(title, results)
    return results


def print_results(title: str, results: list[dict]) -> None:
    good = [r["total"] / r["wall"] / 1e6 for r in results if r.get("ok")]
    best = max(good, default=None)
    rows = []
    for r in results:
        label = CLIENTS[r["client"]][0]
        if "error" in r:
            rows.append([label, str(r["conc"]), "FAILED"])
            print(f"  {r['client']} C={r['conc']} failed: {r['error'][-600:]}")
            continue
        mbps = r["total"] / r["wall"] / 1e6
        sent = f"{r['sent'] / r['total']:.2f}" + (f" *{r['abandoned']}" if r["abandoned"] else "")
        rows.append([
            label, str(r["conc"]), f"{mbps:.0f}", f"{r['cpu'] / (r['total'] / 1e9):.2f}",
            f"{common.fmt(r['in_flight_mean'], '.1f')} ({r['in_flight_peak']})", str(r["requests"]),
            str(r["conns"]), f"{r['req_per_conn']:.1f}", sent,
            "ok" if r["ok"] else "WRONG", f"{mbps / best:.2f}x" if r["ok"] and best else "-",
        ])
    cols = [("client", 27), ("C", 3), ("MB/s", 6), ("CPU-s/GB", 8), ("in flight", 10), ("reqs", 5),
            ("conns", 5), ("req/conn", 8), ("sent/read", 10), ("bytes", 5), ("vs best", 7)]
    common.print_table(title, cols, rows)
    if any(r.get("abandoned") for r in results):
        print("  *N: N requests fake_gcs counted as abandoned (the client went away before the server was done with\n"
              "  the answer: a cancelled read-ahead, or a hang-up right after the last byte while the server still\n"
              "  paced it); the bytes of an abandoned answer are not counted as sent\n")


def main(argv=None) -> list[dict]:
    ap = common.argument_parser(__doc__, ["50:50"], quick="4 objects x 16 MiB, C in 1 8", repeat="default 1")
    ap.add_argument("--objects", type=int, help="how many objects (default 8; --quick 4)")
    ap.add_argument("--object-mib", type=float, help="size of each, MiB (default 64; --quick 16)")
    ap.add_argument("--block-mib", type=int, default=8, help="range size, MiB (default 8)")
    ap.add_argument("--conc", type=int, nargs="+", help="C: requests in flight (default 1 8 16 32; --quick 1 8)")
    ap.add_argument("--clients", nargs="+", default=list(CLIENTS), choices=list(CLIENTS))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(json.loads(args.child))
        return []
    settings = common.finish_args(args, full={"objects": 8, "object_mib": 64, "conc": [1, 8, 16, 32], "repeat": 1},
                                  quick={"objects": 4, "object_mib": 16, "conc": [1, 8], "repeat": 1})
    objects = make_objects(args.objects, int(args.object_mib * (1 << 20)))
    out = []
    for latency_ms, cap in settings:
        out += bench_setting(latency_ms, cap, objects, args)
    return out


if __name__ == "__main__":
    main()
