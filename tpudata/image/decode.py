"""Image decoding: ``tf.io.decode_jpeg``/``decode_png``/``decode_image``, ``tf.image.extract_jpeg_shape``
and ``tf.image.decode_and_crop_jpeg``.

JPEGs go to libjpeg-turbo as views of the caller's buffer (bytes, memoryview or a uint8 array):
no copy. The defaults match TensorFlow's (``dct_method=""`` is libjpeg's fast integer IDCT, fancy
upsampling on), and the output is bit-identical to TensorFlow's where the kernel is built.

Damaged files are treated as TensorFlow treats them:

- a *truncated* JPEG (the data ends before the image does, EOI marker included) raises
  :class:`~tpudata.errors.InvalidImageError`, as ``tf.io.decode_jpeg`` fails on it, unless
  ``try_recover_truncated=True`` (TensorFlow's flag): then what is there decodes and the rest is
  what TensorFlow gives (libjpeg's uniform gray for the missing blocks);
- errors libjpeg cannot decode past (bad markers, tables, headers) raise;
- damage libjpeg only *warns* about (``Corrupt JPEG data: N extraneous bytes before marker``,
  ``premature end of data segment``, ``bad Huffman code``) decodes, as TensorFlow decodes it
  (those warnings are common in real datasets, ImageNet included);
- a header whose ``height * width * components`` exceeds :data:`MAX_DECODED_BYTES` raises before
  anything is allocated for the image (TensorFlow's DecodeJpeg refuses ``2**29`` bytes and more:
  the same default).
"""

from __future__ import annotations

import io
import threading

import numpy as np

from tpudata.errors import InvalidImageError
from tpudata.image import _backend

__all__ = ["as_buffer", "decode_and_crop_jpeg", "decode_image", "decode_jpeg", "decode_png",
           "extract_jpeg_shape", "is_jpeg", "is_png"]

_JCS_CMYK, _JCS_YCCK = 4, 5
_DCT = {"": True, "INTEGER_FAST": True, "INTEGER_ACCURATE": False}

#: The largest decoded JPEG accepted, in bytes of ``height * width * components`` of the whole image
#: as its header gives them (checked before any allocation, for crops too). TensorFlow's decoder
#: refuses ``2**29`` and more; raise this (``tpudata.image.decode.MAX_DECODED_BYTES = ...``) for
#: genuine larger images. Every decode entry point and the batch kernel read it at call time.
MAX_DECODED_BYTES = (1 << 29) - 1

_pillow_truncated_lock = threading.Lock()


def _check_size(h: int, w: int, comps: int, op: str) -> None:
    """InvalidImageError when the header's image is over :data:`MAX_DECODED_BYTES` (before allocating)."""
    size = int(h) * int(w) * int(comps)
    if size > MAX_DECODED_BYTES:
        raise InvalidImageError(
            f"{op}: the JPEG header claims a {h}x{w} image with {comps} components ({size} bytes decoded), "
            f"over the limit of {MAX_DECODED_BYTES} bytes (tpudata.image.decode.MAX_DECODED_BYTES; TensorFlow's "
            "decode_jpeg refuses 2**29 bytes and more); raise the limit if the image is genuine")


def as_buffer(data) -> memoryview:
    """A zero-copy byte view of ``data`` (bytes, bytearray, memoryview, 1-d uint8 array or 0-d bytes array)."""
    if isinstance(data, np.ndarray):
        if data.dtype == object or data.dtype.kind == "S":
            data = data.item()
        elif data.dtype != np.uint8 or data.ndim != 1:
            raise TypeError(f"image bytes must be a 1-d uint8 array, got {data.dtype} {data.shape}")
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"image bytes must be bytes-like, got {type(data).__name__}") from None
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def is_jpeg(data) -> bool:
    """True if the bytes start with a JPEG SOI marker."""
    return bytes(as_buffer(data)[:3]) == b"\xff\xd8\xff"


def is_png(data) -> bool:
    """True if the bytes start with the PNG signature."""
    return bytes(as_buffer(data)[:8]) == b"\x89PNG\r\n\x1a\n"


def _info(buf) -> tuple[int, int, int, int]:
    k = _backend.kernel()
    if k is not None:
        try:
            return k.jpeg_info(buf)
        except ValueError as e:
            raise InvalidImageError(f"extract_jpeg_shape: {e}") from None
    try:
        im = _pillow_open(buf)
    except Exception as e:
        raise InvalidImageError(f"extract_jpeg_shape: invalid JPEG data: {e}") from None
    comps = {"L": 1, "RGB": 3, "CMYK": 4}.get(im.mode, len(im.getbands()))
    return im.height, im.width, comps, _JCS_CMYK if im.mode == "CMYK" else 0


def extract_jpeg_shape(contents) -> np.ndarray:
    """``tf.image.extract_jpeg_shape``: ``[height, width, components]`` (int32) from the header only.

    >>> extract_jpeg_shape(_jpeg_for_doc()).tolist()
    [12, 20, 3]
    """
    h, w, c, _ = _info(as_buffer(contents))
    return np.array([h, w, c], np.int32)


def _channels_for(channels: int, comps: int, cs: int, op: str) -> int:
    if channels not in (0, 1, 3):
        raise ValueError(f"{op}: channels must be 0, 1 or 3, got {channels}")
    if cs in (_JCS_CMYK, _JCS_YCCK) and channels == 1:
        raise InvalidImageError(f"{op}: a CMYK JPEG cannot be decoded to 1 channel (TensorFlow refuses it "
                                "too); decode with channels=3 and convert")
    if channels == 0:
        return 1 if comps == 1 else 3
    return channels


def decode_and_crop_jpeg(contents, crop_window, channels: int = 0, dct_method: str = "",
                         fancy_upscaling: bool = True, try_recover_truncated: bool = False) -> np.ndarray:
    """``tf.image.decode_and_crop_jpeg``: decode only ``crop_window = [y, x, height, width]``.

    Rows above the window are skipped and rows below it never decoded; columns outside it are
    skipped by libjpeg-turbo's ``jpeg_crop_scanline`` (widened by one iMCU so the result equals a
    full decode followed by a crop, which TensorFlow's own op misses by a few levels at the window's
    edges for 4:2:2 files). Damaged data, ``try_recover_truncated`` and the size limit: as
    :func:`decode_jpeg` (a truncated file whose data covers the window decodes, as in TensorFlow).

    >>> decode_and_crop_jpeg(_jpeg_for_doc(), [2, 3, 4, 5]).shape
    (4, 5, 3)
    """
    buf = as_buffer(contents)
    if dct_method not in _DCT:
        raise ValueError(f"dct_method must be one of {sorted(_DCT)}, got {dct_method!r}")
    H, W, comps, cs = _info(buf)
    _check_size(H, W, comps, "decode_and_crop_jpeg")
    ch = _channels_for(channels, comps, cs, "decode_and_crop_jpeg")
    y, x, h, w = (int(v) for v in np.asarray(crop_window).reshape(-1)[:4])
    if y < 0 or x < 0 or h <= 0 or w <= 0 or y + h > H or x + w > W:
        raise InvalidImageError(f"decode_and_crop_jpeg: crop window (y={y}, x={x}, h={h}, w={w}) is not "
                                f"inside the {H}x{W} image")
    k = _backend.kernel()
    if k is not None:
        out = np.empty((h, w, ch), np.uint8)
        try:
            k.decode_into(buf, out, ch, int(_DCT[dct_method]), int(bool(fancy_upscaling)), y, x, h, w,
                          int(bool(try_recover_truncated)), int(MAX_DECODED_BYTES))
        except ValueError as e:
            raise InvalidImageError(f"decode_jpeg: {e}") from None
        return out
    return _pillow_decode(buf, ch, "decode_jpeg", try_recover_truncated)[y:y + h, x:x + w].copy()


def decode_jpeg(contents, channels: int = 0, dct_method: str = "", fancy_upscaling: bool = True,
                try_recover_truncated: bool = False) -> np.ndarray:
    """``tf.io.decode_jpeg``: a ``(height, width, channels)`` uint8 array.

    ``channels``: 0 = as stored (1 for grayscale, else 3), 1 = grayscale, 3 = RGB. CMYK/YCCK files
    decode to RGB as TensorFlow does (Adobe-inverted or not).

    A truncated file raises :class:`~tpudata.errors.InvalidImageError` (as TensorFlow's op fails)
    unless ``try_recover_truncated=True``, TensorFlow's flag: then it decodes as TensorFlow decodes
    it (the missing blocks uniform gray). Images over :data:`MAX_DECODED_BYTES` raise before
    anything is allocated.

    >>> decode_jpeg(_jpeg_for_doc(), channels=1).shape
    (12, 20, 1)
    """
    buf = as_buffer(contents)
    H, W, comps, cs = _info(buf)
    _check_size(H, W, comps, "decode_jpeg")
    ch = _channels_for(channels, comps, cs, "decode_jpeg")
    if _backend.kernel() is None:
        return _pillow_decode(buf, ch, "decode_jpeg", try_recover_truncated)
    return decode_and_crop_jpeg(buf, [0, 0, H, W], ch, dct_method, fancy_upscaling, try_recover_truncated)


def _pillow_open(buf):
    """Pillow's image of ``buf`` (header read); a JPEG without Pillow's decompression-bomb check:
    the JPEG paths apply :data:`MAX_DECODED_BYTES` (the same bound for RGB) and report the shape of
    any header, as TensorFlow's extract_jpeg_shape does."""
    Image = _backend.pillow()
    if is_jpeg(buf):
        from PIL import JpegImagePlugin

        return JpegImagePlugin.JpegImageFile(io.BytesIO(buf))
    return Image.open(io.BytesIO(buf))


def _pillow_decode(buf, channels: int, op: str, try_recover_truncated: bool = False) -> np.ndarray:
    try:
        im = _pillow_open(buf)
        if im.format == "JPEG":  # the size limit, before Pillow allocates (other formats: Pillow's own)
            _check_size(im.height, im.width, len(im.getbands()), op)
        if try_recover_truncated:
            # Pillow's switch is a module global: set only around this load (other threads' loads in
            # the meantime would be lenient too; only this fallback path sets it)
            from PIL import ImageFile

            with _pillow_truncated_lock:
                before, ImageFile.LOAD_TRUNCATED_IMAGES = ImageFile.LOAD_TRUNCATED_IMAGES, True
                try:
                    im.load()
                finally:
                    ImageFile.LOAD_TRUNCATED_IMAGES = before
        else:
            im.load()
    except InvalidImageError:
        raise
    except Exception as e:
        raise InvalidImageError(f"{op}: invalid image data: {e}") from None
    if im.mode == "CMYK" and channels == 3:
        # TensorFlow: Adobe-inverted CMYK -> RGB = k * c / 255 (Pillow already un-inverted the data)
        cmyk = np.asarray(im).astype(np.int32)
        c, m, y, k = (255 - cmyk[..., i] for i in range(4))
        return np.stack([k * c // 255, k * m // 255, k * y // 255], axis=-1).astype(np.uint8)
    mode = "L" if channels == 1 else "RGB"
    arr = np.asarray(im.convert(mode))
    return arr.reshape(arr.shape[0], arr.shape[1], channels)


def decode_png(contents, channels: int = 0, dtype=np.uint8) -> np.ndarray:
    """``tf.io.decode_png`` via Pillow (8-bit, and 16-bit grayscale; Pillow reads 16-bit colour PNGs as 8-bit).

    ``channels``: 0 = as stored, 1 = gray, 2 = gray+alpha, 3 = RGB, 4 = RGBA. RGB -> gray is libpng's
    ``png_do_rgb_to_gray`` with the weights TensorFlow sets (``png_set_rgb_to_gray(png, 1, 0.299,
    0.587)``), bit-identical to ``tf.io.decode_png``: truncated 1/32768 fixed point, or through
    libpng's gamma tables where the file's ``gAMA``/``sRGB`` chunk makes libpng linearise first.

    >>> decode_png(_png_for_doc(), channels=4).shape
    (3, 2, 4)
    """
    if channels not in (0, 1, 2, 3, 4):
        raise ValueError(f"decode_png: channels must be 0-4, got {channels}")
    Image = _backend.pillow()
    try:
        im = Image.open(io.BytesIO(as_buffer(contents)))
        im.load()
    except Exception as e:
        raise InvalidImageError(f"decode_png: invalid PNG data: {e}") from None
    if im.mode in ("I;16", "I;16B", "I"):
        arr = np.asarray(im).astype(np.uint16)[..., None]
    else:
        if im.mode not in ("L", "LA", "RGB", "RGBA"):
            im = im.convert("RGBA" if "A" in im.getbands() or "transparency" in im.info else "RGB")
        arr = np.asarray(im)
        if arr.ndim == 2:
            arr = arr[..., None]
    arr = _png_channels(arr, channels, _png_file_gamma(im.info))
    dtype = np.dtype(dtype)
    if dtype == np.uint16 and arr.dtype == np.uint8:
        arr = arr.astype(np.uint16) * 257
    elif dtype == np.uint8 and arr.dtype == np.uint16:
        arr = (arr // 257).astype(np.uint8)
    return np.ascontiguousarray(arr)


# png_set_rgb_to_gray(png, 1, 0.299, 0.587) (TensorFlow's png_io.cc): libpng makes the weights
# 29900 and 58700 (1/100000), then (png_uint_16)(w * 32768 / 100000); blue is what makes 32768
_GRAY_R, _GRAY_G = 29900 * 32768 // 100000, 58700 * 32768 // 100000  # 9797, 19234
_GRAY_B = 32768 - _GRAY_R - _GRAY_G  # 3737
_PNG_FP_1, _PNG_GAMMA_sRGB_INVERSE, _PNG_GAMMA_THRESHOLD = 100000, 45455, 5000


def _png_file_gamma(info: dict) -> int:
    """The file gamma libpng works with, in 1/100000: 45455 for an ``sRGB`` chunk, else the ``gAMA``
    chunk's value, else 100000 (libpng then assumes the output matches the input)."""
    if "srgb" in info:
        return _PNG_GAMMA_sRGB_INVERSE
    gamma = int(round(float(info.get("gamma", 0)) * _PNG_FP_1))
    return gamma if gamma > 0 else _PNG_FP_1


def _png_reciprocal(a: int) -> int:  # libpng png_reciprocal (floating arithmetic)
    return int(np.floor(1e10 / a + 0.5))


def _png_gamma_significant(g: int) -> bool:
    return g < _PNG_FP_1 - _PNG_GAMMA_THRESHOLD or g > _PNG_FP_1 + _PNG_GAMMA_THRESHOLD


def _png_8bit_table(g: int) -> np.ndarray:
    """libpng png_build_8bit_table: png_gamma_8bit_correct of 0..255 (floating arithmetic)."""
    v = np.arange(256, dtype=np.float64)
    if not _png_gamma_significant(g):
        return np.arange(256, dtype=np.uint32)
    t = np.floor(255 * np.power(v / 255.0, g * 0.00001) + 0.5)
    t[0], t[255] = 0, 255
    return t.astype(np.uint32)


def _rgb_to_gray(color: np.ndarray, file_gamma: int) -> np.ndarray:
    """libpng png_do_rgb_to_gray as TensorFlow's DecodePng runs it: ``(h, w, 3)`` -> ``(h, w, 1)``."""
    c = color.astype(np.uint32)
    r, g, b = c[..., 0], c[..., 1], c[..., 2]
    screen = _png_reciprocal(file_gamma)  # png_init_read_transformations: screen gamma = 1 / file gamma
    if color.dtype == np.uint8 and (_png_gamma_significant(file_gamma) or _png_gamma_significant(screen)):
        to_1, from_1 = _png_8bit_table(_png_reciprocal(file_gamma)), _png_8bit_table(_png_reciprocal(screen))
        gray = from_1[(_GRAY_R * to_1[r] + _GRAY_G * to_1[g] + _GRAY_B * to_1[b] + 16384) >> 15]
    elif color.dtype == np.uint8:  # "the historical approach which simply truncates"
        gray = (_GRAY_R * r + _GRAY_G * g + _GRAY_B * b) >> 15
    else:  # 16-bit: rounded (libpng 1.5.5 and later)
        gray = (_GRAY_R * r + _GRAY_G * g + _GRAY_B * b + 16384) >> 15
    gray = np.where((r == g) & (r == b), r, gray)  # a gray pixel keeps its value
    return gray.astype(color.dtype)[..., None]


def _png_channels(arr: np.ndarray, channels: int, file_gamma: int = _PNG_FP_1) -> np.ndarray:
    have = arr.shape[-1]
    if channels in (0, have):
        return arr
    color, alpha = arr[..., : 3 if have >= 3 else 1], (arr[..., -1:] if have in (2, 4) else None)
    if channels in (1, 2):
        if color.shape[-1] == 3:
            color = _rgb_to_gray(color, file_gamma)
    else:
        if color.shape[-1] == 1:
            color = np.repeat(color, 3, axis=-1)
    if channels in (2, 4):
        if alpha is None:
            alpha = np.full(arr.shape[:-1] + (1,), np.iinfo(arr.dtype).max, arr.dtype)
        return np.concatenate([color, alpha], axis=-1)
    return color


def decode_image(contents, channels: int = 0, dtype=np.uint8, expand_animations: bool = True) -> np.ndarray:
    """``tf.io.decode_image``: JPEG or PNG (others through Pillow); float dtypes scaled to [0, 1].

    >>> decode_image(_jpeg_for_doc(), dtype=np.float32).dtype
    dtype('float32')
    """
    from tpudata.image.ops import convert_image_dtype

    if is_jpeg(contents):
        img = decode_jpeg(contents, channels)
    elif is_png(contents):
        img = decode_png(contents, channels)
    else:
        img = _pillow_decode(as_buffer(contents), channels or 3, "decode_image")
    return convert_image_dtype(img, dtype)


def _jpeg_for_doc() -> bytes:  # doctest helper
    from tpudata.image.synthetic import photo_like

    buf = io.BytesIO()
    _backend.pillow().fromarray(photo_like(np.random.default_rng(0), 12, 20)).save(buf, "JPEG")
    return buf.getvalue()


def _png_for_doc() -> bytes:  # doctest helper
    buf = io.BytesIO()
    _backend.pillow().fromarray(np.zeros((3, 2, 3), np.uint8)).save(buf, "PNG")
    return buf.getvalue()
