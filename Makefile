# The two commands a newcomer runs on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-test
DSTAMP := $(VENV)/.installed-demo
JSTAMP := $(VENV)/.installed-demo-jax
FSTAMP := $(VENV)/.installed-frameworks
# what a (re)install depends on: the packaging and the C accelerator
SOURCES := pyproject.toml setup.py tpudata/_native.c tpudata/_native_example.c tpudata/image/_imgkernel.c \
	tpudata/image/_jpeg_huffman.c tpudata/image/_resize_simd.c
# quiet installs: setuptools' note on every editable install ("Editable installation. Please be
# careful with folders ...") is information, not a problem; other warnings still show. The demo's
# installs (-qq) show errors only.
PIP := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install -q

.PHONY: test test-timing test-frameworks demo demo-jax install bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) -q --upgrade pip 'setuptools>=77'  # the build-system's setuptools (tests read the metadata with it)

# (Re)install whenever the packaging or the C accelerator changes. Each target has its own
# stamp, and either works after the other in the same venv: `make test` installs the [test]
# extra (pytest, JAX, dask, tensorboard, ...); `make demo` only the [demo] extra (Pillow and
# tensorboardX: about 200 MB with the base dependencies), and `make demo-jax` adds JAX (CPU,
# about 500 MB more).
$(STAMP): $(SOURCES) | $(BIN)/python
	$(PIP) -e '.[test]'
	@touch $@

$(DSTAMP): $(SOURCES) | $(BIN)/python
	$(PIP) -q -e '.[demo]'
	@touch $@

$(JSTAMP): $(SOURCES) | $(BIN)/python
	$(PIP) -q -e '.[demo,jax]'
	@touch $@

install: $(STAMP)

# `make test` is the landing gate: behaviour only. Tests that bound wall-clock time (marked
# `timing`: a loaded machine can fail them) run apart with `make test-timing`. PYTEST_ARGS adds
# options (.ci/run: the slowest tests).
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not timing" $(PYTEST_ARGS)

test-timing: $(STAMP)
	$(BIN)/python -m pytest -q -m timing $(PYTEST_ARGS)

# The torch / JAX / grain bridges' tests: installs torch (~5 GB with its CUDA libraries, ~3 min
# fresh), torchdata, jax (CPU) and grain into the same venv. `make test` skips these tests
# when the frameworks are absent.
$(FSTAMP): $(SOURCES) | $(STAMP)
	$(PIP) -e '.[test,test-frameworks]'
	@touch $@

test-frameworks: $(FSTAMP)
	$(BIN)/python -m pytest -q -m "not timing" $(PYTEST_ARGS) tests/torch tests/jax tests/source tpudata/torch tpudata/jax

# The demo trains on 8 JAX CPU devices (measured device time) when the venv has JAX (after
# `make demo-jax` or `make test`), else on the numpy backend (simulated device time per step).
demo: $(DSTAMP)
	$(BIN)/python tools/demo.py

demo-jax: $(JSTAMP)
	$(BIN)/python tools/demo.py --backend jax

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_read.py

clean:
	rm -rf $(VENV) build *.egg-info tpudata/*.so tpudata/image/*.so demo_out
