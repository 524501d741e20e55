"""Errors of map(use_processes=True) name the user's function: worker tracebacks show its file,
line and code (not cloudpickle's ``<dynamic-code>``), and a function that cannot be sent to the
workers is named with its module and qualified name (not the engine's wrapper), saying what to do."""

from __future__ import annotations

import sys
import threading

import pytest

from tpudata.dataset import Dataset
from tpudata.errors import NotPicklableError, WorkerError


def test_worker_traceback_shows_the_users_file_line_and_code():
    pytest.importorskip("cloudpickle")  # sends local functions by value

    def check(x):  # local functions go by value: their code loses its file in cloudpickle
        if int(x) == 3:
            raise ValueError(f"bad element {int(x)}")
        return x

    def outer(x):
        return check(x) * 2

    with pytest.raises(WorkerError) as info:
        list(Dataset.range(6).map(outer, num_parallel_calls=2, use_processes=True))
    tb = info.value.worker_traceback
    assert "<dynamic-code>" not in tb
    line = check.__code__.co_firstlineno + 2
    assert f'File "{__file__}", line {line}, in check' in tb, tb
    assert 'raise ValueError(f"bad element {int(x)}")' in tb  # the source line is found
    assert f'File "{__file__}", line {outer.__code__.co_firstlineno + 1}, in outer' in tb
    assert "bad element 3" in str(info.value)


def test_unpicklable_function_is_named_with_what_to_do():
    pytest.importorskip("cloudpickle")
    lock = threading.Lock()

    def holds_lock(x):
        with lock:
            return x

    with pytest.raises(NotPicklableError) as info:
        list(Dataset.range(4).map(holds_lock, num_parallel_calls=2, use_processes=True))
    text = str(info.value)
    assert isinstance(info.value, TypeError)
    assert f"{__name__}.test_unpicklable_function_is_named_with_what_to_do.<locals>.holds_lock" in text
    assert f"{__file__}:{holds_lock.__code__.co_firstlineno}" in text
    assert "closure variable 'lock'" in text and "ChunkApply" not in text and "map(" in text


def test_lambda_without_cloudpickle_is_named_and_told_to_be_a_module_function(monkeypatch):
    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # as if cloudpickle were not installed
    with pytest.raises(NotPicklableError) as info:
        list(Dataset.range(4).map(lambda x: x + 1, num_parallel_calls=2, use_processes=True))
    text = str(info.value)
    assert f"{__name__}.test_lambda_without_cloudpickle" in text and "<lambda>" in text
    assert "top level of a module" in text and "pip install cloudpickle" in text
    assert "ChunkApply" not in text
