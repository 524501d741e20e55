"""A full /dev/shm gives a clear error (SharedMemoryFullError, naming /dev/shm and what to do)
in the consumer, not a worker killed by SIGBUS."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tpudata import _shm_transport as _shm
from tpudata.errors import SharedMemoryFullError, TpuDataError


def _segments(prefix: str) -> list[str]:
    return [n for n in os.listdir("/dev/shm") if n.startswith(prefix)] if os.path.isdir("/dev/shm") else []


@pytest.mark.skipif(not hasattr(os, "posix_fallocate"), reason="no posix_fallocate here")
def test_a_segment_that_finds_no_room_raises_and_leaves_nothing(monkeypatch):
    prefix = f"tpd{os.getpid()}full_"
    sender = _shm.Sender(prefix)

    def no_room(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", no_room)
    big = {"x": np.ones(4 * _shm.INLINE_LIMIT, np.uint8)}
    with pytest.raises(SharedMemoryFullError) as info:
        sender.encode(big)
    e = info.value
    assert isinstance(e, MemoryError) and isinstance(e, TpuDataError)
    assert e.size >= big["x"].nbytes and str(e) == e.message
    assert "/dev/shm" in str(e) and "--shm-size" in str(e) and "fewer workers" in str(e)
    assert _segments(prefix) == []  # the segment that did not fit is gone
    # small payloads travel inline and never need the room
    payload, slot = sender.encode({"x": np.ones(8, np.uint8)})
    assert payload[0] == "i" and slot is None
    # a file system that cannot reserve (EINVAL) still gets its segment, as before
    monkeypatch.setattr(os, "posix_fallocate",
                        lambda fd, o, n: (_ for _ in ()).throw(OSError(errno.EINVAL, "no")))
    payload, slot = sender.encode(big)
    assert _shm.Receiver().decode(payload)["x"].sum() == big["x"].nbytes
    sender.close()
    assert _segments(prefix) == []


_SMALL_SHM = textwrap.dedent("""
    import sys

    import numpy as np
    from tpudata.dataset import Dataset
    from tpudata.dataset.parallel.processes.pool import ProcessMapper
    from tpudata.errors import SharedMemoryFullError, WorkerError

    def big(x):
        return np.full((1 << 20,), x, dtype=np.float32)  # 4 MB per element

    if __name__ == "__main__":
        run = sys.argv[1]
        try:
            if run == "dataset":
                ds = Dataset.range(50).map(big, num_parallel_calls=2, use_processes=True)
                print(run, "ok", sum(1 for _ in ds))
            else:
                with ProcessMapper(big, num_workers=2) as m:
                    print(run, "ok", sum(1 for _ in m.imap(range(50))))
        except WorkerError as e:
            assert isinstance(e.__cause__, SharedMemoryFullError), repr(e.__cause__)
            print(run, "error", e.__cause__.size, e.__cause__.free)
            print(e)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("unshare") is None,
                    reason="needs Linux and unshare")
def test_a_small_dev_shm_gives_a_clear_error_in_the_consumer(tmp_path):
    """The real thing: a 12 MB /dev/shm (a tmpfs in a private mount namespace, as in a small
    container) and 4 MB results."""
    script = tmp_path / "small_shm.py"
    script.write_text(_SMALL_SHM)
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=12m tmpfs /dev/shm"],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot mount a private /dev/shm here (needs root / CAP_SYS_ADMIN)")
    outs = {}
    for run in ("dataset", "mapper"):  # each on a /dev/shm of its own: no teardown of the other
        out = outs[run] = subprocess.run(
            ["unshare", "-m", "sh", "-c",
             f"mount -t tmpfs -o size=12m tmpfs /dev/shm && exec {sys.executable} {script} {run}"],
            capture_output=True, text=True, timeout=120, cwd=os.getcwd())
        assert out.returncode == 0, out.stderr[-3000:]
        line = next(x for x in out.stdout.splitlines() if x.startswith(run + " "))
        assert line.startswith(f"{run} error"), out.stdout[-3000:]
        size, free = (int(v) for v in line.split()[2:4])
        assert size > free  # the segment did not fit in what was left
        assert "/dev/shm" in out.stdout and "--shm-size" in out.stdout
        assert "SIGBUS" not in out.stdout + out.stderr
    assert "map(big) on worker processes, at input element" in outs["dataset"].stdout
