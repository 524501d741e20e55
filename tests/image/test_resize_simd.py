"""The batch kernel's resize in each vector form the CPU has (tpudata/image/_resize_simd.c) against
its plain C form: the same bits for every method, scale, edge, flip and output type.

The forms: 0 plain C (SSE2 where compiled), 1 AVX2 (vertical pass), 2 AVX-512 (the horizontal pass
by planned blocks of 16 or 8 values, edge pixels padded; blocks that would read too far go pixel by
pixel). ``_imgkernel._set_simd`` picks one; each outcome is compared with form 0 in one process.
"""

from __future__ import annotations

import numpy as np
import pytest

import tpudata.image as ti
from tpudata.image import _backend
from tests.image.helpers import jpeg, needs_kernel

pytestmark = needs_kernel

DATA = jpeg(120, 160, 21)


def _cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _levels() -> list:
    """The forms this CPU runs (form 0 always)."""
    k = _backend.kernel()
    prev, top = k._set_simd(9)
    k._set_simd(prev)
    return list(range(top + 1))


def _at(level: int, fn):
    k = _backend.kernel()
    prev, now = k._set_simd(level)
    try:
        assert now == level
        return fn()
    finally:
        k._set_simd(prev)


def test_the_forms_this_cpu_has_are_in_use():
    flags = _cpu_flags()
    want = 2 if "avx512f" in flags else (1 if "avx2" in flags else 0)
    if not flags:
        pytest.skip("no /proc/cpuinfo flags to compare with")
    assert _levels()[-1] == want


# (crop h, crop w) -> output (h, w): upscales, near 1, the 1.5x downscale (blocks of 8), past 2.3x
# (pixel by pixel), one-pixel rows and outputs, odd widths
CASES = [
    ((20, 30), (224, 224)), ((100, 150), (224, 224)), ((120, 160), (120, 150)), ((110, 150), (100, 100)),
    ((120, 160), (64, 72)), ((120, 160), (16, 16)), ((120, 160), (7, 5)), ((1, 160), (3, 37)),
    ((120, 1), (9, 1)), ((60, 90), (1, 1)), ((97, 131), (61, 89)), ((33, 47), (299, 299)),
]
METHODS = ["bicubic_v1", "bicubic", "bilinear_v1", "bilinear"]


@pytest.mark.parametrize("crop,size", CASES)
@pytest.mark.parametrize("method", METHODS)
def test_every_form_gives_the_plain_forms_bits(crop, size, method):
    levels = _levels()
    if len(levels) == 1:
        pytest.skip("this CPU runs the plain form only")
    h, w = crop
    crops = np.array([[0, 0, h, w], [120 - h, 160 - w, h, w], [(120 - h) // 2, (160 - w) // 2, h, w]], np.int32)
    flips = np.array([0, 1, 0], np.uint8)
    for dtype, output in ((np.float32, "0-255"), (np.float32, "normalized"), (np.uint8, "0-255")):
        def run():
            return ti.preprocess_batch([DATA] * 3, crops, flips, size, method=method, dtype=dtype, output=output,
                                       num_threads=1)
        ref = _at(0, run)
        for level in levels[1:]:
            got = _at(level, run)
            assert got.dtype == ref.dtype and got.shape == ref.shape
            assert got.tobytes() == ref.tobytes(), (level, dtype, output)
