"""Worker processes change nothing process-wide in the user's process: no malloc tuning (the
workers tune themselves), no multiprocessing global (start method, fork server preload list), no
signal handler, no environment variable. tpudata.info() lists the workers while they run."""

from __future__ import annotations

import json
import operator
import os
import subprocess
import sys
import textwrap

import tpudata
from tpudata import _accel
from tpudata.dataset import Dataset
from tpudata.dataset.parallel.processes.pool import ProcessMapper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _refuse(*args, **kwargs):
    raise AssertionError("tpudata tuned malloc in the user's process")


def test_process_maps_leave_the_parents_malloc_alone(monkeypatch):
    """Creating a ProcessMapper used to call mallopt (ensure_allocator_tuned) in this process."""
    monkeypatch.setattr(_accel, "_allocator_state", None)
    monkeypatch.setattr(_accel, "tune_allocator", _refuse)
    monkeypatch.setattr(_accel, "ensure_allocator_tuned", _refuse)
    with ProcessMapper(operator.neg, num_workers=1) as mapper:
        assert list(mapper.imap([1, 2])) == [(0, -1), (1, -2)]
    ds = Dataset.range(4).map(operator.neg, num_parallel_calls=2, use_processes=True)
    assert sorted(int(x) for x in ds) == [-3, -2, -1, 0]
    assert _accel.allocator_tuned() is None


GLOBALS = textwrap.dedent("""
    import json, multiprocessing, operator, os, signal, sys
    from multiprocessing import forkserver
    import tpudata
    from tpudata.dataset import Dataset
    from tpudata.dataset.parallel.processes.pool import ProcessMapper

    def seen():
        server = forkserver._forkserver
        return {"start_method": multiprocessing.get_start_method(allow_none=True),
                "preload": list(server._preload_modules),
                "fork_server": server._forkserver_pid,
                "signals": {s.name: repr(signal.getsignal(s)) for s in
                            (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE)},
                "environ": dict(os.environ)}

    if __name__ == "__main__":
        before = seen()
        for method in ("forkserver", "spawn"):
            with ProcessMapper(operator.neg, num_workers=2, start_method=method) as mapper:
                assert [r for _, r in mapper.imap([1, 2, 3])] == [-1, -2, -3]
        ds = Dataset.range(6).map(operator.neg, num_parallel_calls=2, use_processes=True)
        assert sorted(int(x) for x in ds) == [-5, -4, -3, -2, -1, 0]
        after = seen()
        multiprocessing.set_start_method("spawn")  # still the user's to choose
        print(json.dumps({"before": before, "after": after}))
""")


def test_worker_processes_change_no_multiprocessing_global_signal_or_environment(tmp_path):
    """The fork server's preload list used to be extended through multiprocessing's private
    attributes, and the first worker fixed the default start method (set_start_method then
    raised "context has already been set")."""
    script = tmp_path / "globals_check.py"
    script.write_text(GLOBALS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPUDATA_")}
    env["PYTHONPATH"] = ROOT
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["after"] == seen["before"]
    assert seen["before"]["start_method"] is None and seen["before"]["preload"] == ["__main__"]


def test_info_lists_the_workers_and_the_fork_server_while_they_run():
    with ProcessMapper(operator.neg, num_workers=2) as mapper:
        assert list(mapper.imap([5])) == [(0, -5)]
        names = [name for name, _ in tpudata.info().processes]
        assert names.count("tpudata-fork-server") == 1
        assert {"tpudata-map-0", "tpudata-map-1"} <= set(names)
        assert "tpudata-map-0" in str(tpudata.info())
    names = [name for name, _ in tpudata.info().processes]
    assert not [n for n in names if n.startswith("tpudata-map")]
