# Two commands on a fresh machine: `make demo` and `make test`.
# Both create .venv with python3 -m venv and install jcalib with its test extra; the
# install is skipped on later calls unless pyproject.toml changed (stamp file).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.install-stamp
PYTEST_ARGS ?=

.PHONY: demo test test-slow benchmark clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m experiments.demo

test: $(STAMP)
	$(BIN)/python -m pytest -n auto --dist loadfile --durations=15 $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

benchmark: $(STAMP)
	$(BIN)/python -m benchmarks.simulate_batch

clean:
	rm -rf $(VENV) .jax_cache results .pytest_cache
