"""Presets: tensorflow/tpu's ResNet preprocessing (``resnet_preprocessing.py``) and an Inception-style
variant, per image and per batch.

Which ``resnet_preprocessing.py`` the ResNet preset reproduces: the crop and resize of today's
(tensorflow/tpu since November 2021: center crop of ``size / (size + round(size / 7))`` of the
short side, i.e. ``CROP_FRACTION = 0.875`` at every size; ``crop_padding=32`` gives the July
2018 - November 2021 files, which padded by 32 at every size); the output convention of your
choice (``output=``): ``"0-255"`` is what the file has returned since June 2018 (the model
normalises: ``resnet_main.py`` subtracts ``MEAN_RGB`` and divides by ``STDDEV_RGB``, both times
255), ``"normalized"`` (the default) is the April 2018 file's (normalised here, in [0, 1] units),
``"0-1"`` is the June 2018 file's (the model normalised).

The batch form decodes only each crop window (libjpeg-turbo ``jpeg_skip_scanlines`` /
``jpeg_crop_scanline``), resizes on TensorFlow's grid, flips, normalises and casts straight into a
preallocated ``(n, size, size, 3)`` array, in C threads without the GIL. That array's memory is
reused for a later batch once it and every view of it are dropped (:mod:`tpudata._outpool`;
``tpudata.image.release_batch_memory()`` unmaps what is kept). Without the compiled kernel
the same steps run through the numpy/Pillow reference (slower, decode not bit-identical).

The per-element forms (``resnet_preprocess``, ``inception_preprocess``) carry
``__tpudata_batched__`` (their batch form): in ``map(fn).batch(n)`` with ``fn`` calling them, the
pipeline runs the decode and resize of a whole batch in one kernel call, with the same values
(:mod:`tpudata.dataset.ops.map_batch`).
"""

from __future__ import annotations

import functools
import os

import numpy as np

from tpudata import _outpool
from tpudata.dataset.core.columns import RecordColumn
from tpudata.dataset.core.deferred import BatchForm, Deferred, deferring
from tpudata.errors import InvalidImageError
from tpudata.image import _backend, decode
from tpudata.image.decode import _info, as_buffer, decode_and_crop_jpeg
from tpudata.image.ops import make_rng, sample_crop_window, to_bfloat16
from tpudata.image.resize import resize_bicubic, resize_bilinear

__all__ = ["IMAGENET_MEAN", "IMAGENET_STDDEV", "inception_preprocess", "inception_preprocess_batch",
           "preprocess_batch", "resnet_preprocess", "resnet_preprocess_batch"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STDDEV = (0.229, 0.224, 0.225)
CROP_FRACTION = 0.875
CROP_PADDING = 32  # tensorflow/tpu before November 2021 (every size); since: round(size * (1 / CROP_FRACTION - 1))
F = np.float32
_METHODS = {"bicubic_v1": 0, "bicubic": 1, "bilinear_v1": 2, "bilinear": 3}
_DTYPES = {"uint8": 0, "float32": 1, "bfloat16": 2}
OUTPUTS = ("normalized", "0-1", "0-255")
_TF_CROP = 2  # flips bit 1: decode the window's edge columns as TensorFlow's DecodeAndCropJpeg does


def _dtype_name(dtype) -> str:
    if isinstance(dtype, str):
        name = dtype
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = getattr(dtype, "__name__", repr(dtype))
    if name not in _DTYPES:
        raise ValueError(f"dtype must be uint8, float32 or bfloat16 (ml_dtypes), got {dtype!r}")
    return name


def _output(output: str | None, normalize: bool | None, dtype_name: str) -> str:
    """The output convention from ``output=`` or the older ``normalize=`` (True: "normalized",
    False: "0-1", or "0-255" for uint8, as before)."""
    if output is None:
        if normalize is None or normalize:
            return "normalized"
        return "0-255" if dtype_name == "uint8" else "0-1"
    if output not in OUTPUTS:
        raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}")
    if normalize is not None and normalize != (output == "normalized"):
        raise ValueError(f"normalize={normalize!r} contradicts output={output!r}: pass only output=")
    return output


def _crop_padding(image_size: int, crop_padding: int | None) -> int:
    # resnet_preprocessing (since November 2021): crop_padding = round(image_size * (1/CROP_FRACTION - 1))
    return round(image_size * (1 / CROP_FRACTION - 1)) if crop_padding is None else int(crop_padding)


def _center_window(h: int, w: int, image_size: int, crop_padding: int) -> tuple[int, int, int, int]:
    # resnet_preprocessing._decode_and_center_crop: the ratio is a Python float that TensorFlow
    # makes a float32 constant; the product is float32, truncated to int32
    crop = int(F(image_size / (image_size + crop_padding)) * F(min(h, w)))
    return ((h - crop) + 1) // 2, ((w - crop) + 1) // 2, crop, crop


def _central_fraction_window(h: int, w: int, fraction: float) -> tuple[int, int, int, int]:
    y0, x0 = int((h - h * fraction) / 2), int((w - w * fraction) / 2)
    return y0, x0, h - 2 * y0, w - 2 * x0


class _Images:
    """A batch of JPEGs as the kernel takes them: a zero-copy column (a parsed bytes feature after
    ``batch``: :class:`~tpudata.dataset.core.columns.BytesColumn`) stays in its read buffers; anything
    else becomes a list of byte views. ``arg`` goes to the kernel; ``bufs()`` gives per-image views
    for the reference path."""

    __slots__ = ("arg", "n", "_col")

    def __init__(self, images):
        if isinstance(images, _Images):
            self.arg, self.n, self._col = images.arg, images.n, images._col
            return
        if isinstance(images, RecordColumn):
            buffers, buf_idx, offsets, lengths = images.buffers, images.buf_idx, images.offsets, images.lengths
            self.arg = (list(buffers), None if buf_idx is None else np.ascontiguousarray(buf_idx, np.int32),
                        np.ascontiguousarray(offsets, np.int64), np.ascontiguousarray(lengths, np.int64))
            self.n, self._col = len(images), images
        else:
            self.arg = [as_buffer(b) for b in images]
            self.n, self._col = len(self.arg), None

    def where(self, i: int) -> str:
        """`` (path ...)`` of image ``i``'s file where its column knows it, else ``""``."""
        if self._col is None:
            return ""
        b = 0 if self._col.buf_idx is None else int(self._col.buf_idx[i])
        sources = getattr(self._col, "sources", None) or []
        path, base = sources[b] if b < len(sources) else (None, None)
        if path is None:
            return ""
        if base is None:
            return f" (from {path})"
        from tpudata.tfrecord.batch import RecordBatch

        one = RecordBatch.of_source(self._col.buffers[b], (path, base), self._col.offsets[i:i + 1],
                                    self._col.lengths[i:i + 1])
        return f" (record at offset {int(one.record_offsets[0])} of {path})"

    def fail(self, failures: list, what: str = "") -> InvalidImageError:
        """The error for the kernel's ``[(index, message), ...]`` failures: names the first."""
        i, msg = failures[0]
        more = f" ({len(failures)} bad images in all: {_indices(failures)})" if len(failures) > 1 else ""
        return InvalidImageError(f"image {i} of the batch{self.where(i)}: {what}{msg}{more}", index=i)

    def bufs(self) -> list:
        if self._col is None:
            return self.arg
        buffers, buf_idx, offsets, lengths = self.arg
        views = [memoryview(b).cast("B") for b in buffers]
        idx = np.zeros(self.n, np.int32) if buf_idx is None else buf_idx
        return [views[b][o : o + ln] for b, o, ln in zip(idx.tolist(), offsets.tolist(), lengths.tolist())]


def _indices(failures: list) -> str:
    idx = [str(i) for i, _ in failures[:10]]
    return "indices " + ", ".join(idx) + (", ..." if len(failures) > 10 else "")


def _infos(images: _Images) -> np.ndarray:
    """``(n, 4)`` int32 rows of (height, width, components, colorspace), from the headers."""
    k = _backend.kernel()
    if k is None:
        out = np.empty((images.n, 4), np.int32)
        for i, buf in enumerate(images.bufs()):
            try:
                out[i] = _info(buf)
            except InvalidImageError as e:
                raise images.fail([(i, str(e))]) from None
        return out
    out = np.empty((images.n, 4), np.int32)
    failures = k.jpeg_info_batch(images.arg, out)
    if failures:
        raise images.fail(failures, "extract_jpeg_shape: ")
    return out


def _windows(images, is_training: bool, image_size: int, seed, style: str, crop_padding: int | None = None):
    """``(crops, codes)`` for :func:`_preprocess` (bit 0: flip); a ResNet center crop is flagged (bit 1)
    to be decoded as ``tf.image.decode_and_crop_jpeg`` decodes it, the random crops as a full
    decode then crop (``decode_image`` + ``crop_to_bounding_box``), as resnet_preprocessing does.
    ``seed`` (see :func:`~tpudata.image.ops.make_rng`) is drawn from only when training."""
    rng = make_rng(seed) if is_training else None
    images = _Images(images)
    n = images.n
    crops = np.empty((n, 4), np.int32)
    tf_crop = np.zeros(n, np.uint8)
    infos = _infos(images).tolist()
    padding = _crop_padding(image_size, crop_padding)
    for i in range(n):
        h, w, comps = infos[i][0], infos[i][1], infos[i][2]
        if style == "resnet":
            win = None
            if is_training:
                win = sample_crop_window(h, w, rng, None, 0.1, (3 / 4, 4 / 3), (0.08, 1.0), 10)
                # resnet_preprocessing's "bad" crop: extract_jpeg_shape [h, w, components] equals the
                # crop's [h, w, 3] in 3 places (so never for grayscale or CMYK files) -> center crop
                if win[2] == h and win[3] == w and comps == 3:
                    win = None
            if win is None:
                win = _center_window(h, w, image_size, padding)
                tf_crop[i] = _TF_CROP
        else:  # inception
            if is_training:
                win = sample_crop_window(h, w, rng, None, 0.1, (0.75, 1.33), (0.05, 1.0), 100)
            else:
                win = _central_fraction_window(h, w, 0.875)
        crops[i] = win
    flips = (rng.random(n) < 0.5).astype(np.uint8) if is_training else np.zeros(n, np.uint8)
    return crops, flips | tf_crop


def _reference(bufs, crops, codes, out, method: str, scale, mean, stddev, normalize: bool, name: str,
               recover: bool):
    # Pillow decodes the whole image: a window flagged _TF_CROP gets decode-then-crop values at its
    # edge columns (the kernel gives TensorFlow's DecodeAndCropJpeg values there)
    size = out.shape[1:3]
    failures = []
    for i, buf in enumerate(bufs.bufs()):
        try:
            img = decode_and_crop_jpeg(buf, crops[i], channels=3, try_recover_truncated=recover)
        except InvalidImageError as e:
            failures.append((i, str(e)))  # as the kernel: every image tried, the first named
            continue
        half = not method.endswith("_v1")
        r = (resize_bicubic if method.startswith("bicubic") else resize_bilinear)(img, size, half_pixel_centers=half)
        r = r * F(scale)
        if normalize:
            r = (r - np.asarray(mean, F)) / np.asarray(stddev, F)
        if codes[i] & 1:
            r = r[:, ::-1]
        if name == "uint8":
            out[i] = np.rint(np.clip(r, 0, 255)).astype(np.uint8)
        elif name == "bfloat16":
            out[i] = to_bfloat16(r)
        else:
            out[i] = r
    if failures:
        raise bufs.fail(failures)


def preprocess_batch(images, crops, flips, image_size: int | tuple[int, int], *, method: str = "bicubic_v1",
                     dtype=np.float32, normalize: bool | None = None, output: str | None = None,
                     mean=IMAGENET_MEAN, stddev=IMAGENET_STDDEV, out: np.ndarray | None = None,
                     num_threads: int | None = None, try_recover_truncated: bool = False) -> np.ndarray:
    """Decode each JPEG's crop window ``crops[i] = (y, x, h, w)``, resize to ``image_size`` with
    ``method`` ("bicubic_v1"/"bilinear_v1": TF1 grid as in resnet_preprocessing; "bicubic"/"bilinear":
    TF2 half-pixel), flip where ``flips[i]``, scale and cast.

    ``output``: ``"normalized"`` (the default for float dtypes): ``(x / 255 - mean) / stddev``;
    ``"0-1"``: ``x / 255``; ``"0-255"``: the resized values as they are (float32 as TensorFlow's
    resize gives them, bicubic overshoot included; rounded and clipped for uint8).
    ``normalize=True``/``False`` is the older spelling of ``"normalized"``/``"0-1"``.

    ``uint8`` output keeps the 0-255 resized values (rounded; ``output="0-255"``, or
    ``normalize=False``): 4x less host memory, normalise on the accelerator.

    A bad image (not a JPEG, truncated, over ``tpudata.image.decode.MAX_DECODED_BYTES``, or a
    window not inside it) raises :class:`~tpudata.errors.InvalidImageError` naming its index
    (``index``) and its file where known. ``try_recover_truncated``: as in
    :func:`~tpudata.image.decode_and_crop_jpeg`.
    """
    codes = (np.asarray(flips).reshape(-1) != 0).astype(np.uint8)
    return _preprocess(_Images(images), crops, codes, image_size, method=method, dtype=dtype, normalize=normalize,
                       output=output, mean=mean, stddev=stddev, out=out, num_threads=num_threads,
                       try_recover_truncated=try_recover_truncated)


def _preprocess(bufs: _Images, crops, codes, image_size, *, method, dtype, normalize, output, mean, stddev, out,
                num_threads, try_recover_truncated) -> np.ndarray:
    """:func:`preprocess_batch` with ``codes[i]`` bit 0: flip, bit 1 (``_TF_CROP``): the window's
    edge columns as TensorFlow's DecodeAndCropJpeg decodes them (kernel only)."""
    plan = _plan(image_size, method, dtype, normalize, output, mean, stddev, try_recover_truncated)
    out = _out_array(plan, bufs.n, out)
    crops, codes = _checked_windows(bufs, crops, codes)
    return _run(plan, bufs, crops, codes, out, num_threads)


def _plan(image_size, method, dtype, normalize, output, mean, stddev, try_recover_truncated) -> tuple:
    """The checked settings of a call: ``(method, dtype name, output, out_h, out_w, mean, stddev,
    recover, max_bytes)``, plain values (calls with equal plans can share one kernel call)."""
    args = (image_size, method, dtype, normalize, output, mean, stddev, try_recover_truncated,
            decode.MAX_DECODED_BYTES)
    try:
        return _cached_plan(*args)  # per-element calls repeat their settings
    except TypeError:  # unhashable settings (a list, an array): checked each time
        return _cached_plan.__wrapped__(*args)


@functools.lru_cache(maxsize=64)
def _cached_plan(image_size, method, dtype, normalize, output, mean, stddev, try_recover_truncated,
                 max_bytes) -> tuple:
    if method not in _METHODS:
        raise ValueError(f"method must be one of {sorted(_METHODS)}, got {method!r}")
    name = _dtype_name(dtype)
    output = _output(output, normalize, name)
    if name == "uint8" and output != "0-255":
        raise ValueError("uint8 output holds the 0-255 values: pass output='0-255' (or normalize=False) and "
                         "normalise on the device")
    oh, ow = (image_size, image_size) if np.isscalar(image_size) else (int(image_size[0]), int(image_size[1]))
    return (method, name, output, int(oh), int(ow), tuple(float(v) for v in mean), tuple(float(v) for v in stddev),
            bool(try_recover_truncated), int(max_bytes))


def _np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _out_array(plan: tuple, n: int, out) -> np.ndarray:
    """``out`` checked, or a new ``(n, h, w, 3)`` array (memory of dropped earlier batches is reused:
    no fresh pages to zero)."""
    name, oh, ow = plan[1], plan[3], plan[4]
    if out is None:
        out = _outpool.empty((n, oh, ow, 3), _np_dtype(name))
    if out.shape != (n, oh, ow, 3) or str(out.dtype) != name or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous {name} array of shape {(n, oh, ow, 3)}, "
                         f"got {out.dtype} {out.shape}")
    return out


def _checked_windows(bufs: _Images, crops, codes) -> tuple[np.ndarray, np.ndarray]:
    """``crops`` as int32 ``(n, 4)`` (a value past int32 fails its image) and ``codes`` as uint8."""
    n = bufs.n
    crops = np.asarray(crops)
    if crops.dtype != np.int32 and crops.dtype.kind in "iu" and crops.size and \
            (crops.min() < -2**31 or crops.max() >= 2**31):
        i = int(np.flatnonzero(((crops < -2**31) | (crops >= 2**31)).reshape(n, -1).any(axis=1))[0])
        raise bufs.fail([(i, f"crop window {crops.reshape(n, 4)[i].tolist()} is not inside the image "
                             "(values past int32)")])
    return np.ascontiguousarray(crops, np.int32).reshape(n, 4), np.ascontiguousarray(codes, np.uint8).reshape(n)


def _run(plan: tuple, bufs: _Images, crops: np.ndarray, codes: np.ndarray, out: np.ndarray,
         num_threads: int | None) -> np.ndarray:
    """Decode, crop, resize, flip, scale and cast every image of ``bufs`` into ``out``."""
    method, name, output, oh, ow, mean, stddev, recover, max_bytes = plan
    normalize = output == "normalized"
    scale = 1.0 / 255.0 if output != "0-255" else 1.0
    k = _backend.kernel()
    if k is None:
        _reference(bufs, crops, codes, out, method, scale, mean, stddev, normalize, name, recover)
        return out
    threads = num_threads or min(bufs.n, os.cpu_count() or 1)
    failures = k.preprocess_batch(bufs.arg, out.reshape(-1).view(np.uint8), crops, codes, oh, ow, _METHODS[method],
                                  _DTYPES[name], float(F(scale)), mean, stddev, int(normalize), 1, 1, threads,
                                  int(recover), max_bytes)
    if failures:
        raise bufs.fail(failures)
    return out


class _PresetBatch(BatchForm):
    """The batch form of the per-element presets: the images of one plan in one kernel call."""

    name = "tpudata.image preset"

    def run(self, plan: tuple, payloads: list) -> np.ndarray:
        bufs = _Images([p[0] for p in payloads])
        crops = np.stack([p[1] for p in payloads])
        codes = np.fromiter((p[2] for p in payloads), np.uint8, len(payloads))
        return _run(plan, bufs, crops, codes, _out_array(plan, bufs.n, None), None)


_BATCH_FORM = _PresetBatch()


def _one(bufs: _Images, crops, codes, image_size, **settings):
    """The one image of ``bufs``: computed now, or - while a fused ``map(...).batch(n)`` records
    the map function's calls (:mod:`tpudata.dataset.core.deferred`) - a placeholder that the batch
    computes in one kernel call with the others (the same values: each image is decoded and resized
    on its own). Everything up to the kernel (checks, header, random draws) happens here either way."""
    if not deferring() or _backend.kernel() is None:
        return _preprocess(bufs, crops, codes, image_size, out=None, num_threads=1, **settings)[0]
    plan = _plan(image_size, **settings)
    crops, codes = _checked_windows(bufs, crops, codes)
    return Deferred(_BATCH_FORM, plan, (bufs.arg[0], crops[0], codes[0]), (plan[3], plan[4], 3),
                    _np_dtype(plan[1]))


def resnet_preprocess_batch(images, is_training: bool, image_size: int = 224, *, seed=None, dtype=np.float32,
                            output: str | None = None, normalize: bool | None = None, mean=IMAGENET_MEAN,
                            stddev=IMAGENET_STDDEV, crop_padding: int | None = None, out: np.ndarray | None = None,
                            num_threads: int | None = None, try_recover_truncated: bool = False) -> np.ndarray:
    """``resnet_preprocessing.preprocess_image`` on a list of JPEGs -> ``(n, size, size, 3)``.

    Train: random-resized crop (``sample_distorted_bounding_box`` with area 0.08-1, aspect 3/4-4/3,
    10 attempts, min_object_covered 0.1; center crop when it fails), TF1 bicubic resize, random
    flip. Eval: center crop of ``size / (size + crop_padding)`` of the short side, TF1 bicubic
    resize. ``crop_padding``: ``round(size / 7)`` by default (tensorflow/tpu since November 2021,
    ``CROP_FRACTION = 0.875``: 32 at 224, 43 at 299); 32 for the files before that.

    ``output`` (see :func:`preprocess_batch`): ``"normalized"`` by default (scaled to [0, 1], then
    the ImageNet mean/stddev); ``"0-255"`` is tensorflow/tpu's own output since June 2018 (float32
    or bfloat16, the model normalises); ``"0-1"``. ``seed``: int, tuple (e.g.
    ``(pipeline_seed, batch_index)``) or Generator. ``images``: bytes-like objects, uint8 views, or
    a parsed bytes feature after ``batch`` (a zero-copy ``BytesColumn``: read in place). A bad
    image raises :class:`~tpudata.errors.InvalidImageError` naming it (see :func:`preprocess_batch`;
    ``try_recover_truncated`` as there).

    >>> from tpudata.image.decode import _jpeg_for_doc
    >>> resnet_preprocess_batch([_jpeg_for_doc()] * 2, True, 8, seed=(1, 0)).shape
    (2, 8, 8, 3)
    """
    bufs = _Images(images)
    crops, codes = _windows(bufs, is_training, image_size, seed, "resnet", crop_padding)
    return _preprocess(bufs, crops, codes, image_size, method="bicubic_v1", dtype=dtype, normalize=normalize,
                       output=output, mean=mean, stddev=stddev, out=out, num_threads=num_threads,
                       try_recover_truncated=try_recover_truncated)


def resnet_preprocess(image_bytes, is_training: bool, image_size: int = 224, *, seed=None, dtype=np.float32,
                      output: str | None = None, normalize: bool | None = None, mean=IMAGENET_MEAN,
                      stddev=IMAGENET_STDDEV, crop_padding: int | None = None,
                      try_recover_truncated: bool = False) -> np.ndarray:
    """One image of :func:`resnet_preprocess_batch` -> ``(size, size, 3)``; use in ``Dataset.map``.

    The work runs without the GIL, so ``map(..., num_parallel_calls=k)`` threads use k cores.

    >>> from tpudata.image.decode import _jpeg_for_doc
    >>> resnet_preprocess(_jpeg_for_doc(), False, 8).dtype
    dtype('float32')
    """
    bufs = _Images([image_bytes])
    crops, codes = _windows(bufs, is_training, image_size, seed, "resnet", crop_padding)
    return _one(bufs, crops, codes, image_size, method="bicubic_v1", dtype=dtype, normalize=normalize,
                output=output, mean=mean, stddev=stddev, try_recover_truncated=try_recover_truncated)


def inception_preprocess_batch(images, is_training: bool, image_size: int = 299, *, seed=None,
                               dtype=np.float32, out: np.ndarray | None = None,
                               num_threads: int | None = None, try_recover_truncated: bool = False) -> np.ndarray:
    """Inception/EfficientNet-style (tf-slim ``inception_preprocessing`` without colour distortion):
    train crop with area 0.05-1, aspect 0.75-1.33, 100 attempts (whole image on failure), random flip;
    eval ``central_crop(0.875)``; TF1 bilinear resize; values scaled to [-1, 1].

    >>> from tpudata.image.decode import _jpeg_for_doc
    >>> float(inception_preprocess_batch([_jpeg_for_doc()], False, 8).max()) <= 1.0
    True
    """
    bufs = _Images(images)
    crops, codes = _windows(bufs, is_training, image_size, seed, "inception")
    return _preprocess(bufs, crops, codes, image_size, out=out, num_threads=num_threads,
                       **_inception_settings(dtype, try_recover_truncated))


def _inception_settings(dtype, try_recover_truncated: bool) -> dict:
    return {"method": "bilinear_v1", "dtype": dtype, "normalize": None, "output": "normalized",
            "mean": (0.5, 0.5, 0.5), "stddev": (0.5, 0.5, 0.5), "try_recover_truncated": try_recover_truncated}


def inception_preprocess(image_bytes, is_training: bool, image_size: int = 299, *, seed=None,
                         dtype=np.float32, try_recover_truncated: bool = False) -> np.ndarray:
    """One image of :func:`inception_preprocess_batch`."""
    bufs = _Images([image_bytes])
    crops, codes = _windows(bufs, is_training, image_size, seed, "inception")
    return _one(bufs, crops, codes, image_size, **_inception_settings(dtype, try_recover_truncated))


# the per-element presets name their batch forms; a fused map(...).batch(n) batches their calls
resnet_preprocess.__tpudata_batched__ = resnet_preprocess_batch
inception_preprocess.__tpudata_batched__ = inception_preprocess_batch
