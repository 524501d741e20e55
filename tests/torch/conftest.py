"""DataLoader workers for the torch tests: forkserver (preloaded), and fork only in a clean process."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
multiprocessing.set_forkserver_preload(["torch", "tpudata"])


@pytest.fixture
def isolate_fork(request):
    """For tests that fork: ``isolate_fork()`` is True when this process has threads or JAX
    (forking it would be unsafe) and the test therefore ran, and passed, in a fresh pytest
    process instead; False when the test may fork here."""
    return lambda: _isolate(request)


def _isolate(request) -> bool:
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
