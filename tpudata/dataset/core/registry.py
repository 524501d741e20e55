"""Where core finds what the ops, sources and io folders build, without importing them.

The fluent :class:`~tpudata.dataset.core.base.Dataset` methods (``ds.map``, ``Dataset.range``,
...) and the JSON state's decoders need classes defined above ``core``. Each defining module
calls :func:`provide` when it is imported (``tpudata.dataset`` imports them all), and core asks
:func:`lookup` by name at call time; so ``core`` imports no sibling folder and the import graph
has no cycle.
"""

from __future__ import annotations

from typing import Any

_PROVIDED: dict[str, Any] = {}


def provide(*objects: Any) -> None:
    """Register classes or functions under their ``__name__`` (once per name)."""
    for obj in objects:
        name = obj.__name__
        if _PROVIDED.get(name, obj) is not obj:
            raise RuntimeError(f"two dataset modules provide {name!r}: "
                               f"{_PROVIDED[name].__module__} and {obj.__module__}")
        _PROVIDED[name] = obj


def lookup(name: str) -> Any:
    """What a module provided under ``name``."""
    try:
        return _PROVIDED[name]
    except KeyError:
        raise RuntimeError(f"{name!r} is not provided: tpudata.dataset imports the module that "
                           f"defines it (see tpudata/dataset/__init__.py)") from None


__all__ = ["lookup", "provide"]
