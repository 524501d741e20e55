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
            depends=["tpudata/_native_example.c"],  # included by _native.c
            extra_compile_args=["-O3", "-std=c99", "-fno-strict-aliasing"],
            optional=True,
        ),
        # tpudata.image's decode/preprocess kernel against the system libjpeg-turbo (optional too)
        Extension(
            "tpudata.image._imgkernel",
            sources=["tpudata/image/_imgkernel.c"],
            depends=["tpudata/image/_jpeg_huffman.c", "tpudata/image/_resize_simd.c"],  # included by _imgkernel.c
            libraries=["jpeg"],
            extra_compile_args=["-O3", "-std=gnu99", "-fno-strict-aliasing", "-ffp-contract=off"],
            extra_link_args=["-pthread"],
            optional=True,
        ),
    ]
)
