"""tpudata's reader against exact faults from fake_gcs's Retry Test API (storage-testbench's).

Each case names the request that fails and how: a stream broken after 1 MiB, after 4 MiB, exactly
at a record boundary, a reset on the first range of the second file, a 503 on open, a stall longer
than the read timeout. Every record must arrive exactly once, in order, and tpudata must log the
retry at the expected byte. Reads go through fsspec's HTTP filesystem (which, unlike gcsfs, does
not retry by itself) on fake_gcs's download URLs; the Retry Test id rides on the URL of the file
it is meant for (fake_gcs accepts ``x-retry-test-id`` as a query parameter as well as a header),
and ``storage.objects.download`` instructions skip the HEAD the HTTP filesystem sends on open.
"""

from __future__ import annotations

import logging
import random
import re
import time
from urllib.parse import quote

import aiohttp
import pytest
import requests

import tpudata
from fake_gcs.pytest_plugin import fake_gcs_server  # noqa: F401  (fixture)
from tpudata import storage

BUCKET = "exact-bucket"
KIB = 1024


def _write(server, index: int, payload_sizes: list[int]) -> tuple[str, list[bytes]]:
    rng = random.Random(index)
    name = f"data/train-{index:05d}"
    records = []
    for i, n in enumerate(payload_sizes):
        head = f"{index}:{i}:".encode()
        records.append(head + rng.randbytes(n - len(head)))
    tpudata.write_records(f"gs://{BUCKET}/{name}", records)
    return f"{server.url}/download/storage/v1/b/{BUCKET}/o/{quote(name, safe='')}?alt=media", records


def _files(server, payload: int, count: int, n_files: int = 2):
    storage.gcs_filesystem().mkdir(BUCKET)
    return [_write(server, i, [payload] * count) for i in range(n_files)]


def _retry_test(server, instructions: dict) -> str:
    r = requests.post(f"{server.url}/retry_test", json={"instructions": instructions}, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["id"]


def _completed(server, test_id: str) -> bool:
    return requests.get(f"{server.url}/retry_test/{test_id}", timeout=10).json()["completed"]


def _read(urls, caplog, **options) -> tuple[list[bytes], list[str]]:
    with caplog.at_level(logging.WARNING, logger="tpudata"):
        got = list(tpudata.read_records(urls, **options))
    return got, [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]


def _check(got, files, retries, expected: list[tuple[str, str, int]]):
    assert got == [r for _, records in files for r in records]  # exactly once, in order
    assert len(retries) == len(expected), retries
    for message, (what, url, byte) in zip(retries, expected):
        m = re.match(r"retrying (\w+) of (\S+) at byte (\d+) ", message)
        assert m and (m.group(1), m.group(2), int(m.group(3))) == (what, url, byte), message


@pytest.mark.parametrize(
    "after_kib, buffer_size, payload",
    [
        (1024, 4 << 20, 1000),  # 1 MiB into the second 4 MiB range: mid-record (frames of 1016 bytes)
        (4096, 8 << 20, 1000),  # 4 MiB into the second 8 MiB range
        (256, 1 << 20, 1008),  # frames of exactly 1 KiB: the cut falls on a record boundary
    ],
)
def test_broken_stream_resumes_at_the_exact_byte(
    fake_gcs_server, caplog, after_kib, buffer_size, payload
):  # noqa: F811
    count = (buffer_size + 2 * after_kib * KIB) // (payload + 16)
    files = _files(fake_gcs_server, payload, count)
    if payload == 1008:
        assert (buffer_size + after_kib * KIB) % (payload + 16) == 0  # the boundary case really is one
    # a zero-second stall lets the first range through; the second range breaks
    tid = _retry_test(
        fake_gcs_server,
        {"storage.objects.download": ["stall-for-0s-after-0K", f"return-broken-stream-after-{after_kib}K"]},
    )
    urls = [files[0][0] + f"&x-retry-test-id={tid}", files[1][0]]
    got, retries = _read(urls, caplog, buffer_size=buffer_size)
    # fsspec's HTTP file hands over a range whole or not at all: the retry re-reads that range
    _check(got, files, retries, [("read", urls[0], buffer_size)])
    assert "received %d of" % (after_kib * KIB) in retries[0]
    assert _completed(fake_gcs_server, tid)


def test_reset_on_the_first_range_of_the_second_file(fake_gcs_server, caplog):  # noqa: F811
    files = _files(fake_gcs_server, 3000, count=400)
    # aiohttp silently retries an idempotent request once when a reused connection is reset,
    # so the second reset (on a fresh connection) is the one tpudata sees
    tid = _retry_test(fake_gcs_server, {"storage.objects.download": ["return-reset-connection"] * 2})
    urls = [files[0][0], files[1][0] + f"&x-retry-test-id={tid}"]
    got, retries = _read(urls, caplog, buffer_size=256 << 10)
    assert retries  # tpudata's own retry path ran
    _check(got, files, retries, [("read", urls[1], 0)] * len(retries))
    assert _completed(fake_gcs_server, tid)


def test_503_on_open(fake_gcs_server, caplog):  # noqa: F811
    files = _files(fake_gcs_server, 500, count=300)
    # fsspec's HTTP open asks HEAD, then GET when HEAD fails: both answer 503 -> one failed open
    tid = _retry_test(fake_gcs_server, {"storage.objects.get": ["return-503", "return-503"]})
    urls = [files[0][0] + f"&x-retry-test-id={tid}", files[1][0]]
    got, retries = _read(urls, caplog, buffer_size=64 << 10)
    _check(got, files, retries, [("open", urls[0], 0)])
    assert _completed(fake_gcs_server, tid)


def test_stall_longer_than_the_read_timeout(fake_gcs_server, caplog, timed):  # noqa: F811
    files = _files(fake_gcs_server, 1000, count=500)
    tid = _retry_test(fake_gcs_server, {"storage.objects.download": ["stall-for-20s-after-64K"]})
    urls = [files[0][0] + f"&x-retry-test-id={tid}", files[1][0]]
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=0.5)
    t0 = time.monotonic()
    got, retries = _read(urls, caplog, buffer_size=256 << 10,
                          storage_options={"client_kwargs": {"timeout": timeout}})
    # the first 256 KiB range stalls after 64 KiB; the read times out and that range is read again
    if timed:
        assert time.monotonic() - t0 < 10  # the read timeout ended the stall, not the 20 s
    _check(got, files, retries, [("read", urls[0], 0)])
    assert _completed(fake_gcs_server, tid)


def test_gcsfs_reads_send_the_header_and_retry_by_themselves(fake_gcs_server, caplog):  # noqa: F811
    files = _files(fake_gcs_server, 1000, count=2000)
    tid = _retry_test(
        fake_gcs_server,
        {
            "storage.objects.download": [
                "return-503",
                "return-broken-stream-after-512K",
                "return-reset-connection",
            ]
        },
    )
    urls = [f"gs://{BUCKET}/data/train-{i:05d}" for i in range(2)]
    got = list(
        tpudata.read_records(urls, buffer_size=1 << 20,
                             storage_options={"session_kwargs": {"headers": {"x-retry-test-id": tid}}})
    )
    assert got == [r for _, records in files for r in records]
    assert _completed(fake_gcs_server, tid)  # gcsfs met (and retried) all three faults
