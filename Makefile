# lagwatch — `make run` starts the local system, `make test` runs the suite. Both work on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test bench lint venv system-deps clean

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py services/ingest/*.pyx services/ingest/*.pxd  # compiled by the install
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev,spark]"
	touch $(STAMP)

system-deps:
	@bash scripts/install-system-deps.sh

## run: the whole system on this machine (Redis, Kafka mock, the four services, a webhook receiver) with a demo
## workload, until Ctrl-C; `make run ARGS=--no-demo` starts only Redis and the Kafka mock
run: system-deps venv
	$(BIN)/lagwatch dev up --state-dir .local $(ARGS)

## test: lint, then the whole suite against a real redis-server and the Kafka mock cluster, in two processes
## (pytest-xdist, a test file per process at a time: its fixtures and Spark session stay in one process). The suite
## mostly waits on servers and group joins: two processes took it from 11 min 46 s to 6 min 27 s on 2 cores.
## The files that take longest go first (tests/conftest.py), so both processes end together. `make test
## PYTEST_ARGS=` runs it in one.
PYTEST_ARGS ?= -n 2 --dist loadfile --no-loadscope-reorder
test: system-deps venv lint
	$(BIN)/pytest -q $(PYTEST_ARGS)

## bench: every benchmark in bench/, printing numbers
bench: system-deps venv
	$(BIN)/python bench/run_all.py

## lint: ruff (lint and format) and mypy (strict on shared/; configured in pyproject.toml)
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/typecheck.py

clean:
	rm -rf $(VENV) .local .pytest_cache .ruff_cache .hypothesis
