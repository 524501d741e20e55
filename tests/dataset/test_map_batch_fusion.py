"""The map-and-batch fusion (tpudata.dataset.ops.map_batch) as an optimisation pass: which graphs
it rewrites, and that a fused pipeline gives the unfused one's elements, states and errors.

A stand-in batchable function (``times_ten``) keeps these tests independent of tpudata.image
(tests/image/test_fusion.py runs the real presets)."""

from __future__ import annotations

import functools
import logging

import numpy as np
import pytest

from tpudata.dataset import Dataset, Options
from tpudata.dataset.core.deferred import BatchForm, Deferred, deferring
from tpudata.dataset.core.optimize import optimize, rewrites
from tpudata.dataset.ops.map_batch import MapAndBatchDataset, calls_batch_form


class Bad(ValueError):
    def __init__(self, message, index):
        super().__init__(message)
        self.index = index


class TimesTen(BatchForm):
    name = "times ten"

    def __init__(self):
        self.calls = []  # batch sizes run

    def run(self, key, payloads):
        self.calls.append(len(payloads))
        for i, p in enumerate(payloads):
            if p < 0:
                raise Bad(f"item {i} of {len(payloads)} is negative", i)
        return np.array([p * 10 + key for p in payloads], np.int64)


FORM = TimesTen()


def times_ten(x, plus=0):
    """``x * 10 + plus``, its work deferred to the batch under a fused map-and-batch."""
    x = int(x)
    if deferring():
        return Deferred(FORM, int(plus), x, (), np.dtype(np.int64))
    if x < 0:
        raise Bad(f"item 0 of 1 is negative", 0)
    return np.int64(x * 10 + plus)


times_ten.__tpudata_batched__ = "times_ten_batch"


def unfused(ds):
    options = Options()
    options.experimental_optimization.map_and_batch_fusion = False
    return ds.with_options(options)


def elements(ds):
    with ds.iterator() as it:
        return [tuple(np.asarray(v).copy() for v in b) if isinstance(b, tuple) else np.asarray(b).copy()
                for b in it]


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for u, v in zip(x if isinstance(x, tuple) else (x,), y if isinstance(y, tuple) else (y,)):
            assert u.dtype == v.dtype and u.shape == v.shape
            np.testing.assert_array_equal(u, v)


def pipeline(fn=None, n=23, batch=4, drop=False, calls=None):
    fn = fn or (lambda x: (times_ten(x, plus=3), x * 2))
    return Dataset.range(n).shuffle(7, seed=3).map(fn, num_parallel_calls=calls).batch(batch, drop_remainder=drop)


def test_the_pass_is_registered_and_fuses_map_then_batch_only_when_the_function_batches():
    assert "map_and_batch_fusion" in rewrites()
    fused = optimize(pipeline())
    assert isinstance(fused, MapAndBatchDataset)
    assert repr(fused).endswith("-> map_and_batch(pipeline.<locals>.<lambda>, batch_size=4)>")
    # not fusable: the function calls nothing with a batch form; a process map; map then something else
    for ds in (Dataset.range(8).map(lambda x: x * 2).batch(4),
               Dataset.range(8).map(times_ten, use_processes=True).batch(4),
               Dataset.range(8).map(times_ten).prefetch(1).batch(4),
               Dataset.range(8).map(times_ten).padded_batch(4)):
        assert optimize(ds) is ds
        assert "map_and_batch" not in repr(optimize(ds))
    assert optimize(unfused(pipeline())) is not None
    assert "map_and_batch" not in repr(optimize(unfused(pipeline())))


def test_the_users_graph_is_never_changed_and_ops_above_are_copies():
    ds = pipeline().prefetch(2).take(3)
    before = repr(ds)
    out = optimize(ds)
    assert repr(ds) == before and "map_and_batch" not in before
    assert "map_and_batch" in repr(out) and out is not ds
    shuffle = ds.input.input.input.input
    # the shuffle below is a copy only because the required shuffle_rebuild pass configures it;
    # the source under it, which no pass changes, is shared
    assert out.input.input.input is not shuffle and shuffle._rebuild is None
    assert out.input.input.input.input is shuffle.input


def test_nothing_below_a_cache_is_rewritten():
    ds = pipeline().cache()
    assert optimize(ds) is ds


@pytest.mark.parametrize("calls", [None, 2])
@pytest.mark.parametrize("drop", [False, True])
def test_fused_batches_equal_unfused_and_run_one_batch_call_each(calls, drop):
    FORM.calls.clear()
    want = elements(unfused(pipeline(drop=drop, calls=calls)))
    assert FORM.calls == []
    got = elements(pipeline(drop=drop, calls=calls))
    assert_same(got, want)
    # one call per batch; a dropped remainder is computed too (its errors raise, as unfused)
    assert FORM.calls == [4] * 5 + [3]


def test_recognised_forms_of_the_function():
    plus = functools.partial(times_ten, plus=1)

    def helper(x):
        return times_ten(x)

    class Prep:
        def __call__(self, x):
            return helper(x)

    for fn in (times_ten, plus, lambda x: helper(x), Prep(), lambda x: {"y": plus(x)}):
        assert calls_batch_form(fn), fn
    assert not calls_batch_form(lambda x: x + 1)
    assert not calls_batch_form(abs)


def test_a_function_that_uses_the_result_runs_unfused_from_its_first_call(caplog):
    FORM.calls.clear()
    for fn in (lambda x: times_ten(x) + 1,  # arithmetic on the placeholder
               lambda x: np.asarray(times_ten(x)),  # numpy
               lambda x: times_ten(x).item(),  # an attribute
               lambda x: [times_ten(x)][0] * 1,
               lambda x: (times_ten(x), x)[1]):  # made and dropped
        ds = Dataset.range(10).map(fn).batch(4)
        assert isinstance(optimize(ds), MapAndBatchDataset)  # the code's names look fusable
        with caplog.at_level(logging.INFO, "tpudata.dataset.ops.map_batch"):
            assert_same(elements(ds), elements(unfused(ds)))
        assert "runs unfused" in caplog.text
    assert FORM.calls == []


def test_a_function_called_once_unfused_then_deferred_is_counted_once_per_element():
    seen = []

    def fn(x):
        seen.append(int(x))
        return times_ten(x)

    assert_same(elements(Dataset.range(9).map(fn).batch(4)), elements(unfused(Dataset.range(9).map(fn).batch(4))))
    assert seen == list(range(9)) * 2


def test_state_restores_mid_epoch_identically_and_across_fused_and_unfused():
    full = elements(pipeline())
    for take_from, restore_into in ((pipeline, pipeline), (pipeline, lambda: unfused(pipeline())),
                                    (lambda: unfused(pipeline()), pipeline)):
        with take_from().iterator() as it:
            next(it), next(it)
            state = it.get_state()
        with restore_into().iterator(state) as it:
            rest = [tuple(np.asarray(v).copy() for v in b) for b in it]
        assert_same(rest, full[2:])


def test_a_failing_row_raises_its_own_unfused_error():
    ds = Dataset.from_tensor_slices(np.array([1, 2, 3, -4, 5, 6])).map(times_ten).batch(6)
    with pytest.raises(Bad) as unfused_error:
        elements(unfused(ds))
    with pytest.raises(Bad) as fused_error:
        elements(ds)
    assert str(fused_error.value) == str(unfused_error.value) == "item 0 of 1 is negative"
    assert fused_error.value.__cause__ is None and fused_error.value.__suppress_context__


def test_under_ignore_errors_nothing_is_deferred_and_failing_elements_are_dropped():
    FORM.calls.clear()
    ds = Dataset.from_tensor_slices(np.array([1, -2, 3, 4, -5, 6, 7])).map(times_ten).batch(3).ignore_errors(
        log_warning=False)
    assert [b.tolist() for b in ds] == [[10, 30, 40], [60, 70]]
    assert FORM.calls == []


def test_mixed_results_in_one_component_are_stacked_as_unfused():
    FORM.calls.clear()

    def fn(x):  # element 1 is deferred; element 2 makes no batched call: unfused from there on
        return times_ten(x) if x % 2 else np.int64(-1)

    ds = Dataset.range(1, 8).map(fn, num_parallel_calls=2).batch(4)
    assert_same(elements(ds), elements(unfused(ds)))
    assert FORM.calls == [1]


def test_a_function_that_batches_nothing_runs_unfused_on_the_maps_threads():
    import threading

    names = set()

    def fn(x):
        names.add(threading.current_thread().name)
        return times_ten(x) if x < 0 else x * 2  # refers to a batchable function, never calls it

    ds = Dataset.range(40).map(fn, num_parallel_calls=2).batch(4)
    assert isinstance(optimize(ds), MapAndBatchDataset)
    assert_same(elements(ds), elements(unfused(ds)))
    assert any(name.startswith("tpudata-map-") and "and-batch" not in name for name in names)


def test_element_spec_and_cardinality_are_the_users():
    ds = pipeline(drop=True)
    assert optimize(ds).cardinality() == ds.cardinality() == 5
    assert optimize(ds).element_spec == ds.element_spec


def test_an_error_in_the_read_ahead_batch_is_raised_after_the_batch_before_it():
    def fn(x):
        if x == 6:
            raise KeyError("element 6")
        return times_ten(x)

    for ds in (unfused(Dataset.range(12).map(fn).batch(4)), Dataset.range(12).map(fn).batch(4)):
        with ds.iterator() as it:
            assert next(it).tolist() == [0, 10, 20, 30]
            state = it.get_state()
            with pytest.raises(KeyError, match="element 6"):
                next(it)
        with ds.iterator(state) as it:  # the state after batch 0 names element 4 next
            with pytest.raises(KeyError, match="element 6"):
                next(it)


def test_an_unseeded_shuffle_above_the_fused_op_restores_with_its_saved_seed():
    def make():
        return Dataset.range(40).map(times_ten).batch(4).shuffle(5).repeat(2)

    ds = make()
    assert "map_and_batch" in repr(optimize(ds))
    with ds.iterator() as it:
        for _ in range(13):  # into the second epoch
            next(it)
        state = it.get_state()
        rest = [b.tolist() for b in it]
    with make().iterator(state) as it:  # a new pipeline draws another seed; the state's wins
        assert [b.tolist() for b in it] == rest


def test_closing_a_fused_iterator_mid_epoch_leaves_no_thread_behind():
    import time

    from tests.dataset.helpers import tpudata_threads

    it = pipeline(n=400, calls=2).prefetch(2).iterator()
    next(it), next(it)
    assert any(t.startswith("tpudata-map-and-batch") for t in tpudata_threads())
    it.close()
    deadline = time.time() + 5
    while any(t.startswith("tpudata-map-and-batch") for t in tpudata_threads()) and time.time() < deadline:
        time.sleep(0.02)
    assert not any(t.startswith("tpudata-map-and-batch") for t in tpudata_threads())


def test_a_fused_op_before_distribute_runs_on_the_splits():
    """To graph walkers (distribute()'s cut) the fused op is one op over its input."""
    if not hasattr(Dataset, "distribute"):
        pytest.skip("Dataset.distribute is not in this tree")
    ds = Dataset.range(40).map(lambda x: times_ten(x)).batch(4)
    assert "map_and_batch" in repr(optimize(ds.prefetch(1)))
    remote = ds.distribute(None)
    assert [b.tolist() for b in remote] == [b.tolist() for b in unfused(remote)] == \
        [[x * 10 for x in range(i, i + 4)] for i in range(0, 40, 4)]


def test_exact_epoch_padding_is_the_unfused_one():
    ds = Dataset.range(10).map(lambda x: {"y": times_ten(x), "x": x}).batch(4, pad_remainder=True, num_batches=4)
    assert isinstance(optimize(ds), MapAndBatchDataset)
    got, want = list(ds), list(unfused(ds))
    assert len(got) == len(want) == 4
    for a, b in zip(got, want):
        assert sorted(a) == sorted(b) == ["weight", "x", "y"]
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
