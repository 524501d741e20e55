"""Cropping, flipping, dtype conversion and normalisation: ``tf.image.sample_distorted_bounding_box``,
``central_crop``, ``random_flip_left_right``, ``convert_image_dtype`` and per-channel normalisation.

Randomness comes from a ``seed`` (an int, a tuple of ints such as ``(pipeline_seed, element_index)``,
or a ``numpy.random.Generator``): the same seed gives the same crop, so a pipeline that derives the
seed from its element index restores exactly from a checkpoint.
"""

from __future__ import annotations

import numpy as np

__all__ = ["central_crop", "convert_image_dtype", "flip_left_right", "make_rng", "normalize",
           "random_flip_left_right", "sample_crop_window", "sample_distorted_bounding_box", "to_bfloat16"]

F = np.float32


def make_rng(seed=None) -> np.random.Generator:
    """A Generator from an int, a tuple of ints, a Generator (returned as is) or None (fresh entropy)."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, tuple):
        seed = [int(s) for s in seed]
    return np.random.default_rng(seed)


def _lrint(x: float) -> int:
    """C ``lrintf`` (round half to even) of a float32 value."""
    return int(np.rint(F(x)))


def _random_crop(rng: np.random.Generator, width: int, height: int, min_area: float, max_area: float,
                 aspect: float):
    """TensorFlow's GenerateRandomCrop (sample_distorted_bounding_box_op.cc), in float32."""
    if max_area <= 0 or aspect <= 0 or width <= 0 or height <= 0 or min_area > max_area:
        return None
    aspect = F(aspect)
    min_a = F(F(F(min_area) * F(width)) * F(height))
    max_a = F(F(F(max_area) * F(width)) * F(height))
    h = _lrint(np.sqrt(F(min_a / aspect)))
    max_h = _lrint(np.sqrt(F(max_a / aspect)))
    if _lrint(F(max_h) * aspect) > width:
        max_h = int((width + 0.5 - 0.0000001) / aspect)
        if _lrint(F(max_h) * aspect) > width:
            max_h -= 1
    max_h = min(max_h, height)
    h = min(h, max_h)
    if h < max_h:
        h += int(rng.integers(0, max_h - h + 1))
    w = _lrint(F(h) * aspect)
    area = F(w * h)
    if area < min_a:
        h += 1
        w = _lrint(F(h) * aspect)
        area = F(w * h)
    if area > max_a:
        h -= 1
        w = _lrint(F(h) * aspect)
        area = F(w * h)
    if area < min_a or area > max_a or w > width or h > height or w <= 0 or h <= 0:
        return None
    y = int(rng.integers(0, height - h)) if h < height else 0
    x = int(rng.integers(0, width - w)) if w < width else 0
    return y, x, h, w


def sample_crop_window(height: int, width: int, rng: np.random.Generator, bounding_boxes=None,
                       min_object_covered: float = 0.1, aspect_ratio_range=(0.75, 1.33),
                       area_range=(0.05, 1.0), max_attempts: int = 100) -> tuple[int, int, int, int]:
    """``(y, x, h, w)`` of a distorted crop; the whole image after ``max_attempts`` failures."""
    boxes = []
    for ymin, xmin, ymax, xmax in (np.zeros((0, 4)) if bounding_boxes is None
                                   else np.asarray(bounding_boxes, np.float32).reshape(-1, 4)):
        boxes.append((int(F(ymin) * F(height)), int(F(xmin) * F(width)),
                      int(F(ymax) * F(height)), int(F(xmax) * F(width))))
    if not boxes:
        boxes.append((0, 0, height, width))
    lo, hi = F(aspect_ratio_range[0]), F(aspect_ratio_range[1])
    for _ in range(max_attempts):
        aspect = F(F(rng.random(dtype=np.float32)) * F(hi - lo) + lo)
        crop = _random_crop(rng, width, height, area_range[0], area_range[1], aspect)
        if crop is None:
            continue
        y, x, h, w = crop
        for by0, bx0, by1, bx1 in boxes:
            barea = (by1 - by0) * (bx1 - bx0)
            if barea <= 0:
                continue
            iy = max(0, min(y + h, by1) - max(y, by0))
            ix = max(0, min(x + w, bx1) - max(x, bx0))
            if F(iy * ix) / F(barea) >= F(min_object_covered):
                return crop
    return 0, 0, height, width


def sample_distorted_bounding_box(image_size, bounding_boxes=None, seed=None, min_object_covered: float = 0.1,
                                  aspect_ratio_range=(0.75, 1.33), area_range=(0.05, 1.0),
                                  max_attempts: int = 100, use_image_if_no_bounding_boxes: bool = False):
    """``tf.image.sample_distorted_bounding_box``: ``(begin, size, bboxes)`` for ``tf.slice``.

    TensorFlow's algorithm (aspect ratio uniform in range; height uniform between the area bounds;
    position uniform; the crop must cover ``min_object_covered`` of some box; the whole image after
    ``max_attempts``), drawn from numpy's generator instead of Philox: the same distribution, not
    the same draws.

    >>> begin, size, _ = sample_distorted_bounding_box([375, 500, 3], seed=0, area_range=(0.08, 1.0),
    ...                                                 use_image_if_no_bounding_boxes=True)
    >>> begin.tolist()[2], size.tolist()[2]
    (0, -1)
    """
    shape = [int(v) for v in np.asarray(image_size).reshape(-1)]
    height, width = shape[0], shape[1]
    if bounding_boxes is None or np.asarray(bounding_boxes).size == 0:
        if not use_image_if_no_bounding_boxes:
            raise ValueError("no bounding boxes given: pass bounding_boxes or use_image_if_no_bounding_boxes=True")
        bounding_boxes = None
    y, x, h, w = sample_crop_window(height, width, make_rng(seed), bounding_boxes, min_object_covered,
                                    aspect_ratio_range, area_range, max_attempts)
    box = np.array([[[y / height, x / width, (y + h) / height, (x + w) / width]]], np.float32)
    return np.array([y, x, 0], np.int32), np.array([h, w, -1], np.int32), box


def central_crop(image, central_fraction: float) -> np.ndarray:
    """``tf.image.central_crop`` of one image ``(h, w, c)`` or a batch ``(n, h, w, c)`` (a view).

    >>> central_crop(np.zeros((10, 20, 3)), 0.5).shape
    (6, 10, 3)
    """
    if not 0.0 < central_fraction <= 1.0:
        raise ValueError(f"central_fraction must be in (0, 1], got {central_fraction}")
    arr = np.asarray(image)
    h, w = arr.shape[-3], arr.shape[-2]
    if central_fraction == 1.0:
        return arr
    # TensorFlow: start = int((dim - dim * fraction) / 2) in float64, size = dim - 2 * start
    y0 = int((h - h * central_fraction) / 2)
    x0 = int((w - w * central_fraction) / 2)
    return arr[..., y0:h - y0, x0:w - x0, :]


def flip_left_right(image) -> np.ndarray:
    """``tf.image.flip_left_right`` (a view)."""
    return np.asarray(image)[..., ::-1, :]


def random_flip_left_right(image, seed=None) -> np.ndarray:
    """``tf.image.random_flip_left_right``: each image of a batch flipped with probability 1/2.

    >>> random_flip_left_right(np.arange(3).reshape(1, 3, 1), seed=1).shape
    (1, 3, 1)
    """
    arr = np.asarray(image)
    rng = make_rng(seed)
    if arr.ndim == 3:
        return arr[:, ::-1] if rng.random() < 0.5 else arr
    flips = rng.random(arr.shape[0]) < 0.5
    out = arr.copy()
    out[flips] = arr[flips][:, :, ::-1]
    return out


def to_bfloat16(x) -> np.ndarray:
    """float32 -> bfloat16 (round to nearest even; ``ml_dtypes``)."""
    try:
        import ml_dtypes
    except ImportError as e:
        raise ImportError("bfloat16 output needs ml_dtypes; install the image extra: "
                          "pip install 'tpudata[image]'") from e
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16)


def _as_dtype(dtype) -> np.dtype:
    """A numpy dtype; ``"bfloat16"``/``ml_dtypes.bfloat16`` through ml_dtypes (its error names the extra)."""
    if getattr(dtype, "__name__", str(dtype)) == "bfloat16" or getattr(dtype, "name", None) == "bfloat16":
        try:
            import ml_dtypes
        except ImportError as e:
            raise ImportError("bfloat16 needs ml_dtypes; install the image extra: pip install 'tpudata[image]'") from e
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def _is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt.name == "bfloat16"


def convert_image_dtype(image, dtype, saturate: bool = False) -> np.ndarray:
    """``tf.image.convert_image_dtype``, bit-identical: integers -> floats cast, then multiply by
    ``1 / max`` in the *output* dtype; floats -> integers multiply by ``max + 0.5`` in the *input*
    dtype, then cast (truncation); float -> float casts (bfloat16: round to nearest even).

    Each multiply rounds in its own dtype as TensorFlow's does: uint8 -> bfloat16 is
    ``bfloat16(x) * bfloat16(1/255)`` rounded to bfloat16 (not ``x / 255`` in float32, then rounded:
    one bfloat16 step apart for half the values); bfloat16 -> uint8 multiplies by
    ``bfloat16(255.5) = 256`` (so 1.0 gives 256, which saturates to 255 as TensorFlow's cast does
    in its vector loop). Other out-of-range values without ``saturate`` are undefined, as in
    TensorFlow (numpy's wrap-around here).

    >>> convert_image_dtype(np.array([0, 255], np.uint8), np.float32).tolist()
    [0.0, 1.0]
    >>> convert_image_dtype(np.array([0.0, 0.5, 1.0], np.float32), np.uint8).tolist()
    [0, 127, 255]
    """
    arr = np.asarray(image)
    dst, src = _as_dtype(dtype), arr.dtype
    if src == dst:
        return arr
    if src.kind in "ui" and dst.kind in "ui":
        sbits, dbits = np.iinfo(src).bits - (src.kind == "i"), np.iinfo(dst).bits - (dst.kind == "i")
        if sbits > dbits:
            return (arr >> (sbits - dbits)).astype(dst)
        return (arr.astype(dst) << (dbits - sbits)) if dbits > sbits else arr.astype(dst)
    if _is_float(src) and _is_float(dst):
        if dst.itemsize == 2 and src.itemsize > 4:  # TensorFlow: float64 -> float32 -> (b)float16
            return arr.astype(np.float32).astype(dst)
        return arr.astype(dst)
    if src.kind in "ui" and _is_float(dst):
        with np.errstate(over="ignore", invalid="ignore"):  # int32 -> float16: inf * 0, as in TensorFlow
            return arr.astype(dst) * np.asarray(1.0 / np.iinfo(src).max).astype(dst)
    if _is_float(src) and dst.kind in "ui":
        return _float_to_int(arr, src, dst, saturate)
    return arr.astype(dst)


def _float_to_int(arr: np.ndarray, src: np.dtype, dst: np.dtype, saturate: bool) -> np.ndarray:
    # out of range without saturate is undefined in TensorFlow too (its result depends on the
    # value's position in the array): numpy's wrap-around here, but for bfloat16 (below)
    with np.errstate(over="ignore", invalid="ignore"):
        x = arr * np.asarray(np.iinfo(dst).max + 0.5).astype(src)  # TensorFlow: x * (max + 0.5), then cast
        if saturate:
            x = np.clip(x, *_saturate_limits(src, dst))
        elif src.name == "bfloat16" and dst.itemsize < 4:
            # TensorFlow's bfloat16 -> 8/16-bit cast saturates (in its vectorised loop: the last
            # len % 8 values wrap instead; tpudata saturates them all): white (bfloat16 1.0 * 256) -> 255
            x = np.clip(np.nan_to_num(x.astype(np.float32)), np.iinfo(dst).min, np.iinfo(dst).max)
        return x.astype(dst)


def _saturate_limits(src: np.dtype, dst: np.dtype):
    """tf.dtypes.saturate_cast's clip bounds: ``dst``'s range in ``src`` values, moved towards 0 by
    one step where ``src`` rounds them outside (float32(2**31 - 1) is 2**31)."""
    info = np.iinfo(dst)
    src_info = np.finfo(np.float32) if src.name == "bfloat16" else np.finfo(src)
    try:
        promoted = np.promote_types(src, dst)
    except TypeError:
        promoted = np.dtype(np.float64)
    lo = np.asarray(max(float(src_info.min), info.min)).astype(src)
    if np.asarray(lo).astype(promoted) < np.asarray(info.min).astype(promoted):
        lo = np.nextafter(lo, np.zeros((), src))
    hi = np.asarray(min(float(src_info.max), float(info.max))).astype(src)
    if np.asarray(hi).astype(promoted) > np.asarray(info.max).astype(promoted):
        hi = np.nextafter(hi, np.zeros((), src))
    return lo, hi


def normalize(image, mean, stddev, dtype=np.float32) -> np.ndarray:
    """``(image - mean) / stddev`` per channel (the last axis), computed in float32.

    >>> normalize(np.ones((1, 1, 3), np.float32), [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]).tolist()
    [[[1.0, 1.0, 1.0]]]
    """
    x = np.asarray(image, np.float32)
    out = (x - np.asarray(mean, np.float32)) / np.asarray(stddev, np.float32)
    return to_bfloat16(out) if getattr(dtype, "__name__", "") == "bfloat16" else out.astype(dtype)


