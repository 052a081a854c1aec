# Two commands on a fresh machine: `make demo` and `make test`.
# Both create .venv with python3 -m venv and install jcalib with its test extra; the
# install is skipped on later calls unless pyproject.toml changed (stamp file).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.install-stamp
PYTEST_ARGS ?=
# Python's bytecode and pytest's rewritten test modules are cached (__pycache__, git-ignored) even
# where the shell says PYTHONDONTWRITEBYTECODE: collecting the suite takes 8 s with them, 17 without.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-all test-budget benchmark clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m experiments.demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n auto --dist loadfile --durations=15 $(PYTEST_ARGS)

# Every test: the fast tier above and the tests marked `slow` (notebooks, experiments' --quick
# runs, the multi-process jobs, long recoveries), then every docstring example of jcalib (2 min 16 s
# on 2 cores, several train networks or fit models). Run it before submitting a change.
test-all: $(STAMP)
	$(BIN)/python -m pytest -n auto --dist loadfile --durations=30 -m '' $(PYTEST_ARGS)
	$(BIN)/python -m pytest -n auto --doctest-modules jcalib --durations=10

# `make test` with a report of where the time goes: the 20 slowest tests, totals per file and
# folder, JAX compile against run (tests/budget.py; PYTEST_ARGS="-m ''" for every tier).
test-budget: $(STAMP)
	$(BIN)/python -m tests.budget $(PYTEST_ARGS)

benchmark: $(STAMP)
	$(BIN)/python -m benchmarks.simulate_batch

clean:
	rm -rf $(VENV) results .pytest_cache
