# The two set-up commands of the README: `make demo` (the main job) and `make test` (lint, the documentation site,
# the suite but its `long` drill and benchmark runs, which `make test-long` runs). Each creates the virtual
# environment it needs on first use.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: demo test test-long lint docs bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[test,dev,drill,docs]"
	touch $@

demo: $(BIN)/.installed
	$(BIN)/tenure demo

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/mypy

# The documentation site (mkdocs.yml, docs/) into site/; --strict fails on any broken link or anchor.
docs: $(BIN)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# CI runs `make test` (.ci/run; its budget is 30 minutes on 2 cores) in two phases: the tests that wait on
# ZooKeeper, timers and single Spark jobs two at a time (pytest-xdist, a file per worker), then the `fleet` tests,
# which start real `tenure run` processes of the Spark career and load both cores each, one at a time. `make test-long` adds the drills and the
# benchmarks' quick runs (14 minutes more here), to run before a release.
test: lint docs
	$(BIN)/pytest -m "not long and not fleet" -n 2 --dist loadfile
	$(BIN)/pytest -m "fleet and not long"

test-long: $(BIN)/.installed
	$(BIN)/pytest -m long

# Every benchmark (hours): JSON, markdown and plots under bench/results/<UTC date>/ (see bench/run.py); point the
# bench:table blocks of the performance pages (docs/performance/) at the folder to commit, then
# `$(BIN)/python -m bench.report` refreshes their tables.
bench: $(BIN)/.installed
	$(BIN)/python -m bench.run

clean:
	rm -rf $(VENV) .tenure .pytest_cache .mypy_cache .ruff_cache site
