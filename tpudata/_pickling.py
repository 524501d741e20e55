"""Pickling the user's functions for other processes: one helper, one error.

Every place that sends a user function to another process goes through here: the process map
and interleave (:func:`dumps_function`), a Dataset pickled whole for remote workers or a shard
builder's process pool (:func:`picklable_function`, which keeps the function itself when the
standard pickle takes it), and remote templates (:func:`dumps`). A function that does not pickle
raises :class:`~tpudata.errors.NotPicklableError` naming the user's function (module, qualname,
file and line; never an engine wrapper, which names the user's as ``__wrapped__``), what sends it,
the capture that does not pickle (with cloudpickle) and what to do.

cloudpickle is used when it is installed (lambdas, nested functions and ``__main__`` functions go
by value); otherwise the standard pickle, which needs a ``def`` at the top level of a module.

>>> import threading
>>> lock = threading.Lock()
>>> def holds_lock(x):
...     with lock:
...         return x
>>> try:
...     dumps_function(holds_lock, "an example")
... except NotPicklableError as e:
...     print(str(e).split(" (")[0], "..." if "'lock'" in str(e) or "top level" in str(e) else "")
an example sends tpudata._pickling.holds_lock ...
"""

from __future__ import annotations

import logging
import pickle
import types
from collections.abc import Callable

from tpudata.errors import NotPicklableError

logger = logging.getLogger(__name__)

__all__ = ["describe_function", "dumps", "dumps_function", "picklable_function", "user_function"]


def _cloudpickle():
    try:
        import cloudpickle
    except ImportError:
        return None
    return cloudpickle


def user_function(fn):
    """The user's function inside the engine's wrappers (``ChunkApply``, ``SubDatasetServer``:
    each names it as ``__wrapped__``)."""
    seen = 0
    while getattr(fn, "__wrapped__", None) is not None and seen < 8:
        fn, seen = fn.__wrapped__, seen + 1
    return fn


def describe_function(fn) -> str:
    """``module.qualname (file:line)``, or the object's type where it is not a function."""
    name = getattr(fn, "__qualname__", None)
    if name is None:
        return f"a {type(fn).__module__}.{type(fn).__qualname__} object"
    module = getattr(fn, "__module__", None)
    code = getattr(fn, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"{module + '.' if module else ''}{name}{where}"


def dumps_function(fn: Callable, what: str | None = None) -> bytes:
    """``fn`` pickled for the workers: cloudpickle when installed (lambdas, nested functions and
    ``__main__`` functions go by value), else pickle. Functions that cloudpickle sends by value
    keep their source file (cloudpickle writes ``<dynamic-code>``; the worker puts the file
    back), so worker tracebacks show the user's file, line and code. ``what`` names the caller
    (e.g. ``"map(..., use_processes=True)"``) for the error."""
    cloudpickle = _cloudpickle()
    try:
        if cloudpickle is None:
            return pickle.dumps(fn, protocol=5)
        payload = cloudpickle.dumps(fn)
    except Exception as e:
        raise _not_picklable(fn, what, e, cloudpickle) from e
    files = _code_files(user_function(fn))
    if not files:
        return payload
    return pickle.dumps(_Relocated(payload, files), protocol=5)


def _not_picklable(fn, what: str | None, error: Exception, cloudpickle) -> NotPicklableError:
    user = user_function(fn)
    sender = what or "tpudata"
    if cloudpickle is not None:
        culprit = _unpicklable_capture(user, cloudpickle)
        hint = (f"{culprit} does not pickle: create it inside the function (once per worker, "
                f"e.g. on the first call), or pass what it holds as plain data" if culprit else
                "cloudpickle could not pickle it either (does it hold a lock, a file, a socket "
                "or a generator?)")
    else:
        hint = ("define it with `def` at the top level of a module (not a lambda, a "
                "nested function or a method of a local object), or pip install cloudpickle, "
                "which tpudata then uses to send lambdas and nested functions")
    return NotPicklableError(
        f"{sender} sends {describe_function(user)} to worker processes, so it must pickle, but "
        f"it does not ({type(error).__name__}: {error}); {hint}")


def _unpicklable_capture(fn, cloudpickle) -> str | None:
    """The first closure variable or global of ``fn`` that cloudpickle cannot pickle, named."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    captured = []
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            captured.append((f"its closure variable {name!r}", cell.cell_contents))
        except ValueError:  # an empty cell
            continue
    namespace = getattr(fn, "__globals__", {})
    captured += [(f"its global {n!r}", namespace[n]) for n in _names(code) if n in namespace]
    for label, value in captured:
        try:
            cloudpickle.dumps(value)
        except Exception:
            return f"{label} (a {type(value).__module__}.{type(value).__qualname__})"
    return None


def _names(code) -> list:
    """The global names ``code`` and the code nested in it refer to."""
    out = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out += _names(const)
    return out


_DYNAMIC = "<dynamic-code>"  # the file name cloudpickle gives the functions it sends by value


def _key(code) -> tuple:
    return (getattr(code, "co_qualname", code.co_name), code.co_firstlineno)


def _code_files(fn, depth: int = 3, seen: set | None = None) -> dict:
    """``{(qualname, first line): file}`` of ``fn`` and of the functions it refers to (closure,
    globals, defaults), ``depth`` references deep: what the worker needs to put the files back."""
    seen = set() if seen is None else seen
    out: dict = {}
    if id(fn) in seen or depth < 0:
        return out
    seen.add(id(fn))
    if not isinstance(fn, types.FunctionType):
        inner = getattr(fn, "func", None)  # functools.partial
        if inner is None:
            call = getattr(type(fn), "__call__", None)
            inner = call if isinstance(call, types.FunctionType) else None
        return _code_files(inner, depth - 1, seen) if inner is not None else out
    code = fn.__code__
    if code.co_filename != _DYNAMIC:
        out[_key(code)] = code.co_filename
    for value in _references(fn):
        if isinstance(value, types.FunctionType) or hasattr(value, "func"):
            out.update(_code_files(value, depth - 1, seen))
    return out


def _references(fn) -> list:
    cells = []
    for cell in fn.__closure__ or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:
            continue
    namespace = fn.__globals__
    return cells + [namespace[n] for n in _names(fn.__code__) if n in namespace] + list(
        fn.__defaults__ or ())


class _Relocated:
    """cloudpickle's bytes of a function plus the source files of the functions it sends by
    value; unpickles (in the worker) into the function, with the files put back."""

    def __init__(self, payload: bytes, files: dict):
        self.payload, self.files = payload, files

    def __reduce__(self):
        return (_relocate, (self.payload, self.files))


def _relocate(payload: bytes, files: dict):
    obj = pickle.loads(payload)
    try:
        _put_files_back(obj, files, 6, set())
    except Exception:  # tracebacks only: never fail to start a worker for them
        logger.debug("could not restore the source files of %r", obj, exc_info=True)
    return obj


def _with_file(code, filename: str):
    consts = tuple(_with_file(c, filename) if isinstance(c, types.CodeType) else c
                   for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _put_files_back(obj, files: dict, depth: int, seen: set) -> None:
    if depth < 0 or id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, types.FunctionType):
        code = obj.__code__
        filename = files.get(_key(code))
        if code.co_filename == _DYNAMIC and filename is not None:
            obj.__code__ = _with_file(code, filename)
        for value in _references(obj):
            _put_files_back(value, files, depth - 1, seen)
        return
    if isinstance(obj, (list, tuple)):
        for value in obj:
            _put_files_back(value, files, depth - 1, seen)
        return
    if isinstance(obj, dict):
        for value in obj.values():
            _put_files_back(value, files, depth - 1, seen)
        return
    inner = getattr(obj, "func", None)  # functools.partial
    if inner is not None:
        _put_files_back(inner, files, depth - 1, seen)
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict) and not isinstance(obj, type):
        for value in attrs.values():
            _put_files_back(value, files, depth - 1, seen)



def picklable_function(fn: Callable, what: str | None = None, main_by_value: bool = False):
    """``fn`` ready to travel inside a pickled object (a Dataset, a shard task): ``fn`` itself when
    the standard pickle takes it by reference (a function of an importable module), else a
    wrapper holding its :func:`dumps_function` bytes that unpickles back into ``fn``. Raises
    :class:`~tpudata.errors.NotPicklableError` (naming ``fn``, what sends it, and what to do)
    when it pickles neither way.

    ``main_by_value``: send functions of ``__main__`` by value too (with cloudpickle), for
    workers started with spawn, which import the script as ``__mp_main__`` without what its
    ``if __name__ == "__main__":`` block defined.
    """
    if not (main_by_value and getattr(fn, "__module__", None) == "__main__"
            and _cloudpickle() is not None):
        try:
            pickle.dumps(fn, protocol=5)
            return fn
        except Exception:  # lambdas, closures, local functions: by value, with cloudpickle
            pass
    return _CloudPickled(dumps_function(fn, what))


class _CloudPickled:
    """A function carried as its pickled bytes; unpickles back into the function."""

    def __init__(self, payload: bytes):
        self.payload = payload

    def __reduce__(self):
        return (pickle.loads, (self.payload,))


def dumps(obj) -> bytes:
    """``obj`` (an object holding user functions, e.g. a Dataset template) pickled with cloudpickle
    when installed (functions of ``__main__`` by value), else the standard pickle."""
    cloudpickle = _cloudpickle()
    if cloudpickle is None:
        return pickle.dumps(obj, protocol=5)
    return cloudpickle.dumps(obj, protocol=5)
