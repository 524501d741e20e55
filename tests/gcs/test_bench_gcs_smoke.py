"""benchmarks/bench_gcs_clients.py at a tiny size: its rows run, read the right bytes, and its
CRC check tells a wrong read from a right one. Nothing about speed is asserted."""

from __future__ import annotations

import os
import sys
import zlib

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          "benchmarks")
sys.path.insert(0, BENCHMARKS)

import bench_gcs_clients  # noqa: E402


def test_two_clients_read_every_byte(capsys):
    results = bench_gcs_clients.main(["--setting", "0:none", "--objects", "2", "--object-mib", "2.5",
                                      "--block-mib", "1", "--conc", "1", "3",
                                      "--clients", "gcsfs-file", "http.client"])
    assert [(r["client"], r["conc"]) for r in results] == [
        ("gcsfs-file", 1), ("gcsfs-file", 3), ("http.client", 1), ("http.client", 3)]
    assert all(r["ok"] for r in results), [r.get("error") for r in results]
    out = capsys.readouterr().out
    assert "fake_gcs: 0 ms first-byte latency, no bandwidth cap" in out
    assert "WRONG" not in out and "FAILED" not in out
    http = [r for r in results if r["client"] == "http.client"]
    assert [r["media"] for r in http] == [6, 6]  # 2 objects x 3 ranges (1 + 1 + 0.5 MiB)
    assert [r["conns"] for r in http] == [1, 3]


def test_crc_check_catches_wrong_bytes():
    data = b"abcdefgh"
    right = [[(4, data[4:]), (0, data[:4])]]  # any order of arrival
    assert bench_gcs_clients.crcs(right, [8]) == [zlib.crc32(data)]
    assert bench_gcs_clients.crcs([[(0, data[:4]), (4, b"EFGH")]], [8]) != [zlib.crc32(data)]
    assert bench_gcs_clients.crcs([[(0, data[:4])]], [8]) == [None]  # short
    assert bench_gcs_clients.crcs([[(0, data[:4]), (5, data[5:])]], [8]) == [None]  # a gap
