"""One keyword convention: public entry points take no loose ``**kwargs`` (fsspec options go in one
``storage_options`` dict), and a misspelt keyword raises TypeError naming the closest valid one."""

from __future__ import annotations

import importlib
import inspect

import pytest

from tpudata._keywords import storage_options_dict, strict_keywords

PUBLIC_MODULES = ["tpudata", "tpudata.dataset", "tpudata.distribute", "tpudata.convert",
                  "tpudata.tfrecord", "tpudata.shards", "tpudata.source", "tpudata.example",
                  "tpudata.image", "tpudata.jax", "tpudata.torch"]

# Public callables that still take loose keywords, each with its reason; shrink this, never grow it.
PENDING = {
    "tpudata.shards.manifest.read_manifest": "tpudata/shards passes its options loose inside",
    "tpudata.shards.manifest.verify_manifest": "as read_manifest",
    "tpudata.shards.manifest.write_manifest": "as read_manifest",
    "tpudata.shards.writing.write_shard": "as read_manifest",
    "tpudata.tfrecord.ranges.RangeReader.__init__": "tfrecord/index.py builds it with loose options",
}
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
