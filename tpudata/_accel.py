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


# -- allocator -------------------------------------------------------------------------------------
# glibc returns freed heap memory to the OS and maps blocks >= 128 KiB fresh each time, so every
# batch of large bytes features (e.g. 110 KB JPEGs) page-faults all of its memory again - that
# costs more than reading and parsing. tpudata asks glibc to keep freed memory for reuse (the
# effect TensorFlow's guides get by preloading tcmalloc). Opt out with TPUDATA_MALLOC_TUNING=0.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_allocator_state: bool | None = None


def tune_allocator(enable: bool = True, mmap_threshold: int = 16 << 20,
                   trim_threshold: int = 128 << 20) -> bool:
    """Let glibc malloc keep up to ``trim_threshold`` freed bytes and serve blocks below
    ``mmap_threshold`` from its heap (``enable=False`` restores glibc's defaults).

    Process-wide; returns False where there is no glibc ``mallopt``.
    """
    global _allocator_state
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    if enable:
        ok = mallopt(_M_MMAP_THRESHOLD, mmap_threshold) and mallopt(_M_TRIM_THRESHOLD, trim_threshold)
    else:
        ok = mallopt(_M_MMAP_THRESHOLD, 128 << 10) and mallopt(_M_TRIM_THRESHOLD, 128 << 10)
    _allocator_state = enable
    logger.debug("glibc malloc tuning %s", "on" if enable else "off")
    return bool(ok)


def ensure_allocator_tuned() -> None:
    """Tune the allocator once per process, unless the user chose otherwise."""
    if _allocator_state is None and os.environ.get("TPUDATA_MALLOC_TUNING", "1") != "0":
        tune_allocator(True)
