# The two set-up commands of the README: `make demo` (the main job) and `make test` (the whole suite).
# Each creates the virtual environment it needs on first use.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: demo test lint bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[test,dev,drill]"
	touch $@

demo: $(BIN)/.installed
	$(BIN)/tenure demo

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

# Every benchmark (hours): JSON, markdown and plots under bench/results/<UTC date>/ (see bench/run.py); point the
# README's bench:table blocks at the folder to commit, then `$(BIN)/python -m bench.report` refreshes its tables.
bench: $(BIN)/.installed
	$(BIN)/python -m bench.run

clean:
	rm -rf $(VENV) .tenure .pytest_cache .mypy_cache .ruff_cache
