"""Checkpoints hold the input state: a run stopped at step k and resumed consumes exactly the
records an uninterrupted run consumes (shuffled, interleaved TFRecords on fake GCS, both backends).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import tpudata
from tpudata import Dataset, TFRecordDataset, tpu

from fake_gcs.pytest_plugin import fake_gcs_server  # noqa: F401  (fixture)

N = 480  # records, ids 0..N-1
SPEC = {"id": tpudata.FixedLenFeature([], np.int64), "x": tpudata.FixedLenFeature([6], np.float32),
        "y": tpudata.FixedLenFeature([], np.int64)}
BUCKET = "gs://resume-test"
RNG = np.random.default_rng(5)
XS = RNG.standard_normal((N, 6)).astype(np.float32)
YS = (XS @ RNG.standard_normal((6, 3))).argmax(1)


@pytest.fixture
def shards(fake_gcs_server):  # noqa: F811
    tpudata.storage.gcs_filesystem().mkdir(BUCKET[5:])
    for s in range(12):
        with tpudata.TFRecordWriter(f"{BUCKET}/data/train-{s:05d}-of-00012") as w:
            for i in range(s, N, 12):
                w.write(tpudata.encode_example({"id": i, "x": XS[i], "y": int(YS[i])}))
    return f"{BUCKET}/data/train-*"


def input_fn(params):
    ctx = params["context"]
    files = Dataset.list_files(f"{BUCKET}/data/train-*", shuffle=False).shard(ctx.num_hosts, ctx.current_host)
    return (files.interleave(lambda f: TFRecordDataset(f), cycle_length=3, num_parallel_calls=3)
            .repeat().shuffle(150, seed=7).parse(SPEC)
            .batch(params["batch_size"], drop_remainder=True).map(tpu.make_tpu_ready).prefetch(4))


def numpy_model(seen: list):
    """Softmax regression that records, on the host, the ids of every batch a step consumes."""
    base = tpu.models.softmax_regression(3, feature_key="x", label_key="y", learning_rate=0.2)

    def model_fn(features, labels, mode, params):
        if mode == tpu.ModeKeys.TRAIN:
            seen.append(np.array(features["id"]))
        return base(features, labels, mode, params)

    return model_fn


def jax_model(features, labels, mode, params):
    """Softmax regression plus ``counts[id]``: with SGD(1) and a summed all-reduce, the gradient
    of ``-sum(counts[ids])`` adds 1 to ``counts[i]`` for every record i a step consumes."""
    import jax
    import jax.numpy as jnp

    x = features["x"]
    W = tpu.get_variable("W", (6, 3), initializer=tpu.initializers.glorot_uniform)
    counts = tpu.get_variable("counts", (N,), initializer=tpu.initializers.zeros)
    logp = jax.nn.log_softmax(x @ W)
    xent = -jnp.mean(jnp.take_along_axis(logp, features["y"][:, None], 1)) / 8
    loss = xent - jnp.sum(counts[features["id"]])
    opt = tpu.CrossShardOptimizer(tpu.SGD(1.0), reduction="sum")
    return tpu.TPUEstimatorSpec(mode, loss=loss, train_op=opt.minimize(loss))


def make(backend, model_fn, model_dir=None, hosts=1, loop=5):
    cfg = tpu.RunConfig(model_dir=model_dir, save_checkpoints_steps=5,
                        tpu_config=tpu.TPUConfig(iterations_per_loop=loop, num_shards=4,
                                                 num_hosts=hosts))
    return tpu.TPUEstimator(model_fn, cfg, train_batch_size=32, backend=backend)


@pytest.mark.parametrize("hosts", [1, 2])
@pytest.mark.parametrize("stop", [10, 7])  # at a loop boundary, and after a shorter final loop
def test_numpy_resume_consumes_exactly_the_uninterrupted_records(shards, stop, hosts):
    whole: list = []
    make("numpy", numpy_model(whole), hosts=hosts).train(input_fn, steps=20)
    first: list = []
    make("numpy", numpy_model(first), f"{BUCKET}/m{stop}{hosts}", hosts).train(input_fn, steps=stop)
    rest: list = []
    resumed = make("numpy", numpy_model(rest), f"{BUCKET}/m{stop}{hosts}", hosts)
    resumed.train(input_fn, max_steps=20)
    assert resumed.global_step == 20
    expect = np.concatenate(whole)
    assert len(expect) == 20 * 32
    np.testing.assert_array_equal(np.concatenate(first + rest), expect)  # same records, same order
    # a resume that restarts the input (the old behaviour) would see the first batches again
    again: list = []
    make("numpy", numpy_model(again), f"{BUCKET}/m{stop}{hosts}", hosts).train(
        input_fn, max_steps=25, restore_input=False)
    assert not np.array_equal(np.concatenate(again), expect[stop * 32:(stop + 5) * 32])
    np.testing.assert_array_equal(np.concatenate(again), expect[:5 * 32])


def test_checkpoint_holds_the_state_of_the_last_consumed_batch(shards):
    seen: list = []
    est = make("numpy", numpy_model(seen), f"{BUCKET}/state")
    est.train(input_fn, steps=10)
    with np.load(__import__("io").BytesIO(tpudata.storage.read_bytes(
            f"{BUCKET}/state/model.ckpt-00000010.npz"))) as data:
        state = json.loads(str(data["input_state"]))
    assert state == est.input_state and len(state) == 1
    # the saved state restarts the pipeline right after the 10th step's 4 replica batches,
    # although the infeed and prefetch had read further ahead
    it = input_fn({"batch_size": 8, "context": tpu.TPUContext(4, 1, 0, "train")}).iterator(state[0])
    nxt = np.concatenate([next(it)["id"] for _ in range(4)])
    later: list = []
    make("numpy", numpy_model(later), f"{BUCKET}/state").train(input_fn, steps=1)
    np.testing.assert_array_equal(np.concatenate(later), nxt)


@pytest.mark.parametrize("stop", [7])  # loops of 5, 2 then 5, 5, 3 (10 is covered on numpy)
def test_jax_resume_consumes_exactly_the_uninterrupted_records(shards, stop):
    pytest.importorskip("jax")
    whole = make("jax", jax_model).train(input_fn, steps=20)
    counts = whole.get_variable_value("counts")
    assert counts.sum() == 20 * 32 and counts.max() >= 1  # every consumed record counted once

    d = f"{BUCKET}/jax{stop}"
    make("jax", jax_model, d).train(input_fn, steps=stop)
    resumed = make("jax", jax_model, d)
    resumed.train(input_fn, max_steps=20)
    assert resumed.global_step == 20
    np.testing.assert_array_equal(resumed.get_variable_value("counts"), counts)
    np.testing.assert_allclose(resumed.get_variable_value("W"), whole.get_variable_value("W"),
                               rtol=0, atol=1e-6)
    # restarting the input instead consumes other records
    naive = make("jax", jax_model, f"{BUCKET}/naive{stop}")
    naive.train(input_fn, steps=stop)
    naive.train(input_fn, max_steps=20, restore_input=False)
    assert naive.get_variable_value("counts").sum() == 20 * 32
    assert not np.array_equal(naive.get_variable_value("counts"), counts)


def test_checkpoints_move_between_backends(shards):
    pytest.importorskip("jax")
    seen: list = []
    d = f"{BUCKET}/cross"
    make("numpy", numpy_model(seen), d).train(input_fn, steps=5)
    on_jax = make("jax", tpu.models.softmax_regression(3, feature_key="x", label_key="y",
                                                        learning_rate=0.2), d)
    on_jax.train(input_fn, max_steps=10)
    whole: list = []
    ref = make("numpy", numpy_model(whole)).train(input_fn, steps=10)
    np.testing.assert_allclose(on_jax.get_variable_value("softmax/W"), ref.get_variable_value("softmax/W"),
                               atol=1e-5)


def test_a_different_input_cannot_silently_take_the_saved_state(shards):
    seen: list = []
    d = f"{BUCKET}/other"
    make("numpy", numpy_model(seen), d).train(input_fn, steps=5)

    def other(params):
        ids = np.arange(N, dtype=np.int32)
        return Dataset.from_tensor_slices({"id": ids, "x": XS, "y": YS.astype(np.int32)}).repeat().batch(
            params["batch_size"], drop_remainder=True)

    with pytest.raises(ValueError, match="does not fit the Dataset") as info:
        make("numpy", numpy_model(seen), d).train(other, max_steps=10)
    assert "restore_input=False" in str(info.value)
    est = make("numpy", numpy_model(seen), d).train(other, max_steps=10, restore_input=False)
    assert est.global_step == 10
    assert est.input_state is not None  # the new input's state is what the checkpoint holds now

    def plain(params):  # an iterable of batches has no state to resume from
        return [next(iter(other(params)))] * 100

    with pytest.raises(ValueError, match="not a tpudata Dataset"):
        make("numpy", numpy_model(seen), d).train(plain, max_steps=12)
