# Two entry points for a fresh machine: `make run` starts the store, `make test` runs the tests.
# Both create .venv and install what they need.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-slow test-pure run venv clean bench

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# `pip install` also builds the record codec's compiled accelerator (setup.py: the C extension
# core/record/_accel.c and the _*.c beside it); a change of its source builds it again.
# PySpark finds the `mqstore` data source by listing sys.path (pkgutil.iter_modules), which
# the editable install's import hook does not show: the checkout itself goes on the path too.
$(STAMP): pyproject.toml setup.py $(wildcard core/record/_*.c core/record/_*.h) | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test,spark]'
	$(BIN)/python -c "import os, sysconfig; open(os.path.join(sysconfig.get_paths()['purelib'], 'mqstore-checkout.pth'), 'w').write(os.getcwd() + '\\n')"
	touch $(STAMP)

venv: $(STAMP)

# The default suite: everything not marked slow (about six minutes on 2 cores).
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_ARGS)

# The slow and heavy cases (bigger hypothesis runs, long soaks, process tests of 2.5 s or more); CI runs them after `make test`.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow $(PYTEST_ARGS)

# The unit and regression tests (the record format and the read checks among them) again with
# the pure-Python reference instead of the compiled accelerator (core/record/accel.py).
test-pure: $(STAMP)
	MQSTORE_PURE_PYTHON=1 $(BIN)/python -m pytest -q -m "not slow" tests/unit tests/regress $(PYTEST_ARGS)

run: $(STAMP)
	$(BIN)/mqstore start --store ./store-data

bench: $(STAMP)
	$(BIN)/python benchmarks/embedded.py
	$(BIN)/python benchmarks/pipeline.py

clean:
	rm -rf $(VENV) store-data .pytest_cache build core/record/_accel*.so
