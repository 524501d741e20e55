"""The TPU executor with several hosts over uneven files: input_fn takes its equal step count
from tpudata.distribute (split_batches), so evaluation covers every example exactly once."""

from __future__ import annotations

import numpy as np
import pytest

import tpudata
from tpudata import tpu
from tpudata.distribute import file_record_counts, split_batches
from tpudata.tfrecord import write_records

SPEC = {"x": tpudata.FixedLenFeature([4], np.float32), "y": tpudata.FixedLenFeature([], np.int64)}
SIZES = (40, 8, 24, 8)  # file split on 2 hosts: 64 records vs 16


def _files(tmp_path):
    rng = np.random.default_rng(0)
    files = []
    for k, n in enumerate(SIZES):
        url = str(tmp_path / f"e-{k:05d}-of-{len(SIZES):05d}")
        write_records(url, [tpudata.encode_example({"x": rng.standard_normal(4).astype(np.float32),
                                                    "y": int(rng.integers(0, 3))}) for _ in range(n)])
        files.append(url)
    return files


def _estimator(num_hosts):
    config = tpu.RunConfig(tpu_config=tpu.TPUConfig(iterations_per_loop=4, num_shards=4,
                                                    num_hosts=num_hosts))
    model_fn = tpu.models.softmax_regression(3, feature_key="x", label_key="y")
    return tpu.TPUEstimator(model_fn, config, eval_batch_size=16, train_batch_size=16)


def test_multi_host_evaluation_sees_every_example_once(tmp_path):
    files = _files(tmp_path)
    counts = file_record_counts(files, progress=False)

    def input_fn(params):
        ctx = params["context"]
        ds = split_batches(files, counts, params["batch_size"], ctx.current_host, ctx.num_hosts,
                           pipeline=lambda d, _: d.parse(SPEC), split="files")
        return ds.map(tpu.make_tpu_ready)

    result = _estimator(2).evaluate(input_fn)
    assert result["examples"] == sum(SIZES)
    single = _estimator(1).evaluate(input_fn)
    assert single["examples"] == sum(SIZES) and single["loss"] == pytest.approx(result["loss"])


def test_the_naive_formula_runs_one_host_out_of_batches(tmp_path):
    files = _files(tmp_path)
    naive = int(np.ceil(np.ceil(sum(SIZES) / 2) / 4))  # 10 batches of 4, host 0 needs 16
    ds = (tpudata.Dataset.from_tensor_slices(files).shard(2, 0)
          .interleave(lambda f: tpudata.TFRecordDataset(f), cycle_length=1).parse(SPEC)
          .batch(4, pad_remainder=True, num_batches=naive))
    with pytest.raises(Exception, match="num_batches"):
        list(ds)
