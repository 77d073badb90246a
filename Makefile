# Two entry points for a fresh machine: `make run` starts the store, `make test` runs the tests.
# Both create .venv and install what they need.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test run venv clean bench

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

run: $(STAMP)
	$(BIN)/mqstore start --store ./store-data

bench: $(STAMP)
	$(BIN)/python benchmarks/embedded.py

clean:
	rm -rf $(VENV) store-data .pytest_cache
