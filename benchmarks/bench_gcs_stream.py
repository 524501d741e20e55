"""End to end from gs://: tpudata's README pipeline against TensorFlow's own GCS client and a
hand-written ceiling, reading the same TFRecord shards from fake_gcs.

    python benchmarks/bench_gcs_stream.py            # 16 shards x ~40 MB, P in 1 4 8 16 32, 2 settings
    python benchmarks/bench_gcs_stream.py --quick    # 8 shards x ~10 MB, P in 1 8, one run per row
    python benchmarks/bench_gcs_stream.py --setting 50:50 --parallel 8 --no-tf

Data: ``--shards`` TFRecord files of ~``--shard-mb`` MB of ~110 KB tf.train.Examples (random
80-140 KB ``image/encoded``, a label and four more features: ``bench_read.make_a``, written
with tpudata's TFRecordWriter and example encoder), cached under ``--dir``, uploaded to one
fake_gcs server per setting (``--setting MS:MBPS``: first-byte latency and per-connection cap,
``none`` = no cap; default ``50:50`` and ``20:none``). For each P (``--parallel``), three rows,
each in its own subprocess, each reading every shard once (``--repeat`` times, the fastest run
shown; default 2):

- ``ceiling``: no pipeline: P threads with one keep-alive ``http.client`` connection each, 8 MiB
  ranged GETs of the shards back to back, read into a reused buffer: no CRC check, no parsing,
  no listing (``gcs_bench_common.ranged_pool``, the strongest client of bench_gcs_clients.py).
  It holds exactly P requests in flight; a pipeline that keeps more in flight (read-ahead) can
  pass it, and the ``in flight`` column says so.
- ``tpudata``: the README's pipeline as a user writes it, with the tpudata of this checkout at
  run time (``STORAGE_EMULATOR_HOST`` points it at fake_gcs)::

      Dataset.list_files("gs://BUCKET/train-*", shuffle=False)
          .interleave(TFRecordDataset, cycle_length=P, num_parallel_calls=P)
          .parse(spec).batch(128).prefetch(2)

- ``tensorflow``: TensorFlow's built-in gs:// filesystem (libcurl) with tf.data::

      tf.data.Dataset.list_files("gs://BUCKET/train-*", shuffle=False)
          .interleave(tf.data.TFRecordDataset, cycle_length=P, num_parallel_calls=P)
          .batch(128).map(lambda x: tf.io.parse_example(x, spec), num_parallel_calls=AUTOTUNE)
          .prefetch(AUTOTUNE)

  (batch before parse: tf.data's fastest form of this pipeline; TFRecordDataset's default
  buffer, which did as well as or better than ``buffer_size=8 MiB`` here: ``--tf-buffer-mib 8``).
  TensorFlow's GCS endpoints are compiled in, so it reaches fake_gcs through ``HTTPS_PROXY``: a
  small proxy in its own process (``--proxy``) answers CONNECT for storage.googleapis.com,
  www.googleapis.com and oauth2.googleapis.com, terminates TLS with a leaf certificate signed by
  a CA made for this run (``cryptography``, or the ``openssl`` command), and relays plain HTTP
  to fake_gcs over ONE upstream connection per client connection (so the per-connection cap
  applies to TF's connections as to the others).
  TF gets ``CURL_CA_BUNDLE`` = that CA, ``GOOGLE_AUTH_TOKEN_FOR_TESTING=x`` and
  ``NO_GCE_CHECK=true``. The interpreter: ``$TPUDATA_TF_PYTHON``, else /work/tfvenv/bin/python,
  else ``python3`` if it imports tensorflow; none: the rows are skipped with a line saying why.

tpudata and TensorFlow rows count the records and sum the labels they parsed, which must match
what was written (``records``: ``ok`` or ``WRONG``, and a wrong row gets no MB/s); the ceiling
checks every range's status and length. Before its timed window each row's process has
imported its libraries (tensorflow; tpudata and gcsfs) and run its pipeline over the local copy
of the first shard for two batches (first-use set-up of thread pools and kernels is no part of
reading gs://); the window starts at ``list_files`` and ends after the last batch.

Columns: ``MB/s`` = shard bytes / wall time (10**6 bytes); ``CPU-s/GB`` = user+sys CPU seconds
of the row's process, all threads (getrusage) per 10**9 shard bytes (for the TensorFlow row the
proxy's CPU is not in it, TF's own TLS decryption is; the proxy's CPU-s/GB is printed below the
table); ``in flight`` = mean (peak) requests fake_gcs was serving, sampled from ``GET /_stats``
every 20 ms; ``1st batch`` = seconds from ``list_files`` to the first batch (ceiling: to the
first 8 MiB range); ``reqs``/``conns`` = requests (listing and metadata included) and
connections the server saw; ``vs ceiling``/``vs TF`` = MB/s over the same P's ceiling and
TensorFlow rows. Below each table, the issue's targets for tpudata at P=8: >= 0.9x the ceiling,
>= 1.2x TensorFlow (both set for 50 ms, 50 MB/s per connection) and <= 1.5 CPU-s/GB for
read + CRC + parse, each with PASS or MISS. Caveats: fake_gcs charges latency per request only,
so TF's new TCP+TLS connection per request costs it no round trips here (against GCS it would);
tpudata and the ceiling speak plain HTTP to fake_gcs and pay no TLS at all. The server, the
client and the proxy share the machine's cores (the title gives the load average): on 2 cores
high-P rows measure the machine as much as the client, and other work running makes rows noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import gcs_bench_common as common  # noqa: E402  (stdlib only: the TF interpreter imports this file too)

BUCKET = "stream-bench"
BATCH = 128  # bench_read.WORKLOADS["A"]["batch"]
LABEL = "image/class/label"
GOOGLE_HOSTS = ("storage.googleapis.com", "www.googleapis.com", "oauth2.googleapis.com")
TARGETS = {"ceiling": 0.9, "tf": 1.2, "cpu": 1.5, "parallel": 8}


# ------------------------------------------------------------------------------------- data
def make_shards(directory: str, shards: int, shard_mb: float) -> dict:
    """``shards`` files of ~shard_mb MB (cached); their names, sizes, records and label sum."""
    import bench_read

    import tpudata

    d = os.path.join(directory, f"gcs_stream_{shards}x{shard_mb:g}MB")
    manifest = os.path.join(d, "manifest.json")
    if os.path.exists(manifest):
        with open(manifest) as f:
            return json.load(f)
    os.makedirs(d, exist_ok=True)
    spec = bench_read.spec_of("A")
    out = {"dir": d, "names": [], "sizes": [], "records": 0, "label_sum": 0,
           "features": bench_read.WORKLOADS["A"]["spec"]}
    for s in range(shards):
        name = f"train-{s:05d}-of-{shards:05d}"
        path = os.path.join(d, name)
        bench_read.make_a(path, target_bytes=int(shard_mb * 1e6), seed=7000 + s)
        for b in tpudata.parse_batches(tpudata.read_record_batches(path), spec, BATCH):
            out["records"] += len(b[LABEL])
            out["label_sum"] += int(b[LABEL].sum())
        out["names"].append(name)
        out["sizes"].append(os.path.getsize(path))
    with open(manifest, "w") as f:
        json.dump(out, f)
    return out


# ------------------------------------------------------------------------------ the rows (child)
def child_ceiling(spec: dict) -> None:
    def read(t0):
        got = common.ranged_pool(spec["url"], BUCKET, spec["names"], spec["sizes"], spec["parallel"], keep=False)
        return {"first_batch_s": got["first_s"] - t0, "records": None}, None

    common.child_timed(read)


def _timed_pipeline(pipeline, spec: dict, labels_of, version: str) -> None:
    """Warm the library up with ``pipeline`` over the local copy of the shards (two batches, not
    timed: first-use initialisation of thread pools, kernels and tracing is no part of reading
    gs://), then time ``pipeline("gs://BUCKET/train-*")`` from its ``list_files`` to its last
    batch; ``labels_of(batch)`` -> (records, sum of labels)."""
    for _ in pipeline(spec["warmup"]).take(2):
        pass

    def read(t0):
        first, n, total = None, 0, 0
        for batch in pipeline(f"gs://{BUCKET}/train-*"):
            if first is None:
                first = time.perf_counter() - t0
            count, labels = labels_of(batch)
            n += count
            total += labels
        return {"first_batch_s": first, "records": n, "label_sum": total, "version": version}, None

    common.child_timed(read)


def child_tpudata(spec: dict) -> None:
    import importlib

    import bench_read

    import tpudata

    for mod in ("gcsfs", "aiohttp"):  # what tpudata's gs:// path may import lazily: not timed
        try:
            importlib.import_module(mod)
        except ImportError:
            pass
    features, p = bench_read.spec_of("A"), spec["parallel"]

    def pipeline(pattern):  # the README's
        return (tpudata.Dataset.list_files(pattern, shuffle=False)
                .interleave(tpudata.TFRecordDataset, cycle_length=p, num_parallel_calls=p)
                .parse(features).batch(BATCH).prefetch(2))

    _timed_pipeline(pipeline, spec, lambda b: (len(b[LABEL]), int(b[LABEL].sum())), tpudata.__version__)


def child_tf(spec: dict) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    types = {"bytes": tf.string, "float32": tf.float32, "int64": tf.int64}
    features = {k: tf.io.FixedLenFeature(shape, types[t]) for k, (t, shape) in spec["features"].items()}
    p, buffer, auto = spec["parallel"], spec["tf_buffer"] or None, tf.data.AUTOTUNE

    def pipeline(pattern):
        return (tf.data.Dataset.list_files(pattern, shuffle=False)
                .interleave(lambda f: tf.data.TFRecordDataset(f, buffer_size=buffer),
                            cycle_length=p, num_parallel_calls=p)
                .batch(BATCH)
                .map(lambda x: tf.io.parse_example(x, features), num_parallel_calls=auto)
                .prefetch(auto))

    _timed_pipeline(pipeline, spec, lambda b: (int(b[LABEL].shape[0]), int(tf.reduce_sum(b[LABEL]))),
                    tf.__version__)


CHILDREN = {"ceiling": child_ceiling, "tpudata": child_tpudata, "tensorflow": child_tf}
ROWS = tuple(CHILDREN)


# --------------------------------------------------------------------------- the TLS proxy
def make_certs(directory: str) -> tuple[str, str, str]:
    """A throwaway CA and a leaf certificate for GOOGLE_HOSTS: (ca.pem, leaf.pem, leaf.key)."""
    ca, cert, key = (os.path.join(directory, n) for n in ("ca.pem", "leaf.pem", "leaf.key"))
    try:
        _certs_cryptography(ca, cert, key)
    except ImportError:
        _certs_openssl(directory, ca, cert, key)
    return ca, cert, key


def _certs_cryptography(ca_path: str, cert_path: str, key_path: str) -> None:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def cert(subject, issuer, public_key, sign_key, extensions):
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
             .serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2)))
        for ext, critical in extensions:
            b = b.add_extension(ext, critical=critical)
        return b.sign(sign_key, hashes.SHA256())

    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tpudata benchmark throwaway CA")])
    usage = dict(content_commitment=False, key_encipherment=False, data_encipherment=False,
                 key_agreement=False, encipher_only=False, decipher_only=False)
    ca = cert(ca_name, ca_name, ca_key.public_key(), ca_key, [
        (x509.BasicConstraints(ca=True, path_length=0), True),
        (x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, **usage), True),
        (x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)])
    leaf = cert(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, GOOGLE_HOSTS[0])]), ca_name,
                leaf_key.public_key(), ca_key, [
                    (x509.SubjectAlternativeName([x509.DNSName(h) for h in GOOGLE_HOSTS]), False),
                    (x509.BasicConstraints(ca=False, path_length=None), True),
                    (x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False, **usage), True),
                    (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
                    (x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False)])
    pem = serialization.Encoding.PEM
    with open(ca_path, "wb") as f:
        f.write(ca.public_bytes(pem))
    with open(cert_path, "wb") as f:
        f.write(leaf.public_bytes(pem))
    with open(key_path, "wb") as f:
        f.write(leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


def _certs_openssl(directory: str, ca_path: str, cert_path: str, key_path: str) -> None:
    if shutil.which("openssl") is None:
        raise RuntimeError("neither the cryptography package nor the openssl command is available")
    ca_key, csr, ext = (os.path.join(directory, n) for n in ("ca.key", "leaf.csr", "leaf.ext"))
    with open(ext, "w") as f:
        f.write(f"subjectAltName={','.join('DNS:' + h for h in GOOGLE_HOSTS)}\n"
                "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    for cmd in (
        ["req", "-x509", *ec, "-keyout", ca_key, "-out", ca_path, "-days", "2",
         "-subj", "/CN=tpudata benchmark throwaway CA", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ["req", *ec, "-keyout", key_path, "-out", csr, "-subj", f"/CN={GOOGLE_HOSTS[0]}"],
        ["x509", "-req", "-in", csr, "-CA", ca_path, "-CAkey", ca_key, "-CAcreateserial",
         "-out", cert_path, "-days", "2", "-extfile", ext],
    ):
        subprocess.run(["openssl", *cmd], check=True, capture_output=True)


def serve_proxy(upstream: str, cert: str, key: str) -> None:
    """The proxy's process: print ``PROXY_PORT=N`` and serve until killed. One thread per client
    connection: CONNECT to a Google host -> 200, TLS (http/1.1 only), then one TCP connection to
    fake_gcs, bytes relayed both ways as they are (the HTTP inside is not rewritten)."""
    up_host, up_port = common.host_port(upstream)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["http/1.1"])
    listener = socket.create_server(("127.0.0.1", 0), backlog=256)
    print(f"PROXY_PORT={listener.getsockname()[1]}", flush=True)

    def handle(sock: socket.socket) -> None:
        tls = up = None
        try:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                head += chunk
            method, target = (head.split(b"\r\n", 1)[0].decode("latin-1").split(" ") + ["", ""])[:2]
            if method != "CONNECT" or target.rsplit(":", 1)[0] not in GOOGLE_HOSTS:
                sock.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            sock.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            tls = ctx.wrap_socket(sock, server_side=True)
            up = socket.create_connection((up_host, up_port))
            up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _relay(tls, up)
        except (OSError, ValueError):
            pass
        finally:
            for s in (up, tls, sock):
                if s is not None:
                    s.close()

    while True:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def _relay(tls: ssl.SSLSocket, up: socket.socket) -> None:
    """Both directions in this one thread (an SSL object must not be read and written from two
    threads at once): whichever side is readable is copied to the other."""
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    with selectors.DefaultSelector() as sel:
        sel.register(tls, selectors.EVENT_READ, "client")
        sel.register(up, selectors.EVENT_READ, "upstream")
        while True:
            ready = ["client"] if tls.pending() else [k.data for k, _ in sel.select()]
            for side in ready:
                if side == "client":
                    try:
                        n = tls.recv_into(buf)
                    except ssl.SSLWantReadError:
                        continue
                    if not n:
                        return
                    up.sendall(view[:n])
                else:
                    n = up.recv_into(buf)
                    if not n:
                        return
                    tls.sendall(view[:n])


class Proxy:
    """The proxy in its own process (its CPU is not the TF row's; :meth:`cpu` reads it)."""

    def __init__(self, upstream: str, directory: str) -> None:
        self.ca, cert, key = make_certs(directory)
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--proxy", upstream, cert, key],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = self.proc.stdout.readline().decode()
        if not line.startswith("PROXY_PORT="):
            self.close()
            raise RuntimeError(f"the TLS proxy did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line.split('=', 1)[1])}"

    def cpu(self) -> float:
        """User+sys CPU seconds the proxy process has used so far."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


def find_tf_python() -> tuple[str | None, str]:
    """(interpreter, TensorFlow version) or (None, why not)."""
    env_python = os.environ.get("TPUDATA_TF_PYTHON")
    candidates = [env_python] if env_python else ["/work/tfvenv/bin/python", "python3"]
    tried = []
    for python in candidates:
        if os.sep in python and not os.path.exists(python):
            tried.append(f"{python}: not found")
            continue
        try:
            proc = subprocess.run([python, "-c", "import tensorflow as tf; print(tf.__version__)"],
                                  capture_output=True, text=True, timeout=300,
                                  env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
        except (OSError, subprocess.TimeoutExpired) as exc:
            tried.append(f"{python}: {exc}")
            continue
        if proc.returncode == 0:
            return python, proc.stdout.strip().splitlines()[-1]
        tried.append(f"{python}: cannot import tensorflow")
    return None, "; ".join(tried)


# ---------------------------------------------------------------------------------- parent
def bench_setting(latency_ms, cap, data, args, workdir) -> dict:
    total = sum(data["sizes"])
    results: dict[tuple[str, int], dict] = {}
    with common.FakeGCSProcess(latency_ms, cap, buckets=[BUCKET]) as server:
        objects = {}
        for name in data["names"]:
            with open(os.path.join(data["dir"], name), "rb") as f:
                objects[name] = f.read()
        common.upload(server.url, BUCKET, objects, parallel=len(objects))
        del objects
        base_env = {k: v for k, v in os.environ.items()  # only the TF row gets a proxy and only
                    if k.lower() not in ("https_proxy", "http_proxy", "all_proxy", "no_proxy",
                                         "storage_emulator_host")}  # tpudata an emulator host
        proxy = Proxy(server.url, workdir) if args.tf_python else None
        try:
            for p in args.parallel:
                spec = {"url": server.url, "names": data["names"], "sizes": data["sizes"], "parallel": p,
                        "tf_buffer": args.tf_buffer_mib << 20, "features": data["features"],
                        "warmup": os.path.join(data["dir"], data["names"][0])}
                rows = [("ceiling", sys.executable, base_env),
                        ("tpudata", sys.executable, dict(base_env, STORAGE_EMULATOR_HOST=server.url,
                                                        GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false"))]
                if proxy is not None:
                    rows.append(("tensorflow", args.tf_python, dict(
                        base_env, HTTPS_PROXY=proxy.url, https_proxy=proxy.url, CURL_CA_BUNDLE=proxy.ca,
                        GOOGLE_AUTH_TOKEN_FOR_TESTING="x", NO_GCE_CHECK="true", TF_CPP_MIN_LOG_LEVEL="3")))
                for what, python, env in [r for r in rows if r[0] in args.rows]:
                    before = proxy.cpu() if what == "tensorflow" else 0.0
                    res = common.run_row(server, [os.path.abspath(__file__), "--child", what, json.dumps(spec)],
                                         python=python, env=env, repeat=args.repeat)
                    if what == "tensorflow":
                        res["proxy_cpu"] = (proxy.cpu() - before) / args.repeat  # per run
                    res["total"] = total
                    results[(what, p)] = res
                    common.progress(f"{what} P={p}", res, total)
        finally:
            if proxy is not None:
                proxy.close()
        setting = server.setting
    title = (f"{setting}; {len(data['names'])} shards, {total / 1e6:.0f} MB, {data['records']} records "
             f"(~{total / data['records'] / 1e3:.0f} KB), batch {BATCH}; {common.load_note()}")
    print_setting(title, results, data, args)
    return {f"{w} P={p}": r for (w, p), r in results.items()}


def _ok(res: dict, data: dict) -> str:
    if res.get("records") is None:
        return "-"
    return "ok" if (res["records"], res["label_sum"]) == (data["records"], data["label_sum"]) else "WRONG"


def print_setting(title: str, results: dict, data: dict, args) -> None:
    def mbps(what, p):
        r = results.get((what, p))
        return r["total"] / r["wall"] / 1e6 if r and "error" not in r and _ok(r, data) != "WRONG" else None

    rows, notes = [], []
    for p in args.parallel:
        for what in ("ceiling", "tpudata", "tensorflow"):
            r = results.get((what, p))
            if r is None:
                continue
            if "error" in r:
                rows.append([what, str(p), "FAILED"])
                notes.append(f"{what} P={p} failed: {r['error'][-800:]}")
                continue
            gb = r["total"] / 1e9
            mine, ceil, tf = mbps(what, p), mbps("ceiling", p), mbps("tensorflow", p)
            rows.append([
                what, str(p), common.fmt(mine, ".0f", "WRONG"), f"{r['cpu'] / gb:.2f}",
                f"{common.fmt(r['in_flight_mean'], '.1f')} ({r['in_flight_peak']})",
                common.fmt(r["first_batch_s"], ".2f"), str(r["requests"]), str(r["conns"]), _ok(r, data),
                f"{mine / ceil:.2f}x" if mine and ceil else "-", f"{mine / tf:.2f}x" if mine and tf else "-",
            ])
            if what == "tensorflow":
                notes.append(f"tensorflow P={p}: the TLS proxy used {r['proxy_cpu'] / gb:.2f} CPU-s/GB besides")
    cols = [("row", 10), ("P", 3), ("MB/s", 6), ("CPU-s/GB", 8), ("in flight", 10), ("1st batch", 9),
            ("reqs", 5), ("conns", 5), ("records", 7), ("vs ceiling", 10), ("vs TF", 6)]
    common.print_table(title, cols, rows)
    for line in notes:
        print(f"  {line}")
    if args.tf_skipped and "tensorflow" in args.rows:
        print(f"  tensorflow: skipped ({args.tf_skipped})")
    p = TARGETS["parallel"]
    r = results.get(("tpudata", p))
    if r is not None and "error" not in r:
        mine, ceil, tf = mbps("tpudata", p), mbps("ceiling", p), mbps("tensorflow", p)

        def verdict(value, target, higher=True):
            if value is None:
                return "n/a"
            return f"{value:.2f} ({'>=' if higher else '<='} {target}: " \
                   f"{'PASS' if (value >= target if higher else value <= target) else 'MISS'})"

        print(f"  issue targets, tpudata at P={p} (set for 50 ms, 50 MB/s/conn): "
              f"vs ceiling {verdict(mine / ceil if mine and ceil else None, TARGETS['ceiling'])}, "
              f"vs TF {verdict(mine / tf if mine and tf else None, TARGETS['tf'])}, "
              f"CPU-s/GB {verdict(r['cpu'] / (r['total'] / 1e9), TARGETS['cpu'], higher=False)}")
    print(flush=True)


def main(argv=None) -> dict:
    ap = common.argument_parser(__doc__, ["50:50", "20:none"], quick="8 shards x 10 MB, P in 1 8, one run per row",
                                repeat="default 2; --quick 1")
    ap.add_argument("--shards", type=int, help="how many shards (default 16; --quick 8)")
    ap.add_argument("--shard-mb", type=float, help="MB (10**6 bytes) per shard, about (default 40; --quick 10)")
    ap.add_argument("--parallel", type=int, nargs="+", help="P: parallel reads (default 1 4 8 16 32; --quick 1 8)")
    ap.add_argument("--tf-buffer-mib", type=int, default=0, help="TFRecordDataset buffer_size (default 0: TF's own)")
    ap.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS), help="which rows (default all three)")
    ap.add_argument("--no-tf", action="store_true", help="skip the TensorFlow rows (as --rows ceiling tpudata)")
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "tpudata-bench"))
    ap.add_argument("--child", nargs=2, metavar=("ROW", "SPEC"), help=argparse.SUPPRESS)
    ap.add_argument("--proxy", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        CHILDREN[args.child[0]](json.loads(args.child[1]))
        return {}
    if args.proxy:
        serve_proxy(*args.proxy)
        return {}
    settings = common.finish_args(args, full={"shards": 16, "shard_mb": 40, "parallel": [1, 4, 8, 16, 32], "repeat": 2},
                                  quick={"shards": 8, "shard_mb": 10, "parallel": [1, 8], "repeat": 1})
    if args.no_tf:
        args.rows = [r for r in args.rows if r != "tensorflow"]
    args.tf_python, tf_version = find_tf_python() if "tensorflow" in args.rows else (None, "not asked for")
    args.tf_skipped = None if args.tf_python else tf_version
    print(f"TensorFlow {tf_version} ({args.tf_python})" if args.tf_python else f"TensorFlow rows skipped: {tf_version}")
    data = make_shards(args.dir, args.shards, args.shard_mb)
    out = {}
    with tempfile.TemporaryDirectory(prefix="bench_gcs_stream.") as workdir:
        for latency_ms, cap in settings:
            out[f"{latency_ms:g}:{cap}"] = bench_setting(latency_ms, cap, data, args, workdir)
    return out


if __name__ == "__main__":
    main()
