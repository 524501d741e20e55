"""The C accelerator is built and in use (it is optional at build time, so check it here)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from tpudata import _accel


@pytest.mark.skipif(os.environ.get("TPUDATA_ALLOW_PURE") == "1"
                    and os.environ.get("TPUDATA_REQUIRE_ACCEL") != "1", reason="pure build allowed")
def test_accelerator_built_and_on_by_default():
    """CI (.ci/run sets TPUDATA_REQUIRE_ACCEL=1) fails here when the accelerator was not built."""
    assert _accel.available(), (
        "tpudata._native was not compiled (is a C compiler installed?); set TPUDATA_ALLOW_PURE=1 "
        "to run the suite on the pure Python path only"
    )
    code = "from tpudata import _accel; print(_accel.native is not None)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert out.strip() == "True"


def test_pure_switch():
    code = "from tpudata import _accel; print(_accel.native is None)"
    env = dict(os.environ, TPUDATA_PURE="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "True"


@pytest.mark.skipif(os.environ.get("TPUDATA_REQUIRE_ACCEL") != "1", reason="CI only")
def test_image_kernel_built_in_ci():
    """CI (.ci/run sets TPUDATA_REQUIRE_ACCEL=1) fails here when the image kernel was not built
    (instead of the image tests that need it skipping)."""
    assert _accel.compiled(_accel.IMAGE_KERNEL) is not None, (
        "tpudata.image._imgkernel was not compiled (are the libjpeg-turbo headers installed?)")


_BOTH = ("import tpudata, tpudata.image\n"
         "from tpudata import _accel\n"
         "from tpudata.image import _backend\n"
         "paths = tpudata.accelerated()\n"
         "print(_accel.native is None, _backend.kernel() is None, paths['crc32c'], "
         "paths['image_kernel'])\n")


@pytest.mark.parametrize("value", ["1", "yes", "TRUE", "on"])
def test_one_pure_rule_turns_off_both_extensions(value):
    """TPUDATA_PURE=yes turned off the image kernel but not _native: one rule for both now."""
    out = _run(_BOTH, TPUDATA_PURE=value)
    assert out.stdout.split() == ["True", "True", "False", "False"], out.stderr
    assert "not built" not in out.stderr


@pytest.mark.skipif(not _accel.available() or _accel.compiled(_accel.IMAGE_KERNEL) is None,
                    reason="an extension is not built")
@pytest.mark.parametrize("value", ["", "0", "no", "False", "off"])
def test_pure_rule_values_that_keep_both_extensions_on(value):
    out = _run(_BOTH, TPUDATA_PURE=value)
    assert out.stdout.split() == ["False", "False", "True", "True"], out.stderr


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_allocator_tuning_is_reversible():
    assert _accel.tune_allocator(False) is True
    assert _accel._allocator_state is False
    assert _accel.tune_allocator(True) is True
    assert _accel._allocator_state is True


def _run(code: str, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("TPUDATA_")}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full,
                          timeout=120)


_WITHOUT_NATIVE = "import sys; sys.modules['tpudata._native'] = None  # as if never built\n"


def test_missing_accelerator_warns_once_and_says_so_everywhere():
    code = _WITHOUT_NATIVE + (
        "import tpudata, tpudata.tfrecord, importlib\n"
        "print(tpudata.accelerated())\n"
        "from tpudata.cli import main\n"
        "main(['--version'])\n")
    out = _run(code)
    assert out.stderr.count("C accelerator (tpudata._native) is not built") == 1, out.stderr
    assert "WARNING" in out.stderr or "not built" in out.stderr
    lines = out.stdout.splitlines()
    kernel = _accel.compiled(_accel.IMAGE_KERNEL) is not None
    assert lines[0] == str({"crc32c": False, "tfrecord_framing": False, "example_parsing": False,
                            "hardware_crc32c": False, "image_kernel": kernel})
    assert "C accelerator: NOT BUILT" in lines[1] and "image kernel: " in lines[1]
    # choosing the pure path on purpose is not warned about
    assert "not built" not in _run(_WITHOUT_NATIVE + "import tpudata", TPUDATA_PURE="1").stderr


@pytest.mark.skipif(not _accel.available(), reason="accelerator not built")
def test_accelerated_and_version_report_the_native_paths():
    import tpudata

    paths = tpudata.accelerated()
    assert paths["crc32c"] and paths["tfrecord_framing"] and paths["example_parsing"]
    out = _run("from tpudata.cli import main; main(['--version'])")
    assert out.stdout.startswith("tpudata ") and "C accelerator: on (crc32c, tfrecord_framing" in out.stdout
    off = _run("from tpudata.cli import main; main(['--version'])", TPUDATA_PURE="1")
    assert "C accelerator: built, off" in off.stdout
    previous = _accel.use_native(False)
    try:
        paths = tpudata.accelerated()
        assert not any(v for name, v in paths.items() if name != "image_kernel")
    finally:
        _accel.use_native(previous)
    # the image kernel is reported too, and switched on its own
    kernel = _accel.compiled(_accel.IMAGE_KERNEL) is not None
    assert tpudata.accelerated()["image_kernel"] is kernel
    before = _accel.use_extension(_accel.IMAGE_KERNEL, False)
    try:
        assert tpudata.accelerated()["image_kernel"] is False
    finally:
        _accel.use_extension(_accel.IMAGE_KERNEL, before)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_malloc_tuning_is_opt_in():
    """Importing and reading change nothing process-wide; tune_malloc() or the setting does."""
    code = ("import tpudata, io\n"
            "from tpudata import _accel\n"
            "tpudata.write_records('memory://m/a', [b'x'])\n"
            "list(tpudata.read_records('memory://m/a'))\n"
            "print(_accel.allocator_tuned())\n"
            "print(tpudata.tune_malloc(), _accel.allocator_tuned())\n")
    assert _run(code).stdout.split() == ["None", "True", "True"]
    assert _run(code, TPUDATA_MALLOC_TUNING="1").stdout.split()[0] == "True"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_arena_limit_is_checked_and_can_be_left_alone():
    with pytest.raises(ValueError, match="arena_max must be at least 1, got 0"):
        _accel.tune_allocator(True, arena_max=0)
    assert _accel.tune_allocator(True, arena_max=None) is True
    assert "MALLOC_ARENA_MAX" not in _accel.allocator_environ()
    assert _accel.tune_allocator(False) is True and _accel.allocator_environ() == {}
    assert _accel.tune_allocator(True) is True
    # what a peer benchmark's subprocess is given: the same settings, as glibc's variables
    assert _accel.allocator_environ() == {"MALLOC_MMAP_THRESHOLD_": str(16 << 20),
                                          "MALLOC_TRIM_THRESHOLD_": str(128 << 20),
                                          "MALLOC_ARENA_MAX": "1"}
