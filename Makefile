# turnkit-django development tasks. `make test` is the whole suite (what .ci/run calls); it works
# on a fresh clone: it creates .venv, installs what is missing and starts its own servers.
#
#   make test              lint + docs + unit, integration/concurrency, browser and e2e tiers
#   make test-unit         unit tier only (SQLite in memory)
#   make test-integration  integration + concurrency tiers (throwaway PostgreSQL)
#   make test-browser      the admin in headless Chromium (throwaway PostgreSQL; screenshots in
#                          build/screenshots/, and docs/img/ with TURNKIT_DOCS_SCREENSHOTS=1)
#   make test-e2e          e2e tier (throwaway PostgreSQL + Redis)
#   make test PYTEST_ARGS='-x -k claim'   extra pytest arguments, passed to every tier
#   make bench             per step against the floor (PostgreSQL and SQLite), growth of one
#                          conversation, throughput on Celery workers (throwaway PostgreSQL +
#                          Redis); a markdown report at the end (bench/README.md)
#   make bench-peers       LangGraph and DBOS side by side with the floor and turnkit-django
#                          (installs them into .venv-peers, never into .venv)
#   make lint | docs | demo | venv | clean | distclean

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
EXTRAS := test,dev,docs,anthropic,celery,redis,postgres
PYTEST_ARGS ?=

# The install is redone when the content of pyproject.toml changes or .venv is missing.
VENV_STAMP := build/venv-$(shell sha256sum pyproject.toml | cut -c1-16).stamp
# The peers of `make bench-peers` live in a virtual environment of their own.
PEERS_VENV := .venv-peers
PEERS_STAMP := build/peers-$(shell sha256sum bench/peers-requirements.txt | cut -c1-16).stamp

export PIP_DISABLE_PIP_VERSION_CHECK := 1
export PIP_NO_INPUT := 1
export NO_MKDOCS_2_WARNING := 1

.PHONY: help venv venv-peers test test-unit test-integration test-browser test-e2e lint docs demo bench bench-peers clean distclean FORCE

help:
	@sed -n '1,/^$$/s/^# \{0,1\}//p' Makefile

venv: $(VENV_STAMP)

$(VENV_STAMP): $(if $(wildcard $(BIN)/python),,FORCE)
	@if [ ! -x $(BIN)/python ]; then \
		echo "creating $(VENV) with $$(command -v $(PYTHON))"; \
		$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); exit 1; }; \
	fi
	$(BIN)/python -m pip install --quiet --editable '.[$(EXTRAS)]'
	@mkdir -p build && rm -f build/venv-*.stamp && touch $@

venv-peers: $(PEERS_STAMP)

$(PEERS_STAMP): $(if $(wildcard $(PEERS_VENV)/bin/python),,FORCE)
	@if [ ! -x $(PEERS_VENV)/bin/python ]; then \
		echo "creating $(PEERS_VENV) with $$(command -v $(PYTHON))"; \
		$(PYTHON) -m venv $(PEERS_VENV) || { rm -rf $(PEERS_VENV); exit 1; }; \
	fi
	$(PEERS_VENV)/bin/python -m pip install --quiet -r bench/peers-requirements.txt
	@mkdir -p build && rm -f build/peers-*.stamp && touch $@

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy turnkit_django
	$(BIN)/lint-imports --no-cache

docs: venv
	$(BIN)/mkdocs build --strict --site-dir build/site

test: lint docs
	bash scripts/run-tests.sh all -- $(PYTEST_ARGS)

test-unit: venv
	bash scripts/run-tests.sh unit -- $(PYTEST_ARGS)

test-integration: venv
	bash scripts/run-tests.sh integration -- $(PYTEST_ARGS)

test-browser: venv
	bash scripts/run-tests.sh browser -- $(PYTEST_ARGS)

test-e2e: venv
	bash scripts/run-tests.sh e2e -- $(PYTEST_ARGS)

bench: venv
	bash scripts/bench.sh

bench-peers: venv venv-peers
	bash scripts/bench.sh peers

demo: venv
	$(BIN)/python example_project/demo.py

clean:
	-bash scripts/services.sh stop-all
	rm -rf build site htmlcov .coverage .coverage.* .pytest_cache .mypy_cache .ruff_cache .tox *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(PEERS_VENV)

FORCE:
