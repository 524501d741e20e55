"""Tests that fork: run them in a fresh pytest process when this one has threads or JAX."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ran_isolated(request) -> bool:
    """True when forking here would be unsafe (other threads, or JAX imported) and the test
    therefore ran, and passed, in a fresh pytest process; False when it may fork here."""
    if os.environ.get("TPUDATA_TEST_ISOLATED") or (threading.active_count() == 1 and
                                                  "jax" not in sys.modules):
        return False
    env = dict(os.environ, TPUDATA_TEST_ISOLATED="1")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "no:warnings", request.node.nodeid], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout
    return True
