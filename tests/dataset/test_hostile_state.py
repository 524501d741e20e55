"""Iterator states written by an attacker: a state is data, never code, and names no file.

Each test edits a real state as someone who can write the checkpoint file would, and checks that
restoring it raises a clear :class:`StateError` (or a DataLossError naming the file) and that
nothing the state asked for ran. On the code before states were checked, each of these ran the
attacker's code, read the file the state named, or failed with a bare KeyError / numpy error.
"""

from __future__ import annotations

import base64
import collections
import json
import sys

import numpy as np
import pytest

from tests.dataset.helpers import evil_pickle
from tpudata.dataset import Dataset
from tpudata.errors import DataLossError, StateError, TpuDataError

Pair = collections.namedtuple("Pair", "a b")


def _vec(x):
    return np.full(3, x, np.int64)


def _carried_state(ds, steps: int = 1) -> dict:
    """A JSON state of ``ds`` (ending in a shuffle whose buffer is carried in the state)."""
    with ds.iterator() as it:
        for _ in range(steps):
            next(it)
        return json.loads(json.dumps(it.get_state()))


def _find(obj, key: str) -> list:
    """Every dict inside ``obj`` that has ``key``."""
    found = []
    if isinstance(obj, dict):
        if key in obj:
            found.append(obj)
        for value in obj.values():
            found += _find(value, key)
    elif isinstance(obj, list):
        for value in obj:
            found += _find(value, key)
    return found


def _bytes_column(values) -> dict:
    return {"__objects__": [{"__bytes__": base64.b64encode(v).decode()} for v in values],
            "shape": [len(values)]}


def _drain_with(state: dict, elements: dict, n: int) -> dict:
    """``state`` edited so that its shuffle drains ``n`` buffered ``elements`` next."""
    shuffle = _find(state, "buffer")[0]
    shuffle.pop("pending", None)
    shuffle.pop("pending_n", None)
    shuffle.update(phase="drain", n=n, buffer={"elements": elements})
    return state


def _restore_and_read(ds, state):
    with ds.iterator(state) as it:
        return [next(it) for _ in range(1)]


# -- code named by a state ------------------------------------------------------------------------
def test_a_namedtuple_node_cannot_name_exec(tmp_path):
    """The issue's attack: a buffered structure whose node is ``namedtuple:builtins:exec`` made the
    first ``next()`` call ``exec(<the buffered bytes>)``."""
    marker = tmp_path / "pwned"
    code = f"open({str(marker)!r}, 'w').write('ran')".encode()
    ds = Dataset.range(20).map(lambda x: x.tobytes()).shuffle(8, seed=1)
    state = _drain_with(_carried_state(ds), {
        "tree": {"kind": "namedtuple:builtins:exec", "keys": ["source"], "children": ["*"]},
        "kinds": [None], "cols": [_bytes_column([code] * 2)]}, 2)
    with pytest.raises(StateError, match="builtins:exec"):
        _restore_and_read(ds, state)
    assert not marker.exists()


def test_a_namedtuple_node_cannot_import_a_module(tmp_path, monkeypatch):
    """Importing a module named in a state runs its top level: the name is never imported."""
    (tmp_path / "hostile_state_target.py").write_text(
        f"open({str(tmp_path / 'imported')!r}, 'w').write('ran')\nclass P(tuple):\n"
        "    _fields = ('a',)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "hostile_state_target", raising=False)
    ds = Dataset.range(20).map(_vec).group_by_window(lambda x: x[0] % 2, lambda k, w: w.batch(4),
                                                     window_size=4)
    with ds.iterator() as it:
        next(it)
        state = json.loads(json.dumps(it.get_state()))
    group = _find(state, "groups")[0]
    assert group["tree"] == "*"
    group["tree"] = {"kind": "namedtuple:hostile_state_target:P", "keys": ["a"],
                     "children": ["*"]}
    with pytest.raises(StateError, match="hostile_state_target:P"):
        _restore_and_read(ds, state)
    assert not (tmp_path / "imported").exists()
    assert "hostile_state_target" not in sys.modules


def test_a_state_cannot_make_a_shuffle_unpickle_a_file_it_names(tmp_path):
    """A shuffle without ``spill_url`` unpickled whatever file the state named."""
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(evil_pickle(tmp_path / "pwned"))
    ds = Dataset.range(20).map(_vec).shuffle(8, seed=1)
    state = _drain_with(_carried_state(ds), {"tree": "*", "kinds": [None],
                                             "spilled": str(evil)}, 2)
    with pytest.raises(StateError, match="no spill_url"):
        _restore_and_read(ds, state)
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("name", ["/etc/passwd", "../evil.pkl", "EVIL", "sub/shuffle-buffer-ab.pkl",
                                  "shuffle-buffer-ab.pkl/..", 7])
def test_a_spill_file_is_found_in_spill_url_only(tmp_path, name):
    spill = tmp_path / "ckpt"
    spill.mkdir()
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(evil_pickle(tmp_path / "pwned"))
    if name == "EVIL":
        name = str(evil)  # an absolute path outside spill_url
    ds = Dataset.range(20).map(_vec).shuffle(8, seed=1, spill_url=str(spill))
    state = _drain_with(_carried_state(ds), {"tree": "*", "kinds": [None], "spilled": name}, 2)
    with pytest.raises(StateError, match="spill"):
        _restore_and_read(ds, state)
    assert not (tmp_path / "pwned").exists()


def _spilled_run(spill):
    ds = Dataset.range(300).map(lambda x: np.full(4096, x, np.float64)).shuffle(
        100, seed=4, spill_url=str(spill), spill_bytes=1 << 20)
    state = _carried_state(ds, steps=3)
    names = [e["spilled"] for e in _find(state, "spilled")]
    assert names and all("/" not in n for n in names)  # names, not paths
    return ds, state, names


def test_a_damaged_spill_file_is_named(tmp_path):
    """A cut or flipped spill file raised a bare UnpicklingError/EOFError (or gave wrong data)."""
    spill = tmp_path / "ckpt"
    ds, state, names = _spilled_run(spill)
    path = spill / names[0]
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataLossError, match="damaged spill file") as info:
        _restore_and_read(ds, state)
    assert info.value.path == str(path)
    flipped = bytearray(data)
    flipped[-100] ^= 0x40  # inside an array's bytes: unpickles fine, to wrong values
    path.write_bytes(bytes(flipped))
    with pytest.raises(DataLossError, match="CRC32C") as info:
        _restore_and_read(ds, state)
    assert info.value.path == str(path)
    path.write_bytes(data)
    assert len(list(ds.iterator(state))) == 297  # the intact file restores


def test_an_older_state_naming_its_spill_file_by_url_still_restores(tmp_path):
    spill = tmp_path / "ckpt"
    ds, state, names = _spilled_run(spill)
    expected = [float(e[0]) for e in ds.iterator(state)]
    for entry in _find(state, "spilled"):  # as tpudata wrote them before: whole URLs
        entry["spilled"] = str(spill / entry["spilled"])
    del state["pipeline"]
    assert [float(e[0]) for e in ds.iterator(state)] == expected


# -- a state of another pipeline ------------------------------------------------------------------
@pytest.mark.parametrize("taken,restored", [
    (lambda: Dataset.range(20).map(_vec).shuffle(8, seed=1),
     lambda: Dataset.range(20).map(_vec).batch(2)),  # KeyError: 'seed' before
    (lambda: Dataset.range(200).map(_vec).shuffle(100, seed=1),
     lambda: Dataset.range(200).map(_vec).shuffle(10, seed=1)),  # numpy broadcast error before
    (lambda: Dataset.range(10), lambda: Dataset.range(20)),  # silently restored before
    (lambda: Dataset.range(20).batch(4), lambda: Dataset.range(20).batch(5)),
    (lambda: Dataset.range(20).shard(2, 0), lambda: Dataset.range(20).shard(2, 1)),
])
def test_a_state_of_another_pipeline_says_which(taken, restored):
    state = _carried_state(taken(), steps=2)
    with pytest.raises(StateError, match="another pipeline") as info:
        restored().iterator(state)
    message = str(info.value)
    assert state["pipeline"]["ops"] in message  # what was found
    with restored().iterator() as it:
        assert it.get_state()["pipeline"]["ops"] in message  # what was expected


def test_the_fingerprint_is_the_same_in_another_process():
    import subprocess

    code = ("import json\nfrom tpudata.dataset import Dataset\nimport numpy as np\n"
            "ds = Dataset.range(9).map(abs, num_parallel_calls=3).shuffle(4).batch(2).prefetch(2)\n"
            "print(json.dumps(ds.iterator().get_state()['pipeline']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=120)
    ds = Dataset.range(9).map(abs).shuffle(4, seed=3).batch(2)  # knobs and seeds left out
    assert json.loads(out.stdout) == ds.iterator().get_state()["pipeline"]


@pytest.mark.parametrize("state", [{}, {"foo": 1}, [], "state", {"iteration": 0, "cursor": 3},
                                   {"iteration": "0", "cursor": {}}])
def test_what_is_not_a_state_says_so(state):
    with pytest.raises(StateError, match="not an iterator state"):
        Dataset.range(5).iterator(state)


def test_a_damaged_state_of_this_pipeline_says_it_does_not_fit():
    ds = Dataset.range(200).map(_vec).shuffle(10, seed=1)
    state = _carried_state(ds, steps=2)
    _find(state, "buffer")[0]["n"] = 50  # more than the buffer holds
    with pytest.raises(StateError, match="buffer_size is 10"):
        ds.iterator(state)
    state = _carried_state(ds, steps=2)
    del _find(state, "buffer")[0]["rng"]
    with pytest.raises(StateError, match="does not fit this pipeline.*KeyError"):
        ds.iterator(state)


def test_a_state_of_an_older_tpudata_still_restores():
    ds = Dataset.range(50).map(_vec).shuffle(16, seed=2).batch(3)
    state = _carried_state(ds, steps=4)
    expected = [e.tolist() for e in ds.iterator(state)]
    del state["pipeline"]  # states before this version record no pipeline
    assert [e.tolist() for e in ds.iterator(state)] == expected


# -- namedtuples come from the pipeline, not from the state ---------------------------------------
def _pairs(x):
    return Pair(x, np.full(2, x))


@pytest.mark.parametrize("make", [
    lambda: Dataset.from_tensor_slices(Pair(np.arange(30), np.arange(60).reshape(30, 2))),
    lambda: Dataset.range(30).map(_pairs),  # declared by the map's traced spec
])
def test_namedtuples_in_a_state_resolve_to_the_pipelines_classes(make):
    state = _carried_state(make().shuffle(8, seed=5), steps=3)
    assert "namedtuple:tests.dataset.test_hostile_state:Pair" in json.dumps(state)
    rest = list(make().shuffle(8, seed=5).iterator(state))
    assert rest and all(type(e) is Pair for e in rest)


# -- a saved dataset named by a state -------------------------------------------------------------
def test_a_state_cannot_open_a_saved_dataset_the_pipeline_does_not_load(tmp_path):
    """A reader_func pipeline's state names shards of the save; the old code opened whatever save
    the state named (reading another directory's data into the pipeline)."""
    Dataset.range(10).save(str(tmp_path / "a"), num_shards=3)
    Dataset.range(100, 110).save(str(tmp_path / "b"), num_shards=3)

    def make():  # the shuffle buffers shard datasets: the state names them
        return Dataset.load(str(tmp_path / "a"),
                            reader_func=lambda d: d.shuffle(3, seed=1).flat_map(lambda s: s))

    state = _carried_state(make(), steps=4)
    shards = _find(state, "__saved_shard__")
    assert shards
    b_files = json.loads((tmp_path / "b" / "dataset_spec.tpudata.json").read_text())["shards"]
    for entry in shards:
        entry["__saved_shard__"] = {"path": str(tmp_path / "b"), "file": b_files[0]["file"]}
    with pytest.raises(StateError, match="no Dataset.load of this pipeline"):
        list(make().iterator(state))
    rest = [int(x) for x in make().iterator(_carried_state(make(), steps=4))]
    assert sorted(rest + [int(x) for x in list(make())[:4]]) == list(range(10))


def test_state_errors_are_value_errors():
    assert issubclass(StateError, TpuDataError) and issubclass(StateError, ValueError)
