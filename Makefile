# The two commands a newcomer runs on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-test

.PHONY: test demo install bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# (Re)install whenever the packaging or the C accelerator changes.
$(STAMP): pyproject.toml setup.py tpudata/_native.c tpudata/image/_imgkernel.c | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $@

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

demo: $(STAMP)
	$(BIN)/python tools/demo.py

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_read.py

clean:
	rm -rf $(VENV) build *.egg-info tpudata/*.so tpudata/image/*.so demo_out
