"""The C extensions (one loading rule for both) and the glibc allocator switch.

tpudata has two optional C extensions: ``tpudata._native`` (framing scan, CRC32C, Example
parsing) and ``tpudata.image._imgkernel`` (JPEG decode and batch preprocessing, loaded the first
time tpudata.image needs it). Both load by one rule (:func:`extension`): an extension that was
not built is reported by a WARNING once per process, and ``TPUDATA_PURE`` set to anything but
``""``, ``0``, ``false``, ``no`` or ``off`` (:func:`pure_requested`) selects the pure Python
reference paths for both, silently. :func:`accelerated` says which paths run natively
(``tpudata.accelerated()``, ``tpudata --version``).

``native`` is the ``_native`` module in use, or ``None``. Every caller checks ``_accel.native``
at call time, so tests can switch a whole process to the pure Python reference path with
:func:`use_native` (and the image kernel with :func:`use_extension`).

>>> from tpudata import _accel
>>> previous = _accel.use_native(False)   # pure Python from here on
>>> _accel.native is None
True
>>> _ = _accel.use_native(previous)
"""

from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType

logger = logging.getLogger(__name__)

NATIVE = "tpudata._native"
IMAGE_KERNEL = "tpudata.image._imgkernel"
NOT_BUILT_MESSAGE = (
    "tpudata's C accelerator (tpudata._native) is not built, so reading, CRC checks and parsing "
    "run on the pure Python path (tens of times slower). Reinstall with a C compiler available "
    "(e.g. `pip install --force-reinstall --no-deps tpudata` after installing gcc); "
    "TPUDATA_PURE=1 chooses the pure path on purpose and silences this warning"
)
#: the WARNING for each extension that was not built
NOT_BUILT = {
    NATIVE: NOT_BUILT_MESSAGE,
    IMAGE_KERNEL: (
        "tpudata.image's libjpeg-turbo kernel is not built, so tpudata.image falls back to "
        "Pillow + numpy (slower; JPEG decode not bit-identical to TensorFlow). Install "
        "libjpeg-turbo headers (libjpeg62-turbo-dev) and reinstall; TPUDATA_PURE=1 chooses the "
        "pure path on purpose and silences this warning"),
}
_PURE_OFF = ("", "0", "false", "no", "off")
_built: dict[str, tuple[ModuleType | None, str]] = {}  # name -> (module or None, import error)
_in_use: dict[str, ModuleType | None] = {}  # name -> the module in use now, or None (pure)


def pure_requested() -> bool:
    """Whether ``TPUDATA_PURE`` asks for the pure Python paths (any value but ``""``, ``0``,
    ``false``, ``no`` or ``off``, in any case)."""
    return os.environ.get("TPUDATA_PURE", "").strip().lower() not in _PURE_OFF


def compiled(name: str) -> ModuleType | None:
    """The compiled extension ``name`` (imported once per process), or None where it was not
    built (a WARNING says so, once, unless ``TPUDATA_PURE`` chose the pure path)."""
    if name not in _built:
        try:
            _built[name] = (importlib.import_module(name), "")
        except ImportError as exc:
            _built[name] = (None, str(exc))
            if not pure_requested():  # not a silent fallback: once per process
                logger.warning("%s (%s)", NOT_BUILT[name], exc)
    return _built[name][0]


def extension(name: str) -> ModuleType | None:
    """The extension ``name`` in use now, or None (the pure Python path): the one loading rule.
    Decided on the first call: None when :func:`pure_requested`, else :func:`compiled`."""
    if name not in _in_use:
        pure = pure_requested()
        if pure:
            logger.info("TPUDATA_PURE set: %s is not used (the pure Python reference path)", name)
        _in_use[name] = None if pure else compiled(name)
    return _in_use[name]


def use_extension(name: str, enabled: bool | None) -> bool:
    """Turn extension ``name`` on (when built) or off for this process; None decides again by
    the rule (``TPUDATA_PURE``). Returns whether it was in use before."""
    global native
    previous = extension(name) is not None
    if enabled is None:
        del _in_use[name]  # decided again on the next use
    else:
        _in_use[name] = compiled(name) if enabled else None
    if name == NATIVE:
        native = extension(name)
    return previous


_compiled = compiled(NATIVE)
native: ModuleType | None = extension(NATIVE)

#: What each native path does, by the name :func:`accelerated` reports it under.
PATHS = {
    "crc32c": ("crc32c",),
    "tfrecord_framing": ("scan", "frame", "find_frame", "split"),
    "example_parsing": ("locate", "decode"),
}


def available() -> bool:
    """Whether the compiled accelerator was built (regardless of it being in use)."""
    return _compiled is not None


def accelerated() -> dict[str, bool]:
    """Which hot paths run natively in this process right now, by name.

    ``{"crc32c": True, "tfrecord_framing": True, "example_parsing": True,
    "hardware_crc32c": True, "image_kernel": True}`` on a normal install: the first four are
    ``tpudata._native``'s paths, ``image_kernel`` is tpudata.image's decode/preprocess kernel
    (loaded by this call when tpudata.image has not needed it yet). A path is False when its
    extension was not built (a WARNING said so) or ``TPUDATA_PURE`` chose the pure Python path.
    """
    out = native_paths()
    out["image_kernel"] = extension(IMAGE_KERNEL) is not None
    return out


def native_paths() -> dict[str, bool]:
    """The paths of ``tpudata._native`` that run natively now (:func:`accelerated` less the
    image kernel, which this does not load)."""
    mod = native
    out = {name: mod is not None and all(hasattr(mod, f) for f in fns) for name, fns in PATHS.items()}
    out["hardware_crc32c"] = bool(mod is not None and getattr(mod, "HARDWARE_CRC", 0))
    return out


def describe() -> str:
    """One line for ``tpudata --version``: is each extension built, in use, and for what."""
    extension(IMAGE_KERNEL)
    image = "image kernel: " + _state_word(IMAGE_KERNEL)
    if _compiled is None:
        return f"C accelerator: NOT BUILT (pure Python path, tens of times slower); {image}"
    if native is None:
        return f"C accelerator: built, off (TPUDATA_PURE set, or use_native(False)); {image}"
    paths = accelerated()
    on = ", ".join(name for name in PATHS if paths[name])
    crc = "hardware" if paths["hardware_crc32c"] else "software"
    return f"C accelerator: on ({on}; {crc} CRC32C); {image}"


def _state_word(name: str) -> str:
    if name not in _in_use:
        return "not loaded yet"
    if _in_use[name] is not None:
        return "on"
    built = _built.get(name)
    return "NOT BUILT" if built is not None and built[0] is None else "off"


def extensions() -> dict[str, str]:
    """Each C extension's state, without loading any: ``on``, ``off`` (the pure path chosen),
    ``NOT BUILT`` or ``not loaded yet``."""
    return {name: _state_word(name) for name in NOT_BUILT}


def use_native(enabled: bool) -> bool:
    """Turn the accelerator on or off for this process; returns the previous setting."""
    if enabled and _compiled is None:
        raise RuntimeError("tpudata._native was not built; reinstall with a C compiler available")
    return use_extension(NATIVE, enabled)


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
# have the first reader do it. Processes tpudata owns (the `tpudata` command line, the benchmarks,
# process-map workers) turn it on for themselves.
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
    """Tune the allocator once per process unless ``TPUDATA_MALLOC_TUNING=0``: only for
    processes tpudata owns (the command line, the benchmarks, process-map workers), never the
    user's."""
    if _allocator_state is None and os.environ.get("TPUDATA_MALLOC_TUNING", "1") != "0":
        tune_allocator(True, arena_max=arena_max)
