"""tpudata.image against live TensorFlow (runs only where TensorFlow is importable; never in CI deps)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")

import tpudata.image as ti  # noqa: E402
from tests.image.helpers import jpeg, needs_kernel  # noqa: E402


@needs_kernel
@pytest.mark.parametrize("seed", range(4))
def test_decode_and_eval_preset_at_imagenet_size(seed):
    rng = np.random.default_rng(seed)
    h, w = int(rng.integers(300, 520)), int(rng.integers(300, 520))
    data = jpeg(h, w, seed=seed, subsampling=int(rng.integers(0, 3)))
    np.testing.assert_array_equal(ti.decode_jpeg(data), tf.io.decode_jpeg(data, channels=3).numpy())
    shape = tf.image.extract_jpeg_shape(data)
    crop = tf.cast(0.875 * tf.cast(tf.minimum(shape[0], shape[1]), tf.float32), tf.int32)
    oy, ox = ((shape[0] - crop) + 1) // 2, ((shape[1] - crop) + 1) // 2
    img = tf.image.decode_and_crop_jpeg(data, tf.stack([oy, ox, crop, crop]), channels=3)
    img = tf.compat.v1.image.resize_bicubic([tf.image.convert_image_dtype(img, tf.float32)], [224, 224])[0]
    want = ((img - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]).numpy()
    got = ti.resnet_preprocess(data, False)
    assert np.mean(np.abs(got - want) * np.array(ti.IMAGENET_STDDEV)) < 0.5 / 255


@pytest.mark.parametrize("method", ["bilinear", "bicubic", "area", "nearest"])
@pytest.mark.parametrize("antialias", [False, True])
def test_resize_at_imagenet_size(method, antialias):
    src = np.random.default_rng(1).integers(0, 256, (333, 500, 3)).astype(np.uint8)
    want = tf.image.resize(src, (224, 224), method=method, antialias=antialias).numpy()
    got = ti.resize(src, (224, 224), method=method, antialias=antialias)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)  # exact (the issue asks 1e-4)


@needs_kernel
@pytest.mark.parametrize("size", [160, 192, 256, 288, 299, 320, 384])
def test_eval_preset_is_tensorflow_tpus_at_other_sizes(size):
    """tensorflow/tpu's preprocess_for_eval (the 2023 file, as tests/data/make_image_golden.py
    copies it), float32 and bfloat16, against output="0-255": bit for bit."""
    import ml_dtypes

    from tests.data.make_image_golden import preprocess_for_eval

    rng = np.random.default_rng(size)
    images = [jpeg(int(rng.integers(200, 520)), int(rng.integers(200, 520)), seed=size + i,
                   subsampling=i % 3) for i in range(3)] + [jpeg(13, 17, seed=size)]
    batch = ti.resnet_preprocess_batch(images, False, size, output="0-255")
    for i, data in enumerate(images):
        np.testing.assert_array_equal(batch[i], preprocess_for_eval(data, False, size).numpy())
        np.testing.assert_array_equal(ti.resnet_preprocess(data, False, size, output="0-255"), batch[i])
    bf16 = ti.resnet_preprocess(images[0], False, size, dtype=ml_dtypes.bfloat16, output="0-255")
    np.testing.assert_array_equal(bf16.view(np.uint16),
                                  preprocess_for_eval(images[0], True, size).numpy().view(np.uint16))
