"""Write tests/data/golden/image_ops.npz with TensorFlow as the oracle for tpudata.image.

Run with a TensorFlow install (never a test dependency):  /work/tfvenv/bin/python tests/data/make_image_golden.py
The JPEG/PNG inputs are stored in the file too, so the tests never depend on an encoder's version.
"""

from __future__ import annotations

import importlib.util
import io
import os

import numpy as np
import tensorflow as tf
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "synthetic", os.path.join(HERE, "..", "..", "tpudata", "image", "synthetic.py"))
synthetic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(synthetic)

OUT = {}


def jpeg(arr, **kw) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", **kw)
    return buf.getvalue()


def inputs(rng):
    photo = synthetic.photo_like(rng, 48, 66)
    gray = photo.mean(axis=2).astype(np.uint8)
    cmyk = Image.fromarray(photo).convert("CMYK")
    cbuf = io.BytesIO()
    cmyk.save(cbuf, "JPEG", quality=90)
    pbuf = io.BytesIO()
    Image.fromarray(photo[:40, :50]).save(pbuf, "PNG")
    gbuf = io.BytesIO()
    Image.fromarray(gray[:31, :27]).save(gbuf, "PNG")
    return {
        "j420": jpeg(photo, quality=90),
        "j444": jpeg(photo, quality=95, subsampling=0),
        "j422": jpeg(photo[:, :98], quality=85, subsampling=1),
        "jprog": jpeg(photo, quality=80, progressive=True),
        "jgray": jpeg(gray, quality=90),
        "jcmyk": cbuf.getvalue(),
        "jodd": jpeg(synthetic.photo_like(rng, 37, 53), quality=75),
        "png_rgb": pbuf.getvalue(),
        "png_gray": gbuf.getvalue(),
    }


def sdbb_draws(shape, n, **kw):
    seeds = np.arange(n)
    begins, sizes = [], []
    for s in seeds:
        b, z, _ = tf.image.stateless_sample_distorted_bounding_box(
            shape, tf.constant([[[0.0, 0.0, 1.0, 1.0]]]), seed=[int(s), 7], **kw)
        begins.append(b.numpy()[:2])
        sizes.append(z.numpy()[:2])
    return np.concatenate([np.array(begins), np.array(sizes)], axis=1).astype(np.int16)


def resnet_reference(image_bytes, image_size):
    """tensorflow/tpu resnet_preprocessing.preprocess_for_eval with IMAGE_SIZE as a parameter."""
    shape = tf.image.extract_jpeg_shape(image_bytes)
    h, w = shape[0], shape[1]
    crop = tf.cast((image_size / (image_size + 32)) * tf.cast(tf.minimum(h, w), tf.float32), tf.int32)
    oy, ox = ((h - crop) + 1) // 2, ((w - crop) + 1) // 2
    image = tf.image.decode_and_crop_jpeg(image_bytes, tf.stack([oy, ox, crop, crop]), channels=3)
    image = tf.image.convert_image_dtype(image, dtype=tf.float32)
    image = tf.compat.v1.image.resize_bicubic([image], [image_size, image_size])[0]
    image -= tf.constant([0.485, 0.456, 0.406], shape=[1, 1, 3])
    image /= tf.constant([0.229, 0.224, 0.225], shape=[1, 1, 3])
    return image.numpy()


def main():
    rng = np.random.default_rng(20261123)
    files = inputs(rng)
    for name, data in files.items():
        OUT[f"bytes/{name}"] = np.frombuffer(data, np.uint8)
    for name, data in files.items():
        if name.startswith("png"):
            for ch in (0, 1, 3):
                OUT[f"decode/{name}/{ch}"] = tf.io.decode_png(data, channels=ch).numpy()
            continue
        OUT[f"shape/{name}"] = tf.image.extract_jpeg_shape(data).numpy()
        for ch in (0, 1, 3):
            try:
                OUT[f"decode/{name}/{ch}"] = tf.io.decode_jpeg(data, channels=ch).numpy()
            except tf.errors.InvalidArgumentError:  # e.g. CMYK -> 1 channel: TF refuses
                OUT[f"decode_error/{name}/{ch}"] = np.array(1)
        OUT[f"decode_accurate/{name}"] = tf.io.decode_jpeg(data, channels=3, dct_method="INTEGER_ACCURATE").numpy()
        h, w = OUT[f"shape/{name}"][:2]
        windows = [(0, 0, h, w), (1, 3, h - 9, w - 17), (h // 3, w // 2, h // 3, w // 4), (h - 5, w - 7, 5, 7)]
        for k, win in enumerate(windows):
            OUT[f"crop/{name}/{k}/window"] = np.array(win, np.int32)
            OUT[f"crop/{name}/{k}"] = tf.image.decode_and_crop_jpeg(data, win, channels=3).numpy()

    src = tf.io.decode_jpeg(files["jodd"], channels=3).numpy()  # 37 x 53
    OUT["resize/src"] = src
    srcf = tf.constant(src[None].astype(np.float32))
    for size in ((17, 23), (45, 50), (37, 20)):
        tag = f"{size[0]}x{size[1]}"
        OUT[f"resize/v1_bicubic/{tag}"] = tf.compat.v1.image.resize_bicubic(srcf, size).numpy()[0]
        OUT[f"resize/v1_bilinear/{tag}"] = tf.compat.v1.image.resize_bilinear(srcf, size).numpy()[0]
        OUT[f"resize/v1_bicubic_ac/{tag}"] = tf.compat.v1.image.resize_bicubic(srcf, size, align_corners=True).numpy()[0]
        for method in ("bilinear", "bicubic", "area", "nearest"):
            for aa in (False, True):
                out = tf.image.resize(src[None], size, method=method, antialias=aa).numpy()[0]
                OUT[f"resize/{method}/{int(aa)}/{tag}"] = out

    kw = dict(min_object_covered=0.1, aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0),
              max_attempts=10, use_image_if_no_bounding_boxes=True)
    for shape in ((375, 500, 3), (500, 333, 3), (64, 64, 3)):
        OUT[f"sdbb/resnet/{shape[0]}x{shape[1]}"] = sdbb_draws(shape, 10000, **kw)
    kw2 = dict(min_object_covered=0.0, aspect_ratio_range=(0.5, 2.0), area_range=(0.5, 1.0),
               max_attempts=1, use_image_if_no_bounding_boxes=True)
    OUT["sdbb/wide/300x200"] = sdbb_draws((300, 200, 3), 10000, **kw2)

    for k in range(2):
        photo = jpeg(synthetic.photo_like(rng, 120 + 30 * k, 160 - 20 * k), quality=90)
        OUT[f"bytes/resnet{k}"] = np.frombuffer(photo, np.uint8)
        OUT[f"resnet_eval/{k}"] = resnet_reference(photo, 80)

    path = os.path.join(HERE, "golden", "image_ops.npz")
    np.savez_compressed(path, **OUT)
    print(path, os.path.getsize(path), "bytes,", len(OUT), "arrays")


if __name__ == "__main__":
    main()
