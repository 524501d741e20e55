"""Packed text into JAX: global arrays whose segment ids and positions are sharded with their
tokens, a restored DeviceIterator giving the uninterrupted run's batches, and docs/text.md's
tiny causal LM run as written (8 CPU devices)."""

from __future__ import annotations

import json

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from jax.sharding import Mesh  # noqa: E402

import tpudata.jax as tj  # noqa: E402
from tests.jax.helpers import run_jax_script  # noqa: E402
from tests.readme import code_blocks  # noqa: E402
from tests.text.helpers import id_docs  # noqa: E402
from tpudata.dataset import Dataset, elastic_hosts  # noqa: E402
from tpudata.text import pack  # noqa: E402

L = 24


def make(hosts: int, host: int) -> Dataset:
    mixed = Dataset.mix({"a": id_docs(1, 200, 19), "b": id_docs(2, 80, 19)}, {"a": 2, "b": 1}, seed=4,
                        repeat=True, num_shards=hosts, shard_index=host)
    return pack(mixed, {"tokens": L}, method="best_fit", num_bins=8,
                loss_mask="next_token").batch(8)


def test_packed_rows_are_global_arrays_sharded_with_their_tokens():
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
    host = elastic_hosts(make, 1, 0)
    rows = next(host.iterator())
    with tj.DeviceIterator(host.iterator(), mesh) as it:
        batch = next(it)
    keys = ["tokens", "tokens_segment_ids", "tokens_positions", "tokens_loss_mask"]
    assert sorted(batch) == sorted(keys)
    for k in keys:
        assert batch[k].shape == (8, L) and batch[k].sharding == batch["tokens"].sharding
        np.testing.assert_array_equal(np.asarray(batch[k]), rows[k])
    for tok, seg, pos in zip(*(batch[k].addressable_shards for k in keys[:3])):
        assert tok.device == seg.device == pos.device and tok.index == seg.index == pos.index
        assert tok.data.shape == (2, L)  # 8 rows over the 4 "data" devices


def test_restored_device_iterator_gives_the_uninterrupted_batches():
    mesh = Mesh(np.array(jax.devices()), ("data",))
    ds = elastic_hosts(make, 1, 0)
    with tj.DeviceIterator(ds.iterator(), mesh) as it:
        whole = [jax.tree.map(np.asarray, b) for _, b in zip(range(12), it)]
    got, state = [], None
    for k in (3, 1, 5, 3):
        with tj.DeviceIterator(ds.iterator(state), mesh, depth=3) as it:
            got += [jax.tree.map(np.asarray, b) for _, b in zip(range(k), it)]
            state = json.loads(json.dumps(it.get_state()))
            assert len(json.dumps(state)) < 2048
    for a, b in zip(got, whole, strict=True):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


def test_the_docs_tiny_causal_lm_trains_and_resumes_exactly(tmp_path):
    (block,) = code_blocks("Training: a tiny causal LM", "docs/text.md")
    assert run_jax_script(block, tmp_path, "lm.py").startswith("loss ")
