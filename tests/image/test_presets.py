"""ResNet / Inception presets: TensorFlow fidelity, the C batch kernel against the numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

import tpudata.image as ti
from tpudata.errors import InvalidImageError
from tpudata.image import _backend
from tests.image.helpers import golden, golden_bytes, jpeg, mode, needs_kernel  # noqa: F401

G = golden()
STD = np.array(ti.IMAGENET_STDDEV, np.float32)


@pytest.mark.parametrize("k", [0, 1])
def test_eval_preset_matches_tensorflow_resnet_preprocessing(mode, k):
    data = golden_bytes(G, f"resnet{k}")
    want = G[f"resnet_eval/{k}"]
    got = ti.resnet_preprocess(data, False, image_size=want.shape[0])
    assert got.shape == want.shape and got.dtype == np.float32
    mae = float(np.mean(np.abs(got - want) * STD))  # back on the [0, 1] pixel scale
    # TensorFlow's DecodeAndCropJpeg differs from its full decode at a few window-edge pixels; the
    # kernel equals decode-then-crop, so it is off there only (mean well under a tenth of a level)
    # (the Pillow fallback decodes with the accurate IDCT: about a level off on average)
    assert mae < (0.1 / 255 if mode == "kernel" else 1.5 / 255), mae


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
    assert 25 < flips.sum() < 75
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
