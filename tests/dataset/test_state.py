"""Checkpoints: restoring before any element continues exactly like an uninterrupted run."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tpudata
from tpudata.dataset import Dataset, FixedLengthRecordDataset, TextLineDataset, TFRecordDataset
from tpudata.tfrecord import reader as reader_module
from tests.dataset.helpers import SPEC, check_restore_everywhere, write_shards


@pytest.fixture
def shards(tmp_path, monkeypatch):
    monkeypatch.setattr(reader_module, "MAX_BATCH_RECORDS", 7)  # many small read blocks
    return write_shards(tmp_path / "data", 4, [23, 17, 30, 9])


def _text_and_fixed(tmp_path):
    """Text and fixed-length files, plain and GZIP/ZLIB, that tiny buffers split oddly."""
    import gzip
    import zlib

    d = tmp_path / "misc"
    d.mkdir(exist_ok=True)
    lines = b"".join(b"line %d %s\n" % (i, b"x" * (i % 11)) for i in range(40)) + b"no newline"
    body = bytes(range(256)) * 3  # 768 bytes: 96 records of 8
    fixed = b"HEAD!" + body + b"FOOT"
    files = {}
    for name, data in (("t.txt", lines), ("f.bin", fixed)):
        for comp, enc in (("", lambda b: b), ("GZIP", gzip.compress), ("ZLIB", zlib.compress)):
            p = d / f"{comp or 'plain'}-{name}"
            p.write_bytes(enc(data))
            files[(name, comp)] = str(p)
    return files


def _pipelines(shards, tmp_path):
    pattern = str(tmp_path / "data" / "train-*")
    misc = _text_and_fixed(tmp_path)
    gz = [p + ".gz" for p in shards]
    for p, q in zip(shards, gz):
        tpudata.write_records(q, list(tpudata.TFRecordDataset(p)), compression="GZIP") \
            if not os.path.exists(q) else None
    zl = str(tmp_path / "data.zlib")
    if not os.path.exists(zl):
        tpudata.write_records(zl, list(TFRecordDataset(shards[0])), compression="ZLIB")
    saved = str(tmp_path / "saved")
    if not os.path.exists(saved):
        TFRecordDataset(shards).parse(SPEC).batch(3).save(saved, num_shards=3,
                                                          compression="GZIP")
    return {
        **{f"text_{c or 'plain'}_{b}": (lambda c=c, b=b: TextLineDataset(
            misc[("t.txt", c)], compression_type=c or None, buffer_size=b))
           for c in ("", "GZIP", "ZLIB") for b in (5, 64)},
        **{f"fixed_{c or 'plain'}_{b}": (lambda c=c, b=b: FixedLengthRecordDataset(
            misc[("f.bin", c)], 8, header_bytes=5, footer_bytes=4, buffer_size=b,
            compression_type=c or None)) for c in ("", "GZIP", "ZLIB") for b in (3, 20)},
        "tfrecord_gzip": lambda: TFRecordDataset(gz, compression_type="GZIP"),
        "tfrecord_zlib": lambda: TFRecordDataset(zl, compression_type="ZLIB"),
        "tfrecord_gzip_parallel": lambda: TFRecordDataset(gz, num_parallel_reads=2),
        "nested_interleave": lambda: Dataset.range(3).interleave(
            lambda i: Dataset.range(2).interleave(
                lambda j: Dataset.range(5).map(lambda x, i=i, j=j: x + 100 * i + 10 * j),
                cycle_length=2, block_length=3), cycle_length=2, block_length=2),
        "flat_map": lambda: Dataset.range(6).flat_map(lambda x: Dataset.range(int(x))),
        "parallel_map_batch": lambda: Dataset.range(37).map(lambda x: x * 2, num_parallel_calls=3)
        .batch(5).unbatch().filter(lambda x: x % 3 != 0),
        "text_map_shuffle": lambda: TextLineDataset(misc[("t.txt", "")], buffer_size=9)
        .map(lambda s: len(s)).shuffle(7, seed=2),
        "cache_memory": lambda: Dataset.range(12).map(lambda x: x + 1).cache().repeat(2),
        "zip_text_fixed": lambda: Dataset.zip((TextLineDataset(misc[("t.txt", "GZIP")], buffer_size=6),
                                               FixedLengthRecordDataset(misc[("f.bin", "")], 8, 5, 4,
                                                                        buffer_size=11))),
        "repeat_take_skip": lambda: Dataset.range(7).repeat(3).skip(4).take(12),
        "enumerate_shuffle": lambda: TFRecordDataset(shards).enumerate(3).shuffle(9, seed=5),
        "concatenate_files": lambda: TFRecordDataset(shards[:2]).concatenate(
            TFRecordDataset(shards[2:], num_parallel_reads=2)).parse(SPEC).batch(7),
        "scan_parallel_map": lambda: Dataset.range(40).map(lambda x: x * 2, num_parallel_calls=3)
        .scan(np.int64(0), lambda s, x: (s + x, (s, x))).batch(4),
        "from_generator_interleave": lambda: Dataset.range(4).interleave(
            lambda i: Dataset.from_generator(lambda i=int(i): iter(range(10 * i, 10 * i + 5 + i)),
                                             output_signature=tpudata.TensorSpec((), np.int64)),
            cycle_length=2, block_length=3),
        "sample_files": lambda: Dataset.sample_from_datasets(
            [TFRecordDataset(shards[:2]), TFRecordDataset(shards[2:]).shuffle(6, seed=1)],
            weights=[0.3, 0.7], seed=2).parse(SPEC).batch(5),
        "choose_files": lambda: Dataset.choose_from_datasets(
            [TFRecordDataset(shards[0]), TFRecordDataset(shards[1], buffer_size=64)],
            Dataset.range(100).map(lambda x: x % 3 // 2), stop_on_empty_dataset=False),
        "window_files": lambda: TFRecordDataset(shards, num_parallel_reads=2).window(5, 3)
        .flat_map(lambda w: w.batch(5)).parse(SPEC),
        "group_files": lambda: TFRecordDataset(shards).parse(SPEC).shuffle(10, seed=2)
        .group_by_window(lambda e: e["id"] % 3, lambda k, w: w.batch(4), window_size=4),
        "bucket": lambda: Dataset.range(1, 40).map(lambda x: np.arange(x % 9)).bucket_by_sequence_length(
            lambda s: len(s), [2, 9], [3, 2, 4], pad_to_bucket_boundary=True,
            padded_shapes=[None]),
        "rebatch_files": lambda: TFRecordDataset(shards).parse(SPEC).batch(7).rebatch([3, 5]),
        "load": lambda: Dataset.load(saved).unbatch().shuffle(7, seed=1),
        "load_reader_func": lambda: Dataset.load(saved, reader_func=lambda d: d.interleave(
            lambda s: s, cycle_length=2, block_length=2)),
        "text_parallel": lambda: TextLineDataset([misc[("t.txt", "GZIP")]] * 2,
                                                 compression_type="GZIP", buffer_size=7,
                                                 num_parallel_reads=2),
        "interleave_filter": lambda: Dataset.range(4).interleave(
            lambda i: Dataset.range(5).filter(lambda x: x != 2), cycle_length=2, block_length=3),
        "prefetch_map": lambda: Dataset.range(30).map(lambda x: x * x, num_parallel_calls=2)
        .prefetch(3),
        "range": lambda: Dataset.range(40),
        "slices": lambda: Dataset.from_tensor_slices({"a": np.arange(30), "b": np.arange(30.0)}),
        "tfrecord": lambda: TFRecordDataset(shards),
        "parallel_reads": lambda: TFRecordDataset(shards, num_parallel_reads=3),
        "interleave": lambda: Dataset.list_files(pattern).interleave(
            lambda f: TFRecordDataset(f), cycle_length=3, block_length=2),
        "shard": lambda: TFRecordDataset(shards).shard(3, 1),
        "take_skip": lambda: Dataset.range(50).skip(7).take(30),
        "shuffle": lambda: Dataset.range(60).shuffle(16, seed=4),
        "shuffle_unseeded": lambda: Dataset.range(60).shuffle(16),
        "shuffle_repeat": lambda: Dataset.range(20).shuffle(8, seed=1).repeat(3),
        "map_filter": lambda: Dataset.range(40).map(lambda x: x * 3, num_parallel_calls=2)
        .filter(lambda x: x % 2 == 0),
        "zip": lambda: Dataset.zip((Dataset.range(25), Dataset.range(100, 130).shuffle(5, seed=2))),
        "batch": lambda: TFRecordDataset(shards).parse(SPEC).batch(5),
        "batch_then_parse": lambda: TFRecordDataset(shards).batch(6).parse(SPEC),
        "pad": lambda: TFRecordDataset(shards).shard(2, 1).parse(SPEC)
        .batch(8, pad_remainder=True, num_batches=6),
        "padded_batch": lambda: Dataset.range(1, 12).map(lambda x: np.arange(int(x))).padded_batch(3),
        "unbatch": lambda: Dataset.range(23).batch(4).unbatch(),
        "cache_file": lambda: Dataset.range(15).shuffle(5, seed=9).cache(str(tmp_path / "c")).repeat(2),
        "prefetch": lambda: Dataset.range(30).batch(4).prefetch(2),
        "full_pipeline": lambda: Dataset.list_files(pattern)
        .interleave(lambda f: TFRecordDataset(f), cycle_length=4, num_parallel_calls=4)
        .shuffle(20, seed=3).parse(SPEC).batch(8, drop_remainder=True).prefetch(2),
    }


MORE = [f"text_{c}_{b}" for c in ("plain", "GZIP", "ZLIB") for b in (5, 64)] + [
    f"fixed_{c}_{b}" for c in ("plain", "GZIP", "ZLIB") for b in (3, 20)] + [
    "tfrecord_gzip", "tfrecord_zlib", "tfrecord_gzip_parallel", "nested_interleave", "flat_map",
    "parallel_map_batch", "text_map_shuffle", "cache_memory", "zip_text_fixed",
    "repeat_take_skip", "prefetch_map", "enumerate_shuffle", "concatenate_files",
    "scan_parallel_map", "from_generator_interleave", "interleave_filter", "sample_files", "choose_files",
    "window_files", "group_files", "bucket", "rebatch_files", "load", "load_reader_func",
    "text_parallel"]

NAMES = MORE + ["range", "slices", "tfrecord", "parallel_reads", "interleave", "shard", "take_skip",
         "shuffle", "shuffle_unseeded", "shuffle_repeat", "map_filter", "zip", "batch",
         "batch_then_parse", "pad", "padded_batch", "unbatch", "cache_file", "prefetch",
         "full_pipeline"]


@pytest.mark.parametrize("name", NAMES)
def test_restore_at_every_element(name, shards, tmp_path):
    make = _pipelines(shards, tmp_path)[name]
    out = check_restore_everywhere(make)
    assert out  # the pipeline produced something


def test_full_pipeline_is_the_data(shards, tmp_path):
    pattern = str(tmp_path / "data" / "train-*")
    ds = (Dataset.list_files(pattern)
          .interleave(lambda f: TFRecordDataset(f), cycle_length=4, num_parallel_calls=4)
          .shuffle(20, seed=3).parse(SPEC).batch(8, drop_remainder=True).prefetch(2))
    ids = [i for b in ds for i in b["id"].tolist()]
    assert len(ids) == 72 and len(set(ids)) == 72 and set(ids) <= set(range(79))


def test_state_mentions_file_offsets_and_seeds(shards):
    import json

    it = TFRecordDataset(shards).shuffle(10, seed=5).iterator()
    for _ in range(12):
        next(it)
    state = json.dumps(it.get_state())
    assert '"offset"' in state and '"seed": 5' in state and '"offsets"' in state
    assert '"elements"' not in state  # records of plain files are named, not carried
    it.close()


def test_restore_after_end_and_into_a_later_iteration():
    ds = Dataset.range(50).shuffle(50, seed=1)
    it = ds.iterator()
    first = list(it)
    assert list(Dataset.range(50).shuffle(50, seed=1).iterator(it.get_state())) == []
    second_it = ds.iterator()  # the second iteration reshuffles
    state = second_it.get_state()
    second = list(second_it)
    assert second != first and sorted(second) == sorted(first)
    assert list(Dataset.range(50).shuffle(50, seed=1).iterator(state)) == second
