"""``python -m fake_gcs``: prints STORAGE_EMULATOR_HOST, logs requests, persists --data-dir."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import fake_gcs
from tests.gcs.helpers import Raw, object_path, upload

REPO = os.path.dirname(os.path.dirname(os.path.abspath(fake_gcs.__file__)))


def _start(*args: str) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-m", "fake_gcs", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    line = proc.stdout.readline().strip()
    assert line.startswith("STORAGE_EMULATOR_HOST=http://127.0.0.1:"), line
    return proc, line.split("=", 1)[1]


def _stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    return err


def test_cli_persists_data_dir_across_restarts(tmp_path):
    data_dir = str(tmp_path / "store")
    proc, url = _start("--data-dir", data_dir, "--log-level", "DEBUG")
    try:
        raw = Raw(url)
        raw.json(
            "POST", "/storage/v1/b?project=p", {"name": "persist-bucket", "versioning": {"enabled": True}}
        )
        g1 = upload(raw, "a/b.bin", b"first", bucket="persist-bucket")["generation"]
        g2 = upload(raw, "a/b.bin", b"second", bucket="persist-bucket")["generation"]
        raw.json("PATCH", object_path("a/b.bin", "persist-bucket"), {"metadata": {"k": "v"}})
        raw.close()
    finally:
        err = _stop(proc)
    assert "POST /upload/storage/v1/b/persist-bucket/o" in err  # one debug line per request
    proc, url = _start("--data-dir", data_dir)
    try:
        raw = Raw(url)
        status, _, res = raw.json("GET", object_path("a/b.bin", "persist-bucket"))
        assert status == 200 and res["generation"] == g2 and res["metadata"] == {"k": "v"}
        assert raw("GET", object_path("a/b.bin", "persist-bucket") + "?alt=media")[2] == b"second"
        assert (
            raw("GET", object_path("a/b.bin", "persist-bucket") + f"?alt=media&generation={g1}")[2]
            == b"first"
        )
        assert raw.json("GET", "/storage/v1/b/persist-bucket")[2]["versioning"] == {"enabled": True}
        g3 = upload(raw, "a/b.bin", b"third", bucket="persist-bucket")["generation"]
        assert int(g3) > int(g2)  # generations keep increasing after a restart
        raw.close()
    finally:
        _stop(proc)


def test_cli_without_data_dir_is_in_memory_and_rejects_bad_flags(tmp_path):
    proc, url = _start("--latency-ms", "5", "--error-rate", "0")
    try:
        raw = Raw(url)
        t0 = time.perf_counter()
        assert raw("GET", "/storage/v1/b")[0] == 200
        assert time.perf_counter() - t0 >= 0.005
        raw.close()
    finally:
        _stop(proc)
    env = dict(os.environ, PYTHONPATH=REPO)
    bad = subprocess.run(
        [sys.executable, "-m", "fake_gcs", "--error-rate", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert bad.returncode == 2 and "error_rate" in bad.stderr


def test_cli_creates_buckets_at_start(tmp_path):
    data = str(tmp_path / "data")
    proc, url = _start("--bucket", "alpha", "--bucket", "beta", "--data-dir", data)
    try:
        raw = Raw(url)
        names = [b["name"] for b in raw.json("GET", "/storage/v1/b?project=p")[2]["items"]]
        assert names == ["alpha", "beta"]
        upload(raw, "x.bin", b"kept", bucket="alpha")
        raw.close()
    finally:
        _stop(proc)
    proc, url = _start("--bucket", "alpha", "--data-dir", data)   # exists already: kept as is
    try:
        raw = Raw(url)
        assert raw("GET", object_path("x.bin", "alpha") + "?alt=media")[2] == b"kept"
        raw.close()
    finally:
        _stop(proc)
    env = dict(os.environ, PYTHONPATH=REPO)
    bad = subprocess.run([sys.executable, "-m", "fake_gcs", "--port", "0", "--bucket", "Bad_Name!"],
                         capture_output=True, text=True, env=env, timeout=30)
    assert bad.returncode == 2 and "--bucket" in bad.stderr and "Bad_Name!" in bad.stderr


def test_cli_concurrency_and_jitter_knobs_and_stats():
    proc, url = _start("--max-in-flight", "1", "--bandwidth-mbps", "100", "--bandwidth-jitter", "0.5",
                       "--seed", "1")
    try:
        raw = Raw(url)
        for _ in range(3):
            assert raw("GET", "/storage/v1/b")[0] == 200
        status, _, body = raw("GET", "/_stats")
        stats = json.loads(body)
        assert status == 200 and stats["requests"]["by_kind"]["list"] == 3
        assert stats["in_flight"]["peak"] == 1 and stats["connections"]["requests_per_connection"] == {"3": 1}
        raw.close()
    finally:
        _stop(proc)
    env = dict(os.environ, PYTHONPATH=REPO)
    bad_flags = (
        (["--bandwidth-jitter", "1"], "bandwidth_jitter"),
        (["--max-in-flight", "0"], "max_in_flight"),
    )
    for flags, word in bad_flags:
        bad = subprocess.run([sys.executable, "-m", "fake_gcs", "--port", "0", *flags],
                             capture_output=True, text=True, env=env, timeout=30)
        assert bad.returncode == 2 and word in bad.stderr, bad.stderr
