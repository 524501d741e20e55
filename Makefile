# The two commands a newcomer runs on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-test
FSTAMP := $(VENV)/.installed-frameworks

.PHONY: test test-frameworks demo install bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# (Re)install whenever the packaging or the C accelerator changes.
$(STAMP): pyproject.toml setup.py tpudata/_native.c tpudata/_native_example.c tpudata/image/_imgkernel.c | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $@

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The torch / JAX / grain bridges' tests: installs torch (~5 GB with its CUDA libraries, ~3 min
# fresh), torchdata, jax (CPU) and grain into the same venv. `make test` skips these tests
# when the frameworks are absent.
$(FSTAMP): pyproject.toml setup.py tpudata/_native.c tpudata/_native_example.c | $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,test-frameworks]'
	@touch $@

test-frameworks: $(FSTAMP)
	$(BIN)/python -m pytest -q tests/torch tests/jax tests/source tpudata/torch tpudata/jax

demo: $(STAMP)
	$(BIN)/python tools/demo.py

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_read.py

clean:
	rm -rf $(VENV) build *.egg-info tpudata/*.so tpudata/image/*.so demo_out
