"""The C accelerator is built and in use (it is optional at build time, so check it here)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from tpudata import _accel


@pytest.mark.skipif(os.environ.get("TPUDATA_ALLOW_PURE") == "1", reason="pure build allowed")
def test_accelerator_built_and_on_by_default():
    assert _accel.available(), (
        "tpudata._native was not compiled (is a C compiler installed?); set TPUDATA_ALLOW_PURE=1 "
        "to run the suite on the pure Python path only"
    )
    code = "from tpudata import _accel; print(_accel.native is not None)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert out.strip() == "True"


def test_pure_switch():
    code = "from tpudata import _accel; print(_accel.native is None)"
    env = dict(os.environ, TPUDATA_PURE="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "True"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_allocator_tuning_is_reversible():
    assert _accel.tune_allocator(False) is True
    assert _accel._allocator_state is False
    assert _accel.tune_allocator(True) is True
    assert _accel._allocator_state is True
