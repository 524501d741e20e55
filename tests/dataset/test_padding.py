"""Exact-epoch evaluation: padded final batches with a zero-weight mask, across several hosts."""

from __future__ import annotations

import numpy as np
import pytest

from tpudata.dataset import Dataset, TFRecordDataset
from tests.dataset.helpers import SPEC, outputs, write_shards

B = 4


@pytest.mark.parametrize("n", [0, 1, B - 1, B, B + 1, 3 * B + 2])
def test_single_host_mask_counts_every_record_once(n):
    ds = Dataset.from_tensor_slices({"x": np.arange(n, dtype=np.int64)}).batch(B, pad_remainder=True)
    batches = outputs(ds)
    assert all(len(b["x"]) == B and len(b["weight"]) == B for b in batches)
    assert len(batches) == -(-n // B)
    weights = np.array([w for b in batches for w in b["weight"]])
    xs = np.array([x for b in batches for x in b["x"]])
    assert weights.sum() == n and weights.dtype == np.float64 or weights.sum() == n
    assert xs[weights == 1].tolist() == list(range(n))
    assert (xs[weights == 0] == 0).all()  # padding is zeros


@pytest.mark.parametrize("n", [0, 1, B - 1, B, B + 1, 3 * B + 2])
@pytest.mark.parametrize("hosts", [1, 2, 3])
def test_several_hosts_run_the_same_number_of_steps(tmp_path, n, hosts):
    paths = write_shards(tmp_path, 2, [n // 2, n - n // 2])
    per_host = -(-n // hosts)
    steps = -(-per_host // B)
    seen, total_weight = [], 0.0
    for h in range(hosts):
        ds = (TFRecordDataset(paths).shard(hosts, h).parse(SPEC)
              .batch(B, pad_remainder=True, num_batches=steps))
        batches = outputs(ds)
        assert len(batches) == steps  # every host runs the same number of steps
        for b in batches:
            assert len(b["id"]) == B and b["weight"].count(1.0) + b["weight"].count(0.0) == B
            seen += [i for i, w in zip(b["id"], b["weight"]) if w == 1.0]
            total_weight += sum(b["weight"])
            assert all(t == b"" for t, w in zip(b["tag"], b["weight"]) if w == 0.0)
    assert total_weight == n and sorted(seen) == list(range(n))


def test_mask_goes_with_features_of_a_tuple():
    ds = Dataset.from_tensor_slices(({"x": np.arange(3)}, np.arange(3) * 10)).batch(2, pad_remainder=True)
    (f0, l0), (f1, l1) = outputs(ds)
    assert f1 == {"x": [2, 0], "weight": [1.0, 0.0]} and l1 == [20, 0]


def test_padding_errors():
    with pytest.raises(TypeError, match="must be dicts"):
        outputs(Dataset.range(3).batch(2, pad_remainder=True))
    with pytest.raises(ValueError, match="more than num_batches"):
        outputs(Dataset.from_tensor_slices({"x": np.arange(9)}).batch(2, pad_remainder=True,
                                                                       num_batches=2))
    with pytest.raises(ValueError, match="not both"):
        Dataset.range(3).batch(2, drop_remainder=True, pad_remainder=True)
    with pytest.raises(ValueError, match="needs pad_remainder"):
        Dataset.range(3).batch(2, num_batches=3)
    with pytest.raises(ValueError, match="already have"):
        outputs(Dataset.from_tensor_slices({"weight": np.arange(3)}).batch(2, pad_remainder=True))


def test_varlen_and_bytes_padding(tmp_path):
    import tpudata

    paths = write_shards(tmp_path, 1, 3, lambda i: {"v": np.arange(i + 1, dtype=np.int64), "s": b"x%d" % i})
    spec = {"v": tpudata.VarLenFeature(np.int64), "s": tpudata.FixedLenFeature([], bytes)}
    (b0, b1) = list(TFRecordDataset(paths).parse(spec).batch(2, pad_remainder=True))
    assert b1["v"].to_list()[1].tolist() == [] and b1["s"].tolist() == [b"x2", b""]
    assert b1["weight"].tolist() == [1.0, 0.0] and b1["weight"].dtype == np.float32
