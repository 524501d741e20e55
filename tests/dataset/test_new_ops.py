"""enumerate, concatenate, scan, from_generator, flat_map, apply: tf.data's orders (golden
files written by live tf.data with tests/data/make_dataset_golden.py), specs, errors, state."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from tpudata.dataset import UNKNOWN, Dataset, TensorSpec
from tpudata.dataset.core.spec import DatasetSpec
from tpudata.dataset.core.nest import flatten
from tpudata.errors import SpecError
from tests.dataset.helpers import check_restore_everywhere, outputs

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
sys.path.insert(0, DATA)
from dataset_op_cases import CASES, SAMPLED  # noqa: E402

with open(os.path.join(DATA, "golden", "dataset_ops.json")) as f:
    GOLDEN = json.load(f)["orders"]


def _build(name):
    return {**CASES, **SAMPLED}[name](Dataset, TensorSpec, bytes)


def _text(x):
    """Golden files hold bytes as latin-1 text."""
    if isinstance(x, bytes):
        return x.decode("latin-1")
    if isinstance(x, dict):
        return {k: _text(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_text(v) for v in x]
    return x


def _spec(ds):
    return [[[d for d in s.shape], "string" if s.dtype == object else str(s.dtype)]
            for s in flatten(ds.element_spec)[1]]


def test_golden_covers_every_case():
    assert sorted(GOLDEN) == sorted({**CASES, **SAMPLED})


@pytest.mark.parametrize("name", sorted(CASES))
def test_order_and_spec_like_tf_data(name):
    ds = _build(name)
    assert _text(outputs(ds)) == GOLDEN[name]["elements"]
    assert _spec(ds) == GOLDEN[name]["spec"]
    assert ds.cardinality() == GOLDEN[name]["cardinality"]


@pytest.mark.parametrize("name", sorted(SAMPLED))
def test_sampled_elements_and_spec_like_tf_data(name):
    ds = _build(name)
    assert sorted(_text(outputs(ds))) == GOLDEN[name]["sorted_elements"]
    assert _spec(ds) == GOLDEN[name]["spec"]


@pytest.mark.parametrize("name", sorted(CASES) + sorted(SAMPLED))
def test_restore_at_every_element(name):
    out = check_restore_everywhere(lambda: _build(name))
    if name in CASES:
        assert _text(out) == GOLDEN[name]["elements"]
    else:
        assert sorted(out) == GOLDEN[name]["sorted_elements"]


def test_dtypes_survive_a_checkpoint():
    def make():
        return Dataset.range(6).scan((np.int64(0), np.float32(1.0)),
                                     lambda s, x: ((s[0] + x, s[1] * np.float32(1.5)), s))

    it = make().iterator()
    for _ in range(3):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    it.close()
    with make().iterator(state) as resumed:
        total, scale = next(resumed)
    assert (type(total), type(scale)) == (np.int64, np.float32)
    assert (int(total), float(scale)) == (3, 1.5 ** 3)


def test_enumerate_and_concatenate_cardinality():
    assert Dataset.range(5).enumerate().cardinality() == 5
    assert Dataset.range(5).concatenate(Dataset.range(3)).cardinality() == 8
    assert Dataset.range(5).concatenate(Dataset.range(3).repeat()).cardinality() == -1
    assert Dataset.range(5).concatenate(Dataset.range(3).filter(bool)).cardinality() == UNKNOWN


def test_concatenate_refuses_different_structures_and_dtypes():
    with pytest.raises(SpecError, match="different structures"):
        Dataset.range(3).concatenate(Dataset.range(3).enumerate())
    with pytest.raises(SpecError, match="different dtypes"):
        Dataset.range(3).concatenate(Dataset.range(3, dtype=np.int32))
    with pytest.raises(TypeError, match="needs a Dataset"):
        Dataset.range(3).concatenate([1, 2])
    merged = Dataset.range(3).batch(2, drop_remainder=True).concatenate(Dataset.range(3).batch(3))
    assert merged.element_spec == TensorSpec((None,), np.dtype(np.int64))


def test_enumerate_needs_an_integer():
    with pytest.raises(TypeError, match="integer"):
        Dataset.range(3).enumerate(start=1.5)


def test_scan_errors_name_the_problem():
    with pytest.raises(SpecError, match="initial state's is int64"):
        list(Dataset.range(3).scan(np.int64(0), lambda s, x: (s + 0.5, x)))
    with pytest.raises(SpecError, match="structure"):
        list(Dataset.range(3).scan(np.int64(0), lambda s, x: ((s, s), x)))
    with pytest.raises(SpecError, match=r"\(new_state, output_element\)"):
        list(Dataset.range(3).scan(np.int64(0), lambda s, x: s + x))


def test_scan_calls_the_function_on_demand():
    calls = []

    def fn(s, x):
        calls.append(int(x))
        return s + x, s

    assert outputs(Dataset.range(1000).scan(np.int64(0), fn).take(4)) == [0, 0, 1, 3]
    assert calls == [0, 1, 2, 3]


def test_from_generator_converts_and_checks_like_tf():
    sig = TensorSpec((2,), np.float32)
    assert [x.dtype for x in Dataset.from_generator(lambda: [[1, 2]], output_signature=sig)] == [
        np.float32]
    with pytest.raises(SpecError, match=r"shape \(3,\) where the signature has \(2,\)"):
        list(Dataset.from_generator(lambda: [[1, 2, 3]], output_signature=sig))
    with pytest.raises(SpecError, match="does not convert to float32"):
        list(Dataset.from_generator(lambda: ["abc"], output_signature=sig))
    with pytest.raises(SpecError, match="structure"):
        list(Dataset.from_generator(lambda: [(1, 2)], output_signature={"a": sig}))
    with pytest.raises(TypeError, match="output_signature"):
        Dataset.from_generator(lambda: [1])
    with pytest.raises(TypeError, match="callable"):
        Dataset.from_generator(iter([1, 2]), output_signature=sig)
    assert Dataset.from_generator(lambda: [1], output_signature=sig).cardinality() == UNKNOWN


def test_from_generator_deprecated_types_and_shapes():
    ds = Dataset.from_generator(lambda: (((i, [i] * 2) for i in range(3))),
                                output_types=(np.int64, np.int32), output_shapes=((), [2]))
    assert ds.element_spec == (TensorSpec((), np.dtype(np.int64)), TensorSpec((2,), np.dtype(np.int32)))
    assert outputs(ds) == [[0, [0, 0]], [1, [1, 1]], [2, [2, 2]]]


def test_from_generator_restore_replays_by_count():
    opened = []

    def gen():
        opened.append(1)
        yield from range(10)

    ds = Dataset.from_generator(gen, output_signature=TensorSpec((), np.int64))
    it = ds.iterator()
    assert [int(next(it)) for _ in range(4)] == [0, 1, 2, 3]
    state = it.get_state()
    it.close()
    assert outputs_from(ds, state) == list(range(4, 10))
    assert len(opened) == 2  # the restore called the generator again

    short = Dataset.from_generator(lambda: iter(range(2)), output_signature=TensorSpec((), np.int64))
    with pytest.raises(ValueError, match="same sequence"):
        short.iterator(state)


def outputs_from(ds, state):
    with ds.iterator(state) as it:
        return [int(x) for x in it]


def test_from_generator_closes_the_generator():
    closed = []

    def gen():
        try:
            yield from range(100)
        finally:
            closed.append(True)

    with Dataset.from_generator(gen, output_signature=TensorSpec((), np.int64)).iterator() as it:
        next(it)
    assert closed == [True]


def test_apply_must_return_a_dataset():
    with pytest.raises(TypeError, match="must return a Dataset"):
        Dataset.range(3).apply(lambda ds: list(ds))


def _two(seed=None, **kw):
    return Dataset.sample_from_datasets([Dataset.range(50), Dataset.range(100, 150)],
                                        seed=seed, **kw)


def test_sample_is_seeded_and_weighted():
    a, b = outputs(_two(1)), outputs(_two(1))
    assert a == b and sorted(a) == list(range(50)) + list(range(100, 150))
    assert outputs(_two(2)) != a
    ones = Dataset.sample_from_datasets([Dataset.range(1).repeat(), Dataset.range(1, 2).repeat()],
                                        weights=[1.0, 3.0], seed=4).take(20000)
    assert 0.73 < np.mean([int(x) for x in ones]) < 0.77
    assert _two(1).cardinality() == UNKNOWN
    assert Dataset.sample_from_datasets([Dataset.range(2).repeat(), Dataset.range(3)]
                                        ).cardinality() == -1


def test_sample_rerandomize_each_iteration():
    fixed = _two(3)
    assert outputs(fixed) == outputs(fixed)  # TF's default: the same picks every iteration
    again = _two(3, rerandomize_each_iteration=True)
    assert outputs(again) != outputs(again)
    assert outputs(_two(3).repeat(2))[:100] == outputs(_two(3).repeat(2))[100:]


def test_sample_unseeded_state_carries_its_seed():
    ds = _two()
    it = ds.iterator()
    for _ in range(30):
        next(it)
    state = it.get_state()
    rest = [int(x) for x in it]
    with ds.iterator(state) as resumed:
        assert [int(x) for x in resumed] == rest
    # a freshly built unseeded dataset takes the saved seed from the state (tests/dataset/test_seeds.py)
    with _two().iterator(state) as fresh:
        assert [int(x) for x in fresh] == rest


def test_sample_and_choose_errors():
    with pytest.raises(ValueError, match="same length"):
        Dataset.sample_from_datasets([Dataset.range(2), Dataset.range(2)], weights=[1.0])
    with pytest.raises(ValueError, match=">= 0"):
        Dataset.sample_from_datasets([Dataset.range(2), Dataset.range(2)], weights=[1.0, -1])
    with pytest.raises(ValueError, match="should not be empty"):
        Dataset.sample_from_datasets([])
    with pytest.raises(SpecError, match="sample_from_datasets: the datasets have different"):
        Dataset.sample_from_datasets([Dataset.range(2), Dataset.range(2, dtype=np.int32)])
    with pytest.raises(TypeError, match="scalar int64"):
        Dataset.choose_from_datasets([Dataset.range(2)], Dataset.range(2, dtype=np.int32))
    with pytest.raises(TypeError, match="should be a Dataset"):
        Dataset.choose_from_datasets([Dataset.range(2)], [0, 0])
    bad = Dataset.choose_from_datasets([Dataset.range(2)], Dataset.from_tensor_slices(
        np.array([0, 3], np.int64)))
    with pytest.raises(ValueError, match="out of range: 3"):
        outputs(bad)
    single = Dataset.range(4)
    assert Dataset.sample_from_datasets([single]) is single


def test_window_spec_and_cardinality_like_tf():
    ds = Dataset.from_tensor_slices({"a": np.arange(5), "b": np.arange(5.0)}).window(2)
    assert ds.element_spec == {"a": DatasetSpec(TensorSpec((), np.dtype(np.int64))),
                               "b": DatasetSpec(TensorSpec((), np.dtype(np.float64)))}
    # TF's WindowDatasetOp::CardinalityInternal
    assert Dataset.range(11).window(4, shift=3, drop_remainder=True).cardinality() == 3
    assert Dataset.range(11).window(4, shift=3).cardinality() == 4
    assert Dataset.range(3).window(2, stride=3, drop_remainder=True).cardinality() == 0
    assert Dataset.range(3).repeat().window(2).cardinality() == -1
    windows = list(Dataset.range(5).window(2))
    assert [[int(x) for x in w] for w in windows] == [[0, 1], [2, 3], [4]]
    with pytest.raises(ValueError, match="size must be a positive integer"):
        Dataset.range(3).window(0)
    with pytest.raises(ValueError, match="shift must be a positive integer"):
        Dataset.range(3).window(2, shift=-1)


def test_window_state_reads_the_buffer_again_instead_of_carrying_it():
    it = Dataset.range(100).window(40, shift=1).iterator()
    next(it)
    state = it.get_state()
    del state["pipeline"]  # what the state says of its pipeline (~150 bytes here)
    assert len(json.dumps(state)) < 300  # the 39 buffered elements are not in the state


def test_group_by_window_errors():
    with pytest.raises(ValueError, match="exactly one of"):
        Dataset.range(3).group_by_window(lambda x: x, lambda k, w: w)
    with pytest.raises(TypeError, match="scalar integer"):
        outputs(Dataset.range(3).group_by_window(lambda x: 0.5, lambda k, w: w, 2))
    with pytest.raises(ValueError, match="greater than zero"):
        outputs(Dataset.range(3).group_by_window(lambda x: x, lambda k, w: w,
                                                 window_size_func=lambda k: k - 1))
    with pytest.raises(TypeError, match="must return a Dataset"):
        outputs(Dataset.range(3).group_by_window(lambda x: x, lambda k, w: 1, 1))


def test_bucket_errors_like_tf():
    with pytest.raises(ValueError, match="len\\(bucket_boundaries\\) \\+ 1"):
        Dataset.range(3).bucket_by_sequence_length(lambda x: x, [1, 2], [1, 2])
    seqs = Dataset.range(1, 6).map(lambda x: np.arange(int(x)))
    with pytest.raises(ValueError, match="< max\\(bucket_boundaries\\)"):
        outputs(seqs.bucket_by_sequence_length(lambda s: len(s), [3], [2, 2],
                                               pad_to_bucket_boundary=True))


def test_rebatch_refuses_scalars_and_bad_sizes():
    with pytest.raises(ValueError, match="rank >= 1"):
        Dataset.range(4).rebatch(2)
    with pytest.raises(ValueError, match="positive integer"):
        Dataset.range(4).batch(2).rebatch([2, 0])
    assert Dataset.range(9).batch(2).rebatch([3, 3], drop_remainder=True).element_spec == \
        TensorSpec((3,), np.dtype(np.int64))
