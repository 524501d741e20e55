"""Shared fixtures: run hot paths both through the C accelerator and the pure Python reference."""

from __future__ import annotations

import os
import sys

# JAX tests run on 8 CPU devices: set before anything imports jax (importing tpudata never does)
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_force_host_platform_device_count=8").strip()

import fsspec  # noqa: E402
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

from tpudata import _accel  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "data")
GOLDEN = os.path.join(DATA, "golden")
sys.path.insert(0, DATA)  # golden_content

# CI (.ci/run sets HYPOTHESIS_PROFILE=ci) draws the property tests' cases from a fixed seed, so a
# landing is not refused by a case drawn for the first time; `make test` elsewhere explores anew.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

MODES = ["native", "pure"] if _accel.available() else ["pure"]


@pytest.fixture(params=[pytest.param(False, id="untimed"),
                        pytest.param(True, id="timed", marks=pytest.mark.timing)])
def timed(request):
    """For a test that checks what happens *and* how fast: it runs twice, asserting its wall-clock
    bounds (``if timed: assert took < ...``) only in the ``timing``-marked run. `make test` (the
    landing gate) deselects that run, which a loaded machine can fail; `make test-timing` runs it.
    Lower bounds that prove a wait was paid are behaviour, asserted in both runs."""
    return request.param


@pytest.fixture(params=MODES)
def accel(request):
    """Parametrise a test over the accelerator and the pure Python reference path."""
    previous = _accel.native is not None
    _accel.use_native(request.param == "native")
    yield request.param
    _accel.use_native(previous)


@pytest.fixture
def memfs():
    """A clean shared ``memory://`` filesystem."""
    fs = fsspec.filesystem("memory")
    fs.store.clear()
    del fs.pseudo_dirs[1:]
    yield fs
    fs.store.clear()
    del fs.pseudo_dirs[1:]


def golden(name: str) -> str:
    return os.path.join(GOLDEN, name)
