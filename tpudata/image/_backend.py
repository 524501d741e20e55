"""Loads the optional decode/preprocess kernel (``tpudata.image._imgkernel``) and Pillow, lazily.

The kernel links the system libjpeg-turbo. It loads by tpudata's one rule for C extensions
(:func:`tpudata._accel.extension`): where it was not built (no ``jpeglib.h`` at install time) a
WARNING says so once, and where ``TPUDATA_PURE`` is set (as for ``tpudata._native``) tpudata.image
uses the numpy + Pillow reference path (Pillow's JPEG decode is not bit-identical to
TensorFlow's: it uses the accurate IDCT).
"""

from __future__ import annotations

from tpudata import _accel

__all__ = ["kernel", "pillow", "use_kernel"]

EXTRA_HINT = "install the image extra: pip install 'tpudata[image]'"


def kernel():
    """The compiled kernel module in use, or None (pure path)."""
    return _accel.extension(_accel.IMAGE_KERNEL)


def use_kernel(flag: bool | None) -> None:
    """Tests: switch between the kernel (when built) and the reference path (None: decide
    again by ``TPUDATA_PURE``)."""
    _accel.use_extension(_accel.IMAGE_KERNEL, flag)


def pillow():
    """``PIL.Image``, or an ImportError naming the extra."""
    try:
        from PIL import Image
    except ImportError as e:  # pragma: no cover - Pillow is in the test deps
        raise ImportError(f"tpudata.image needs Pillow for this operation; {EXTRA_HINT}") from e
    return Image
