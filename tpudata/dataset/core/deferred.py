"""Deferred calls: how a fused ``map(fn).batch(n)`` runs the per-element calls of a function
that has a batch form (tpudata.image's presets) as one call per batch.

While the fused op calls the user's ``fn`` (:func:`recording`), such a function does its cheap
per-element part as it always does - argument checks, header reads, random draws, in element
order - and returns a :class:`Deferred` placeholder for the rest instead of computing it. The
fused op then computes each batch's placeholders in one call of their :class:`BatchForm`, whose
rows equal the per-element results exactly, written straight into the batch array.

A placeholder may only be returned: every placeholder a call made must be a leaf of the call's
result (:func:`returned`). Anything else - arithmetic, numpy, indexing, any attribute but
``shape`` and ``dtype`` - raises :class:`DeferredUsed`; the fused op then calls ``fn`` again on
that element as the unfused map would and stops deferring for the rest of the iteration.
"""

from __future__ import annotations

import threading

from tpudata.dataset.core.nest import flatten

__all__ = ["BatchForm", "Deferred", "DeferredUsed", "deferring", "recording", "returned"]

_local = threading.local()  # .made: the placeholders of the running call (None: not deferring)


class DeferredUsed(TypeError):
    """A placeholder was used inside the function instead of being returned."""


class BatchForm:
    """The batch form of a per-element function: ``run(key, payloads)`` returns the ``(n, ...)``
    array whose row ``i`` equals the per-element call that made ``payloads[i]`` (all with one
    ``key``). A bad row raises an error with ``index`` set; ``run(key, [payloads[index]])``
    then raises what the per-element call raises."""

    name = "batch form"

    def run(self, key, payloads: list):  # pragma: no cover - interface
        raise NotImplementedError


def deferring() -> bool:
    """Whether calls on this thread are being recorded for a fused batch (see :func:`recording`)."""
    return getattr(_local, "made", None) is not None


class recording:
    """``with recording() as made:`` calls on this thread return placeholders, listed in ``made``."""

    __slots__ = ("made", "_outer")

    def __enter__(self) -> list:
        self._outer = getattr(_local, "made", None)
        self.made = _local.made = []
        return self.made

    def __exit__(self, *exc) -> None:
        _local.made = self._outer


def returned(result, made: list) -> bool:
    """Whether the placeholders ``made`` during a call are exactly those among ``result``'s leaves
    (each returned as it is, none kept elsewhere, none from another call)."""
    found = [id(v) for v in flatten(result)[1] if type(v) is Deferred]
    return sorted(found) == sorted(id(d) for d in made)


def _used(self, *args, **kwargs):
    raise DeferredUsed(f"{self!r} was used before the batch computed it")


class Deferred:
    """The result of one per-element call, to be computed with the rest of its batch.

    ``shape`` and ``dtype`` are the result's; ``form.run(key, [payload, ...])`` computes it.
    """

    __slots__ = ("form", "key", "payload", "shape", "dtype")
    __array_ufunc__ = None  # numpy operators defer to us, and we support none
    __array__ = __getitem__ = __setitem__ = __iter__ = __len__ = __bool__ = _used
    __index__ = __int__ = __float__ = __complex__ = __buffer__ = __contains__ = _used

    def __init__(self, form: BatchForm, key, payload, shape: tuple, dtype):
        self.form, self.key, self.payload, self.shape, self.dtype = form, key, payload, shape, dtype
        _local.made.append(self)

    def __getattr__(self, name):
        if name.startswith("__"):  # protocol probes (hasattr, numpy's array interface): absent
            raise AttributeError(name)
        raise DeferredUsed(f"{self!r} was used (.{name}) before the batch computed it")

    def __repr__(self) -> str:
        return f"<deferred {self.form.name} result {self.shape} {self.dtype}>"
