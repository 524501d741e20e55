"""Loads the optional decode/preprocess kernel (``tpudata.image._imgkernel``) and Pillow, lazily.

The kernel links the system libjpeg-turbo; where it was not built (no ``jpeglib.h`` at install time)
or ``TPUDATA_PURE=1`` is set, tpudata.image falls back to the numpy + Pillow reference path and logs
a warning once (Pillow's JPEG decode is not bit-identical to TensorFlow's: it uses the accurate IDCT).
"""

from __future__ import annotations

import logging
import os

_log = logging.getLogger(__name__)
_state: dict = {}

__all__ = ["kernel", "pillow", "use_kernel"]

EXTRA_HINT = "install the image extra: pip install 'tpudata[image]'"


def kernel():
    """The compiled kernel module, or None (pure path)."""
    if "kernel" not in _state:
        mod = None
        if os.environ.get("TPUDATA_PURE", "") not in ("", "0"):
            _log.info("TPUDATA_PURE set: tpudata.image uses the numpy/Pillow reference path")
        else:
            try:
                from tpudata.image import _imgkernel as mod  # type: ignore[attr-defined]
            except ImportError as e:
                _log.warning("tpudata.image's libjpeg-turbo kernel is not built (%s); falling back to "
                             "Pillow + numpy (slower; JPEG decode not bit-identical to TensorFlow). "
                             "Install libjpeg-turbo headers (libjpeg62-turbo-dev) and reinstall.", e)
        _state["kernel"] = mod
    return _state["kernel"]


def use_kernel(flag: bool) -> None:
    """Tests: switch between the kernel (when built) and the reference path."""
    _state.pop("kernel", None)
    if not flag:
        _state["kernel"] = None
    else:
        kernel()


def pillow():
    """``PIL.Image``, or an ImportError naming the extra."""
    try:
        from PIL import Image
    except ImportError as e:  # pragma: no cover - Pillow is in the test deps
        raise ImportError(f"tpudata.image needs Pillow for this operation; {EXTRA_HINT}") from e
    return Image
