"""One keyword convention: public entry points take no loose ``**kwargs`` (fsspec options go in one
``storage_options`` dict), and a misspelt keyword raises TypeError naming the closest valid one."""

from __future__ import annotations

import importlib
import inspect

import pytest

import tpudata
from tests.lockedfs import locked  # noqa: F401 (a fixture)
from tpudata._keywords import storage_options_dict, strict_keywords

PUBLIC_MODULES = ["tpudata", "tpudata.dataset", "tpudata.distribute", "tpudata.convert",
                  "tpudata.tfrecord", "tpudata.shards", "tpudata.source", "tpudata.example",
                  "tpudata.image", "tpudata.jax", "tpudata.torch", "tpudata.dataset.io.spill"]

# Public callables that still take loose keywords, each with its reason; shrink this, never grow it.
PENDING: dict[str, str] = {}
FORWARDING = {  # the keywords go to another callable, by design
    "tpudata.shards.executors.InlineExecutor.submit": "Executor.submit(fn, *args, **kwargs)",
}


def _loose_keyword_callables() -> set[str]:
    found = set()
    for module_name in PUBLIC_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # an optional framework (jax, torch) not installed
            continue
        for name in module.__all__:
            obj = getattr(module, name)
            targets = [obj]
            if inspect.isclass(obj):
                exempt = issubclass(obj, BaseException) or obj.__init__ is object.__init__
                targets = [] if exempt else [obj.__init__]  # not exceptions' or records'
                methods = [getattr(v, "__func__", v) for k, v in vars(obj).items()
                           if not k.startswith("_")]  # static and class methods too
                targets += [m for m in methods if inspect.isfunction(m)]
            for fn in targets:
                try:
                    params = inspect.signature(fn).parameters.values()
                except (TypeError, ValueError):
                    continue
                if any(p.kind is p.VAR_KEYWORD for p in params):
                    found.add(f"{fn.__module__}.{fn.__qualname__}")
    return found


def test_public_entry_points_take_no_loose_keywords():
    """``tfrecord_batches(..., anon=True)`` used to be accepted and then fail deeper down."""
    loose = _loose_keyword_callables()
    assert loose - set(PENDING) - set(FORWARDING) == set(), (
        "take storage_options: Mapping | None = None and decorate with strict_keywords")
    assert set(PENDING) <= loose, f"fixed: remove from PENDING {set(PENDING) - loose}"


def test_strict_keywords_names_the_closest_and_points_loose_options_to_storage_options():
    @strict_keywords
    def read(url, *, verify=True, storage_options=None):
        return storage_options_dict("read", storage_options)

    with pytest.raises(TypeError, match=r"read\(\) got an unexpected keyword argument 'verfy'; "
                                        r"did you mean 'verify'\?"):
        read("x", verfy=False)
    with pytest.raises(TypeError, match=r"'anon'.*fsspec options go in storage_options=\{"):
        read("x", anon=True)
    assert read("x", storage_options={"anon": True}) == {"anon": True}
    assert read("x") == {}
    with pytest.raises(TypeError, match=r"read\(\): storage_options must be a dict"):
        read("x", storage_options="anon")
    assert inspect.signature(read).parameters.keys() == {"url", "verify", "storage_options"}


def test_shards_range_reader_and_spill_helpers_take_one_storage_options_dict(locked):
    """Each reaches fsspec with its ``storage_options`` (``locked://`` opens only with them) and
    refuses them loose, naming the keyword and where fsspec options go."""
    from tpudata.dataset.io.spill import PREFIX, prune_spilled, remove_spilled
    from tpudata.shards import Manifest, read_manifest, verify_manifest, write_manifest, write_shard
    from tpudata.tfrecord import RangeReader
    from tests.lockedfs import OPTIONS, PASSWORD

    info = write_shard("locked://b/s-00000-of-00001", [b"ab", b"cde"], storage_options=OPTIONS)
    assert info.records == 2
    url = "locked://b/s.manifest.json"
    write_manifest(url, Manifest("s", [info]), storage_options=OPTIONS)
    assert read_manifest(url, storage_options=OPTIONS).num_records == 2
    assert verify_manifest(url, storage_options=OPTIONS) == []
    reader = RangeReader(storage_options=OPTIONS)
    assert bytes(reader.read("locked://b/s-00000-of-00001", 12, 14)) == b"ab"
    reader.close()
    with pytest.raises(PermissionError, match="needs storage_options"):
        read_manifest(url)  # the options are what opens it

    loose = [(write_shard, ("locked://b/t-00000-of-00001", [b"x"])), (read_manifest, (url,)),
             (verify_manifest, (url,)), (write_manifest, (url, Manifest("s", [info]))),
             (RangeReader, ()), (remove_spilled, ({}, "locked://b/spill")),
             (prune_spilled, ("locked://b/spill",))]
    for fn, args in loose:
        name = fn.__qualname__
        with pytest.raises(TypeError, match=rf"{name}\(\) got an unexpected keyword argument "
                                            r"'password'.*storage_options=\{"):
            fn(*args, password=PASSWORD)
        with pytest.raises(TypeError, match=rf"{name}\(\): storage_options must be a dict"):
            fn(*args, storage_options="anon")
    with pytest.raises(TypeError, match=r"'compresion'; did you mean 'compression'"):
        write_shard("locked://b/t-00000-of-00001", [b"x"], compresion="GZIP")

    spill = "locked://b/spill"
    tpudata.storage.makedirs(spill, **OPTIONS)
    with tpudata.storage.open_atomic(f"{spill}/{PREFIX}00ff.pkl", **OPTIONS) as f:
        f.write(b"x")
    state = {"spilled": f"{PREFIX}00ff.pkl"}
    assert remove_spilled(state, spill, storage_options=OPTIONS) == [f"{spill}/{PREFIX}00ff.pkl"]
    with tpudata.storage.open_atomic(f"{spill}/{PREFIX}0aaa.pkl", **OPTIONS) as f:
        f.write(b"x")
    assert [u.rsplit("/", 1)[-1] for u in prune_spilled(spill, storage_options=OPTIONS)] == \
        [f"{PREFIX}0aaa.pkl"]
