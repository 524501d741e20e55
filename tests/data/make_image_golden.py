"""Write tests/data/golden/image_ops.npz with TensorFlow as the oracle for tpudata.image.

Run with a TensorFlow install (never a test dependency):  /work/tfvenv/bin/python tests/data/make_image_golden.py
The JPEG/PNG inputs are stored in the file too, so the tests never depend on an encoder's version.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import struct

import numpy as np
import tensorflow as tf
from PIL import Image, ImageFilter, PngImagePlugin

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


def resnet_reference_2018(image_bytes, image_size):
    """tensorflow/tpu resnet_preprocessing.preprocess_for_eval as of April 2018 (CROP_PADDING = 32,
    convert to [0, 1] before the resize, normalised there), with IMAGE_SIZE as a parameter."""
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
        OUT[f"resnet_eval/{k}"] = resnet_reference_2018(photo, 80)

    presets()
    png_gray()
    dtype_conversions()

    path = os.path.join(HERE, "golden", "image_ops.npz")
    np.savez_compressed(path, **OUT)
    print(path, os.path.getsize(path), "bytes,", len(OUT), "arrays")


# --- tensorflow/tpu models/official/resnet/resnet_preprocessing.py as of 2023-11 (the newest; TF 2.21),
# the eval path verbatim but for tf.compat.v1 spelled out ---------------------------------------------
CROP_FRACTION = 0.875
PRESET_SIZES = (160, 192, 224, 256, 288, 299, 320, 384)
SAMPLE_STRIDE = 211  # the golden file keeps every 211th value of each output, and a digest of all of them


def _decode_and_center_crop(image_bytes, image_size):
    """Crops to center of image with padding then scales image_size."""
    shape = tf.image.extract_jpeg_shape(image_bytes)
    image_height = shape[0]
    image_width = shape[1]

    # crop_fraction = image_size / (image_size + crop_padding)
    crop_padding = round(image_size * (1 / CROP_FRACTION - 1))
    padded_center_crop_size = tf.cast(
        ((image_size / (image_size + crop_padding)) *
         tf.cast(tf.minimum(image_height, image_width), tf.float32)),
        tf.int32)

    offset_height = ((image_height - padded_center_crop_size) + 1) // 2
    offset_width = ((image_width - padded_center_crop_size) + 1) // 2
    crop_window = tf.stack([offset_height, offset_width,
                            padded_center_crop_size, padded_center_crop_size])
    image = tf.image.decode_and_crop_jpeg(image_bytes, crop_window, channels=3)
    image = tf.compat.v1.image.resize_bicubic([image], [image_size, image_size])[0]

    return image


def preprocess_for_eval(image_bytes, use_bfloat16, image_size):
    image = _decode_and_center_crop(image_bytes, image_size)
    image = tf.reshape(image, [image_size, image_size, 3])
    image = tf.image.convert_image_dtype(
        image, dtype=tf.bfloat16 if use_bfloat16 else tf.float32)
    return image


def digest(arr: np.ndarray) -> np.ndarray:
    return np.frombuffer(hashlib.sha256(np.ascontiguousarray(arr).tobytes()).digest(), np.uint8)


def preset_images(rng) -> dict:
    """Blurred and photo-like 375x500 JPEGs (4:2:0), a 4:2:2 portrait and a tiny 17x13 one."""
    out = {}
    for k in range(2):
        photo = synthetic.photo_like(rng, 375, 500)
        blurred = np.asarray(Image.fromarray(photo).filter(ImageFilter.GaussianBlur(2 + 2 * k)))
        out[f"blur{k}"] = jpeg(blurred, quality=90)
        out[f"photo{k}"] = jpeg(photo, quality=75)
    out["portrait422"] = jpeg(synthetic.photo_like(rng, 500, 333), quality=85, subsampling=1)
    out["tiny"] = jpeg(synthetic.photo_like(rng, 17, 13), quality=90)
    return out


def presets():
    """preprocess_for_eval (float32 at every size in use, bfloat16 at two) of each image, as the
    digest of the whole output and every SAMPLE_STRIDE-th value."""
    files = preset_images(np.random.default_rng(20261124))
    for name, data in files.items():
        OUT[f"bytes/preset_{name}"] = np.frombuffer(data, np.uint8)
        for size in PRESET_SIZES:
            want = preprocess_for_eval(data, False, size).numpy()
            OUT[f"preset/eval/{name}/{size}/digest"] = digest(want)
            OUT[f"preset/eval/{name}/{size}/sample"] = want.reshape(-1)[::SAMPLE_STRIDE].copy()
        for size in (224, 299):
            want = preprocess_for_eval(data, True, size).numpy().view(np.uint16)
            OUT[f"preset/eval_bf16/{name}/{size}/digest"] = digest(want)
            OUT[f"preset/eval_bf16/{name}/{size}/sample"] = want.reshape(-1)[::SAMPLE_STRIDE].copy()


# --- decode_png(channels=1) of colour PNGs: libpng's rgb_to_gray, with and without gamma chunks --------

def png(image: Image.Image, chunks=()) -> bytes:
    info = PngImagePlugin.PngInfo()
    for key, value in chunks:
        info.add(key, value)
    buf = io.BytesIO()
    image.save(buf, "PNG", pnginfo=info)
    return buf.getvalue()


def png_gray():
    rng = np.random.default_rng(20261125)
    photo = synthetic.photo_like(rng, 48, 64)
    noise = rng.integers(0, 256, (16, 64, 3), dtype=np.uint8)  # every (r, g, b) mix, not just photo ones
    rgb = np.concatenate([photo, noise], axis=0)
    rgba = np.concatenate([rgb, rng.integers(0, 256, rgb.shape[:2] + (1,), dtype=np.uint8)], axis=-1)
    gama = lambda g: [(b"gAMA", struct.pack(">I", g))]  # noqa: E731
    pal = Image.fromarray(rgb).convert("P", palette=Image.ADAPTIVE, colors=200)
    files = {
        "rgb": png(Image.fromarray(rgb)),
        "rgba": png(Image.fromarray(rgba)),
        "palette": png(pal),
        "rgb_gamma045": png(Image.fromarray(rgb), gama(45455)),
        "rgba_gamma08": png(Image.fromarray(rgba), gama(80000)),
        "rgb_gamma097": png(Image.fromarray(rgb), gama(97000)),  # within libpng's threshold: no tables
        "rgb_srgb": png(Image.fromarray(rgb), [(b"sRGB", b"\x00")]),
        "palette_gamma22": png(pal, gama(220000)),
    }
    for name, data in files.items():
        OUT[f"bytes/gray_{name}"] = np.frombuffer(data, np.uint8)
        OUT[f"png_gray/decode/{name}/1"] = tf.io.decode_png(data, channels=1).numpy()
    OUT["png_gray/decode/rgb_gamma045/3"] = tf.io.decode_png(files["rgb_gamma045"], channels=3).numpy()


# --- tf.image.convert_image_dtype: every uint8 value, other integers, floats (bfloat16 as uint16 bits) ---

def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.uint16) if x.dtype.name == "bfloat16" else x


def dtype_conversions():
    rng = np.random.default_rng(20261126)
    floats = np.concatenate([np.linspace(0, 1, 1025), rng.uniform(0, 1, 1000), [0.998, 0.9985, 0.999]])
    ints = {"uint8": np.arange(256, dtype=np.uint8)}
    for name in ("uint16", "int8", "int16", "int32"):
        info = np.iinfo(name)
        ints[name] = np.unique(np.concatenate([np.linspace(0, info.max, 1001), rng.integers(0, info.max, 500)
                                                ]).astype(name))
    for src, x in ints.items():
        OUT[f"dtype/in/{src}"] = x
        for dst in ("bfloat16", "float16", "float32", "float64"):
            OUT[f"dtype/{src}/{dst}"] = _bits(tf.image.convert_image_dtype(x, getattr(tf, dst)).numpy())
    for src in ("float64", "float32", "float16", "bfloat16"):
        x = tf.cast(tf.constant(floats, tf.float64), getattr(tf, src))
        OUT[f"dtype/in/{src}"] = _bits(x.numpy())
        for dst in ("bfloat16", "float16", "float32", "float64", "uint8", "uint16", "int16", "int32"):
            if dst == src:
                continue
            y = tf.image.convert_image_dtype(x, getattr(tf, dst)).numpy()
            if dst not in ("bfloat16", "float16", "float32", "float64"):
                # x * (max + 0.5) past max (e.g. bfloat16(0.999) * 256) is undefined in TensorFlow:
                # its cast wraps or saturates by the value's position in the array
                scaled = (x * tf.constant(np.iinfo(dst).max + 0.5, x.dtype)).numpy().astype(np.float64)
                ok = scaled < np.iinfo(dst).max + 1
                y = np.where(ok, y, 0).astype(y.dtype)
                OUT[f"dtype/{src}/{dst}/defined"] = ok
            OUT[f"dtype/{src}/{dst}"] = _bits(y)
    wide = tf.constant(np.linspace(-1.5, 2.5, 801), tf.float64)
    for src in ("float64", "float32", "float16", "bfloat16"):
        x = tf.cast(wide, getattr(tf, src))
        OUT[f"dtype_saturate/in/{src}"] = _bits(x.numpy())
        for dst in ("uint8", "int16", "int32"):
            y = tf.image.convert_image_dtype(x, getattr(tf, dst), saturate=True)
            OUT[f"dtype_saturate/{src}/{dst}"] = y.numpy()


if __name__ == "__main__":
    main()
