"""Shared fixtures: run hot paths both through the C accelerator and the pure Python reference."""

from __future__ import annotations

import os
import sys

import fsspec
import pytest

from tpudata import _accel

DATA = os.path.join(os.path.dirname(__file__), "data")
GOLDEN = os.path.join(DATA, "golden")
sys.path.insert(0, DATA)  # golden_content

MODES = ["native", "pure"] if _accel.available() else ["pure"]


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
