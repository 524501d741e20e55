"""Access to the optional C accelerator.

``native`` is the compiled :mod:`tpudata._native` module, or ``None`` when it was not built (a
WARNING says so once, at import) or when ``TPUDATA_PURE=1`` is set. :func:`accelerated` says which
paths run natively (``tpudata.accelerated()``, ``tpudata --version``). Every caller checks
``_accel.native`` at call time, so tests can switch a whole process to the pure Python reference
path with :func:`use_native`.

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
    _IMPORT_ERROR = str(exc)
else:
    _IMPORT_ERROR = ""

native: ModuleType | None = None if os.environ.get("TPUDATA_PURE") == "1" else _compiled

#: What each native path does, by the name :func:`accelerated` reports it under.
PATHS = {
    "crc32c": ("crc32c",),
    "tfrecord_framing": ("scan", "frame", "find_frame", "split"),
    "example_parsing": ("locate", "decode"),
}
NOT_BUILT_MESSAGE = (
    "tpudata's C accelerator (tpudata._native) is not built, so reading, CRC checks and parsing "
    "run on the pure Python path (tens of times slower). Reinstall with a C compiler available "
    "(e.g. `pip install --force-reinstall --no-deps tpudata` after installing gcc); "
    "TPUDATA_PURE=1 chooses the pure path on purpose and silences this warning"
)

if _compiled is None and os.environ.get("TPUDATA_PURE") != "1":  # pragma: no cover - build
    # not a silent fallback: once per process, at import
    logger.warning("%s (%s)", NOT_BUILT_MESSAGE, _IMPORT_ERROR)


def available() -> bool:
    """Whether the compiled accelerator was built (regardless of it being in use)."""
    return _compiled is not None


def accelerated() -> dict[str, bool]:
    """Which hot paths run natively in this process right now, by name.

    ``{"crc32c": True, "tfrecord_framing": True, "example_parsing": True,
    "hardware_crc32c": True}`` on a normal install; all False when the accelerator was not built
    (a WARNING said so at import) or ``TPUDATA_PURE=1`` chose the pure Python path.
    """
    mod = native
    out = {name: mod is not None and all(hasattr(mod, f) for f in fns) for name, fns in PATHS.items()}
    out["hardware_crc32c"] = bool(mod is not None and getattr(mod, "HARDWARE_CRC", 0))
    return out


def describe() -> str:
    """One line for ``tpudata --version``: is the accelerator built, in use, and for what."""
    if _compiled is None:
        return "C accelerator: NOT BUILT (pure Python path, tens of times slower)"
    if native is None:
        return "C accelerator: built, off (TPUDATA_PURE=1 or use_native(False))"
    paths = accelerated()
    on = ", ".join(name for name, v in paths.items() if v and name != "hardware_crc32c")
    crc = "hardware" if paths["hardware_crc32c"] else "software"
    return f"C accelerator: on ({on}; {crc} CRC32C)"


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
# costs more than reading and parsing. Threads other than the main one allocate from arenas of
# 64 MB heaps that glibc unmaps as soon as one empties, whatever the trim threshold: batches
# made in pipeline threads and freed by the consumer are faulted in afresh every epoch (90k page
# faults for a 420 MB epoch of bench_pipeline's workload A, 1.0 GB/s; with one arena 10 faults,
# 3.4-3.9 GB/s). tune_allocator() asks glibc to keep freed memory for reuse in one arena (the
# effect TensorFlow's guides get by preloading tcmalloc). It changes the whole process, so the
# library never does it on its own: call tpudata.tune_malloc(), or set TPUDATA_MALLOC_TUNING=1 to
# have the first reader do it. The `tpudata` command line and the benchmarks turn it on.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_allocator_state: bool | None = None
_allocator_environ: dict[str, str] = {}  # the glibc settings tune_allocator(True) made


def tune_allocator(enable: bool = True, mmap_threshold: int = 16 << 20,
                   trim_threshold: int = 128 << 20, arena_max: int | None = 1) -> bool:
    """Let glibc malloc keep up to ``trim_threshold`` freed bytes, serve blocks below
    ``mmap_threshold`` from its heap, and give threads at most ``arena_max`` arenas (None: leave
    the number of arenas as it is) (``enable=False`` restores glibc's defaults).

    Process-wide (exported as ``tpudata.tune_malloc``); returns False where there is no glibc
    ``mallopt``. Call it early: threads that already allocated keep their arenas, and glibc fixes
    the arena limit for good once a thread started after the call has asked for one, so
    ``enable=False`` restores the thresholds but not always the number of arenas.
    """
    global _allocator_state, _allocator_environ
    if arena_max is not None and arena_max < 1:
        raise ValueError(f"tune_allocator: arena_max must be at least 1, got {arena_max}")
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    if enable:
        ok = (mallopt(_M_MMAP_THRESHOLD, mmap_threshold) and mallopt(_M_TRIM_THRESHOLD, trim_threshold)
              and (arena_max is None or mallopt(_M_ARENA_MAX, arena_max)))
    else:  # glibc's defaults; its arena limit is 8 per core on 64-bit machines
        ok = (mallopt(_M_MMAP_THRESHOLD, 128 << 10) and mallopt(_M_TRIM_THRESHOLD, 128 << 10)
              and mallopt(_M_ARENA_MAX, 8 * (os.cpu_count() or 1)))
    _allocator_state = enable
    _allocator_environ = {}
    if enable:
        _allocator_environ = {"MALLOC_MMAP_THRESHOLD_": str(mmap_threshold),
                              "MALLOC_TRIM_THRESHOLD_": str(trim_threshold)}
        if arena_max is not None:
            _allocator_environ["MALLOC_ARENA_MAX"] = str(arena_max)
    logger.debug("glibc malloc tuning %s", "on" if enable else "off")
    return bool(ok)


def allocator_environ() -> dict[str, str]:
    """The environment variables that give a child process (a peer benchmark, say) the glibc
    settings this process was tuned with; empty when it was not."""
    return dict(_allocator_environ)


def allocator_tuned() -> bool | None:
    """True/False after :func:`tune_allocator` ran in this process, None if it never did."""
    return _allocator_state


def tune_allocator_if_requested() -> None:
    """Readers call this: tune once, only when ``TPUDATA_MALLOC_TUNING=1`` asks for it."""
    if _allocator_state is None and os.environ.get("TPUDATA_MALLOC_TUNING") == "1":
        tune_allocator(True)


def ensure_allocator_tuned(arena_max: int | None = 1) -> None:
    """Tune the allocator once per process unless ``TPUDATA_MALLOC_TUNING=0`` (for applications
    that own their process: the command line, the benchmarks; a process map's parent passes
    ``arena_max=None``, as it may be a trainer whose own threads allocate)."""
    if _allocator_state is None and os.environ.get("TPUDATA_MALLOC_TUNING", "1") != "0":
        tune_allocator(True, arena_max=arena_max)
