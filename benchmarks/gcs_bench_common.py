"""Shared by ``bench_gcs_clients.py`` and ``bench_gcs_stream.py``: the pieces of an honest gs://
read benchmark against fake_gcs.

- :class:`FakeGCSProcess`: ``python -m fake_gcs`` in its own process (its GIL is not the
  client's), on a free loopback port, with a first-byte latency and a per-connection bandwidth
  cap; killed on exit.
- :class:`InFlightSampler`: ``GET /_stats`` polled on one keep-alive connection while a row runs;
  the mean of ``in_flight.current`` over the row's timed window is the mean number of requests
  the server was serving (latency wait and body together). fake_gcs does not count requests to
  ``/_stats``, and a connection that carried none of the counted requests is not in
  ``requests_per_connection``, so the sampler does not disturb the counters it reads.
- :func:`run_row`: one row = one subprocess (its own interpreter, event loops and pools); it
  prints one JSON line (:func:`child_timed` measures wall time and user+sys CPU of the child
  around the read); the server's counters are reset before and read after.
- :func:`ranged_pool`: the plain stdlib client, C threads each with one keep-alive
  ``http.client.HTTPConnection``, ``GET /download/storage/v1/b/B/o/NAME?alt=media`` with a
  ``Range`` header, the body read with ``readinto`` into a preallocated buffer.

Only the standard library is imported at module level, so a TensorFlow interpreter without
tpudata's dependencies can import it too.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import select
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote, urlsplit

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1 << 20
BLOCK = 8 * MiB


# --------------------------------------------------------------------------------- the server
def parse_setting(text: str) -> tuple[float, float | None]:
    """``"MS:MBPS"`` -> (latency ms, per-connection MB/s or None); ``none`` or 0: no cap."""
    ms, _, cap = text.partition(":")
    cap = cap.strip().lower()
    return float(ms), (None if cap in ("", "none", "0") else float(cap))


class FakeGCSProcess:
    """``python -m fake_gcs`` in a subprocess bound to 127.0.0.1 on a free port (``--port 0``)."""

    def __init__(self, latency_ms: float, bandwidth_mbps: float | None, buckets=()) -> None:
        self.latency_ms = latency_ms
        self.bandwidth_mbps = bandwidth_mbps
        self.buckets = list(buckets)
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self._log = tempfile.TemporaryFile()

    def __enter__(self) -> "FakeGCSProcess":
        cmd = [sys.executable, "-m", "fake_gcs", "--host", "127.0.0.1", "--port", "0",
               "--latency-ms", str(self.latency_ms), "--log-level", "WARNING"]
        if self.bandwidth_mbps:
            cmd += ["--bandwidth-mbps", str(self.bandwidth_mbps)]
        for b in self.buckets:
            cmd += ["--bucket", b]
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, env=env, cwd=REPO)
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline().decode() if ready else ""
        if not line.startswith("STORAGE_EMULATOR_HOST="):
            self.__exit__()
            raise RuntimeError(f"fake_gcs did not start: {line!r} {self.log_tail()}")
        self.url = line.split("=", 1)[1].strip()
        return self

    def log_tail(self, n: int = 2000) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-n:]

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc.stdout.close()
            self.proc = None
        self._log.close()

    @property
    def setting(self) -> str:
        cap = f"{self.bandwidth_mbps:g} MB/s per connection" if self.bandwidth_mbps else "no bandwidth cap"
        return f"fake_gcs: {self.latency_ms:g} ms first-byte latency, {cap}"

    def _call(self, method: str, path: str) -> dict:
        host, port = host_port(self.url)
        conn = http.client.HTTPConnection(host, port, timeout=60)
        try:
            conn.request(method, path)
            resp = conn.getresponse()
            body = resp.read()
            return json.loads(body) if body else {}
        finally:
            conn.close()

    def stats(self) -> dict:
        return self._call("GET", "/_stats")

    def reset_stats(self) -> None:
        self._call("POST", "/_stats/reset")


def host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname, parts.port


def upload(url: str, bucket: str, objects: dict[str, bytes], parallel: int = 8) -> None:
    """Simple media uploads, ``parallel`` at a time (each on its own connection, so each pays
    the server's per-connection cap once)."""
    host, port = host_port(url)

    def put(item):
        name, data = item
        conn = http.client.HTTPConnection(host, port, timeout=600)
        try:
            conn.request("POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote(name, safe='')}",
                         body=data, headers={"Content-Type": "application/octet-stream"})
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"upload of {name} answered {resp.status}: {body[:300]!r}")
        finally:
            conn.close()

    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(put, objects.items()))


# ------------------------------------------------------------------------------ in flight
class InFlightSampler:
    """Polls ``GET /_stats`` every ``interval`` seconds; :meth:`mean` of ``in_flight.current``."""

    def __init__(self, url: str, interval: float = 0.02) -> None:
        self.url = url
        self.interval = interval
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="in-flight sampler", daemon=True)

    def _run(self) -> None:
        host, port = host_port(self.url)
        conn = http.client.HTTPConnection(host, port, timeout=30)
        try:
            while not self._stop.is_set():
                conn.request("GET", "/_stats")
                now = time.time()
                current = json.loads(conn.getresponse().read())["in_flight"]["current"]
                self.samples.append((now, current))
                self._stop.wait(self.interval)
        finally:
            conn.close()

    def __enter__(self) -> "InFlightSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def mean(self, t0: float, t1: float) -> float | None:
        """Mean of the samples taken between wall-clock times ``t0`` and ``t1``."""
        inside = [c for t, c in self.samples if t0 <= t <= t1]
        return sum(inside) / len(inside) if inside else None


# ------------------------------------------------------------------------------------- rows
def child_timed(read, check=None) -> None:
    """In a row's subprocess: ``read(t0)`` returns ``(results, state)``; it runs between two
    readings of the wall clock and of this process's user+sys CPU time (all threads), then
    ``check(state)`` (not timed: verifying the bytes) adds its results. Prints one JSON line:
    the results plus ``wall``, ``cpu`` and ``t0``/``t1`` (epoch seconds, for the sampler)."""
    r0, t0w, t0 = resource.getrusage(resource.RUSAGE_SELF), time.time(), time.perf_counter()
    out, state = read(t0)
    t1, t1w, r1 = time.perf_counter(), time.time(), resource.getrusage(resource.RUSAGE_SELF)
    out.update(wall=t1 - t0, t0=t0w, t1=t1w,
               cpu=(r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime))
    if check is not None:
        out.update(check(state))
    print(json.dumps(out), flush=True)


def run_row(server: FakeGCSProcess, argv: list[str], python: str = sys.executable,
            env: dict | None = None, repeat: int = 1, timeout: float = 900) -> dict:
    """Run one row (``python argv...``) ``repeat`` times, the server's counters reset before each;
    the fastest run's JSON result plus what the server saw during it: mean/peak requests in
    flight, requests, connections, requests per connection, body bytes sent."""
    best: dict | None = None
    for _ in range(repeat):
        res = _run_once(server, argv, python, env, timeout)
        if "error" in res:
            return res
        if best is None or res["wall"] < best["wall"]:
            best = res
    return best


def _run_once(server: FakeGCSProcess, argv: list[str], python: str, env: dict | None, timeout: float) -> dict:
    server.reset_stats()
    with InFlightSampler(server.url) as sampler:
        try:
            proc = subprocess.run([python, *argv], capture_output=True, text=True, env=env,
                                  timeout=timeout, check=False, cwd=REPO)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:g} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines:
        return {"error": (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}")[-1500:]}
    res = json.loads(lines[-1])
    st = server.stats()
    hist = st["connections"]["requests_per_connection"]
    conns = sum(hist.values())
    res.update(in_flight_mean=sampler.mean(res["t0"], res["t1"]), in_flight_peak=st["in_flight"]["peak"],
               requests=st["requests"]["total"], media=st["requests"]["by_kind"]["media"], conns=conns,
               req_per_conn=sum(int(k) * v for k, v in hist.items()) / conns if conns else 0.0,
               sent=st["bytes"]["sent"], abandoned=st["requests"]["abandoned"])
    return res


def argument_parser(doc: str, settings: list[str], quick: str, repeat: str) -> argparse.ArgumentParser:
    """The options both benchmarks take: ``--setting`` (repeatable), ``--quick``, ``--repeat``."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setting", action="append", metavar="MS:MBPS",
                    help="fake_gcs latency (ms) and per-connection cap (MB/s, 'none' = no cap); "
                         f"repeatable, one table each (default {' and '.join(settings)})")
    ap.add_argument("--quick", action="store_true", help=quick)
    ap.add_argument("--repeat", type=int, help=f"runs per row, the fastest kept ({repeat})")
    ap.set_defaults(default_settings=settings)
    return ap


def finish_args(args, full: dict, quick: dict) -> list[tuple[float, float | None]]:
    """Options left unset (None) take their ``--quick`` value or their full-run value; returns
    the settings, parsed."""
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return [parse_setting(s) for s in (args.setting or args.default_settings)]


def progress(what: str, res: dict, total: int) -> None:
    """A line on stderr as each row ends (a full run takes minutes)."""
    done = res.get("error", "")[-200:] or f"{total / res['wall'] / 1e6:.0f} MB/s"
    print(f"  {what}: {done}", file=sys.stderr, flush=True)


def load_note() -> str:
    """The 1-minute load average against the core count (other work on the machine skews rows)."""
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


# ------------------------------------------------------------------------------ the pool
def ranges_of(sizes: list[int], block: int = BLOCK) -> list[tuple[int, int, int]]:
    """(object index, offset, length) of every ``block`` of every object, object after object."""
    return [(i, off, min(block, size - off)) for i, size in enumerate(sizes) for off in range(0, size, block)]


def ranged_pool(url: str, bucket: str, names: list[str], sizes: list[int], conc: int,
                block: int = BLOCK, keep: bool = True) -> dict:
    """Read every object fully with ``conc`` threads, each with one keep-alive HTTPConnection
    and ``block``-byte ranged GETs. ``keep``: into one preallocated bytearray per object
    (returned as ``buffers``); else into a buffer per thread, reused (nothing kept). Also
    returns ``first_s``: perf_counter() when the first range was complete."""
    host, port = host_port(url)
    todo = ranges_of(sizes, block)
    buffers = [bytearray(s) for s in sizes] if keep else None
    lock = threading.Lock()
    first: list[float] = []
    paths = [f"/download/storage/v1/b/{bucket}/o/{quote(n, safe='')}?alt=media" for n in names]
    conns = [http.client.HTTPConnection(host, port, timeout=300) for _ in range(conc)]

    def worker(conn: http.client.HTTPConnection) -> None:
        own = None if keep else memoryview(bytearray(block))
        while True:
            with lock:
                if not todo:
                    return
                i, off, n = todo.pop(0)
            conn.request("GET", paths[i], headers={"Range": f"bytes={off}-{off + n - 1}"})
            resp = conn.getresponse()
            if resp.status != 206:
                raise RuntimeError(f"{names[i]} bytes {off}-: HTTP {resp.status} {resp.read(300)!r}")
            view = memoryview(buffers[i])[off:off + n] if keep else own[:n]
            got = 0
            while got < n:
                k = resp.readinto(view[got:])
                if not k:
                    raise RuntimeError(f"{names[i]} bytes {off}-: body ended after {got} of {n}")
                got += k
            if not resp.isclosed():
                resp.read()
            if not first:
                first.append(time.perf_counter())

    # the connections live as long as the pool (closed when every thread is done), as a pool's do
    try:
        with ThreadPoolExecutor(conc) as pool:
            for f in [pool.submit(worker, c) for c in conns]:
                f.result()
    finally:
        for c in conns:
            c.close()
    return {"buffers": buffers, "first_s": first[0] if first else None}


# ----------------------------------------------------------------------------------- tables
def fmt(value, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def print_table(title: str, columns: list[tuple[str, int]], rows: list[list[str]]) -> None:
    """``columns``: (header, width); the first column is left-aligned, the rest right-aligned."""
    print(title)
    head = [f"{h:<{w}}" if j == 0 else f"{h:>{w}}" for j, (h, w) in enumerate(columns)]
    print("  ".join(head).rstrip())
    for row in rows:
        cells = [f"{c:<{w}}" if j == 0 else f"{c:>{w}}" for j, (c, (_, w)) in enumerate(zip(row, columns))]
        print("  ".join(cells).rstrip())
    print(flush=True)
