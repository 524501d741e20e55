"""Access to the optional C accelerator.

``native`` is the compiled :mod:`tpudata._native` module, or ``None`` when it was not built or
when ``TPUDATA_PURE=1`` is set. Every caller checks ``_accel.native`` at call time, so tests can
switch a whole process to the pure Python reference path with :func:`use_native`.

>>> from tpudata import _accel
>>> previous = _accel.use_native(False)   # pure Python from here on
>>> _accel.native is None
True
>>> _ = _accel.use_native(previous)
"""

from __future__ import annotations

import logging
import os
from types import ModuleType

logger = logging.getLogger(__name__)

try:  # pragma: no cover - depends on the build
    from tpudata import _native as _compiled
except ImportError as exc:  # pragma: no cover
    _compiled = None
    logger.debug("tpudata._native not available (%s); using the pure Python path", exc)

native: ModuleType | None = None if os.environ.get("TPUDATA_PURE") == "1" else _compiled


def available() -> bool:
    """Whether the compiled accelerator was built (regardless of it being in use)."""
    return _compiled is not None


def use_native(enabled: bool) -> bool:
    """Turn the accelerator on or off for this process; returns the previous setting."""
    global native
    previous = native is not None
    if enabled and _compiled is None:
        raise RuntimeError("tpudata._native was not built; reinstall with a C compiler available")
    native = _compiled if enabled else None
    return previous
