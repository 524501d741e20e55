"""One way to pickle user functions (tpudata._pickling): every path that sends one to another
process (the process map, the shard builder's pool, a pickled Dataset) raises the same
NotPicklableError, naming the user's function (module and qualname, never an engine wrapper) and
what to do, before anything runs or is written."""

from __future__ import annotations

import os
import pickle
import sys
import threading
from concurrent.futures import ProcessPoolExecutor

import pytest

from tpudata._pickling import dumps_function, picklable_function
from tpudata.dataset import Dataset
from tpudata.errors import NotPicklableError
from tpudata.shards import build_shards, read_manifest

LOCK = threading.Lock()


def _closure_over_a_lock():
    lock = threading.Lock()
    return lambda x: (lock, x)[1]


def _assert_names(info, fn, sender: str) -> str:
    text = str(info.value)
    assert isinstance(info.value, TypeError) and isinstance(info.value, pickle.PicklingError)
    assert text.startswith(f"{sender} sends {fn.__module__}.{fn.__qualname__} "
                           f"({__file__}:{fn.__code__.co_firstlineno})"), text
    return text


def test_process_map_names_a_lambda_closing_over_a_lock():
    pytest.importorskip("cloudpickle")
    fn = _closure_over_a_lock()
    with pytest.raises(NotPicklableError) as info:
        list(Dataset.range(4).map(fn, num_parallel_calls=2, use_processes=True))
    text = _assert_names(info, fn, "map(..., use_processes=True)")
    assert "tests.test_pickling._closure_over_a_lock.<locals>.<lambda>" in text
    assert "closure variable 'lock' (a _thread.lock) does not pickle" in text
    assert "create it inside the function" in text and "ChunkApply" not in text


def test_shard_builder_names_a_local_encoder_before_writing_anything(tmp_path):
    pytest.importorskip("cloudpickle")
    lock = threading.Lock()

    def encode(i):
        with lock:
            return str(i).encode()

    with pytest.raises(NotPicklableError) as info:
        build_shards(range(10), encode, str(tmp_path / "out"), "x", num_shards=2, workers=2)
    text = _assert_names(info, encode, "build_shards()")
    assert ("test_shard_builder_names_a_local_encoder_before_writing_anything.<locals>.encode"
            in text)
    assert "closure variable 'lock'" in text
    assert not (tmp_path / "out").exists()  # refused before the build began
    with ProcessPoolExecutor(1) as pool, pytest.raises(NotPicklableError, match=r"<locals>\.encode "):
        build_shards(range(10), encode, str(tmp_path / "out"), "x", num_shards=2, executor=pool)
    # in-process (one worker) nothing is pickled, so the same encoder builds
    assert build_shards(range(10), encode, str(tmp_path / "one"), "x", num_shards=2,
                        workers=1).manifest.num_records == 10


def test_shard_builder_sends_a_lambda_by_value_to_its_pool(tmp_path):
    pytest.importorskip("cloudpickle")
    offset = 100
    result = build_shards(range(6), lambda i: str(i + offset).encode(), str(tmp_path), "x",
                          num_shards=2, workers=2)
    assert read_manifest(str(tmp_path / "x.manifest.json")).num_records == 6
    from tpudata import read_records

    got = [r for s in result.manifest.shards for r in read_records(str(tmp_path / s.name))]
    assert got == [str(i + 100).encode() for i in range(6)]


def test_without_cloudpickle_a_lambda_is_named_with_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # as if it were not installed
    fn = lambda i: str(i).encode()  # noqa: E731
    with pytest.raises(NotPicklableError) as info:
        build_shards(range(4), fn, str(tmp_path), "x", num_shards=2, workers=2)
    text = _assert_names(info, fn, "build_shards()")
    assert "test_without_cloudpickle_a_lambda_is_named_with_what_to_do.<locals>.<lambda>" in text
    assert "`def` at the top level of a module" in text and "pip install cloudpickle" in text
    with pytest.raises(NotPicklableError, match=r"a pickled Dataset \(\w+\) sends .*<lambda>"):
        pickle.dumps(Dataset.range(3).map(fn))


class _EngineWrapper:
    """Stands for an engine wrapper (as ChunkApply): it names the user's function __wrapped__."""

    def __init__(self, fn):
        self.__wrapped__ = fn

    def __call__(self, x):
        return self.__wrapped__(x)


def test_the_users_function_is_named_not_the_wrapper_and_a_global_capture_is_found():
    pytest.importorskip("cloudpickle")

    def uses_global_lock(x):
        with LOCK:
            return x

    with pytest.raises(NotPicklableError) as info:
        dumps_function(_EngineWrapper(uses_global_lock), "a test")
    text = _assert_names(info, uses_global_lock, "a test")
    assert "_EngineWrapper" not in text and "its global 'LOCK' (a _thread.lock)" in text


def test_picklable_functions_round_trip():
    pytest.importorskip("cloudpickle")
    assert picklable_function(os.path.join) is os.path.join  # importable: by reference
    k = 5
    wrapped = picklable_function(lambda x: x + k)  # by value
    assert pickle.loads(pickle.dumps(wrapped))(1) == 6
    assert pickle.loads(dumps_function(lambda x: x * k))(2) == 10


SCRIPT = '''
import sys
from tpudata.shards import build_shards

if __name__ == "__main__":
    def encode(i):  # defined under the guard: a spawned worker's __mp_main__ lacks it
        return str(i).encode()

    r = build_shards(range(6), encode, sys.argv[1], "x", num_shards=2, workers=2)
    print(r.manifest.num_records)
'''


def test_shard_builder_sends_a_function_of_a_guarded_main_by_value(tmp_path):
    """It used to reach the workers by reference and break the pool (BrokenProcessPool)."""
    pytest.importorskip("cloudpickle")
    import subprocess

    script = tmp_path / "build.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=120, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "6"
