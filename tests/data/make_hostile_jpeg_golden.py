"""Record what TensorFlow does with damaged JPEGs, for tests/image/test_hostile_jpeg.py.

Run with a TensorFlow install (never a tpudata dependency), from the repository root:

    /work/tfvenv/bin/python tests/data/make_hostile_jpeg_golden.py

It writes tests/data/golden/hostile_jpeg.npz: a few small base JPEGs (stored, so the test never
depends on an encoder's version), a fixed-seed list of edits (a byte XORed, a byte set to 0xFF, or
the file cut short: the test rebuilds the exact bytes), and for every edited file what
``tf.io.decode_jpeg(channels=3)``, the same with ``try_recover_truncated=True`` and
``tf.image.decode_and_crop_jpeg`` (one window per base) gave: failed, or the output's shape and
CRC32. Then the same for a few hand-made cases (``special/...``: a missing EOI, damage after the
scan, headers claiming huge sizes around TensorFlow's 2**29-byte limit, an empty file).
"""

from __future__ import annotations

import importlib.util
import io
import os
import sys
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from PIL import Image  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "synthetic", os.path.join(HERE, "..", "..", "tpudata", "image", "synthetic.py"))
synthetic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(synthetic)
sys.path.insert(0, HERE)
from jpeg_edits import SET_FF, TRUNCATE, XOR, apply_edit  # noqa: E402,F401

OUT = os.path.join(HERE, "golden", "hostile_jpeg.npz")
EDITS_PER_BASE = 100


def jpeg(arr, **kw) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", **kw)
    return buf.getvalue()


def bases() -> dict:
    rng = np.random.default_rng(20240611)
    photo = synthetic.photo_like(rng, 40, 56)
    return {
        "baseline420": jpeg(photo, quality=90),
        "progressive": jpeg(photo, quality=85, progressive=True),
        "gray": jpeg(photo.mean(axis=2).astype(np.uint8)[:32, :40], quality=90),
        "restart444": jpeg(photo, quality=90, subsampling=0, restart_marker_rows=1),
    }


def make_edits(data: bytes, rng) -> list:
    """EDITS_PER_BASE edits: 40% XOR anywhere, 20% XOR in the headers, 20% 0xFF, 20% cut."""
    sos = data.index(b"\xff\xda")
    edits = []
    for k in range(EDITS_PER_BASE):
        r = k % 10
        if r < 4:
            edits.append((XOR, int(rng.integers(2, len(data))), int(rng.integers(1, 256))))
        elif r < 6:
            edits.append((XOR, int(rng.integers(2, sos + 14)), int(rng.integers(1, 256))))
        elif r < 8:
            edits.append((SET_FF, int(rng.integers(sos + 14, len(data) - 2)), 0xFF))
        else:
            edits.append((TRUNCATE, int(rng.integers(sos + 14, len(data))), 0))
    return edits


def specials(data: bytes) -> dict:
    """Hand-made damage at the places the random edits rarely reach (``data``: a baseline JPEG)."""
    body, eoi = data[:-2], data[-2:]
    sof = data.index(b"\xff\xc0")
    dqt = data[data.index(b"\xff\xdb"):]
    dqt = dqt[:2 + int.from_bytes(dqt[2:4], "big")]
    com = b"\xff\xfe\x00\x12" + b"tpudata comment!"

    def dims(h: int, w: int) -> bytes:
        return data[:sof + 5] + h.to_bytes(2, "big") + w.to_bytes(2, "big") + data[sof + 9:]

    return {
        "intact": data,
        "no_eoi": body,
        "half_eoi": body + b"\xff",
        "extraneous_before_eoi": body + b"\x00\x11\x22" + eoi,
        "comment_after_scan": body + com + eoi,
        "comment_after_scan_cut": body + com[:9],
        "tables_after_scan_cut": body + dqt[:len(dqt) // 2],
        "trailing_garbage_after_eoi": data + b"garbage",
        "claims_1000x1000": dims(1000, 1000),
        "claims_16000x16000": dims(16000, 16000),
        "claims_65500x65500": dims(65500, 65500),
        "claims_10923x16384": dims(10923, 16384),  # 536,887,296 bytes: just over 2**29
        "claims_10922x16384": dims(10922, 16384),  # 536,854,528 bytes: just under
        "empty": b"",
        "soi_only": data[:2],
    }


def window(data: bytes) -> list:
    h, w, _ = tf.image.extract_jpeg_shape(data).numpy().tolist()
    return [h // 4, w // 4, h // 2, w // 2]


def outcome(fn) -> list:
    """[ok, height, width, crc32 of the bytes]; [0, 0, 0, 0] when TensorFlow fails."""
    try:
        img = fn().numpy()
    except (tf.errors.InvalidArgumentError, tf.errors.ResourceExhaustedError):
        return [0, 0, 0, 0]
    return [1, img.shape[0], img.shape[1], zlib.crc32(img.tobytes())]


def main() -> None:
    rng = np.random.default_rng(7)
    out = {"tf_version": np.array(tf.__version__)}
    names = []
    edits, dec, rec, crop = [], [], [], []
    for bi, (name, data) in enumerate(bases().items()):
        names.append(name)
        out[f"base/{name}"] = np.frombuffer(data, np.uint8)
        win = window(data)
        out[f"window/{name}"] = np.array(win, np.int64)
        for kind, pos, value in make_edits(data, rng):
            bad = apply_edit(data, kind, pos, value)
            edits.append([bi, kind, pos, value])
            dec.append(outcome(lambda: tf.io.decode_jpeg(bad, channels=3)))
            rec.append(outcome(lambda: tf.io.decode_jpeg(bad, channels=3, try_recover_truncated=True)))
            crop.append(outcome(lambda: tf.image.decode_and_crop_jpeg(bad, win, channels=3)))
    sdec, srec, scrop = [], [], []
    special = specials(bases()["baseline420"])
    for name, bad in special.items():
        out[f"special/{name}"] = np.frombuffer(bad, np.uint8)
        sdec.append(outcome(lambda: tf.io.decode_jpeg(bad, channels=3)))
        srec.append(outcome(lambda: tf.io.decode_jpeg(bad, channels=3, try_recover_truncated=True)))
        scrop.append(outcome(lambda: tf.image.decode_and_crop_jpeg(bad, [0, 0, 8, 8], channels=3)))
    out["special_names"] = np.array(list(special))
    out["special_decode"] = np.array(sdec, np.int64)
    out["special_recover"] = np.array(srec, np.int64)
    out["special_crop"] = np.array(scrop, np.int64)
    out["names"] = np.array(names)
    out["edits"] = np.array(edits, np.int64)
    out["tf_decode"] = np.array(dec, np.int64)
    out["tf_recover"] = np.array(rec, np.int64)
    out["tf_crop"] = np.array(crop, np.int64)
    np.savez_compressed(OUT, **out)
    d = out["tf_decode"][:, 0]
    print(f"wrote {OUT}: {len(edits)} edits, TensorFlow decodes {int(d.sum())} and fails {int((d == 0).sum())}")


if __name__ == "__main__":
    main()
