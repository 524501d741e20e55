"""DataLoader workers for the torch tests: forkserver (preloaded), and fork only in a clean process."""

from __future__ import annotations

import multiprocessing

import pytest

from tests.isolation import ran_isolated

multiprocessing.set_forkserver_preload(["torch", "tpudata"])


@pytest.fixture
def isolate_fork(request):
    """``isolate_fork()``: True when the test already ran (and passed) in a fresh process
    because forking this one would be unsafe (see :func:`tests.isolation.ran_isolated`)."""
    return lambda: ran_isolated(request)
