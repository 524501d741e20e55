"""The executor's checkpoints carry a packed, mixed, tokenized input's state: a run stopped and
resumed trains on exactly the rows of the uninterrupted run (the packer's partial rows packed
again from its position), and on another number of hosts every document's tokens once
(elastic_hosts: the state moves)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.text.helpers import doc_ids, ids_from_text, write_text_corpus
from tpudata import tpu
from tpudata.dataset import Dataset, TFRecordDataset, elastic_hosts
from tpudata.text import pack, tokenize

DOCS = {"web": 120, "code": 70}
CID = {"web": 1, "code": 2}
EOS = 1


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    write_text_corpus(root, {name: (CID[name], n) for name, n in DOCS.items()}, spread=11)
    return root


def input_fn_of(root, repeat):
    def input_fn(params):
        ctx, size = params["context"], params["batch_size"]

        def make(hosts, host):
            comps = {n: TFRecordDataset(str(root / f"{n}.tfrecord")) for n in DOCS}
            mixed = Dataset.mix(comps, {"web": 2, "code": 1}, seed=3, repeat=repeat,
                                num_shards=hosts, shard_index=host)
            ids = tokenize(mixed, ids_from_text, feature="text", record="example", add_eos=EOS,
                           max_length=8)
            rows = pack(ids, {"text": 12}, method="first_fit", num_bins=6, seed=1)
            return rows.batch(size, drop_remainder=True)

        return elastic_hosts(make, ctx.num_hosts, ctx.current_host)

    return input_fn


def recording_model(seen: list):
    """Fits one number to the rows' share of loss-bearing tokens; records each step's tokens."""
    def model_fn(features, labels, mode, params):
        real = (features["text_segment_ids"] != 0) & (features["text"] != EOS)
        seen.append(np.sort(features["text"][real]))
        w = tpu.get_variable("w", ())
        target = float(real.mean())
        loss = float((w - target) ** 2)
        return tpu.TPUEstimatorSpec(mode, loss=loss, train_op=tpu.CrossShardOptimizer(
            tpu.SGD(0.5)).minimize(loss, {"w": np.float32(2 * (w - target))}))

    return model_fn


def make(model_fn, model_dir=None, hosts=1):
    cfg = tpu.RunConfig(model_dir=model_dir, save_checkpoints_steps=3,
                        tpu_config=tpu.TPUConfig(iterations_per_loop=3, num_shards=2,
                                                 num_hosts=hosts))
    return tpu.TPUEstimator(model_fn, cfg, train_batch_size=4, backend="numpy", verbose=False)


@pytest.mark.parametrize("stop", [3, 4])
def test_resume_trains_on_the_rows_of_the_uninterrupted_run(corpus, tmp_path, stop):
    input_fn = input_fn_of(corpus, True)
    whole: list = []
    ref = make(recording_model(whole)).train(input_fn, steps=9)
    first: list = []
    make(recording_model(first), str(tmp_path)).train(input_fn, steps=stop)
    rest: list = []
    resumed = make(recording_model(rest), str(tmp_path))
    resumed.train(input_fn, max_steps=9)
    assert resumed.global_step == 9 and len(first + rest) == len(whole)
    for a, b in zip(first + rest, whole):
        np.testing.assert_array_equal(a, b)
    assert resumed.get_variable_value("w") == ref.get_variable_value("w")
    state = resumed.input_state[0]  # the packer's position, not its rows
    assert len(json.dumps(state)) < 2048


def test_checkpoint_of_two_hosts_resumes_on_one_with_every_token_once(corpus, tmp_path):
    input_fn = input_fn_of(corpus, False)
    seen: list = []
    make(recording_model(seen), str(tmp_path), hosts=2).train(input_fn, steps=4)
    est = make(recording_model(seen), str(tmp_path), hosts=1)
    est.train(input_fn, max_steps=10_000)  # to the end of the input (logged)
    assert 4 < est.global_step < 10_000
    got = np.concatenate(seen).tolist()
    want = [t for name, n in DOCS.items() for i in range(n) for t in doc_ids(CID[name], i, 11)]
    assert len(got) == len(set(got))  # none twice
    missing = set(want) - set(got)
    # only rows that did not fill a last batch are dropped (drop_remainder): the host runs its
    # own pipeline and drains the two old hosts', each may leave one row of 12 tokens
    assert len(missing) <= 3 * 12, len(missing)
