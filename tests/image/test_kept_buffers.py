"""The batch kernel's buffers a thread keeps from one call to the next (the decoded window and the
resize's rows, up to 16 MB each, freed when the thread ends): a per-element map calls the kernel
once per image, and freed buffers would come back as fresh pages every call.

What is kept must never show in a result: every call gives what a fresh thread gives, whatever
size of image came before."""

from __future__ import annotations

import threading

import numpy as np

import tpudata.image as ti
from tpudata.image import _backend
from tests.image.helpers import jpeg, needs_kernel

pytestmark = needs_kernel

KEEP = 16 << 20


def _in_new_thread(fn):
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # handed to the test's thread
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _prep(data: bytes, crop, size) -> np.ndarray:
    return ti.preprocess_batch([data], np.array([crop], np.int32), np.array([0], np.uint8), size,
                               output="0-255", num_threads=1)


def test_a_thread_keeps_its_buffers_and_results_stay_those_of_a_fresh_thread():
    k = _backend.kernel()
    small, large = jpeg(60, 80, 1), jpeg(300, 400, 2)
    cases = [(large, (0, 0, 300, 400), 224), (small, (5, 7, 40, 50), 224), (large, (100, 30, 150, 333), 64),
             (small, (0, 0, 60, 80), (31, 17))]
    fresh = [_in_new_thread(lambda c=c: _prep(*c)) for c in cases]

    def one_thread():
        got, kept = [], []
        assert k._kept_bytes() == 0  # a new thread keeps nothing yet
        for _ in range(2):  # after a larger image and after a smaller one
            for c in cases:
                got.append(_prep(*c))
                kept.append(k._kept_bytes())
        return got, kept

    got, kept = _in_new_thread(one_thread)
    for i, g in enumerate(got):
        assert g.tobytes() == fresh[i % len(cases)].tobytes()
    # the decoded window of the 300x400 image at least, kept after the first call
    assert kept[0] >= 300 * 400 * 3 and max(kept) < 2 * KEEP


def test_a_buffer_over_the_limit_is_not_kept():
    from PIL import Image
    import io

    k = _backend.kernel()
    noise = np.random.default_rng(3).integers(0, 256, (2400, 2600, 3), np.uint8)  # 18.7 MB decoded
    buf = io.BytesIO()
    Image.fromarray(noise).save(buf, "JPEG", quality=50)
    big = buf.getvalue()

    def run():
        _prep(jpeg(60, 80, 1), (0, 0, 60, 80), 32)
        before = k._kept_bytes()
        out = _prep(big, (0, 0, 2400, 2600), 32)
        return before, k._kept_bytes(), out

    before, after, out = _in_new_thread(run)
    assert 0 < before < KEEP and after < KEEP  # the 18.7 MB window went back when the call ended
    assert out.shape == (1, 32, 32, 3)
