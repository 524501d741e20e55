"""ResNet / Inception presets: TensorFlow fidelity, the C batch kernel against the numpy reference."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import tpudata.image as ti
from tpudata.errors import InvalidImageError
from tpudata.image import _backend
from tests.image.helpers import golden, golden_bytes, jpeg, mode, needs_kernel  # noqa: F401

G = golden()
STD = np.array(ti.IMAGENET_STDDEV, np.float32)
JPEG_NAMES = ["j420", "j444", "j422", "jprog", "jgray", "jcmyk", "jodd"]


@pytest.mark.parametrize("k", [0, 1])
def test_eval_preset_matches_the_2018_resnet_preprocessing(mode, k):
    """crop_padding=32 and the default normalisation: the April 2018 file (CROP_PADDING = 32 at every
    size, normalised in the input pipeline), here at size 80."""
    data = golden_bytes(G, f"resnet{k}")
    want = G[f"resnet_eval/{k}"]
    got = ti.resnet_preprocess(data, False, image_size=want.shape[0], crop_padding=32)
    assert got.shape == want.shape and got.dtype == np.float32
    mae = float(np.mean(np.abs(got - want) * STD))  # back on the [0, 1] pixel scale
    # the 2018 file converted to [0, 1] before the resize (float rounding apart); the Pillow fallback
    # decodes with the accurate IDCT: about a level off on average
    assert mae < (0.1 / 255 if mode == "kernel" else 1.5 / 255), mae


PRESET_KINDS = ["blur0", "blur1", "photo0", "photo1", "portrait422", "tiny"]
PRESET_SIZES = [160, 192, 224, 256, 288, 299, 320, 384]
STRIDE = 211  # tests/data/make_image_golden.py keeps every 211th value of TensorFlow's output
# the Pillow fallback decodes with the accurate IDCT and the whole image (so not TensorFlow's crop
# edges): a level off on average, two for the tiny image (17x13 -> 11x11 blown up 20-35x)
REFERENCE_LEVELS = {"tiny": 2.5}


def _digest(arr) -> np.ndarray:
    return np.frombuffer(hashlib.sha256(np.ascontiguousarray(arr).tobytes()).digest(), np.uint8)


def _check_tf_eval(mode, got, name, size, bf16=False):
    """``got`` (0-255 scale) against tensorflow/tpu's preprocess_for_eval(image, bf16, size)."""
    key = f"preset/eval{'_bf16' if bf16 else ''}/{name}/{size}"
    assert got.shape == (size, size, 3)
    got = got.view(np.uint16) if bf16 else got
    if mode == "kernel":  # bit-identical: every STRIDE-th value, and a digest of all of them
        np.testing.assert_array_equal(got.reshape(-1)[::STRIDE], G[key + "/sample"])
        np.testing.assert_array_equal(_digest(got), G[key + "/digest"])
    else:
        import ml_dtypes

        as_float = (lambda a: a.view(ml_dtypes.bfloat16).astype(np.float32)) if bf16 else (lambda a: a)
        diff = np.abs(as_float(got.reshape(-1)[::STRIDE]) - as_float(G[key + "/sample"]))
        assert diff.mean() < REFERENCE_LEVELS.get(name, 1.5), diff.mean()


@pytest.mark.parametrize("size", PRESET_SIZES)
@pytest.mark.parametrize("name", PRESET_KINDS)
def test_eval_preset_is_tensorflow_tpus_at_every_size(mode, name, size):
    """output="0-255" is tensorflow/tpu's resnet_preprocessing.preprocess_for_eval (the 2023 file,
    crop_padding = round(size / 7)) bit for bit, at every size in use; "0-1" is it / 255 and the
    default its ImageNet normalisation."""
    data = golden_bytes(G, f"preset_{name}")
    want = G[f"preset/eval/{name}/{size}/sample"]
    # the check: resnet_preprocess(b, False, image_size=size, normalize=False) * 255
    unit = ti.resnet_preprocess(data, False, image_size=size, normalize=False).reshape(-1)[::STRIDE]
    diff = np.abs(unit * 255 - want)
    assert (diff.max() < 1e-3) if mode == "kernel" else (diff.mean() < REFERENCE_LEVELS.get(name, 1.5)), diff.max()
    _check_tf_eval(mode, ti.resnet_preprocess(data, False, size, output="0-255"), name, size)
    if mode == "kernel":  # and the default, normalised
        channel = np.arange(0, size * size * 3, STRIDE) % 3
        mean, std = np.array(ti.IMAGENET_MEAN, np.float32)[channel], np.array(ti.IMAGENET_STDDEV, np.float32)[channel]
        normalized = ti.resnet_preprocess(data, False, image_size=size).reshape(-1)[::STRIDE]
        np.testing.assert_allclose(normalized, (want / np.float32(255) - mean) / std, rtol=0, atol=2e-5)


@pytest.mark.parametrize("size", PRESET_SIZES)
def test_eval_batch_preset_is_tensorflow_tpus_at_every_size(mode, size):
    images = [golden_bytes(G, f"preset_{name}") for name in PRESET_KINDS]
    batch = ti.resnet_preprocess_batch(images, False, size, output="0-255")
    for i, name in enumerate(PRESET_KINDS):
        _check_tf_eval(mode, batch[i], name, size)


@pytest.mark.parametrize("size", [224, 299])
def test_eval_preset_bfloat16_is_tensorflow_tpus(mode, size):
    """preprocess_for_eval(image, use_bfloat16=True, size): the 0-255 values rounded to bfloat16."""
    import ml_dtypes

    images = [golden_bytes(G, f"preset_{name}") for name in PRESET_KINDS]
    batch = ti.resnet_preprocess_batch(images, False, size, dtype=ml_dtypes.bfloat16, output="0-255")
    for i, name in enumerate(PRESET_KINDS):
        _check_tf_eval(mode, batch[i], name, size, bf16=True)
    one = ti.resnet_preprocess(images[0], False, size, dtype="bfloat16", output="0-255")
    np.testing.assert_array_equal(one.view(np.uint16), batch[0].view(np.uint16))


def test_output_conventions(mode):
    data = jpeg(90, 120, seed=7)
    raw = ti.resnet_preprocess(data, False, 64, output="0-255")
    np.testing.assert_allclose(ti.resnet_preprocess(data, False, 64, output="0-1"), raw / np.float32(255),
                               rtol=0, atol=1e-6)
    np.testing.assert_array_equal(ti.resnet_preprocess(data, False, 64, normalize=False),
                                  ti.resnet_preprocess(data, False, 64, output="0-1"))
    default = ti.resnet_preprocess(data, False, 64)  # unchanged: normalised
    np.testing.assert_array_equal(default, ti.resnet_preprocess(data, False, 64, output="normalized"))
    np.testing.assert_array_equal(default, ti.resnet_preprocess(data, False, 64, normalize=True))
    model_side = (raw - np.float32(255) * np.array(ti.IMAGENET_MEAN, np.float32)) / (
        np.float32(255) * np.array(ti.IMAGENET_STDDEV, np.float32))  # resnet_main.py's MEAN_RGB / STDDEV_RGB
    np.testing.assert_allclose(default, model_side, rtol=0, atol=2e-5)
    u8 = ti.resnet_preprocess_batch([data], False, 64, dtype="uint8", output="0-255")
    np.testing.assert_array_equal(u8, ti.resnet_preprocess_batch([data], False, 64, dtype="uint8", normalize=False))
    np.testing.assert_array_equal(u8[0], np.rint(np.clip(raw, 0, 255)).astype(np.uint8))
    with pytest.raises(ValueError, match="output must be one of"):
        ti.resnet_preprocess(data, False, 64, output="tf")
    with pytest.raises(ValueError, match="contradicts"):
        ti.resnet_preprocess(data, False, 64, output="0-255", normalize=True)
    with pytest.raises(ValueError, match="uint8 output holds the 0-255 values"):
        ti.resnet_preprocess(data, False, 64, dtype="uint8", output="0-1")


def test_center_crop_padding_follows_the_size():
    """tensorflow/tpu since 2021: crop_padding = round(size * (1 / 0.875 - 1)); before: 32."""
    for size, padding in [(160, 23), (192, 27), (224, 32), (256, 37), (288, 41), (299, 43), (320, 46), (384, 55)]:
        assert ti.presets._crop_padding(size, None) == padding
        crop = int(np.float32(size / (size + padding)) * np.float32(375))
        assert ti.presets._center_window(375, 500, size, padding) == ((376 - crop) // 2, (501 - crop) // 2, crop, crop)
    assert ti.presets._crop_padding(299, 32) == 32


def test_train_fallback_is_the_center_crop_only_for_rgb_files(mode, monkeypatch):
    """resnet_preprocessing's "bad" crop: extract_jpeg_shape (h, w, components) equal to the crop's
    (h, w, 3) in three places; a grayscale file's whole-image crop is resized as it is."""
    rgb, gray = jpeg(60, 80), golden_bytes(G, "jgray")
    monkeypatch.setattr(ti.presets, "sample_crop_window", lambda h, w, *a: (0, 0, h, w))
    crops, codes = ti.presets._windows([rgb, gray], True, 32, np.random.default_rng(0), "resnet")
    assert crops[0].tolist() == list(ti.presets._center_window(60, 80, 32, 5)) and codes[0] & 2
    h, w = G["shape/jgray"][:2]
    assert crops[1].tolist() == [0, 0, h, w] and not codes[1] & 2


@needs_kernel
@pytest.mark.parametrize("name", JPEG_NAMES)
def test_kernel_can_decode_a_window_as_tensorflows_decode_and_crop(name):
    """decode_into(..., tf_crop=True) (the eval preset's center crops) gives TensorFlow's
    DecodeAndCropJpeg values, window edges included, bit for bit."""
    k = _backend.kernel()
    data = golden_bytes(G, name)
    for j in range(4):
        y, x, h, w = G[f"crop/{name}/{j}/window"].tolist()
        out = np.empty((h, w, 3), np.uint8)
        k.decode_into(data, out, 3, 1, 1, y, x, h, w, 0, (1 << 29) - 1, True)
        np.testing.assert_array_equal(out, G[f"crop/{name}/{j}"])


def _batch(n=6):
    return [jpeg(120 + 13 * i, 160 - 7 * i, seed=i) for i in range(n)]


@needs_kernel
@pytest.mark.parametrize("is_training", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "uint8", "bfloat16"])
def test_kernel_equals_reference(is_training, dtype):
    images = _batch()
    kw = dict(seed=(3, 9), dtype=dtype, normalize=dtype != "uint8")
    fast = ti.resnet_preprocess_batch(images, is_training, 64, **kw)
    _backend.use_kernel(False)
    try:
        ref = ti.resnet_preprocess_batch(images, is_training, 64, **kw)
    finally:
        _backend.use_kernel(True)
    assert fast.dtype == ref.dtype and fast.shape == (6, 64, 64, 3)
    diff = np.abs(fast.astype(np.float32) - ref.astype(np.float32))
    # same crops and flips; the reference decodes with Pillow (accurate IDCT): a level or two apart
    if dtype == "uint8":
        assert diff.mean() < 1.5
    else:
        assert diff.mean() < 0.03


@needs_kernel
@pytest.mark.parametrize("method", ["bicubic_v1", "bicubic", "bilinear_v1", "bilinear"])
def test_kernel_resize_is_tensorflows_grid(method):
    """Same decoded pixels in both paths: the kernel's resize equals the numpy (TensorFlow) one."""
    data = jpeg(97, 131, seed=4)
    crops = np.array([[5, 7, 80, 101], [0, 0, 97, 131]], np.int32)
    flips = np.array([1, 0], np.uint8)
    out = ti.preprocess_batch([data, data], crops, flips, (45, 70), method=method, normalize=False)
    for i, (y, x, h, w) in enumerate(crops):
        img = ti.decode_and_crop_jpeg(data, [y, x, h, w])
        fn = ti.resize_bicubic if method.startswith("bicubic") else ti.resize_bilinear
        ref = fn(img, (45, 70), half_pixel_centers=not method.endswith("_v1")) * np.float32(1 / 255)
        if flips[i]:
            ref = ref[:, ::-1]
        assert np.abs(out[i] - ref).max() < 1e-6


def test_train_preset_is_seeded_and_flips(mode):
    images = _batch(4)
    a = ti.resnet_preprocess_batch(images, True, 32, seed=(1, 2))
    b = ti.resnet_preprocess_batch(images, True, 32, seed=(1, 2))
    c = ti.resnet_preprocess_batch(images, True, 32, seed=(1, 3))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    one = ti.resnet_preprocess(images[0], True, 32, seed=5)
    np.testing.assert_array_equal(one, ti.resnet_preprocess(images[0], True, 32, seed=5))
    crops, flips = ti.presets._windows([ti.decode.as_buffer(x) for x in images * 25], True, 32,
                                       np.random.default_rng(0), "resnet")
    assert 25 < (flips & 1).sum() < 75
    assert (crops[:, 2] > 0).all()


def test_preallocated_output_and_errors(mode):
    images = _batch(3)
    out = np.zeros((3, 16, 16, 3), np.float32)
    res = ti.resnet_preprocess_batch(images, False, 16, out=out)
    assert res is out and out.any()
    with pytest.raises(ValueError, match="C-contiguous float32 array of shape"):
        ti.resnet_preprocess_batch(images, False, 16, out=np.zeros((2, 16, 16, 3), np.float32))
    with pytest.raises(ValueError, match="normalize=False"):
        ti.resnet_preprocess_batch(images, False, 16, dtype=np.uint8)
    with pytest.raises(ValueError, match="dtype"):
        ti.resnet_preprocess_batch(images, False, 16, dtype=np.int16)
    bad = images[:1] + [images[1][:300]] + images[2:]
    with pytest.raises(InvalidImageError, match="image 1 of the batch") as e:
        ti.resnet_preprocess_batch(bad, False, 16)
    assert e.value.index == 1
    with pytest.raises(InvalidImageError, match="image 0 of the batch"):
        ti.resnet_preprocess_batch([b"not a jpeg"], False, 16)


@needs_kernel
def test_threads_give_the_same_batch():
    images = _batch(8)
    one = ti.resnet_preprocess_batch(images, True, 48, seed=4, num_threads=1)
    many = ti.resnet_preprocess_batch(images, True, 48, seed=4, num_threads=4)
    np.testing.assert_array_equal(one, many)


def test_views_from_a_parsed_batch(mode):
    images = _batch(2)
    arr = np.array(images, dtype=object)  # what parse() yields for a bytes feature
    np.testing.assert_array_equal(ti.resnet_preprocess_batch(arr, False, 24),
                                  ti.resnet_preprocess_batch([memoryview(x) for x in images], False, 24))


def test_inception_preset(mode):
    images = _batch(2)
    ev = ti.inception_preprocess_batch(images, False, 40)
    assert ev.shape == (2, 40, 40, 3) and -1.0 <= ev.min() and ev.max() <= 1.0
    img = ti.decode_jpeg(images[0])
    ref = ti.resize_bilinear(ti.central_crop(img, 0.875), (40, 40)) / np.float32(255)
    assert np.abs((ev[0] + 1) / 2 - ref).mean() < (1e-5 if mode == "kernel" else 0.01)
    tr = ti.inception_preprocess(images[1], True, 40, seed=3)
    assert tr.shape == (40, 40, 3)


@needs_kernel
@pytest.mark.parametrize("subsampling", [0, 1, 2])  # 4:4:4, 4:2:2, 4:2:0
def test_batch_windows_are_the_decoded_crops(subsampling):
    """The batch kernel decodes each window in place (scanlines a little wider than the window):
    resized 1:1, every window anywhere in the image, edges included, is exactly the crop that
    decode_and_crop_jpeg gives."""
    data = jpeg(75, 131, seed=subsampling, subsampling=subsampling)
    rng = np.random.default_rng(subsampling)
    h, w = 37, 53
    ys = np.r_[0, 75 - h, rng.integers(0, 75 - h + 1, 14)]
    xs = np.r_[131 - w, 0, rng.integers(0, 131 - w + 1, 14)]
    crops = np.stack([ys, xs, np.full(16, h), np.full(16, w)], 1).astype(np.int32)
    out = ti.preprocess_batch([data] * 16, crops, np.zeros(16, np.uint8), (h, w), method="bilinear",
                              normalize=False, dtype="uint8")
    for i, (y, x, _, _) in enumerate(crops):
        np.testing.assert_array_equal(out[i], ti.decode_and_crop_jpeg(data, [y, x, h, w]), err_msg=str(crops[i]))


@needs_kernel
@pytest.mark.parametrize("name", ["jgray", "jcmyk", "j422", "jprog"])
def test_batch_kernel_handles_every_jpeg_kind(name):
    data = golden_bytes(G, name)
    rgb = G[f"decode/{name}/3"]  # TensorFlow's decode (the kernel's is bit-identical)
    h, w = rgb.shape[:2]
    crops = np.array([[2, 3, h - 5, w - 9]], np.int32)
    out = ti.preprocess_batch([data], crops, np.zeros(1, np.uint8), (20, 30), normalize=False)
    ref = ti.resize_bicubic(rgb[2:h - 3, 3:w - 6], (20, 30)) * np.float32(1 / 255)
    assert np.abs(out[0] - ref).max() < 1e-6


def test_zero_copy_column_gives_the_same_batch_as_bytes(mode):
    """A parsed bytes feature after batch (BytesColumn: views into read buffers, here two of them
    so images are addressed by buffer index) decodes in place to the same batch as bytes objects."""
    from tpudata.dataset.core.columns import BytesColumn, RecordColumn

    images = _batch(6)
    col = RecordColumn.concat([BytesColumn.from_bytes(images[:2]), BytesColumn.from_bytes(images[2:])])
    assert isinstance(col, BytesColumn) and len(col.buffers) == 2 and col.buf_idx is not None
    col = col.take(np.array([5, 0, 3, 1, 4, 2]))
    order = [images[i] for i in (5, 0, 3, 1, 4, 2)]
    for is_training in (False, True):
        want = ti.resnet_preprocess_batch(order, is_training, 40, seed=(2, 1))
        got = ti.resnet_preprocess_batch(col, is_training, 40, seed=(2, 1))
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ti.inception_preprocess_batch(col, False, 24),
                                  ti.inception_preprocess_batch(order, False, 24))


def test_zero_copy_column_names_the_bad_image(mode):
    from tpudata.dataset.core.columns import BytesColumn

    col = BytesColumn.from_bytes([jpeg(40, 50), b"not a jpeg", jpeg(41, 52)])
    with pytest.raises(InvalidImageError, match="image 1 of the batch") as info:
        ti.resnet_preprocess_batch(col, False, 16)
    assert info.value.index == 1


@needs_kernel
def test_kernel_rejects_a_column_that_points_outside_its_buffer():
    k = _backend.kernel()
    out = np.empty((1, 4), np.int32)
    with pytest.raises(ValueError, match="outside its buffer"):
        k.jpeg_info_batch(([b"abc"], None, np.array([1], np.int64), np.array([5], np.int64)), out)


@needs_kernel
def test_kernel_bfloat16_is_the_float32_batch_rounded_to_nearest_even():
    import ml_dtypes

    images = _batch(5)
    for is_training in (False, True):
        f32 = ti.resnet_preprocess_batch(images, is_training, 45, seed=(4, 4))
        bf16 = ti.resnet_preprocess_batch(images, is_training, 45, seed=(4, 4), dtype=ml_dtypes.bfloat16)
        np.testing.assert_array_equal(bf16.view(np.uint16), f32.astype(ml_dtypes.bfloat16).view(np.uint16))
