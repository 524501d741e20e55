"""Shared pieces of the tpudata.image tests: the TensorFlow golden file and JPEG makers."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest

from tpudata.image import _backend
from tpudata.image.synthetic import photo_like

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "data", "golden", "image_ops.npz")
KERNEL = _backend.kernel() is not None
MODES = ["kernel", "reference"] if KERNEL else ["reference"]


def golden() -> dict:
    with np.load(GOLDEN) as g:
        return {k: g[k] for k in g.files}


def golden_bytes(g: dict, name: str) -> bytes:
    return g[f"bytes/{name}"].tobytes()


def jpeg(height: int, width: int, seed: int = 0, mode: str = "RGB", **kw) -> bytes:
    """A photo-like JPEG (quality 90 unless ``quality`` says otherwise; ``mode``: "L", "CMYK")."""
    from PIL import Image

    img = Image.fromarray(photo_like(np.random.default_rng(seed), height, width))
    if mode != "RGB":
        img = img.convert(mode)
    buf = io.BytesIO()
    img.save(buf, "JPEG", **{"quality": 90, **kw})
    return buf.getvalue()


@pytest.fixture(params=MODES)
def mode(request):
    """Run a test through the compiled kernel and through the numpy/Pillow reference path."""
    _backend.use_kernel(request.param == "kernel")
    yield request.param
    _backend.use_kernel(True)


needs_kernel = pytest.mark.skipif(not KERNEL, reason="tpudata.image._imgkernel not built (no libjpeg-turbo headers)")
