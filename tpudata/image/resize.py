"""Resizing as TensorFlow computes it: ``tf.image.resize`` (TF2: half-pixel centres, optional
antialias) and TF1's ``tf.compat.v1.image.resize_bicubic``/``resize_bilinear`` grid that
``resnet_preprocessing.py`` uses.

This is the numpy reference: float32 throughout, in the operation order of TensorFlow's kernels
(resize_bicubic_op.cc, resize_bilinear_op.cc, resize_area_op.cc, resize_nearest_neighbor_op.cc,
scale_and_translate_op.cc), so results agree with TensorFlow to float32 rounding. The batch
preprocessing kernel in C implements the bicubic and bilinear grids again and is tested against it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["resize", "resize_area", "resize_bicubic", "resize_bilinear", "resize_nearest_neighbor"]

F = np.float32
_TABLE = 1024
_tables: dict = {}


def _cubic_table(a: float) -> np.ndarray:
    if a not in _tables:
        t = np.empty((_TABLE + 1, 2), np.float32)
        for i in range(_TABLE + 1):
            x = float(np.float32(i * 1.0 / _TABLE))
            t[i, 0] = ((a + 2) * x - (a + 3)) * x * x + 1
            x = float(np.float32(x + 1.0))
            t[i, 1] = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
        _tables[a] = t
    return _tables[a]


def _scale(in_size: int, out_size: int, align_corners: bool) -> np.float32:
    if align_corners and out_size > 1:
        return F(in_size - 1) / F(out_size - 1)
    return F(in_size) / F(out_size)


def _cubic_taps(in_size: int, out_size: int, align_corners: bool, half_pixel: bool):
    scale = _scale(in_size, out_size, align_corners)
    o = np.arange(out_size, dtype=F)
    loc = (o + F(0.5)) * scale - F(0.5) if half_pixel else o * scale
    base = np.floor(loc).astype(np.int64)
    delta = (loc - base.astype(F)).astype(F)
    off = np.rint(delta * F(_TABLE)).astype(np.int64)
    tab = _cubic_table(-0.5 if half_pixel else -0.75)
    w = np.stack([tab[off, 1], tab[off, 0], tab[_TABLE - off, 0], tab[_TABLE - off, 1]], axis=1)
    raw = base[:, None] + np.arange(-1, 3)[None, :]
    idx = np.clip(raw, 0, in_size - 1)
    if half_pixel:  # taps outside the image get weight 0, the rest renormalised
        w = np.where(idx == raw, w, F(0))
        s = ((w[:, 0] + w[:, 1]) + w[:, 2]) + w[:, 3]
        ok = np.abs(s) >= F(1000.0) * np.finfo(F).tiny
        inv = np.where(ok, F(1) / np.where(ok, s, F(1)), F(1)).astype(F)
        w = np.where(ok[:, None], w * inv[:, None], w)
    return idx, w.astype(F)


def _as_batch(images):
    arr = np.asarray(images)
    if arr.ndim == 3:
        return arr[None], True
    if arr.ndim != 4:
        raise ValueError(f"images must be (height, width, channels) or a batch of them, got shape {arr.shape}")
    return arr, False


def _size(size) -> tuple[int, int]:
    oh, ow = (int(v) for v in size)
    if oh <= 0 or ow <= 0:
        raise ValueError(f"size must be positive, got {tuple(size)}")
    return oh, ow


def resize_bicubic(images, size, align_corners: bool = False, half_pixel_centers: bool = False) -> np.ndarray:
    """``tf.compat.v1.image.resize_bicubic``: Keys cubic (A=-0.75, TF1 grid) or, with
    ``half_pixel_centers``, TF2's (A=-0.5, out-of-image taps dropped). Returns float32.

    >>> resize_bicubic(np.ones((4, 4, 1), np.uint8), (2, 3)).shape
    (2, 3, 1)
    """
    arr, single = _as_batch(images)
    oh, ow = _size(size)
    yi, yw = _cubic_taps(arr.shape[1], oh, align_corners, half_pixel_centers)
    xi, xw = _cubic_taps(arr.shape[2], ow, align_corners, half_pixel_centers)
    src = arr.astype(F)
    col = src[:, yi[:, 0]] * yw[None, :, 0, None, None]  # vertical first, as TensorFlow caches it
    for k in range(1, 4):
        col = col + src[:, yi[:, k]] * yw[None, :, k, None, None]
    out = col[:, :, xi[:, 0]] * xw[None, None, :, 0, None]
    for k in range(1, 4):
        out = out + col[:, :, xi[:, k]] * xw[None, None, :, k, None]
    return out[0] if single else out


def _linear_taps(in_size: int, out_size: int, align_corners: bool, half_pixel: bool):
    scale = _scale(in_size, out_size, align_corners)
    o = np.arange(out_size, dtype=F)
    loc = (o + F(0.5)) * scale - F(0.5) if half_pixel else o * scale
    fl = np.floor(loc)
    lo = np.maximum(fl.astype(np.int64), 0)
    hi = np.minimum(np.ceil(loc).astype(np.int64), in_size - 1)
    return lo, hi, (loc - fl).astype(F)


def resize_bilinear(images, size, align_corners: bool = False, half_pixel_centers: bool = False) -> np.ndarray:
    """``tf.compat.v1.image.resize_bilinear`` (TF1 grid unless ``half_pixel_centers``). Returns float32.

    >>> resize_bilinear(np.arange(4, dtype=np.float32).reshape(1, 4, 1), (1, 2))[0, :, 0].tolist()
    [0.0, 2.0]
    """
    arr, single = _as_batch(images)
    oh, ow = _size(size)
    ylo, yhi, yl = _linear_taps(arr.shape[1], oh, align_corners, half_pixel_centers)
    xlo, xhi, xl = _linear_taps(arr.shape[2], ow, align_corners, half_pixel_centers)
    src = arr.astype(F)
    top, bot = src[:, ylo], src[:, yhi]
    xl_ = xl[None, None, :, None]
    t = top[:, :, xlo] + (top[:, :, xhi] - top[:, :, xlo]) * xl_
    b = bot[:, :, xlo] + (bot[:, :, xhi] - bot[:, :, xlo]) * xl_
    out = t + (b - t) * yl[None, :, None, None]
    return out[0] if single else out


def resize_nearest_neighbor(images, size, align_corners: bool = False,
                            half_pixel_centers: bool = False) -> np.ndarray:
    """``tf.compat.v1.image.resize_nearest_neighbor``; keeps the input dtype.

    >>> resize_nearest_neighbor(np.arange(4).reshape(1, 4, 1), (1, 2), half_pixel_centers=True)[0, :, 0].tolist()
    [1, 3]
    """
    arr, single = _as_batch(images)
    oh, ow = _size(size)

    def idx(n_in, n_out):
        scale = _scale(n_in, n_out, align_corners)
        o = np.arange(n_out, dtype=F)
        loc = (o + F(0.5)) * scale if half_pixel_centers else o * scale
        i = np.rint(loc) if align_corners else np.floor(loc)
        i = np.minimum(i.astype(np.int64), n_in - 1)
        return np.maximum(i, 0)

    out = arr[:, idx(arr.shape[1], oh)][:, :, idx(arr.shape[2], ow)]
    return out[0] if single else out


def _area_taps(in_size: int, out_size: int):
    scale = _scale(in_size, out_size, False)
    taps = []
    for o in range(out_size):
        a = F(o) * scale
        b = F(o + 1) * scale
        start, end = int(np.floor(a)), int(np.ceil(b))
        ws = []
        for i in range(start, end):
            if i < a:
                s = scale if i + 1 > b else F(F(i + 1) - a)
            else:
                s = F(b - F(i)) if i + 1 > b else F(1.0)
            ws.append((min(max(i, 0), in_size - 1), F(s)))
        taps.append(ws)
    return taps, scale


def resize_area(images, size) -> np.ndarray:
    """``tf.compat.v1.image.resize_area`` (what ``tf.image.resize(method="area")`` runs). Returns float32.

    >>> resize_area(np.arange(4, dtype=np.float32).reshape(1, 4, 1), (1, 2))[0, :, 0].tolist()
    [0.5, 2.5]
    """
    arr, single = _as_batch(images)
    oh, ow = _size(size)
    src = arr.astype(F)
    ytaps, ys = _area_taps(arr.shape[1], oh)
    xtaps, xs = _area_taps(arr.shape[2], ow)
    h = np.empty(src.shape[:2] + (ow, src.shape[3]), F)
    for o, ws in enumerate(xtaps):  # per input row: first tap scaled, middle taps added, last scaled
        acc = src[:, :, ws[0][0]] * ws[0][1]
        if len(ws) > 1:
            for i, _ in ws[1:-1]:
                acc = acc + src[:, :, i]
            acc = acc + src[:, :, ws[-1][0]] * ws[-1][1]
        h[:, :, o] = acc
    out = np.zeros((src.shape[0], oh, ow, src.shape[3]), F)
    scale = F(F(1.0) / (ys * xs))
    for o, ws in enumerate(ytaps):
        acc = np.zeros((src.shape[0], ow, src.shape[3]), F)
        for i, s in ws:
            acc = acc + h[:, i] * s
        out[:, o] = acc * scale
    return out[0] if single else out


def _kernel(name: str):
    if name == "bilinear":
        return 1.0, lambda x: np.where(x < 1, F(1) - x, F(0)).astype(F)

    def keys(x):
        x = np.abs(x)
        far = ((F(-0.5) * x + F(2.5)) * x - F(4.0)) * x + F(2.0)
        near = ((F(1.5) * x - F(2.5)) * x) * x + F(1.0)
        return np.where(x >= 2, F(0), np.where(x >= 1, far, near)).astype(F)

    return 2.0, keys


def _spans(in_size: int, out_size: int, method: str):
    radius, kern = _kernel(method)
    scale = F(out_size) / F(in_size)
    inv_scale = F(F(1.0) / scale)
    kscale = max(inv_scale, F(1.0))
    span = min(2 * int(np.ceil(F(radius) * kscale)) + 1, in_size)
    starts = np.zeros(out_size, np.int64)
    weights = np.zeros((out_size, span), F)
    for x in range(out_size):
        sample = F(F(x) + F(0.5)) * inv_scale
        if sample < 0 or sample > in_size:
            continue
        s0 = int(np.ceil(sample - F(radius) * kscale - F(0.5)))
        s1 = int(np.floor(sample + F(radius) * kscale - F(0.5)))
        s0 = min(max(s0, 0), in_size - 1)
        s1 = min(max(s1, 0), in_size - 1) + 1
        pos = (np.arange(s0, s1).astype(F) + F(0.5) - sample)
        w = kern(np.abs(pos * F(F(1.0) / kscale)))
        total = F(0)
        for v in w:
            total = F(total + v)
        if abs(total) >= 1000.0 * np.finfo(F).tiny:
            w = (w * F(F(1.0) / total)).astype(F)
            weights[x, : len(w)] = w
        starts[x] = s0
    return starts, weights


def _scale_and_translate(arr: np.ndarray, oh: int, ow: int, method: str) -> np.ndarray:
    src = arr.astype(F)
    n, h, w, c = src.shape
    xs, xw = _spans(w, ow, method)
    ys, yw = _spans(h, oh, method)
    mid = np.zeros((n, oh, w, c), F)
    for k in range(yw.shape[1]):  # rows first (GatherRows into an (out_h, w) buffer), then columns
        idx = ys + k
        wk = np.where(idx < h, yw[:, k], F(0)).astype(F)
        mid += src[:, np.minimum(idx, h - 1)] * wk[None, :, None, None]
    out = np.zeros((n, oh, ow, c), F)
    for k in range(xw.shape[1]):
        idx = xs + k
        wk = np.where(idx < w, xw[:, k], F(0)).astype(F)
        out += mid[:, :, np.minimum(idx, w - 1)] * wk[None, None, :, None]
    return out


METHODS = ("area", "bicubic", "bilinear", "nearest")


def resize(images, size, method: str = "bilinear", preserve_aspect_ratio: bool = False,
           antialias: bool = False) -> np.ndarray:
    """``tf.image.resize`` (TF2): half-pixel centres; float32 out except ``nearest`` (input dtype).

    ``antialias`` widens the bilinear/bicubic kernel when downsampling (TensorFlow's
    scale_and_translate); ``area`` and ``nearest`` ignore it, as in TensorFlow.

    >>> resize(np.zeros((10, 20, 3), np.uint8), (5, 5), method="bicubic").dtype
    dtype('float32')
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    arr, single = _as_batch(images)
    oh, ow = _size(size)
    if preserve_aspect_ratio:
        h, w = arr.shape[1:3]
        scale = min(F(oh) / F(h), F(ow) / F(w))
        oh, ow = int(np.rint(F(h) * scale)), int(np.rint(F(w) * scale))
    if method == "nearest":
        out = resize_nearest_neighbor(arr, (oh, ow), half_pixel_centers=True)
    elif method == "area":
        out = resize_area(arr, (oh, ow))
    elif antialias:
        out = _scale_and_translate(arr, oh, ow, method)
    elif method == "bilinear":
        out = resize_bilinear(arr, (oh, ow), half_pixel_centers=True)
    else:
        out = resize_bicubic(arr, (oh, ow), half_pixel_centers=True)
    return out[0] if single else out
