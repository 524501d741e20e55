"""The presets inside a tpudata.Dataset: per element and per batch, seeded by position, and a
checkpoint restores the exact same augmented batches."""

from __future__ import annotations

import os

import numpy as np

import tpudata
import tpudata.image as ti
from tpudata import AUTOTUNE, Dataset, FixedLenFeature, TFRecordDataset
from tests.image.helpers import jpeg

SPEC = {"image/encoded": FixedLenFeature([], bytes), "image/class/label": FixedLenFeature([], np.int64)}


def _shards(tmp_path, n=24):
    for s in range(2):
        with tpudata.TFRecordWriter(os.path.join(tmp_path, f"train-{s:05d}-of-00002")) as w:
            for i in range(s, n, 2):
                w.write(tpudata.encode_example({"image/encoded": jpeg(40 + i, 56 - i, seed=i),
                                                "image/class/label": i}))
    return os.path.join(tmp_path, "train-*")


def _batch_pipeline(pattern, calls=None):
    def prep(f, step):
        x = ti.resnet_preprocess_batch(f["image/encoded"], True, 16, seed=(7, int(step)))
        return x, f["image/class/label"]

    src = Dataset.list_files(pattern, shuffle=False).interleave(lambda p: TFRecordDataset(p), cycle_length=2)
    src = src.shuffle(8, seed=1).parse(SPEC).batch(4, drop_remainder=True)
    return Dataset.zip((src, Dataset.range(1 << 40))).map(prep, num_parallel_calls=calls).prefetch(2)


def _batch_pipeline_autotune(pattern):  # two batches in flight: the next read overlaps the kernel
    return _batch_pipeline(pattern, AUTOTUNE)


def _element_pipeline(pattern):
    def prep(f, i):
        return ti.resnet_preprocess(f["image/encoded"], True, 16, seed=(7, int(i))), f["image/class/label"]

    src = Dataset.list_files(pattern, shuffle=False).interleave(lambda p: TFRecordDataset(p), cycle_length=2)
    src = src.shuffle(8, seed=1).parse(SPEC)
    return Dataset.zip((src, Dataset.range(1 << 40))).map(prep, num_parallel_calls=2).batch(4, drop_remainder=True)


def test_batch_and_element_forms_run_and_restore_exactly(tmp_path):
    pattern = _shards(str(tmp_path))
    for make in (_batch_pipeline, _batch_pipeline_autotune, _element_pipeline):
        with make(pattern).iterator() as it:
            full = [(x.copy(), y.copy()) for x, y in it]
        assert len(full) == 6 and full[0][0].shape == (4, 16, 16, 3) and full[0][0].dtype == np.float32
        with make(pattern).iterator() as it:
            for _ in range(2):
                next(it)
            state = it.get_state()
        with make(pattern).iterator(state) as it:
            rest = list(it)
        assert len(rest) == 4
        for (x, y), (x2, y2) in zip(full[2:], rest):
            np.testing.assert_array_equal(y, y2)
            np.testing.assert_array_equal(x, x2)


def test_jpeg_bytes_reach_the_batch_op_as_views_and_the_batch_is_not_copied(tmp_path):
    """parse -> batch hands the image bytes to the batch op in the read buffers (a BytesColumn, no
    bytes object per image); the array the op returns is the one the pipeline yields (no np.stack)."""
    from tpudata.dataset.core.columns import BytesColumn

    pattern = _shards(str(tmp_path))
    seen, made = [], []

    def prep(f):
        col = f["image/encoded"]
        seen.append(col)
        x = ti.resnet_preprocess_batch(col, False, 256)  # 3 MB: a block of its own
        made.append(x)
        return x, f["image/class/label"]

    ds = (Dataset.list_files(pattern, shuffle=False).interleave(lambda p: TFRecordDataset(p), cycle_length=2)
          .parse(SPEC).batch(4, drop_remainder=True).map(prep).prefetch(2))
    with ds.iterator() as it:
        got = list(it)
    assert len(got) == 6 and all(isinstance(c, BytesColumn) for c in seen)
    for col, (x, _) in zip(seen, got):
        # the values sit in the reader's buffers, among the rest of each record (no per-image copy)
        assert sum(len(b) for b in col.buffers) > int(col.lengths.sum())
        assert all(isinstance(v, bytes) for v in col) and col[0] == list(col)[0]
        np.testing.assert_array_equal(x, ti.resnet_preprocess_batch(col.tolist(), False, 256))
    assert all(any(np.shares_memory(x, m) for m in made) for x, _ in got)
