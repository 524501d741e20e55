#!/usr/bin/env python3
"""Run gcsfs's own test suite (``gcsfs/tests`` of a fsspec/gcsfs checkout) against fake_gcs.

    python tools/run_gcsfs_suite.py /tmp/gcsfs-checkout              # both modes
    python tools/run_gcsfs_suite.py /tmp/gcsfs-checkout --mode off   # ZB/HNS switch off only
    python tools/run_gcsfs_suite.py /tmp/gcsfs-checkout --server peer  # gcp-storage-emulator

Each mode gets a fresh server on a free loopback port. The suite runs from the checkout with
``STORAGE_EMULATOR_HOST`` at the server, ``GOOGLE_APPLICATION_CREDENTIALS`` at the checkout's
fake service account, ``PYTHONPATH`` at the checkout (so its gcsfs is the one tested), and
``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` (mode "off") or unset (mode "on"), as gcsfs's CI
does. Needs pytest, pytest-asyncio and pytest-timeout. A dev-time check: it is not part of
``make test`` (CI has no internet to fetch the checkout). Exit status 0 when nothing failed.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    kind: str, python: str, log_path: str, data_dir: str | None = None, extra_args: tuple = ()
) -> tuple[subprocess.Popen, str]:
    """Start ``kind`` (fake_gcs or gcp-storage-emulator) on a free port; (process, URL) once it
    accepts connections. ``extra_args`` go to fake_gcs's command line."""
    port = free_port()
    if kind == "fake_gcs":
        cmd = [python, "-m", "fake_gcs", "--host", "127.0.0.1", "--port", str(port), *extra_args]
        if data_dir:
            cmd += ["--data-dir", data_dir]
    else:
        exe = os.path.join(os.path.dirname(python), "gcp-storage-emulator")
        cmd = [exe, "start", "--host=127.0.0.1", f"--port={port}", "--in-memory"]
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{kind} exited early; see {log_path}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"{kind} did not start; see {log_path}")


def run_mode(checkout: str, mode: str, url: str, python: str, log_path: str, extra: list[str]) -> str:
    env = dict(os.environ)
    env.update(
        STORAGE_EMULATOR_HOST=url,
        GOOGLE_APPLICATION_CREDENTIALS=os.path.join(
            checkout, "gcsfs/tests/fake-service-account-credentials.json"
        ),
        PYTHONPATH=checkout,
    )
    env.pop("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", None)
    if mode == "off":
        env["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
    cmd = [
        python,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "gcsfs/",
        "-q",
        "--color=no",
        "--timeout=300",
        "-rfE",
        *extra,
    ]
    with open(log_path, "wb") as log:
        subprocess.run(cmd, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT)
    with open(log_path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    summary = next((ln for ln in reversed(lines) if re.search(r"\d+ (passed|failed|error)", ln)), "?")
    for ln in lines:
        if ln.startswith(("FAILED ", "ERROR ")):
            print("   ", ln[:200])
    return summary.strip("= ")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkout", help="path of a fsspec/gcsfs checkout (with gcsfs/tests)")
    p.add_argument("--mode", choices=["off", "on", "both"], default="both")
    p.add_argument(
        "--server",
        choices=["fake_gcs", "peer"],
        default="fake_gcs",
        help="peer = gcp-storage-emulator, for comparison",
    )
    p.add_argument("--data-dir", help="run fake_gcs with its on-disk backend in a fresh folder here")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--logs", default="/tmp/gcsfs_suite_logs")
    p.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = p.parse_args()
    checkout = os.path.abspath(args.checkout)
    if not os.path.isdir(os.path.join(checkout, "gcsfs", "tests")):
        raise SystemExit(f"{checkout} has no gcsfs/tests")
    os.makedirs(args.logs, exist_ok=True)
    failed = False
    for mode in ["off", "on"] if args.mode == "both" else [args.mode]:
        server_log = os.path.join(args.logs, f"{args.server}-{mode}-server.log")
        data_dir = None
        if args.data_dir:
            data_dir = os.path.join(os.path.abspath(args.data_dir), f"{mode}-{os.getpid()}")
        proc, url = start_server(args.server, args.python, server_log, data_dir)
        try:
            t0 = time.time()
            log = os.path.join(args.logs, f"{args.server}-{mode}-pytest.log")
            summary = run_mode(checkout, mode, url, args.python, log, args.pytest_args)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        print(f"{args.server} ZB_HNS={mode}: {summary}  [{time.time() - t0:.0f}s, log {log}]")
        failed |= bool(re.search(r"\d+ (failed|error)", summary))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
