"""sample_distorted_bounding_box: TensorFlow's distribution (chi-square over 10k draws vs TF's)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi2_contingency

import tpudata.image as ti
from tests.image.helpers import golden

G = golden()
RESNET = dict(min_object_covered=0.1, aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0), max_attempts=10)
WIDE = dict(min_object_covered=0.0, aspect_ratio_range=(0.5, 2.0), area_range=(0.5, 1.0), max_attempts=1)


def _draws(h, w, n, seed=0, **kw):
    rng = np.random.default_rng(seed)
    return np.array([ti.sample_crop_window(h, w, rng, None, **kw) for _ in range(n)])


def _features(d, h, w):
    area = d[:, 2] * d[:, 3] / (h * w)
    aspect = np.log(d[:, 3] / d[:, 2])
    whole = (d[:, 2] == h) & (d[:, 3] == w)
    cy = (d[:, 0] + d[:, 2] / 2) / h
    return area, aspect, whole, cy


def _p_values(ours, theirs, h, w):
    fo, ft = _features(ours, h, w), _features(theirs, h, w)
    ps = []
    for a, b in zip(fo[:2] + fo[3:], ft[:2] + ft[3:]):
        edges = np.quantile(np.concatenate([a, b]), np.linspace(0, 1, 11))
        edges = np.unique(edges)
        ca, _ = np.histogram(a, edges)
        cb, _ = np.histogram(b, edges)
        keep = (ca + cb) > 0
        ps.append(chi2_contingency(np.stack([ca[keep], cb[keep]]))[1])
    table = np.array([[fo[2].sum(), (~fo[2]).sum()], [ft[2].sum(), (~ft[2]).sum()]])
    if table[:, 0].sum() > 0:
        ps.append(chi2_contingency(table)[1])
    return ps


@pytest.mark.parametrize("key", ["resnet/375x500", "resnet/500x333", "resnet/64x64", "wide/300x200"])
def test_crop_distribution_matches_tensorflow(key):
    params, shape = key.split("/")
    h, w = (int(v) for v in shape.split("x"))
    theirs = G[f"sdbb/{key}"].astype(np.int64)  # columns: y, x, h, w
    ours = _draws(h, w, len(theirs), **(RESNET if params == "resnet" else WIDE))
    assert (ours[:, 2] >= 1).all() and (ours[:, 0] + ours[:, 2] <= h).all() and (ours[:, 1] + ours[:, 3] <= w).all()
    ps = _p_values(ours, theirs, h, w)
    assert min(ps) > 1e-3, ps


def test_the_chi_square_check_detects_a_different_distribution():
    theirs = G["sdbb/resnet/375x500"].astype(np.int64)
    wrong = _draws(375, 500, len(theirs), **{**RESNET, "area_range": (0.15, 1.0)})
    assert min(_p_values(wrong, theirs, 375, 500)) < 1e-6


def test_tf_style_outputs_seeding_and_fallback():
    begin, size, box = ti.sample_distorted_bounding_box([375, 500, 3], seed=(7, 1), area_range=(0.08, 1.0),
                                                       use_image_if_no_bounding_boxes=True)
    again = ti.sample_distorted_bounding_box([375, 500, 3], seed=(7, 1), area_range=(0.08, 1.0),
                                             use_image_if_no_bounding_boxes=True)
    np.testing.assert_array_equal(begin, again[0])
    assert begin[2] == 0 and size[2] == -1 and box.shape == (1, 1, 4)
    np.testing.assert_allclose(box[0, 0], [begin[0] / 375, begin[1] / 500, (begin[0] + size[0]) / 375,
                                           (begin[1] + size[1]) / 500], rtol=1e-6)
    # impossible constraints -> the whole image, as TensorFlow
    b, s, _ = ti.sample_distorted_bounding_box([30, 40, 3], [[[0.0, 0.0, 1.0, 1.0]]], seed=1, area_range=(0.1, 0.2),
                                               min_object_covered=0.9)
    assert b.tolist() == [0, 0, 0] and s.tolist() == [30, 40, -1]
    # a box the crop must cover
    for i in range(50):
        b, s, _ = ti.sample_distorted_bounding_box([100, 100, 3], [[[0.4, 0.4, 0.6, 0.6]]], seed=i,
                                                   min_object_covered=1.0, area_range=(0.05, 1.0))
        assert b[0] <= 40 and b[1] <= 40 and b[0] + s[0] >= 60 and b[1] + s[1] >= 60
    with pytest.raises(ValueError, match="bounding boxes"):
        ti.sample_distorted_bounding_box([10, 10, 3])
