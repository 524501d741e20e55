"""tpudata.info(): what tpudata has loaded, changed, holds and runs in this process, read without
loading, starting or allocating anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

import tpudata
from tpudata import _accel, _outpool
from tpudata._info import Info
from tpudata.dataset import Dataset


def _run(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TPUDATA_", "MALLOC_"))}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_info_in_a_fresh_process_reports_nothing_changed_and_starts_nothing():
    code = ("import json, sys, threading, tpudata\n"
            "report = tpudata.info()\n"
            "print(json.dumps({'tuned': report.malloc_tuned, 'settings': report.malloc_settings,\n"
            "    'pooled': report.pooled_bytes, 'threads': list(report.threads),\n"
            "    'processes': list(report.processes), 'extensions': report.extensions,\n"
            "    'kernel': 'tpudata.image._imgkernel' in sys.modules,\n"
            "    'gcs_pool': getattr(sys.modules.get('tpudata._ranged'), '_pool', None) is not None,\n"
            "    'running': threading.active_count()}))\n")
    seen = json.loads(_run(code))
    assert seen["tuned"] is None and seen["settings"] == {}
    assert seen["pooled"] == {"batch_memory": 0}
    assert seen["threads"] == [] and seen["processes"] == [] and seen["running"] == 1
    assert not seen["kernel"] and not seen["gcs_pool"]  # info() made neither
    assert seen["extensions"][_accel.IMAGE_KERNEL] == "not loaded yet"
    assert seen["extensions"][_accel.NATIVE] == ("on" if _accel.available() else "NOT BUILT")


def test_info_reports_malloc_tuning_once_tune_malloc_ran():
    code = ("import json, tpudata\n"
            "ok = tpudata.tune_malloc()\n"
            "report = tpudata.info()\n"
            "print(json.dumps([ok, report.malloc_tuned, report.malloc_settings, str(report)]))\n")
    ok, tuned, settings, text = json.loads(_run(code))
    if ok:  # glibc
        assert tuned is True and settings["MALLOC_ARENA_MAX"] == "1"
        assert "glibc malloc: tuned (MALLOC_MMAP_THRESHOLD_=" in text


def test_info_reports_pooled_batch_memory_threads_and_extensions():
    _outpool.release_batch_memory()
    a = _outpool.empty((_outpool.MIN_BYTES,), np.uint8)
    del a  # its mapping is kept for the next batch
    it = iter(Dataset.range(10_000).map(lambda x: x, num_parallel_calls=2).prefetch(2))
    next(it)
    try:
        report = tpudata.info()
        assert isinstance(report, Info) and report.pid == os.getpid()
        assert report.pooled_bytes["batch_memory"] == _outpool.MIN_BYTES
        assert "tpudata-prefetch" in report.threads
        assert any(name.startswith("tpudata-map") for name in report.threads)
        assert report.accelerated["crc32c"] == _accel.native_paths()["crc32c"]
        text = str(report)
        assert text.startswith(f"tpudata in process {os.getpid()}\n")
        for line in ("C extensions: tpudata._native ", "pooled memory: batch_memory 4.0 MiB",
                     "threads: ", "worker processes: "):
            assert line in text, text
        assert repr(report).startswith("Info(pid=")
    finally:
        it.close()
        _outpool.release_batch_memory()
    assert tpudata.info().pooled_bytes["batch_memory"] == 0
    from tpudata import _ranged

    held = _ranged.get_pool().stats()["held_bytes"]  # once gs:// reads made the pool
    assert tpudata.info().pooled_bytes["gcs_read_held"] == held
    assert "info" in tpudata.__all__
