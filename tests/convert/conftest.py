"""Fixtures for the converter tests: one tiny ImageNet tree and its reference conversion."""

from __future__ import annotations

import pytest

pytest.importorskip("PIL")

from tests.convert.helpers import make_imagenet_tree  # noqa: E402

# shard counts used by every ImageNet test (14 training, 5 validation images)
TRAIN_SHARDS = 7
VALIDATION_SHARDS = 2


@pytest.fixture(scope="session")
def imagenet_tree(tmp_path_factory):
    """``(root, info)``: the raw tree and what each image is (see helpers.make_imagenet_tree)."""
    root = tmp_path_factory.mktemp("imagenet_raw")
    info = make_imagenet_tree(str(root))
    return str(root), info


@pytest.fixture(scope="session")
def imagenet_reference(imagenet_tree, tmp_path_factory):
    """An uninterrupted one-worker conversion (scratch layout): the bytes others must match."""
    from tpudata.convert import convert_imagenet

    out = tmp_path_factory.mktemp("imagenet_reference")
    results = convert_imagenet(imagenet_tree[0], str(out), num_train_shards=TRAIN_SHARDS,
                               num_validation_shards=VALIDATION_SHARDS, split_subdirs=True,
                               workers=1)
    return str(out), results
