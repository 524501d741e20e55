"""The per-element presets in ``map(...).batch(n)``: fused into one kernel call per batch
(tpudata.dataset.ops.map_batch), with the unfused pipeline's batches, states and errors."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

import tpudata
import tpudata.image as ti
from tpudata import Dataset, FixedLenFeature, TFRecordDataset
from tpudata.dataset import Options
from tpudata.dataset.core.optimize import optimize
from tpudata.dataset.ops.map_batch import MapAndBatchDataset
from tpudata.errors import InvalidImageError
from tpudata.image import presets
from tests.image.helpers import jpeg, needs_kernel

SPEC = {"image/encoded": FixedLenFeature([], bytes), "image/class/label": FixedLenFeature([], np.int64)}
N = 22


def _shards(tmp_path, bad=()):
    for s in range(2):
        with tpudata.TFRecordWriter(os.path.join(tmp_path, f"train-{s:05d}-of-00002")) as w:
            for i in range(s, N, 2):
                data = b"\xff\xd8\xff not a jpeg" if i in bad else jpeg(40 + i, 60 - i, seed=i)
                w.write(tpudata.encode_example({"image/encoded": data, "image/class/label": i}))
    return os.path.join(tmp_path, "train-*")


def _unfused(ds):
    options = Options()
    options.experimental_optimization.map_and_batch_fusion = False
    return ds.with_options(options)


def _pipeline(pattern, train=True, calls=2, **kw):
    """The per-element form a port writes first, seeded by element position."""
    def prep(f, i):
        return ti.resnet_preprocess(f["image/encoded"], train, 24, seed=(5, int(i)), **kw), f["image/class/label"]

    src = Dataset.list_files(pattern, shuffle=False).interleave(lambda p: TFRecordDataset(p), cycle_length=2)
    src = src.shuffle(8, seed=1).parse(SPEC)
    return Dataset.zip((src, Dataset.range(1 << 40))).map(prep, num_parallel_calls=calls).batch(4)


def _all(ds):
    with ds.iterator() as it:
        return [(x.copy(), y.copy()) for x, y in it]


def _assert_same(a, b):
    assert len(a) == len(b)
    for (x, y), (x2, y2) in zip(a, b):
        assert x.dtype == x2.dtype and x.shape == x2.shape
        np.testing.assert_array_equal(y, y2)
        np.testing.assert_array_equal(x.view(np.uint8), x2.view(np.uint8))  # bit for bit (bfloat16 too)


@needs_kernel
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("kw", [{}, {"output": "0-255"}, {"dtype": ml_dtypes.bfloat16, "output": "0-255"},
                                {"dtype": np.uint8, "output": "0-255"}])
def test_fused_preset_batches_equal_unfused_and_one_kernel_call_each(tmp_path, monkeypatch, train, kw):
    pattern = _shards(str(tmp_path))
    assert isinstance(optimize(_pipeline(pattern)), MapAndBatchDataset)
    runs = []
    run = presets._PresetBatch.run
    monkeypatch.setattr(presets._PresetBatch, "run", lambda self, plan, p: runs.append(len(p)) or run(self, plan, p))
    want = _all(_unfused(_pipeline(pattern, train, **kw)))
    assert runs == []
    got = _all(_pipeline(pattern, train, **kw))
    _assert_same(got, want)
    assert runs == [4, 4, 4, 4, 4, 2]


@needs_kernel
def test_fused_inception_preset_equals_unfused(tmp_path):
    pattern = _shards(str(tmp_path))
    ds = Dataset.list_files(pattern, shuffle=False).interleave(TFRecordDataset, cycle_length=2).parse(SPEC)
    ds = ds.enumerate().map(lambda i, f: (ti.inception_preprocess(f["image/encoded"], True, 20, seed=int(i)),
                                          f["image/class/label"])).batch(5)
    assert "map_and_batch" in repr(optimize(ds))
    _assert_same(_all(ds), _all(_unfused(ds)))


@needs_kernel
def test_fused_preset_restores_mid_epoch_identically(tmp_path):
    pattern = _shards(str(tmp_path))
    full = _all(_pipeline(pattern))
    for take, restore in ((_pipeline, _pipeline), (_pipeline, lambda p: _unfused(_pipeline(p))),
                          (lambda p: _unfused(_pipeline(p)), _pipeline)):
        with take(pattern).iterator() as it:
            next(it), next(it), next(it)
            state = it.get_state()
        with restore(pattern).iterator(state) as it:
            rest = [(x.copy(), y.copy()) for x, y in it]
        _assert_same(rest, full[3:])


@needs_kernel
def test_a_bad_jpeg_raises_its_own_error_fused_as_unfused(tmp_path):
    pattern = _shards(str(tmp_path), bad={9})
    errors = []
    for ds in (_unfused(_pipeline(pattern, False)), _pipeline(pattern, False)):
        with pytest.raises(InvalidImageError) as info:
            _all(ds)
        errors.append(info.value)
    assert str(errors[0]) == str(errors[1]) and errors[0].index == errors[1].index == 0
    # damage past the header: the kernel's batch call fails, the element's own call names it
    good = jpeg(40, 50, seed=1)
    cut = good[:len(good) // 2]
    ds = Dataset.from_tensor_slices(np.array([good, good, cut, good], dtype=object)).map(
        lambda b: ti.resnet_preprocess(b, False, 16)).batch(4)
    errors = []
    for d in (_unfused(ds), ds):
        with pytest.raises(InvalidImageError) as info:
            list(d)
        errors.append(info.value)
    assert str(errors[0]) == str(errors[1]) and "truncated" in str(errors[1])


@needs_kernel
def test_a_function_that_uses_the_preset_result_stays_exact(tmp_path):
    pattern = _shards(str(tmp_path))

    def prep(f, i):  # uses the image: not fusable; found on the first call, which runs again
        x = ti.resnet_preprocess(f["image/encoded"], True, 24, seed=(5, int(i)))
        return x * 2.0, f["image/class/label"]

    src = Dataset.list_files(pattern, shuffle=False).interleave(TFRecordDataset, cycle_length=2)
    ds = Dataset.zip((src.shuffle(8, seed=1).parse(SPEC), Dataset.range(1 << 40))).map(prep, 2).batch(4)
    _assert_same(_all(ds), _all(_unfused(ds)))
    # a function that calls no preset is never fused
    plain = Dataset.range(8).map(lambda i: np.full((2, 2), i, np.float32)).batch(4)
    assert optimize(plain) is plain


@needs_kernel
def test_the_docs_per_element_snippet_is_fused_and_equals_unfused(tmp_path):
    from tests.readme import code_blocks

    (code,) = code_blocks("The per-element form, fused", "docs/images.md")
    pattern = _shards(str(tmp_path))
    src = Dataset.list_files(pattern, shuffle=False).interleave(TFRecordDataset, cycle_length=2)
    ns = {"tpudata": tpudata, "keys": SPEC, "ds": src}
    exec(compile(code, "docs/images.md", "exec"), ns)
    ds = ns["ds"]
    assert "map_and_batch" in repr(optimize(ds))
    small = ds.input.batch(4)  # the same map, batches of 4 (22 images)
    assert "map_and_batch" in repr(optimize(small))
    _assert_same(_all(small), _all(_unfused(small)))


def test_without_the_kernel_the_fused_pipeline_is_the_unfused_one(tmp_path):
    from tpudata.image import _backend

    pattern = _shards(str(tmp_path))
    _backend.use_kernel(False)  # the reference path: nothing to batch, the map runs as it is
    try:
        _assert_same(_all(_pipeline(pattern, False)), _all(_unfused(_pipeline(pattern, False))))
    finally:
        _backend.use_kernel(True)
