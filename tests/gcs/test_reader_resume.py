"""tpudata's own retry path: a read that fails half-way resumes at its exact byte offset.

gcsfs retries every fault itself, so this reads through fsspec's HTTP filesystem, which does
not: fake_gcs's download URLs with injected 503/429 answers and connections cut mid-body. Every
record must come back exactly once, in order, and tpudata must have retried.
"""

from __future__ import annotations

import logging
import random
from urllib.parse import quote

import pytest

import tpudata
from fake_gcs import Knobs
from tpudata import storage
from tpudata.dataset import Dataset, TFRecordDataset

from fake_gcs.pytest_plugin import fake_gcs_server  # noqa: F401  (fixture)


def _upload(server, n_files=3, per_file=150):
    storage.gcs_filesystem().mkdir("resume-bucket")
    rng = random.Random(11)
    urls, expected = [], []
    for s in range(n_files):
        name = f"data/train-{s:05d}-of-{n_files:05d}"
        records = [f"{s}:{i}:".encode() + rng.randbytes(rng.randint(100, 3000)) for i in range(per_file)]
        tpudata.write_records(f"gs://resume-bucket/{name}", records)
        expected.append(records)
        urls.append(f"{server.url}/download/storage/v1/b/resume-bucket/o/{quote(name, safe='')}?alt=media")
    return urls, expected


@pytest.mark.parametrize("seed", [1, 2])
def test_http_reads_resume_at_the_exact_byte(fake_gcs_server, caplog, seed):  # noqa: F811
    urls, expected = _upload(fake_gcs_server)
    fake_gcs_server.knobs = Knobs(error_rate=0.1, cut_rate=0.15, seed=seed)
    with caplog.at_level(logging.WARNING, logger="tpudata"):
        got = list(tpudata.read_records(urls, buffer_size=16 * 1024))
    assert got == [r for file in expected for r in file]
    retried = [r for r in caplog.records if "retrying" in r.getMessage()]
    assert retried, "no fault reached tpudata's own retry path"
    faults = fake_gcs_server.faults
    assert faults.injected_errors + faults.injected_cuts >= len(retried)


def test_parallel_dataset_over_http_with_faults(fake_gcs_server):  # noqa: F811
    urls, expected = _upload(fake_gcs_server, n_files=4, per_file=60)
    fake_gcs_server.knobs = Knobs(error_rate=0.1, cut_rate=0.1, seed=7)
    ds = Dataset.from_tensor_slices(urls).interleave(
        lambda u: TFRecordDataset(u, buffer_size=8192), cycle_length=4, num_parallel_calls=4)
    got = list(ds)
    assert sorted(got) == sorted(r for file in expected for r in file)
    assert len(got) == sum(len(f) for f in expected)


def test_retries_are_bounded(fake_gcs_server):  # noqa: F811
    urls, _ = _upload(fake_gcs_server, n_files=1, per_file=20)
    fake_gcs_server.knobs = Knobs(error_rate=1.0, seed=0)
    with pytest.raises(tpudata.StorageError, match="failed after 3 attempt"):
        list(tpudata.TFRecordFileReader(urls[0], retries=2))
