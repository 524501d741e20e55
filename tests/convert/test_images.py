"""Image normalisation and the nine-feature Example encoder."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from tpudata.convert.images import image_example, normalize_image
from tpudata.example import decode_example


@given(st.binary(max_size=3000), st.integers(0, 1 << 40), st.integers(0, 1 << 20),
       st.integers(-(1 << 63), (1 << 63) - 1), st.text(max_size=300), st.text(max_size=200))
def test_image_example_holds_the_nine_features(jpeg, height, width, label, synset, filename):
    filename = filename.replace("\0", "")
    got = decode_example(image_example(jpeg, height, width, label, synset, filename))
    want = _reference_values(jpeg, height, width, label, synset, filename)
    assert list(got) == list(want)  # the original tool's order
    assert {k: v.tolist() for k, v in got.items()} == want


def _reference_values(jpeg, height, width, label, synset, filename):
    return {
        "image/height": [height], "image/width": [width], "image/colorspace": [b"RGB"],
        "image/channels": [3], "image/class/label": [label],
        "image/class/synset": [synset.encode("utf-8")], "image/format": [b"JPEG"],
        "image/filename": [os.path.basename(filename).encode("utf-8")], "image/encoded": [jpeg],
    }


def _png(img) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


@pytest.mark.parametrize("mode", ["RGBA", "LA", "P", "1", "I;16", "RGB"])
def test_pngs_become_rgb_jpegs(mode):
    rng = np.random.default_rng(0)
    base = Image.fromarray(rng.integers(0, 256, (9, 13, 3), dtype=np.uint8), "RGB")
    img = Image.fromarray(np.asarray(base.convert("L"), np.uint16) * 257) \
        if mode == "I;16" else base.convert(mode)
    jpeg, height, width, was = normalize_image(_png(img))
    assert (height, width) == (9, 13) and was == f"PNG {img.mode}"
    with Image.open(io.BytesIO(jpeg)) as out:
        assert (out.format, out.mode, out.size) == ("JPEG", "RGB", (13, 9))
    if mode == "I;16":  # 16-bit grey scaled down to 8 bits, not clipped to white
        grey = np.asarray(base.convert("L"), np.int16)
        with Image.open(io.BytesIO(jpeg)) as out:
            assert np.abs(np.asarray(out.convert("L"), np.int16) - grey).mean() < 6


def test_rgb_jpeg_kept_and_garbage_rejected():
    buf = io.BytesIO()
    Image.new("RGB", (4, 6), (10, 20, 30)).save(buf, "JPEG")
    data = buf.getvalue()
    assert normalize_image(data, verify=True) == (data, 6, 4, None)
    with pytest.raises(OSError):
        normalize_image(b"not an image")
    with pytest.raises(OSError):  # a truncated JPEG: its header parses, its data does not
        normalize_image(data[: len(data) // 2], verify=True)
