#!/usr/bin/env bash
# Sanitizer job: tpudata's C extensions (tpudata/_native.c with _native_example.c, and
# tpudata/image/_imgkernel.c) built with AddressSanitizer + UndefinedBehaviorSanitizer into a copy
# of the tree in a temporary directory (the in-place .so files are left alone), then the tests that
# feed them hostile input, run against that build: the TFRecord corruption fuzz, the MultiBatch
# property tests, the hostile-argument tests, and the JPEG tests with a larger random byte-edit fuzz.
# Fails on a test failure and on any sanitizer report (a report also aborts the run).
#
#   tools/sanitize.sh                 # from anywhere; uses .venv/bin/python when it exists
#   PYTHON=python3 CC=gcc tools/sanitize.sh
#   SANITIZE_JPEG_EDITS=50000 tools/sanitize.sh   # more random JPEG edits (default 10000)
#   SANITIZE_KEEP=1 tools/sanitize.sh             # keep the temporary tree and logs
#   tools/sanitize.sh -k window                   # extra arguments go to pytest
#
# Needs gcc (or clang) with the sanitizer runtimes and the libjpeg-turbo headers. Python itself is not
# instrumented: libasan is preloaded (LD_PRELOAD) and Python's allocator is plain malloc
# (PYTHONMALLOC=malloc) so overflows into Python objects are seen too; leak detection is off
# (the interpreter keeps memory to its exit). About a minute on 2 cores.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
CC="${CC:-gcc}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/tpudata-sanitize.XXXXXX")"
if [ "${SANITIZE_KEEP:-0}" = 1 ]; then
    echo "sanitize: keeping $WORK"
else
    trap 'rm -rf "$WORK"' EXIT
fi
TREE="$WORK/tree"
LOGS="$WORK/logs"
mkdir -p "$TREE" "$LOGS"

# The tree without its built extensions or caches.
tar -C "$ROOT" --exclude='*.so' --exclude='__pycache__' --exclude='*.pyc' --exclude='.hypothesis' \
    -cf - tpudata tests conftest.py pyproject.toml | tar -C "$TREE" -xf -

INC="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
EXT="$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
SAN=(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all -g -O1)
echo "sanitize: building the extensions with ${SAN[*]} into $TREE"
"$CC" -shared -fPIC "${SAN[@]}" -std=c99 -fno-strict-aliasing -I"$INC" \
    "$ROOT/tpudata/_native.c" -o "$TREE/tpudata/_native$EXT"
"$CC" -shared -fPIC "${SAN[@]}" -std=gnu99 -fno-strict-aliasing -ffp-contract=off -I"$INC" \
    "$ROOT/tpudata/image/_imgkernel.c" -o "$TREE/tpudata/image/_imgkernel$EXT" -ljpeg -pthread

LIBASAN="$("$CC" -print-file-name=libasan.so)"
[ -f "$LIBASAN" ] || { echo "sanitize: no libasan.so from $CC" >&2; exit 2; }
export LD_PRELOAD="$LIBASAN"
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export PYTHONMALLOC=malloc
export PYTHONPATH="$TREE"
export PYTHONDONTWRITEBYTECODE=1
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"
export TPUDATA_REQUIRE_ACCEL=1
export TPUDATA_JPEG_FUZZ_EDITS="${SANITIZE_JPEG_EDITS:-10000}"
unset TPUDATA_PURE

cd "$TREE"
# The copy's sanitized modules must be the ones imported (not the in-place build nor an install).
"$PY" - "$TREE" <<'EOF'
import sys
import tpudata, tpudata._native as native, tpudata.image._imgkernel as kernel
for mod in (tpudata, native, kernel):
    assert mod.__file__.startswith(sys.argv[1] + "/"), f"{mod.__name__} comes from {mod.__file__}"
with open(native.__file__, "rb") as f:
    assert b"__asan_init" in f.read(), "the extension is not built with AddressSanitizer"
print("sanitize: importing", native.__file__, "and", kernel.__file__)
EOF

# --capture=sys: pytest captures Python's sys.stdout/stderr only, so a sanitizer report (written to
# fd 2 just before the process exits) reaches the log instead of a capture file that dies with it.
set +e
"$PY" -m pytest -q -p no:cacheprovider -o addopts="-ra" --capture=sys \
    tests/test_native_hostile.py tests/image/test_hostile_jpeg.py tests/image/test_fast_huffman.py tests/image/test_resize_simd.py tests/image/test_kept_buffers.py \
    tests/test_fuzz.py tests/test_multibatch.py \
    tests/image/test_decode.py tests/image/test_presets.py "$@" 2>&1 | tee "$LOGS/pytest.log"
status=${PIPESTATUS[0]}
set -e

if grep -qE "ERROR: AddressSanitizer|runtime error:|UndefinedBehaviorSanitizer" "$LOGS/pytest.log"; then
    echo "sanitize: a sanitizer reported an error (above)" >&2
    status=1
fi
if [ "$status" != 0 ]; then
    echo "sanitize: FAILED (exit $status)" >&2
    exit "$status"
fi
echo "sanitize: passed with no sanitizer report"
