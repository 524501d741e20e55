"""Saved datasets edited by an attacker, or damaged: ``Dataset.load`` runs nothing and checks all.

The metadata (``dataset_spec.tpudata.json``) is data only - a namedtuple in its structure is
resolved from the classes the caller passes, never imported - and every shard is checked against
it once: its size when the dataset is opened, its CRC32C with ``verify=True``, its record count
when it is read to its end. A killed save leaves nothing the next save does not remove.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tpudata
from tests.dataset.helpers import outputs
from tpudata.dataset import Dataset
from tpudata.dataset.io.saved_format import METADATA
from tpudata.errors import SavedDatasetError, UntrustedTypeError

Point = collections.namedtuple("Point", "x y")


def _saved(path, n=30, shards=3) -> dict:
    Dataset.range(n).map(lambda x: (x, np.full(2, x))).save(str(path), num_shards=shards)
    return json.loads((path / METADATA).read_text())


def _edit(path, **changes) -> dict:
    meta = json.loads((path / METADATA).read_text())
    meta.update(changes)
    (path / METADATA).write_text(json.dumps(meta))
    return meta


# -- code named by the metadata -------------------------------------------------------------------
def test_the_structure_cannot_build_and_exec_code(tmp_path):
    """The issue's attack: an ``exec`` node over a ``str.join`` node over a dict whose key is the
    code ran the code inside ``Dataset.load``, before any data was read."""
    marker = tmp_path / "pwned"
    _saved(tmp_path / "d")
    code = f"open({str(marker)!r}, 'w').write('ran')"
    empty_str = {"kind": "namedtuple:builtins:str", "keys": [], "children": []}
    joined = {"kind": "namedtuple:builtins:str.join", "keys": ["a", "b"],
              "children": [empty_str, {"kind": "dict", "keys": [code], "children": ["*"]}]}
    _edit(tmp_path / "d", structure={"kind": "tuple", "keys": None, "children": [
        "*", {"kind": "namedtuple:builtins:exec", "keys": ["source"], "children": [joined]}]})
    with pytest.raises(UntrustedTypeError, match="builtins:"):
        Dataset.load(str(tmp_path / "d"))
    assert not marker.exists()


def test_the_structure_cannot_import_a_module(tmp_path, monkeypatch):
    (tmp_path / "hostile_saved_target.py").write_text(
        "import collections\n"
        f"open({str(tmp_path / 'imported')!r}, 'w').write('ran')\n"
        "P = collections.namedtuple('P', 'a b')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "hostile_saved_target", raising=False)
    meta = _saved(tmp_path / "d")
    structure = dict(meta["structure"], kind="namedtuple:hostile_saved_target:P", keys=["a", "b"])
    _edit(tmp_path / "d", structure=structure)
    with pytest.raises(UntrustedTypeError, match="hostile_saved_target:P") as info:
        Dataset.load(str(tmp_path / "d"))
    assert "namedtuples=" in str(info.value) and METADATA in str(info.value)
    assert not (tmp_path / "imported").exists() and "hostile_saved_target" not in sys.modules


def test_namedtuples_come_from_the_caller(tmp_path):
    path = str(tmp_path / "p")
    Dataset.range(4).map(lambda x: Point(x, np.full(2, x))).save(path, num_shards=2)
    with pytest.raises(UntrustedTypeError, match="test_hostile_saved:Point"):
        Dataset.load(path)
    for loaded in (Dataset.load(path, namedtuples=[Point]),
                   Dataset.load(path, element_spec=Dataset.load(
                       path, namedtuples=[Point]).element_spec)):
        assert [type(e) for e in loaded] == [Point] * 4
    other = collections.namedtuple("Point", "a b")  # same name, other fields: not Point
    other.__module__, other.__qualname__ = __name__, "Point"
    with pytest.raises(SavedDatasetError, match="fields"):
        Dataset.load(path, namedtuples=[other])
    with pytest.raises(TypeError, match="namedtuple classes"):
        Dataset.load(path, namedtuples=[tuple])


@pytest.mark.parametrize("dtype", ["finfo", "__class__", "ml_dtypes.finfo", "os.system"])
def test_a_dtype_name_is_looked_up_never_called(tmp_path, dtype):
    pytest.importorskip("ml_dtypes")
    meta = _saved(tmp_path / "d")
    leaves = [dict(meta["leaves"][0], dtype=dtype)] + meta["leaves"][1:]
    _edit(tmp_path / "d", leaves=leaves)
    with pytest.raises(SavedDatasetError, match="dtype"):
        Dataset.load(str(tmp_path / "d"))


# -- shards that do not match the metadata --------------------------------------------------------
def _cut_last_record(shard: str) -> None:
    index = tpudata.build_index(shard)
    with open(shard, "r+b") as f:
        f.truncate(int(index[-1, 0]))  # at a record boundary: every record left is intact


def test_a_shard_cut_at_a_record_boundary_is_refused(tmp_path):
    """The issue's case: 295 of 300 elements loaded while cardinality() said 300."""
    meta = _saved(tmp_path / "d", n=300, shards=3)
    shard = str(tmp_path / "d" / meta["shards"][1]["file"])
    _cut_last_record(shard)
    with pytest.raises(SavedDatasetError, match="bytes, but the saved dataset's metadata") as info:
        Dataset.load(str(tmp_path / "d"))
    assert info.value.path == shard


def test_a_cut_shard_of_an_older_save_is_caught_at_its_end(tmp_path):
    """Metadata without sizes (written before this version): the count is checked at the end."""
    meta = _saved(tmp_path / "d", n=300, shards=3)
    for s in meta["shards"]:
        del s["bytes"], s["crc32c"]
    _edit(tmp_path / "d", shards=meta["shards"])
    assert len(outputs(Dataset.load(str(tmp_path / "d")))) == 300  # still loads when intact
    shard = str(tmp_path / "d" / meta["shards"][2]["file"])
    _cut_last_record(shard)
    ds = Dataset.load(str(tmp_path / "d"))
    with pytest.raises(SavedDatasetError, match="holds 99 records.*says 100") as info:
        list(ds)
    assert info.value.path == shard


def test_an_appended_record_is_refused(tmp_path):
    meta = _saved(tmp_path / "d")
    shard = str(tmp_path / "d" / meta["shards"][0]["file"])
    with open(shard, "rb") as f:
        first = next(iter(tpudata.read_records(shard)))
    with open(shard, "ab") as f:
        f.write(tpudata.tfrecord.framing.frame([first]))
    with pytest.raises(SavedDatasetError, match=os.path.basename(shard)):
        Dataset.load(str(tmp_path / "d"))


def test_swapped_records_are_caught_by_verify(tmp_path):
    """Two records of one size swapped: the size and count still match; the CRC32C does not."""
    meta = _saved(tmp_path / "d")
    shard = str(tmp_path / "d" / meta["shards"][0]["file"])
    records = list(tpudata.read_records(shard))
    records[0], records[1] = records[1], records[0]
    tpudata.write_records(shard, records)
    assert len(outputs(Dataset.load(str(tmp_path / "d")))) == 30  # sizes agree: only verify sees
    with pytest.raises(SavedDatasetError, match="CRC32C") as info:
        Dataset.load(str(tmp_path / "d"), verify=True)
    assert info.value.path == shard


@pytest.mark.parametrize("change", [
    {"cardinality": "many"}, {"cardinality": -1}, {"cardinality": 31}, {"cardinality": 2 ** 70},
    {"shards": "x"}, {"shards": [{"file": "..", "shard_id": 0, "records": 30}]},
    {"shards": [{"file": "/etc/passwd", "shard_id": 0, "records": 30}]},
    {"shards": [{"file": "shard-0a-00000.tfrecord", "shard_id": 0, "records": "30"}]},
    {"shards": [{"file": "shard-0a-00000.tfrecord", "shard_id": 0, "records": -5}]},
    {"structure": {"kind": "tuple", "keys": None, "children": "**"}},
    {"structure": {"kind": "set", "keys": None, "children": ["*", "*"]}},
])
def test_damaged_metadata_names_the_file(tmp_path, change):
    _saved(tmp_path / "d")
    _edit(tmp_path / "d", **change)
    with pytest.raises(SavedDatasetError, match="damaged or not a tpudata save") as info:
        Dataset.load(str(tmp_path / "d"))
    assert info.value.path == str(tmp_path / "d" / METADATA)


# -- a killed save --------------------------------------------------------------------------------
SLOW_SAVE = textwrap.dedent("""
    import sys
    import numpy as np
    from tpudata.dataset import Dataset
    Dataset.range(10 ** 7).map(lambda x: np.full(2048, x)).save(sys.argv[1], num_shards=2,
                                                                  progress=False)
""")


def test_a_killed_save_leaves_nothing_the_next_save_keeps(tmp_path):
    path = tmp_path / "d"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_SAVE, str(path)])
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until its shards are being written
            temps = [n for n in os.listdir(path) if ".tmp-" in n] if path.exists() else []
            if temps and all(os.path.getsize(path / n) > 1 << 20 for n in temps):
                break
            time.sleep(0.05)
        else:
            pytest.fail("the save never started writing")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    left = os.listdir(path)
    assert [n for n in left if ".tmp-" in n] and METADATA not in left
    orphan = path / "shard-0badcafe-00000.tfrecord"  # as a save killed between shard and metadata
    tpudata.write_records(str(orphan), [b"x"])
    Dataset.range(5).save(str(path), num_shards=2)
    meta = json.loads((path / METADATA).read_text())
    assert sorted(os.listdir(path)) == sorted([METADATA] + [s["file"] for s in meta["shards"]])
    assert outputs(Dataset.load(str(path))) == [0, 1, 2, 3, 4]
