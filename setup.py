"""Build the optional C accelerator ``tpudata._native``.

Everything else lives in pyproject.toml. The extension is optional: if it cannot be compiled,
tpudata falls back to its pure Python + numpy reference path (``TPUDATA_PURE=1`` forces that path).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tpudata._native",
            sources=["tpudata/_native.c"],
            extra_compile_args=["-O3", "-std=c99", "-fno-strict-aliasing"],
            optional=True,
        )
    ]
)
