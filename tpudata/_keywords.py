"""Misspelt keyword arguments raise ``TypeError`` naming the closest valid keyword.

>>> @strict_keywords
... def read(url, buffer_size=1, compression=None):
...     return buffer_size
>>> try:
...     read("x", bufer_size=10)
... except TypeError as e:
...     print(e)
read() got an unexpected keyword argument 'bufer_size'; did you mean 'buffer_size'?
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Mapping
from typing import Callable, Iterable, TypeVar

F = TypeVar("F", bound=Callable)

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def unknown_keyword_error(name: str, keyword: str, valid: Iterable[str]) -> TypeError:
    """The ``TypeError`` for ``keyword`` passed to ``name``, suggesting the closest of ``valid``."""
    valid = sorted(valid)
    close = difflib.get_close_matches(keyword, valid, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else f"; valid keywords: {', '.join(valid)}"
    if "storage_options" in valid and not close:
        hint += " (fsspec options go in storage_options={...})"
    return TypeError(f"{name}() got an unexpected keyword argument {keyword!r}{hint}")


def check_keywords(name: str, given: Iterable[str], valid: Iterable[str]) -> None:
    """Raise :func:`unknown_keyword_error` for the first of ``given`` that is not in ``valid``."""
    valid = set(valid)
    for keyword in given:
        if keyword not in valid:
            raise unknown_keyword_error(name, keyword, valid)


def storage_options_dict(name: str, storage_options: Mapping | None) -> dict:
    """The ``storage_options`` given to ``name`` (None or a mapping of fsspec options) as a new
    dict; a ``TypeError`` for anything else. Every public entry point takes fsspec options this
    one way, as one ``storage_options={...}`` argument, never as loose keywords."""
    if storage_options is None:
        return {}
    if not isinstance(storage_options, Mapping):
        raise TypeError(f"{name}(): storage_options must be a dict (of fsspec options), not "
                        f"{type(storage_options).__name__}")
    return dict(storage_options)


def strict_keywords(fn: F) -> F:
    """Make unknown keywords to ``fn`` (a function, or a class's ``__init__``) raise a TypeError
    with a suggestion, instead of Python's bare "unexpected keyword argument"."""
    params = inspect.signature(fn).parameters
    valid = frozenset(n for n, p in params.items() if p.kind in _NAMED)
    name = fn.__qualname__.removesuffix(".__init__")

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        for keyword in kwargs:
            if keyword not in valid:
                raise unknown_keyword_error(name, keyword, valid)
        return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


__all__ = ["check_keywords", "storage_options_dict", "strict_keywords", "unknown_keyword_error"]
