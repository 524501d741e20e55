"""The kernel's own entropy decoder (tpudata/image/_jpeg_huffman.c) against libjpeg-turbo's.

It replaces libjpeg's Huffman decoding for baseline single-scan JPEGs whose data ends in a marker;
everything else stays with libjpeg. Every outcome must be libjpeg's: the same pixels, on good files
of every layout and on damaged ones (bad codes, data cut short inside a segment, stray markers,
restart markers out of order), and the same errors. Each case is decoded twice in one process,
with the decoder switched on and off (``_imgkernel._set_fast_huffman``).
"""

from __future__ import annotations

import io
import os
import zlib

import numpy as np
import pytest

import tpudata.image as ti
from tpudata.errors import InvalidImageError
from tpudata.image import _backend
from tests.data.jpeg_edits import SET_FF, TRUNCATE, XOR, apply_edit
from tests.image.helpers import jpeg, needs_kernel

pytestmark = needs_kernel
# damaged copies of each file (tools/sanitize.sh runs more, as for tests/image/test_hostile_jpeg.py)
EDITS = max(60, int(os.environ.get("TPUDATA_JPEG_FUZZ_EDITS", "300")) // 20)


# name -> JPEG: the layouts the decoder takes over (and two it leaves to libjpeg)
def _files() -> dict:
    return {
        "420": jpeg(37, 53, 1),
        "444": jpeg(40, 31, 2, subsampling=0),
        "422": jpeg(33, 47, 3, subsampling=1),
        "gray": jpeg(29, 41, 4, mode="L"),
        "optimized": jpeg(45, 38, 5, optimize=True),
        "q100": jpeg(24, 40, 6, quality=100),
        "q20": jpeg(50, 50, 7, quality=20),
        "restart-1": jpeg(40, 56, 8, restart_marker_blocks=1),
        "restart-3": jpeg(48, 33, 9, restart_marker_blocks=3, subsampling=0),
        "restart-rows": jpeg(64, 64, 10, restart_marker_rows=1),
        "cmyk": jpeg(20, 30, 11, mode="CMYK"),
        "progressive": jpeg(30, 30, 12, progressive=True),
    }


FILES = _files()
TAKEN_OVER = [n for n in FILES if n != "progressive"]


def _kernel():
    return _backend.kernel()


def _both(fn) -> tuple:
    """``(outcome with the fast decoder, outcome with libjpeg's)``: an array's bytes and shape, or
    the error's message."""
    k = _kernel()
    out = []
    for flag in (True, False):
        before = k._set_fast_huffman(flag)
        try:
            try:
                img = fn()
                out.append(("ok", img.shape, zlib.crc32(np.ascontiguousarray(img).tobytes())))
            except InvalidImageError as e:
                out.append(("error", str(e)))
        finally:
            k._set_fast_huffman(before)
    return tuple(out)


@pytest.mark.parametrize("name", list(FILES))
def test_it_decodes_baseline_scans_and_leaves_the_rest_to_libjpeg(name):
    k = _kernel()
    before = k._fast_huffman_scans()
    ti.decode_jpeg(FILES[name], channels=3)
    assert k._fast_huffman_scans() - before == (1 if name in TAKEN_OVER else 0)


@pytest.mark.parametrize("name", list(FILES))
def test_the_same_pixels_as_libjpeg(name):
    data = FILES[name]
    h, w = ti.decode_jpeg(data, channels=3).shape[:2]
    windows = [(0, 0, h, w), (h // 3, w // 4, h - h // 3, w // 2), (h - 9, 1, 9, w - 1), (5, w - 17, h - 5, 17)]
    cases = [lambda: ti.decode_jpeg(data, channels=3),
             lambda: ti.decode_jpeg(data, channels=3, fancy_upscaling=False),
             lambda: ti.decode_jpeg(data, channels=3, dct_method="INTEGER_FAST")]
    if name != "cmyk":  # (TensorFlow refuses CMYK to one channel)
        cases.append(lambda: ti.decode_jpeg(data, channels=1))
    cases += [lambda win=win: ti.decode_and_crop_jpeg(data, win, channels=3) for win in windows]
    crops = np.array([[0, 0, h, w], list(windows[1]), list(windows[3])], np.int32)
    cases.append(lambda: ti.preprocess_batch([data] * 3, crops, np.array([0, 1, 2], np.uint8), 16, num_threads=2))
    for case in cases:
        fast, slow = _both(case)
        assert fast[0] == "ok" and fast == slow


def _edits(rng, data: bytes, count: int) -> list:
    """Random damage inside the scan (after the SOS header): bytes flipped or set to FF, bytes
    cut out, FF xx markers put in, the file cut short."""
    sos = data.index(b"\xff\xda")
    start = sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")
    out = []
    for _ in range(count):
        kind = int(rng.integers(6))
        pos = int(rng.integers(start, len(data)))
        if kind == 0:
            out.append(apply_edit(data, XOR, pos, int(rng.integers(1, 256))))
        elif kind == 1:
            out.append(apply_edit(data, SET_FF, pos, 0))
        elif kind == 2:
            out.append(apply_edit(data, TRUNCATE, pos, 0))
        elif kind == 3:
            n = int(rng.integers(1, 40))
            out.append(data[:pos] + data[pos + n:])
        elif kind == 4:  # a marker: a restart marker (maybe out of order), EOI, or another
            marker = int(rng.choice([0xD0 + int(rng.integers(8)), 0xD9, 0xC4, 0xFE, 0xFF]))
            out.append(data[:pos] + bytes([0xFF, marker]) + data[pos:])
        else:  # several flips at once
            b = bytearray(data)
            for p in rng.integers(start, len(data), 4):
                b[int(p)] ^= int(rng.integers(1, 256))
            out.append(bytes(b))
    return out


@pytest.mark.parametrize("name", TAKEN_OVER)
def test_damaged_scans_decode_as_libjpeg_decodes_them(name):
    """Pixels, or the error, of decode_jpeg (with and without try_recover_truncated) and of a
    crop, for random damage to each file's scan."""
    data = FILES[name]
    h, w = ti.decode_jpeg(data, channels=3).shape[:2]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    differ = []
    for i, bad in enumerate(_edits(rng, data, EDITS)):
        for label, case in (
                ("decode", lambda: ti.decode_jpeg(bad, channels=3)),
                ("recover", lambda: ti.decode_jpeg(bad, channels=3, try_recover_truncated=True)),
                ("crop", lambda: ti.decode_and_crop_jpeg(bad, (h // 4, w // 5, h // 2, w // 2), channels=3))):
            fast, slow = _both(case)
            if fast != slow:
                differ.append((i, label, fast, slow))
    assert not differ, differ[:3]


def test_restart_markers_out_of_order_stay_with_libjpeg():
    data = FILES["restart-1"]
    first = data.index(b"\xff\xd0")
    swapped = data[:first + 1] + b"\xd3" + data[first + 2:]  # RST3 where RST0 belongs
    k = _kernel()
    before = k._fast_huffman_scans()
    fast, slow = _both(lambda: ti.decode_jpeg(swapped, channels=3))
    assert fast == slow
    assert k._fast_huffman_scans() == before  # libjpeg resynchronises, as it always did


def test_a_file_bigger_than_the_kept_buffers_decodes_the_same():
    # over 4 MB of scan: the unstuffed copy comes from libjpeg's image pool, not the thread's
    from PIL import Image

    noise = np.random.default_rng(5).integers(0, 256, (1600, 1800, 3), np.uint8)
    buf = io.BytesIO()
    Image.fromarray(noise).save(buf, "JPEG", quality=100, subsampling=0)
    data = buf.getvalue()
    assert len(data) > 4 << 20
    k = _kernel()
    before = k._fast_huffman_scans()
    fast, slow = _both(lambda: ti.decode_jpeg(data, channels=3))
    assert fast[0] == "ok" and fast == slow
    assert k._fast_huffman_scans() == before + 1


@pytest.mark.parametrize("quality", [35, 75, 90, 97])
def test_photos_of_every_quality_decode_the_same(quality):
    # two coefficients a lookup where their codes fit together: photo-sized scans at qualities
    # from few coefficients a block (end of block right after a pair) to nearly all 63
    data = jpeg(180, 260, 40 + quality, quality=quality)
    k = _kernel()
    before = k._fast_huffman_scans()
    for case in (lambda: ti.decode_jpeg(data, channels=3),
                 lambda: ti.decode_and_crop_jpeg(data, (20, 30, 150, 200), channels=3)):
        fast, slow = _both(case)
        assert fast[0] == "ok" and fast == slow
    assert k._fast_huffman_scans() == before + 2
