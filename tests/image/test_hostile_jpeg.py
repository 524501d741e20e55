"""Damaged and hostile JPEGs, as TensorFlow treats them: truncated files fail (unless
``try_recover_truncated``), headers claiming huge images are refused before anything is allocated,
crop windows are checked in 64-bit arithmetic, and a bad image in a batch is named.

TensorFlow is the oracle of tests/data/golden/hostile_jpeg.npz (tests/data/make_hostile_jpeg_golden.py):
400 fixed-seed byte edits of four small JPEGs, and a few hand-made cases, with what TensorFlow 2.21's
decode_jpeg / decode_and_crop_jpeg gave. ``TPUDATA_JPEG_FUZZ_EDITS`` sets how many random edits the
property fuzz at the end tries (tools/sanitize.sh runs more of them under AddressSanitizer).
"""

from __future__ import annotations

import os
import tracemalloc
import zlib

import numpy as np
import pytest

import tpudata.image as ti
from tpudata.errors import InvalidImageError
from tpudata.image import _backend, decode
from tests.data.jpeg_edits import SET_FF, TRUNCATE, XOR, apply_edit  # noqa: F401
from tests.image.helpers import jpeg, mode, needs_kernel  # noqa: F401

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "data", "golden", "hostile_jpeg.npz")
FUZZ_EDITS = int(os.environ.get("TPUDATA_JPEG_FUZZ_EDITS", "300"))

with np.load(GOLDEN) as _g:
    G = {k: _g[k] for k in _g.files}
NAMES = [str(n) for n in G["names"]]
BASES = [G[f"base/{n}"].tobytes() for n in NAMES]


def outcome(fn) -> list:
    """[ok, height, width, crc32]; [0, 0, 0, 0] for an InvalidImageError (anything else propagates)."""
    try:
        img = fn()
    except InvalidImageError:
        return [0, 0, 0, 0]
    return [1, img.shape[0], img.shape[1], zlib.crc32(img.tobytes())]


def with_dims(data: bytes, h: int, w: int) -> bytes:
    """``data`` with its SOF header claiming an h x w image."""
    sof = data.index(b"\xff\xc0")
    return data[:sof + 5] + h.to_bytes(2, "big") + w.to_bytes(2, "big") + data[sof + 9:]


# -- TensorFlow's outcomes -----------------------------------------------------------------------
@needs_kernel
def test_byte_edits_decode_exactly_as_tensorflow():
    """Every edited file: decode_jpeg fails where TensorFlow's fails, else gives TensorFlow's bytes;
    the same with try_recover_truncated=True; decode_and_crop_jpeg fails where TensorFlow's does."""
    bad = []
    for i, (bi, kind, pos, value) in enumerate(G["edits"].tolist()):
        data = apply_edit(BASES[bi], kind, pos, value)
        win = G[f"window/{NAMES[bi]}"].tolist()
        got = outcome(lambda: ti.decode_jpeg(data, channels=3))
        rec = outcome(lambda: ti.decode_jpeg(data, channels=3, try_recover_truncated=True))
        crop = outcome(lambda: ti.decode_and_crop_jpeg(data, win, channels=3))
        if got != G["tf_decode"][i].tolist() or rec != G["tf_recover"][i].tolist():
            bad.append((i, NAMES[bi], kind, pos, value, got[:3], G["tf_decode"][i, :3].tolist()))
        # TensorFlow's crop differs from its own full decode by a few levels next to the window's
        # edges (see test_decode.py): the outcome and shape are compared, and ours against our decode
        if crop[:3] != G["tf_crop"][i, :3].tolist():
            bad.append((i, NAMES[bi], kind, pos, value, crop[:3], G["tf_crop"][i, :3].tolist()))
        if crop[0] and got[0]:
            y, x, h, w = win
            full = ti.decode_jpeg(data, channels=3)
            np.testing.assert_array_equal(ti.decode_and_crop_jpeg(data, win, channels=3),
                                          full[y:y + h, x:x + w], err_msg=str((i, NAMES[bi], kind, pos)))
    assert not bad, f"{len(bad)} edits unlike TensorFlow {str(G['tf_version'])}: {bad[:5]}"
    # the set covers both outcomes for each operation, and truncation in particular
    trunc = G["edits"][:, 1] == TRUNCATE
    assert G["tf_decode"][trunc, 0].sum() == 0 and G["tf_recover"][trunc, 0].all()
    assert 0 < G["tf_crop"][trunc, 0].sum() < trunc.sum()


@needs_kernel
def test_hand_made_damage_as_tensorflow():
    """Missing/half EOI, damage after the last scan, a truncated trailing segment (TensorFlow gives
    up quietly on some, fails on others), headers around the 2**29-byte limit, empty data."""
    for i, name in enumerate(str(n) for n in G["special_names"]):
        data = G[f"special/{name}"].tobytes()
        crop = outcome(lambda: ti.decode_and_crop_jpeg(data, [0, 0, 8, 8], channels=3))
        assert crop[:3] == G["special_crop"][i, :3].tolist(), name
        if name == "claims_10922x16384":  # under the limit: TensorFlow decodes 537 MB of gray; not here
            continue
        assert outcome(lambda: ti.decode_jpeg(data, channels=3)) == G["special_decode"][i].tolist(), name
        assert outcome(lambda: ti.decode_jpeg(data, channels=3, try_recover_truncated=True)) == \
            G["special_recover"][i].tolist(), name


# -- truncated files in every decode path --------------------------------------------------------
def test_truncated_jpeg_raises_in_every_decode_path(mode):
    data = jpeg(64, 80)
    cut = data[: len(data) * 2 // 3]  # header intact: the shape reads; rows missing
    assert ti.extract_jpeg_shape(cut).tolist() == [64, 80, 3]
    with pytest.raises(InvalidImageError, match="truncated"):
        ti.decode_jpeg(cut)
    with pytest.raises(InvalidImageError, match="truncated"):
        ti.decode_image(cut)
    with pytest.raises(InvalidImageError, match="truncated"):
        ti.decode_and_crop_jpeg(cut, [40, 0, 24, 80])
    with pytest.raises(InvalidImageError, match="truncated"):
        ti.decode_jpeg(data[:-2])  # only the EOI marker missing: TensorFlow fails too
    if mode == "kernel":  # a window the data covers decodes, as TensorFlow's crop (rows below unread)
        np.testing.assert_array_equal(ti.decode_and_crop_jpeg(data[: len(data) * 3 // 4], [0, 0, 16, 80]),
                                      ti.decode_jpeg(data)[:16])


def test_try_recover_truncated_decodes_what_is_there(mode):
    data = jpeg(64, 80)
    full = ti.decode_jpeg(data)
    cut = data[: len(data) * 2 // 3]
    img = ti.decode_jpeg(cut, try_recover_truncated=True)
    assert img.shape == (64, 80, 3)
    if mode == "kernel":  # libjpeg's decode of the rows that are there, as TensorFlow's
        np.testing.assert_array_equal(img[:8], full[:8])
    crop = ti.decode_and_crop_jpeg(cut, [40, 8, 24, 64], try_recover_truncated=True)
    assert crop.shape == (24, 64, 3)


def test_a_truncated_image_in_a_batch_is_named(mode):
    images = [jpeg(48, 64, seed=s) for s in range(4)]
    images[2] = images[2][: len(images[2]) // 2]
    crops = np.array([[0, 0, 48, 64]] * 4, np.int32)
    with pytest.raises(InvalidImageError, match=r"image 2 of the batch: .*truncated") as e:
        ti.preprocess_batch(images, crops, np.zeros(4, np.uint8), 16)
    assert e.value.index == 2
    with pytest.raises(InvalidImageError, match="image 2 of the batch") as e:
        ti.resnet_preprocess_batch(images, False, 16)
    assert e.value.index == 2
    images[0] = images[0][:-2]
    with pytest.raises(InvalidImageError, match=r"image 0 of the batch: .*truncated.*\(2 bad images in all: "
                                                r"indices 0, 2\)") as e:
        ti.preprocess_batch(images, crops, np.zeros(4, np.uint8), 16)
    assert e.value.index == 0
    out = ti.preprocess_batch(images, crops, np.zeros(4, np.uint8), 16, try_recover_truncated=True)
    assert out.shape == (4, 16, 16, 3) and np.isfinite(out).all()
    one = ti.resnet_preprocess(images[2], False, 16, try_recover_truncated=True)
    assert one.shape == (16, 16, 3)


@needs_kernel
def test_a_bad_image_of_a_column_names_its_file_when_known(tmp_path):
    import tpudata
    from tpudata.dataset.core.columns import BytesColumn, RecordColumn

    good, bad = jpeg(40, 50), jpeg(40, 50)[:len(jpeg(40, 50)) // 2]
    col = BytesColumn.from_bytes([good, bad])
    col.sources = [("gs://bucket/train-00001.tfrecord", None)]  # values cut from records: the file
    with pytest.raises(InvalidImageError, match=r"image 1 of the batch \(from gs://bucket/train-00001"
                                                r"\.tfrecord\): .*truncated") as e:
        ti.resnet_preprocess_batch(col, False, 16)
    assert e.value.index == 1
    path = str(tmp_path / "images.tfrecord")  # whole records: the file and the record's offset
    with tpudata.TFRecordWriter(path) as w:
        w.write(good)
        w.write(bad)
    col = RecordColumn.from_batch(next(iter(tpudata.read_record_batches(path))))
    with pytest.raises(InvalidImageError, match=rf"image 1 of the batch \(record at offset {len(good) + 16} "
                                                rf"of {path}\): .*truncated"):
        ti.resnet_preprocess_batch(col, False, 16)


# -- the size limit ------------------------------------------------------------------------------
@pytest.mark.parametrize("h, w", [(16000, 16000), (65500, 65500), (10923, 16384)])
def test_headers_claiming_huge_images_are_refused_before_allocating(mode, h, w):
    data = with_dims(jpeg(32, 32), h, w)  # a 1 KB file
    tracemalloc.start()
    try:
        for fn in (lambda: ti.decode_jpeg(data), lambda: ti.decode_and_crop_jpeg(data, [0, 0, 8, 8]),
                   lambda: ti.decode_image(data)):
            with pytest.raises(InvalidImageError, match=rf"claims a {h}x{w} image .*MAX_DECODED_BYTES"):
                fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # nothing of the claimed size (numpy's arrays are traced)
    crops = np.array([[0, 0, 8, 8]], np.int32)
    with pytest.raises(InvalidImageError, match=r"image 0 of the batch: .*MAX_DECODED_BYTES") as e:
        ti.preprocess_batch([data], crops, np.zeros(1, np.uint8), 8)
    assert e.value.index == 0


def test_the_size_limit_is_a_module_setting(mode, monkeypatch):
    data = jpeg(64, 64)
    assert decode.MAX_DECODED_BYTES == 2**29 - 1  # TensorFlow refuses 2**29 and more
    monkeypatch.setattr(decode, "MAX_DECODED_BYTES", 64 * 64 * 3 - 1)
    with pytest.raises(InvalidImageError, match="12288 bytes decoded"):
        ti.decode_jpeg(data)
    with pytest.raises(InvalidImageError, match="image 1 of the batch"):
        ti.resnet_preprocess_batch([jpeg(8, 8), data], False, 8)
    monkeypatch.setattr(decode, "MAX_DECODED_BYTES", 64 * 64 * 3)
    assert ti.decode_jpeg(data).shape == (64, 64, 3)
    assert ti.resnet_preprocess_batch([jpeg(8, 8), data], False, 8).shape == (2, 8, 8, 3)


# -- windows and sizes in 64-bit arithmetic ------------------------------------------------------
BIG = 2**31 - 8
WINDOWS = [
    (0, BIG, 8, 100),  # x + w wrapped past int32: read far outside the row
    (BIG, 0, 100, 8),
    (0, 0, 8, BIG),
    (0, 8, 8, 2**31 - 1),
    (-8, 0, 16, 16),
    (0, -2**31, 8, 8),
    (0, 0, -8, 16),
    (0, 0, 16, 0),
    (2**31 - 1, 2**31 - 1, 2**31 - 1, 2**31 - 1),
]


@pytest.mark.parametrize("window", WINDOWS)
def test_crop_windows_near_int32_limits_are_refused(mode, window):
    images = [jpeg(40, 48, seed=1), jpeg(40, 48, seed=2)]
    crops = np.array([[0, 0, 40, 48], window], np.int32)
    with pytest.raises(InvalidImageError, match=r"image 1 of the batch: .*crop window .* not inside the "
                                                r"40x48 image") as e:
        ti.preprocess_batch(images, crops, np.zeros(2, np.uint8), 16)
    assert e.value.index == 1
    with pytest.raises(InvalidImageError, match="not inside"):
        ti.decode_and_crop_jpeg(images[1], list(window))


def test_windows_past_int32_are_refused_not_wrapped(mode):
    images = [jpeg(40, 48)]
    for window in ([0, 0, 2**32 + 16, 16], [2**40, 0, 8, 8]):  # int32 wrap: 16 rows / row 0
        with pytest.raises(InvalidImageError, match="image 0 of the batch: .*crop window"):
            ti.preprocess_batch(images, np.array([window], np.int64), np.zeros(1, np.uint8), 16)


@needs_kernel
def test_kernel_checks_its_own_arguments_in_64_bits():
    k = _backend.kernel()
    data = jpeg(40, 48)
    out = np.empty(64, np.uint8)
    for y, x, h, w in [(0, 2**62, 1, 1), (2**63 - 1, 0, 1, 1), (0, 0, 1, 2**62), (0, 0, 2**32 + 1, 2**31),
                       (-1, 0, 1, 1)]:
        with pytest.raises(ValueError, match="not inside|too small"):
            k.decode_into(data, out, 3, 1, 1, y, x, h, w)
    # a column whose offset + length wraps past int64
    col = ([data], None, np.array([1], np.int64), np.array([2**63 - 1], np.int64))
    with pytest.raises(ValueError, match="outside its buffer"):
        k.preprocess_batch(col, np.empty(16 * 16 * 3, np.uint8), np.zeros((1, 4), np.int32), np.zeros(1, np.uint8),
                           16, 16, 0, 0, 1.0, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), 0, 1, 1, 1)
    # output sizes whose product wraps
    with pytest.raises(ValueError, match="bad output size|too small"):
        k.preprocess_batch([data], np.empty(16, np.uint8), np.zeros((1, 4), np.int32), np.zeros(1, np.uint8),
                           2**31 - 1, 2**31 - 1, 0, 1, 1.0, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), 0, 1, 1, 1)


# -- property fuzz: random byte edits, no oracle -------------------------------------------------
def _header_shape(data: bytes):
    try:
        return tuple(ti.extract_jpeg_shape(data).tolist())
    except InvalidImageError:
        return None


@needs_kernel
def test_random_byte_edits_fail_cleanly_or_decode_to_the_header_size():
    """Every edit either raises InvalidImageError or decodes to the size its header gives (never a
    crash); a cut file always raises (never silently gray); a batch of edited files fails exactly
    when one of its images does, naming the first."""
    rng = np.random.default_rng(1234)
    crops_all, flips = np.array([[4, 4, 24, 24]] * 8, np.int32), np.zeros(8, np.uint8)
    batch: list = []
    for k in range(FUZZ_EDITS):
        base = BASES[k % len(BASES)]
        kind = (XOR, XOR, SET_FF, TRUNCATE)[k % 4]
        pos = int(rng.integers(2, len(base)))
        data = apply_edit(base, kind, pos, int(rng.integers(1, 256)))
        if kind != TRUNCATE and k % 5 == 4:  # now and then a few more bytes
            for _ in range(3):
                data = apply_edit(data, XOR, int(rng.integers(2, len(base))), int(rng.integers(1, 256)))
        shape = _header_shape(data)
        try:
            img = ti.decode_jpeg(data, channels=3)
        except InvalidImageError:
            img = None
        if img is not None:
            assert shape is not None and img.shape == (shape[0], shape[1], 3), (k, kind, pos)
        if kind == TRUNCATE:
            assert img is None, f"a file cut at {pos} of {len(base)} decoded"
        batch.append(data)
        if len(batch) == len(crops_all):
            _check_batch(batch, crops_all, flips)
            batch = []


def _check_batch(batch, crops, flips):
    failed = []
    for i, data in enumerate(batch):
        try:
            ti.decode_and_crop_jpeg(data, crops[i], channels=3)
        except InvalidImageError:
            failed.append(i)
    try:
        ti.preprocess_batch(batch, crops, flips, 12, num_threads=2)
    except InvalidImageError as e:
        assert failed and e.index == failed[0], (failed, str(e))
    else:
        assert not failed, failed


@needs_kernel
def test_a_file_that_loops_the_recovering_decoder_fails_instead_of_hanging():
    """tests/data/recover_loop.jpg (a damaged, cut-short JPEG with restart markers): with
    try_recover_truncated, libjpeg reading TensorFlow's way asks for the same stale bytes forever
    (TensorFlow 2.21's decode_jpeg had not returned after 90 s); tpudata fails it at once, naming
    the flag. Without the flag it fails as a truncated file."""
    path = os.path.join(os.path.dirname(__file__), "..", "data", "recover_loop.jpg")
    with open(path, "rb") as f:
        data = f.read()
    with pytest.raises(InvalidImageError, match="try_recover_truncated.*never returns"):
        ti.decode_jpeg(data, channels=3, try_recover_truncated=True)
    with pytest.raises(InvalidImageError, match="truncated"):
        ti.decode_jpeg(data, channels=3)
