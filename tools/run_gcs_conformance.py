#!/usr/bin/env python3
"""Run python-storage's retry conformance suite against fake_gcs.

    python tools/run_gcs_conformance.py /tmp/python-storage-checkout
    python tools/run_gcs_conformance.py CHECKOUT -- -k "S8"        # extra pytest arguments

The suite (``tests/conformance/test_conformance.py`` with ``retry_strategy_test_data.json``)
is what Google's client libraries run against storage-testbench: each case creates a Retry
Test (``POST /retry_test``), runs a client call with ``x-retry-test-id``, and checks the call
succeeded or failed as the scenario expects and that every instruction was consumed. The
module runs ``docker pull``/``docker run`` at import to start the testbench: the runner puts a
no-op ``docker`` first on PATH and points ``STORAGE_EMULATOR_HOST`` at a fresh fake_gcs
instead. Cases for JSON API methods fake_gcs does not implement (see
``fake_gcs.retry_test.supported_methods()``) are skipped with the reason. The
suite tests the client library importable from the checkout (``PYTHONPATH=CHECKOUT``), as
python-storage's nox session does. Needs the ``gcs-conformance`` extra. A dev-time check, not
part of ``make test``. Exit status 0 when nothing failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script from anywhere
import run_gcsfs_suite  # noqa: E402  (its server start-up)
SUITE = "tests/conformance/test_conformance.py"
DATA = "tests/conformance/retry_strategy_test_data.json"


def start_server(python: str, log_path: str) -> tuple[subprocess.Popen, str]:
    """fake_gcs on a free port, started as tools/run_gcsfs_suite.py starts it."""
    return run_gcsfs_suite.start_server("fake_gcs", python, log_path, extra_args=("--log-level", "WARNING"))


def unsupported_cases(checkout: str) -> list[tuple[str, str]]:
    """``(test-name pattern, reason)`` for scenarios whose method fake_gcs does not implement."""
    sys.path.insert(0, REPO)
    from fake_gcs.retry_test import supported_methods

    with open(os.path.join(checkout, DATA), encoding="utf-8") as f:
        scenarios = json.load(f)["retryTests"]
    out = []
    for scenario in scenarios:
        for method in scenario["methods"]:
            name = method["name"]
            if name not in supported_methods():
                out.append((f"test-S{scenario['id']}-{name}-", f"fake_gcs does not implement {name}"))
    return out


PLUGIN = """
import json, os
import pytest

_UNSUPPORTED = json.loads(os.environ.get("FAKE_GCS_UNSUPPORTED", "[]"))


def pytest_collection_modifyitems(config, items):
    for item in items:
        for prefix, reason in _UNSUPPORTED:
            if item.name.startswith(prefix):
                item.add_marker(pytest.mark.skip(reason=reason))
                break
"""


def docker_stub(folder: str) -> str:
    path = os.path.join(folder, "docker")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n# run_gcs_conformance.py: fake_gcs is already running\nexit 0\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    return folder


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkout", help="path of a googleapis/python-storage checkout")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--logs", default="/tmp/gcs_conformance_logs")
    p.add_argument("--commit", help="the checkout's commit, when it is not a git work tree")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = p.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    args.pytest_args = extra
    checkout = os.path.abspath(args.checkout)
    if not os.path.isfile(os.path.join(checkout, SUITE)):
        raise SystemExit(f"{checkout} has no {SUITE}")
    os.makedirs(args.logs, exist_ok=True)
    skipped = unsupported_cases(checkout)
    commit = (
        args.commit
        or subprocess.run(
            ["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
    )
    server_log = os.path.join(args.logs, "fake_gcs-server.log")
    log_path = os.path.join(args.logs, "pytest.log")
    proc, url = start_server(args.python, server_log)
    t0 = time.time()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "fake_gcs_unsupported.py"), "w") as f:
                f.write(PLUGIN)
            env = dict(os.environ)
            env.update(
                STORAGE_EMULATOR_HOST=url,
                PATH=docker_stub(tmp) + os.pathsep + env.get("PATH", ""),
                PYTHONPATH=checkout + os.pathsep + tmp,
                FAKE_GCS_UNSUPPORTED=json.dumps(skipped),
            )
            cmd = [args.python, "-m", "pytest", "-p", "no:cacheprovider", "-p", "fake_gcs_unsupported"]
            cmd += [SUITE, "-q", "--color=no", "-rfEs", "--timeout=300", "-o", "addopts="]
            cmd += args.pytest_args
            with open(log_path, "wb") as log:
                subprocess.run(cmd, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    with open(log_path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    summary = next((ln for ln in reversed(lines) if re.search(r"\d+ (passed|failed|error)", ln)), "?")
    for ln in lines:
        if ln.startswith(("FAILED ", "ERROR ", "SKIPPED ")):
            print("   ", ln[:200])
    reasons = sorted({reason for _, reason in skipped})
    print(f"skipped cases: {len(reasons)} methods fake_gcs does not implement:")
    for reason in reasons:
        print("   ", reason)
    print(f"python-storage {commit[:12] or '?'} conformance vs fake_gcs: {summary.strip('= ')}")
    print(f"[{time.time() - t0:.0f}s, log {log_path}]")
    return 1 if re.search(r"\d+ (failed|error)", summary) else 0


if __name__ == "__main__":
    sys.exit(main())
