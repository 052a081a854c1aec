# Two commands on a fresh machine: `make demo` and `make test`.
# Both create .venv with python3 -m venv and install jcalib with its test extra; the
# install is skipped on later calls unless pyproject.toml changed (stamp file). pip does not
# compile every installed package's bytecode (--no-compile: 58 s instead of 89 s on the 2-core
# machine); Python compiles the modules a run imports, once, into their __pycache__.
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
	$(BIN)/python -m pip install --quiet --no-compile --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m experiments.demo

# make test: the fast tier of tests/ and every docstring example of jcalib, with jcalib's jaxtyping
# annotations checked at run time (tests/shapecheck.py: the shapes and dtypes of array arguments
# and return values; the few tests marked `unwrapped` are left to make test-all).
SHAPE_CHECK := --jaxtyping-packages=jcalib,tests.shapecheck.check
TEST_ARGS := --doctest-modules $(SHAPE_CHECK) jcalib tests

# One xdist worker more than cores: a worker waiting on a subprocess, a notebook kernel or the
# disk leaves its core to another (the cores were 93 % busy with one worker per core).
WORKERS := $(shell echo $$(( $$(nproc) + 1 )))

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadfile --durations=15 $(TEST_ARGS) $(PYTEST_ARGS)

# Every test and docstring example: the fast tier above and the tests marked `slow` (notebooks,
# experiments' --quick runs, the multi-process jobs, long recoveries), without the shape check's
# wrappers (so the `unwrapped` tests run too). Run it before submitting a change.
test-all: $(STAMP)
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadfile --durations=30 -m '' --doctest-modules jcalib tests $(PYTEST_ARGS)

# `make test` with a report of where the time goes: the 20 slowest tests, totals per file and
# folder, JAX compile against run (tests/budget.py; PYTEST_ARGS="-m ''" for every tier).
test-budget: $(STAMP)
	$(BIN)/python -m tests.budget $(TEST_ARGS) $(PYTEST_ARGS)

benchmark: $(STAMP)
	$(BIN)/python -m benchmarks.simulate_batch

clean:
	rm -rf $(VENV) results .pytest_cache
