"""Optional dependencies, imported where a feature needs them, raising an error that names the
``pip install 'tpudata[extra]'`` that brings them (a :class:`~tpudata.errors.MissingExtraError`,
an ImportError, instead of a bare ModuleNotFoundError). Every import of ``ml_dtypes`` goes
through :func:`ml_dtypes`.
"""

from __future__ import annotations

from types import ModuleType

from tpudata.errors import MissingExtraError


# the extras that bring ml_dtypes (pyproject.toml)
_ML_DTYPES_EXTRAS = ("bfloat16", "image", "jax")


def ml_dtypes(purpose: str = "bfloat16", extra: str = "bfloat16") -> ModuleType:
    """The ``ml_dtypes`` module (bfloat16 and the float8 types; importing it registers them
    with numpy). ``purpose`` says what needs it and ``extra`` which extra to suggest (one of
    those that bring it: the caller's own, e.g. ``"image"``), for the error."""
    try:
        import ml_dtypes as module  # noqa: PLC0415
    except ImportError as exc:
        others = " and ".join(f"[{e}]" for e in _ML_DTYPES_EXTRAS if e != extra)
        raise MissingExtraError(
            f"{purpose} needs the ml_dtypes package, which is not installed: pip install "
            f"'tpudata[{extra}]' (the {others} extras bring it too)",
            extra=extra, name="ml_dtypes") from exc
    return module


def bfloat16(purpose: str = "bfloat16", extra: str = "bfloat16"):
    """numpy's bfloat16 dtype (from ``ml_dtypes``; see :func:`ml_dtypes`)."""
    import numpy as np  # noqa: PLC0415

    return np.dtype(ml_dtypes(purpose, extra).bfloat16)


__all__ = ["bfloat16", "ml_dtypes"]
