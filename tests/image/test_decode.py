"""Decoding against TensorFlow's golden outputs: bit-identical, crop == decode-then-crop."""

from __future__ import annotations

import numpy as np
import pytest

import tpudata.image as ti
from tpudata.errors import InvalidImageError
from tests.image.helpers import golden, golden_bytes, jpeg, mode, needs_kernel  # noqa: F401

G = golden()
JPEGS = ["j420", "j444", "j422", "jprog", "jgray", "jcmyk", "jodd"]


@needs_kernel
@pytest.mark.parametrize("name", JPEGS)
@pytest.mark.parametrize("channels", [0, 1, 3])
def test_decode_jpeg_bit_identical_to_tensorflow(name, channels):
    data = golden_bytes(G, name)
    if f"decode_error/{name}/{channels}" in G:
        with pytest.raises(InvalidImageError, match="CMYK"):
            ti.decode_jpeg(data, channels=channels)
        return
    got = ti.decode_jpeg(data, channels=channels)
    want = G[f"decode/{name}/{channels}"]
    assert got.dtype == np.uint8 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@needs_kernel
@pytest.mark.parametrize("name", JPEGS)
def test_accurate_dct_matches_tensorflow(name):
    got = ti.decode_jpeg(golden_bytes(G, name), channels=3, dct_method="INTEGER_ACCURATE")
    np.testing.assert_array_equal(got, G[f"decode_accurate/{name}"])


@pytest.mark.parametrize("name", JPEGS)
def test_extract_jpeg_shape(mode, name):
    np.testing.assert_array_equal(ti.extract_jpeg_shape(golden_bytes(G, name)), G[f"shape/{name}"])


@needs_kernel
@pytest.mark.parametrize("name", JPEGS)
@pytest.mark.parametrize("k", range(4))
def test_decode_and_crop_matches_tensorflow_and_full_decode(name, k):
    data = golden_bytes(G, name)
    y, x, h, w = G[f"crop/{name}/{k}/window"].tolist()
    got = ti.decode_and_crop_jpeg(data, [y, x, h, w], channels=3)
    full = ti.decode_jpeg(data, channels=3)
    np.testing.assert_array_equal(got, full[y:y + h, x:x + w])
    tf_crop = G[f"crop/{name}/{k}"]
    tf_full = G[f"decode/{name}/3"][y:y + h, x:x + w]
    # TensorFlow's DecodeAndCropJpeg differs from its own full decode next to some window edges
    # (libjpeg-turbo's cropped upsampling); everywhere else ours is bit-identical to it as well
    assert ((got == tf_crop) | (tf_crop != tf_full)).all()


@needs_kernel
@pytest.mark.parametrize("name", ["j420", "j422", "j444", "jprog", "jgray"])
def test_random_crop_windows_equal_decode_then_crop(name):
    data = golden_bytes(G, name)
    full = ti.decode_jpeg(data, channels=3)
    H, W = full.shape[:2]
    rng = np.random.default_rng(3)
    for _ in range(150):
        y, x = int(rng.integers(0, H)), int(rng.integers(0, W))
        h, w = int(rng.integers(1, H - y + 1)), int(rng.integers(1, W - x + 1))
        np.testing.assert_array_equal(ti.decode_and_crop_jpeg(data, [y, x, h, w], channels=3),
                                      full[y:y + h, x:x + w], err_msg=str((y, x, h, w)))


def test_reference_decode_is_close_to_tensorflow(mode):
    """The Pillow fallback is not bit-identical (accurate IDCT) but close."""
    for name in ("j420", "jgray", "jcmyk"):
        got = ti.decode_jpeg(golden_bytes(G, name), channels=3).astype(int)
        assert np.abs(got - G[f"decode/{name}/3"]).mean() < 1.5


@pytest.mark.parametrize("name", ["png_rgb", "png_gray"])
@pytest.mark.parametrize("channels", [0, 1, 3])
def test_decode_png_matches_tensorflow(name, channels):
    got = ti.decode_png(golden_bytes(G, name), channels=channels)
    want = G[f"decode/{name}/{channels}"]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


GRAY_PNGS = ["rgb", "rgba", "palette", "rgb_gamma045", "rgba_gamma08", "rgb_gamma097", "rgb_srgb", "palette_gamma22"]


@pytest.mark.parametrize("name", GRAY_PNGS)
def test_decode_png_to_gray_is_bit_identical_to_tensorflow(name):
    """libpng's rgb_to_gray as TensorFlow sets it up (0.299, 0.587 -> 9797, 19234, 3737 / 32768,
    truncated), and through libpng's gamma tables where a gAMA or sRGB chunk asks for them."""
    data = golden_bytes(G, f"gray_{name}")
    want = G[f"png_gray/decode/{name}/1"]
    got = ti.decode_png(data, channels=1)
    assert got.shape == want.shape and got.dtype == np.uint8
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ti.decode_image(data, channels=1), want)
    if name == "rgb_gamma045":  # no gamma applied to RGB output (TensorFlow sets no screen gamma)
        np.testing.assert_array_equal(ti.decode_png(data, channels=3), G[f"png_gray/decode/{name}/3"])


def test_decode_image_dispatches_and_scales(mode):
    j = golden_bytes(G, "j420")
    p = golden_bytes(G, "png_rgb")
    assert ti.decode_image(j).shape == (48, 66, 3)
    assert ti.decode_image(p).shape == (40, 50, 3)
    f = ti.decode_image(p, dtype=np.float32)
    np.testing.assert_allclose(f * 255, G["decode/png_rgb/3"], atol=1e-4)


def test_views_are_accepted_without_copies(mode):
    data = golden_bytes(G, "jodd")
    arr = np.frombuffer(b"pad" + data + b"tail", np.uint8)[3:-4]  # a view into a bigger buffer
    np.testing.assert_array_equal(ti.decode_jpeg(arr), ti.decode_jpeg(data))
    np.testing.assert_array_equal(ti.decode_jpeg(memoryview(data)), ti.decode_jpeg(data))


def test_bad_input_raises_clear_errors(mode):
    with pytest.raises(InvalidImageError, match="invalid JPEG|invalid image"):
        ti.decode_jpeg(b"\xff\xd8\xff" + b"garbage" * 10)
    with pytest.raises(InvalidImageError, match=r"crop window \(y=45, x=0, h=10, w=5\) is not inside the 48x66"):
        ti.decode_and_crop_jpeg(golden_bytes(G, "j420"), [45, 0, 10, 5])
    with pytest.raises(ValueError, match="channels"):
        ti.decode_jpeg(golden_bytes(G, "j420"), channels=2)
    with pytest.raises(TypeError, match="bytes-like"):
        ti.decode_jpeg(12345)
    with pytest.raises(ValueError, match="dct_method"):
        ti.decode_and_crop_jpeg(golden_bytes(G, "j420"), [0, 0, 1, 1], dct_method="FLOAT")


@needs_kernel
def test_truncated_jpeg_decodes_like_libjpeg_or_raises():
    data = jpeg(64, 64)
    with pytest.raises(InvalidImageError):
        ti.decode_jpeg(data[:200])
