"""Worker processes end with their parent, and live as long as it does, whatever thread started
them (one rule, tpudata._processes.exit_with_parent, for process maps and shard builders)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tests.dataset import procpool_fns as fns
from tpudata.dataset.parallel.processes.pool import ProcessMapper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_workers_started_by_a_thread_that_ended_live_on(start_method):
    """PR_SET_PDEATHSIG fires when the *thread* that started a worker ends: a mapper built in a
    short-lived thread (a prefetch or loader thread) would lose its workers to SIGKILL."""
    box = {}

    def build():
        box["m"] = ProcessMapper(fns.tokens, 2, start_method=start_method)
        box["first"] = [i for i, _ in box["m"].imap(range(4))]

    t = threading.Thread(target=build)
    t.start()
    t.join()
    time.sleep(0.6)  # past a parent-watch poll
    with box["m"] as m:
        assert box["first"] == [0, 1, 2, 3]
        assert [i for i, _ in m.imap(range(8))] == list(range(8))


SCRIPT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from tests.dataset import procpool_fns as fns
    from tpudata.dataset.parallel.processes.pool import ProcessMapper
    if __name__ == "__main__":
        m = ProcessMapper(fns.tokens, 2, start_method=sys.argv[2])
        pids = sorted({int(out["pid"]) for _, out in m.imap(range(16))})
        print(" ".join(map(str, pids)), flush=True)
        time.sleep(60)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of a parent that is gone counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_workers_exit_when_their_parent_is_killed(start_method):
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, ROOT, start_method],
                            stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert pids and all(_alive(p) for p in pids)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids), pids
