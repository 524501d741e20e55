"""``python -m fake_gcs``: run the server in the foreground and print STORAGE_EMULATOR_HOST."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from fake_gcs.app import Limits
from fake_gcs.errors import GCSError
from fake_gcs.knobs import Knobs
from fake_gcs.server import FakeGCSServer

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fake_gcs", description="A fake GCS JSON API server.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=4443, help="port (0 picks a free one; default 4443)")
    p.add_argument("--data-dir", help="keep objects on disk here (default: in memory)")
    p.add_argument("--bucket", action="append", default=[], metavar="NAME",
                   help="create this bucket at start unless it exists (repeatable)")
    p.add_argument("--max-object-size", type=int, default=Limits().max_object_size, help="bytes")
    g = p.add_argument_group("realism knobs")
    g.add_argument("--latency-ms", type=float, default=0.0, help="first-byte latency")
    g.add_argument("--jitter-ms", type=float, default=0.0, help="extra uniform 0..jitter latency")
    g.add_argument("--bandwidth-mbps", type=float, default=None, help="per-connection cap, MB/s")
    g.add_argument("--error-rate", type=float, default=0.0, help="fraction answered 503/429")
    g.add_argument("--cut-rate", type=float, default=0.0, help="fraction of bodies cut half-way")
    g.add_argument("--seed", type=int, default=None, help="seed for the fault sequence")
    g.add_argument("--bandwidth-jitter", type=float, default=0.0, metavar="J",
                   help="per-request rate = bandwidth x U(1-J, 1+J), seeded (0 <= J < 1)")
    g.add_argument("--max-in-flight", type=int, default=None, metavar="N",
                   help="requests served at once; more wait in a queue (default: no limit)")
    p.add_argument("--log-level", default="INFO", help="DEBUG logs one line per request")
    return p


def main(argv: list[str] | None = None) -> int:
    """Parse flags, start serving, print the STORAGE_EMULATOR_HOST value; stop on SIGINT/SIGTERM."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    try:
        knobs = Knobs(
            args.latency_ms,
            args.jitter_ms,
            args.bandwidth_mbps,
            args.error_rate,
            args.cut_rate,
            args.seed,
            args.bandwidth_jitter,
            args.max_in_flight,
        )
        server = FakeGCSServer(
            args.host, args.port, args.data_dir, knobs=knobs, max_object_size=args.max_object_size
        )
        for name in args.bucket:
            if name not in server.store.buckets:
                server.store.create_bucket(name, {})
    except GCSError as exc:
        print(f"fake_gcs: --bucket: {exc.message}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as exc:
        print(f"fake_gcs: {exc}", file=sys.stderr)
        return 2
    stopping = threading.Event()

    def _stop(signum, frame):  # serve_forever runs in this thread: shut down from another
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=server._httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(f"STORAGE_EMULATOR_HOST={server.url}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
