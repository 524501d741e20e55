"""The optional pieces: the kernel's fallback and the errors that name the ``[image]`` extra."""

from __future__ import annotations

import logging
import sys

import numpy as np
import pytest

import tpudata.image as ti
from tpudata.image import _backend


def test_missing_pillow_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(ImportError, match=r"pip install 'tpudata\[image\]'"):
        _backend.pillow()


def test_missing_ml_dtypes_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    with pytest.raises(ImportError, match=r"tpudata\[image\]"):
        ti.to_bfloat16(np.zeros(2, np.float32))


@pytest.mark.parametrize("value", ["1", "yes", "True"])
def test_pure_mode_falls_back_to_the_reference(monkeypatch, caplog, value):
    monkeypatch.setenv("TPUDATA_PURE", value)
    _backend.use_kernel(None)  # decide again, by the setting
    try:
        with caplog.at_level(logging.INFO, logger="tpudata._accel"):
            assert _backend.kernel() is None
        assert "reference path" in caplog.text
        from tests.image.helpers import jpeg

        assert ti.resnet_preprocess(jpeg(40, 50), False, 16).shape == (16, 16, 3)
    finally:
        monkeypatch.delenv("TPUDATA_PURE")
        _backend.use_kernel(None)
