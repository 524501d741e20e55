"""One home for AUTOTUNE and worker counts: one definition of the value, and one function
(``tpudata.dataset.core.options.worker_count``) that every op turns its parallelism into workers
with, so every op refuses the same bad values with the same message."""

from __future__ import annotations

import os
import re

import pytest

import tpudata
import tpudata.dataset
from tests.dataset.helpers import SPEC, write_shards
from tpudata.dataset import Dataset, TFRecordDataset
from tpudata.dataset.core import options

PKG = os.path.dirname(os.path.abspath(tpudata.__file__))


def test_one_autotune_definition_exported_as_before():
    assert tpudata.AUTOTUNE == tpudata.dataset.AUTOTUNE == options.AUTOTUNE == -1
    assert tpudata.AUTOTUNE is tpudata.dataset.AUTOTUNE is options.AUTOTUNE
    defined = []
    for dirpath, _, files in os.walk(PKG):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                if re.search(r"^AUTOTUNE\s*=", open(path).read(), re.MULTILINE):
                    defined.append(os.path.relpath(path, PKG))
    assert defined == [os.path.join("dataset", "core", "options.py")]


def test_worker_count():
    cores = os.cpu_count() or 2
    assert [options.worker_count(n) for n in (None, 0, 1, 5, options.AUTOTUNE)] == [0, 0, 1, 5, cores]
    assert options.worker_count(None, default=options.AUTOTUNE) == cores
    assert options.worker_count(0, default=3) == 3
    with pytest.raises(ValueError, match=r"num_parallel_reads must be >= 1, None or AUTOTUNE"):
        options.worker_count(-2, "num_parallel_reads")
    assert options.is_autotune(-1) and not options.is_autotune(None) and not options.is_autotune(2)


@pytest.mark.parametrize("make,name", [
    (lambda p: TFRecordDataset(p).map(abs, num_parallel_calls=-2), "num_parallel_calls"),
    (lambda p: TFRecordDataset(p).parse(SPEC, num_parallel_calls=-2), "num_parallel_calls"),
    (lambda p: Dataset.from_tensor_slices([p]).interleave(TFRecordDataset, num_parallel_calls=-2),
     "num_parallel_calls"),
    (lambda p: TFRecordDataset(p, num_parallel_reads=-2), "num_parallel_reads"),
    (lambda p: tpudata.TextLineDataset(p, num_parallel_reads=-2), "num_parallel_reads"),
])
def test_every_op_refuses_a_bad_worker_count_alike(tmp_path, make, name):
    """parse() used to take -2 as 0 workers and a one-file reader ignored num_parallel_reads."""
    path = write_shards(tmp_path, 1, 2)[0]
    with pytest.raises(ValueError, match=rf"^{name} must be >= 1, None or AUTOTUNE \(-1\), not -2$"):
        make(path)


def test_autotune_and_processes_default_to_one_worker_per_core(tmp_path):
    path = write_shards(tmp_path, 1, 2)[0]
    cores = os.cpu_count() or 2
    ds = TFRecordDataset(path).map(abs, num_parallel_calls=tpudata.AUTOTUNE)
    assert ds.workers == cores and ds.autotune
    assert TFRecordDataset(path).map(abs, use_processes=True).workers == cores
    assert TFRecordDataset(path).parse(SPEC, num_parallel_calls=tpudata.AUTOTUNE).threads == cores
