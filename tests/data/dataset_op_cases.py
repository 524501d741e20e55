"""Pipelines written once for tf.data and tpudata (``D`` is the Dataset class, ``S`` a
TensorSpec maker, ``STR`` the string dtype): make_dataset_golden.py runs them with TensorFlow
and tests/dataset/test_new_ops.py compares tpudata's output with the saved orders.
Imports nothing: it runs in either environment."""

from __future__ import annotations

import numpy as np


def _gen_pairs():
    for i in range(1, 6):
        yield i, [0.5 * i] * i


def _gen_dicts():
    for i in range(4):
        yield {"id": i, "name": f"n{i}", "v": np.arange(2, dtype=np.float64) + i}


def _gen_args(n, base):
    for i in range(int(n)):
        yield int(base) + i


def _gen_sequences():
    for i in range(1, 16):
        n = (i * 5) % 7
        yield n, np.arange(n, dtype=np.int64) + i


def _sequences(D, S):
    return D.from_generator(_gen_sequences, output_signature=(S((), np.int32),
                                                              S((None,), np.int64)))


CASES = {
    "enumerate": lambda D, S, STR: D.range(10, 15).enumerate(),
    "enumerate_start": lambda D, S, STR: D.range(4).enumerate(start=7),
    "enumerate_dict_batch": lambda D, S, STR: D.from_tensor_slices(
        {"a": np.arange(7), "b": np.arange(7.0)}).enumerate(start=-2).batch(3),
    "concatenate": lambda D, S, STR: D.range(4).concatenate(D.range(10, 13)),
    "concatenate_batch_repeat": lambda D, S, STR: D.range(5).concatenate(D.range(10, 13))
    .batch(3).repeat(2),
    "concatenate_empty": lambda D, S, STR: D.range(0).concatenate(D.range(3)).concatenate(
        D.range(0)),
    "scan_cumsum": lambda D, S, STR: D.range(8).scan(np.int64(0), lambda s, x: (s + x, s + x)),
    "scan_tuple_state": lambda D, S, STR: D.range(1, 7).scan(
        (np.int64(1), np.float32(0.5)),
        lambda s, x: ((s[0] * x, s[1] * np.float32(2.0)), (s[0], s[1], x))),
    "scan_after_batch": lambda D, S, STR: D.range(10).batch(3).scan(
        np.int64(100), lambda s, b: (s - 1, b + s)),
    "from_generator": lambda D, S, STR: D.from_generator(
        _gen_pairs, output_signature=(S((), np.int64), S((None,), np.float32))),
    "from_generator_dict": lambda D, S, STR: D.from_generator(
        _gen_dicts, output_signature={"id": S((), np.int32), "name": S((), STR),
                                      "v": S((2,), np.float64)}),
    "from_generator_args": lambda D, S, STR: D.from_generator(
        _gen_args, args=(3, 40), output_signature=S((), np.int64)).repeat(2),
    "flat_map": lambda D, S, STR: D.range(1, 5).flat_map(lambda x: D.range(x)),
    "flat_map_tuples": lambda D, S, STR: D.range(3).flat_map(
        lambda x: D.zip((D.range(x + 1), D.range(x + 1).map(lambda y: y * 10)))),
    "apply": lambda D, S, STR: D.range(10).apply(lambda ds: ds.skip(2).take(5)),
    "choose": lambda D, S, STR: D.choose_from_datasets(
        [D.range(3), D.range(10, 12), D.range(20, 23)],
        D.from_tensor_slices(np.array([0, 1, 1, 0, 2, 1, 2, 2, 0], np.int64))),
    "choose_keep_going": lambda D, S, STR: D.choose_from_datasets(
        [D.range(3), D.range(10, 12), D.range(20, 23)],
        D.from_tensor_slices(np.array([0, 1, 1, 0, 2, 1, 2, 2, 0, 1, 0, 2], np.int64)),
        stop_on_empty_dataset=False),
    "choose_dicts_repeat": lambda D, S, STR: D.choose_from_datasets(
        [D.from_tensor_slices({"a": np.arange(4), "b": np.arange(4) * 2}),
         D.from_tensor_slices({"a": np.arange(10, 14), "b": np.arange(4) * 3})],
        D.range(6).map(lambda x: x % 2)).repeat(2),
    "sample_one_weight": lambda D, S, STR: D.sample_from_datasets(
        [D.range(3), D.range(10, 14), D.range(20, 22)], weights=[0.0, 2.0, 0.0], seed=3),
    "sample_zero_weights": lambda D, S, STR: D.sample_from_datasets(
        [D.range(3), D.range(10, 14)], weights=[0.0, 0.0], seed=3),
    "window_batch": lambda D, S, STR: D.range(7).window(3).flat_map(lambda w: w.batch(3)),
    "window_shift": lambda D, S, STR: D.range(7).window(3, shift=1).flat_map(lambda w: w.batch(3)),
    "window_stride_gap": lambda D, S, STR: D.range(13).window(3, shift=5, stride=2).flat_map(
        lambda w: w.batch(3)),
    "window_drop": lambda D, S, STR: D.range(11).window(4, shift=3, drop_remainder=True)
    .flat_map(lambda w: w.batch(4, drop_remainder=True)),
    "window_flat": lambda D, S, STR: D.range(9).window(2, shift=3, stride=2).flat_map(lambda w: w),
    "window_dict": lambda D, S, STR: D.from_tensor_slices(
        {"a": np.arange(5), "s": np.array([b"x", b"yy", b"z", b"w", b"v"])}).window(2, 1)
    .flat_map(lambda w: D.zip(w).batch(2)),
    "window_tuple": lambda D, S, STR: D.range(8).map(lambda x: (x, x * 2)).window(3, 2)
    .flat_map(lambda a, b: D.zip((a.batch(3), b.batch(3)))),
    "group_by_window": lambda D, S, STR: D.range(10).group_by_window(
        lambda x: x % 2, lambda k, w: w.batch(3), 3),
    "group_by_window_sizes": lambda D, S, STR: D.range(23).map(lambda x: (x, x * 10))
    .group_by_window(lambda x, y: x % 3, lambda k, w: w.batch(10).map(lambda a, b: (a, b + k)),
                     window_size_func=lambda k: k + 2),
    "group_by_window_flat": lambda D, S, STR: D.range(17).group_by_window(
        lambda x: (x * 7) % 4, lambda k, w: w.skip(1), 3),
    "bucket": lambda D, S, STR: _sequences(D, S).bucket_by_sequence_length(
        lambda n, s: n, [2, 4], [2, 3, 2]),
    "bucket_drop": lambda D, S, STR: _sequences(D, S).bucket_by_sequence_length(
        lambda n, s: n, [1, 3], [2, 4, 3], drop_remainder=True),
    "bucket_to_boundary": lambda D, S, STR: _sequences(D, S).bucket_by_sequence_length(
        lambda n, s: n, [3, 8], [2, 3, 2], padding_values=(np.int32(0), np.int64(-1)),
        pad_to_bucket_boundary=True),
    "bucket_no_padding": lambda D, S, STR: _sequences(D, S).map(lambda n, s: n)
    .bucket_by_sequence_length(lambda n: n, [3], [3, 2], no_padding=True),
    "padded_batch_spec": lambda D, S, STR: _sequences(D, S).padded_batch(
        4, padded_shapes=([], [8]), drop_remainder=True),
    "rebatch": lambda D, S, STR: D.range(10).batch(4).rebatch(3),
    "rebatch_sizes": lambda D, S, STR: D.range(13).batch(4).rebatch([2, 3, 1]),
    "rebatch_drop_dict": lambda D, S, STR: D.from_tensor_slices(
        {"a": np.arange(11), "b": np.arange(22).reshape(11, 2)}).batch(3).rebatch(
        4, drop_remainder=True),
}

# random picks: tf.data's Philox draws are not reproduced, so these are compared as multisets
SAMPLED = {
    "sample_uniform": lambda D, S, STR: D.sample_from_datasets(
        [D.range(5), D.range(10, 17), D.range(20, 22)], seed=7),
    "sample_weighted_stop": lambda D, S, STR: D.sample_from_datasets(
        [D.range(40), D.range(100, 103)], weights=[0.0001, 0.9999], seed=1,
        stop_on_empty_dataset=True),
}
