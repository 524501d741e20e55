"""Files the pipeline writes for itself - cache parts, shuffle spill files - damaged, edited, or
left behind by a killed run.

A cache part is found only by the marker's token in the cache's own directory and is checked (its
header, CRC32C and element count) when read; what a killed pass or spill left is removed by a
later run once it is an hour old (a younger file may belong to a live writer elsewhere).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from tests.dataset.helpers import evil_pickle, outputs
from tpudata.dataset import Dataset
from tpudata.dataset.io import checked
from tpudata.errors import DataLossError


def _mib(x):
    return np.full(1 << 17, x, np.float64)  # 1 MiB per element: 8 per cache part


def _cached(url, n=20):
    return Dataset.range(n).map(_mib).cache(url).map(lambda a: int(a[0]))


def _parts(directory) -> list:
    return sorted(n for n in os.listdir(directory) if n.startswith("part-"))


def test_the_marker_cannot_point_outside_the_cache(tmp_path):
    """The parts are named by the marker's token: a token with ``..`` made the old code unpickle a
    file outside the cache directory."""
    url = tmp_path / "c"
    assert outputs(_cached(str(url))) == list(range(20))
    (url / "part-x").mkdir()
    (tmp_path / "evil-00000.pkl").write_bytes(evil_pickle(tmp_path / "pwned"))
    marker = json.loads((url / "_complete.json").read_text())
    (url / "_complete.json").write_text(json.dumps(dict(marker, token="x/../../evil")))
    with pytest.raises(DataLossError, match="damaged cache marker") as info:
        outputs(_cached(str(url)))
    assert info.value.path == str(url / "_complete.json")
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("how", ["flip", "cut", "swap", "foreign"])
def test_a_damaged_part_names_its_file(tmp_path, how):
    url = tmp_path / "c"
    assert outputs(_cached(str(url))) == list(range(20))
    parts = _parts(url)
    assert len(parts) == 3  # 8 + 8 + 4 elements
    target = url / parts[1]
    data = target.read_bytes()
    if how == "flip":
        target.write_bytes(data[:-1000] + bytes([data[-1000] ^ 1]) + data[-999:])
    elif how == "cut":
        target.write_bytes(data[: len(data) // 3])
    elif how == "swap":  # a whole, valid part where another was: its count gives it away
        target.write_bytes((url / parts[2]).read_bytes())
    else:  # a pickle that is not a cache part
        target.write_bytes(evil_pickle(tmp_path / "pwned"))
    with pytest.raises(DataLossError, match="cache") as info:
        outputs(_cached(str(url)))
    assert info.value.path == str(target)
    assert not (tmp_path / "pwned").exists()


def test_a_cache_of_an_older_tpudata_is_rebuilt(tmp_path, caplog):
    url = tmp_path / "c"
    outputs(_cached(str(url)))
    marker = json.loads((url / "_complete.json").read_text())
    for name in _parts(url):  # as tpudata wrote them before: bare pickles, no format field
        blob = (url / name).read_bytes()
        (url / name).write_bytes(blob[checked.HEADER_SIZE:])
    del marker["format"], marker["version"]
    (url / "_complete.json").write_text(json.dumps(marker))
    assert outputs(_cached(str(url))) == list(range(20))
    assert "older tpudata" in caplog.text
    new = json.loads((url / "_complete.json").read_text())
    assert new["format"] == "tpudata.cache" and new["token"] != marker["token"]


SLOW_CACHE = textwrap.dedent("""
    import sys, time
    import numpy as np
    from tpudata.dataset import Dataset
    def slow(x):
        if x >= 20:
            time.sleep(60)  # killed while the pass is still going
        return np.full(1 << 17, x, np.float64)
    for _ in Dataset.range(100).map(slow).cache(sys.argv[1]):
        pass
""")


def _age(directory, seconds: float) -> None:
    old = time.time() - seconds
    for name in os.listdir(directory):
        os.utime(os.path.join(directory, name), (old, old))


def test_a_killed_cache_pass_is_cleaned_up_by_a_later_run(tmp_path):
    url = tmp_path / "c"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_CACHE, str(url)])
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (url.exists() and len(_parts(url)) >= 2):
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    killed = _parts(url)
    assert len(killed) >= 2 and "_complete.json" not in os.listdir(url)
    temp = url / ".part-0123456789ab-00002.pkl.tmp-abcdef012345"  # killed inside a write
    temp.write_bytes(b"half a part")
    assert outputs(_cached(str(url), n=3)) == [0, 1, 2]  # a young leftover may be a live writer's
    assert set(killed) <= set(os.listdir(url)) and temp.exists()
    _age(url, checked.STALE_SECONDS + 60)
    assert outputs(_cached(str(url), n=3)) == [0, 1, 2]  # an hour on: the next run removes them
    left = os.listdir(url)
    assert not set(killed) & set(left) and not temp.exists()
    marker = json.loads((url / "_complete.json").read_text())
    assert sorted(left) == sorted(["_complete.json"] + [
        f"part-{marker['token']}-{i:05d}.pkl" for i in range(len(marker["counts"]))])


def test_a_killed_spill_write_is_cleaned_up_by_the_next_spill(tmp_path):
    spill = tmp_path / "ckpt"
    spill.mkdir()
    old = spill / ".shuffle-buffer-0123456789abcdef.pkl.tmp-0123456789ab"  # as a killed write
    young = spill / ".shuffle-buffer-fedcba9876543210.pkl.tmp-ba9876543210"  # a live one's
    other = spill / ".model.ckpt.tmp-0123456789ab"  # not the shuffle's
    for path in (old, young, other):
        path.write_bytes(b"partial")
    os.utime(old, (time.time() - checked.STALE_SECONDS - 60,) * 2)
    os.utime(other, (time.time() - checked.STALE_SECONDS - 60,) * 2)
    ds = Dataset.range(300).map(lambda x: np.full(4096, x, np.float64)).shuffle(
        100, seed=4, spill_url=str(spill), spill_bytes=1 << 20)
    with ds.iterator() as it:
        next(it)
        it.get_state()  # the first spill of the run
    assert not old.exists() and young.exists() and other.exists()
