# turnkit-django development tasks. `make test` is the whole suite (what .ci/run calls); it works
# on a fresh clone: it creates .venv, installs what is missing and starts its own servers.
#
#   make test              lint + docs + unit, integration/concurrency, browser and e2e tiers on
#                          Django 5.2 / Python 3.11 (.venv), then unit and integration/concurrency
#                          again on Django 6.1 / Python 3.13 or 3.12 (.venv-django61); not the soak
#   make test-unit         unit tier only (SQLite in memory)
#   make test-integration  integration + concurrency tiers (throwaway PostgreSQL)
#   make test-browser      the admin in headless Chromium (throwaway PostgreSQL; screenshots in
#                          build/screenshots/, and docs/img/ with TURNKIT_DOCS_SCREENSHOTS=1)
#   make test-e2e          e2e tier (throwaway PostgreSQL + Redis)
#   make test-django61     unit + integration/concurrency tiers on Django 6.1 / Python 3.13 (3.12)
#   make soak              the nemesis soak for SOAK_SECONDS (default 600; SOAK_SEED replays
#                          a run): faults, a mixed workload, then every invariant (tests/soak)
#   make test PYTEST_ARGS='-x -k claim'   extra pytest arguments, passed to every tier
#   make bench             per step against the floor (PostgreSQL and SQLite), growth of one
#                          conversation, throughput on Celery workers (throwaway PostgreSQL +
#                          Redis); a markdown report at the end (bench/README.md)
#   make bench-peers       LangGraph and DBOS side by side with the floor and turnkit-django
#                          (installs them into .venv-peers, never into .venv)
#   make demo              the example project's story (example_project/demo.py); installs only
#                          the `demo` extra into .venv when the full install is not there yet
#   make lint | docs | venv | venv-demo | venv-peers | venv-django61 | clean | distclean

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
EXTRAS := test,dev,docs,anthropic,celery,redis,postgres
PYTEST_ARGS ?=
SOAK_SECONDS ?= 600

# The install is redone when the content of pyproject.toml changes or .venv is missing.
VENV_STAMP := build/venv-$(shell sha256sum pyproject.toml | cut -c1-16).stamp
# `make demo` needs only the `demo` extra: it installs that into .venv unless the full install
# (VENV_STAMP) is already there; a later `make test` adds the other extras to the same .venv.
DEMO_STAMP := build/demo-$(shell sha256sum pyproject.toml | cut -c1-16).stamp
# The peers of `make bench-peers` live in a virtual environment of their own.
PEERS_VENV := .venv-peers
PEERS_STAMP := build/peers-$(shell sha256sum bench/peers-requirements.txt | cut -c1-16).stamp

# The second supported stack: the newest Django, which needs Python >= 3.12, on Python 3.13 when
# there is one, else 3.12 (found by scripts/find-python.sh: PATH, then pyenv's versions;
# override with PYTHON313=... or PYTHON312=...). An existing .venv-django61 is kept: remove it
# to rebuild it on another Python.
VENV61 := .venv-django61
DJANGO61 := Django>=6.1,<6.2
EXTRAS61 := test,dev,anthropic,celery,redis,postgres
VENV61_STAMP := build/django61-$(shell { cat pyproject.toml; echo '$(EXTRAS61) $(DJANGO61)'; } \
	| sha256sum | cut -c1-16).stamp

export PIP_DISABLE_PIP_VERSION_CHECK := 1
export PIP_NO_INPUT := 1
export NO_MKDOCS_2_WARNING := 1

.PHONY: help venv venv-demo venv-peers venv-django61 test test-unit test-integration test-browser \
	test-e2e test-django61 soak lint docs demo bench bench-peers clean distclean FORCE

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

venv-demo: $(DEMO_STAMP)

$(DEMO_STAMP): $(if $(wildcard $(BIN)/python),,FORCE)
	@if [ ! -x $(BIN)/python ]; then \
		echo "creating $(VENV) with $$(command -v $(PYTHON))"; \
		$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); exit 1; }; \
	fi
	$(BIN)/python -m pip install --quiet --editable '.[demo]'
	@mkdir -p build && rm -f build/demo-*.stamp && touch $@

venv-peers: $(PEERS_STAMP)

$(PEERS_STAMP): $(if $(wildcard $(PEERS_VENV)/bin/python),,FORCE)
	@if [ ! -x $(PEERS_VENV)/bin/python ]; then \
		echo "creating $(PEERS_VENV) with $$(command -v $(PYTHON))"; \
		$(PYTHON) -m venv $(PEERS_VENV) || { rm -rf $(PEERS_VENV); exit 1; }; \
	fi
	$(PEERS_VENV)/bin/python -m pip install --quiet -r bench/peers-requirements.txt
	@mkdir -p build && rm -f build/peers-*.stamp && touch $@

venv-django61: $(VENV61_STAMP)

$(VENV61_STAMP): $(if $(wildcard $(VENV61)/bin/python),,FORCE)
	@if [ ! -x $(VENV61)/bin/python ]; then \
		python61=$$(bash scripts/find-python.sh 3.13 3.12) || exit 1; \
		echo "creating $(VENV61) with $$python61"; \
		$$python61 -m venv $(VENV61) || { rm -rf $(VENV61); exit 1; }; \
	fi
	$(VENV61)/bin/python -m pip install --quiet --editable '.[$(EXTRAS61)]' '$(DJANGO61)'
	@mkdir -p build && rm -f build/django61-*.stamp && touch $@

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy turnkit_django
	$(BIN)/lint-imports --no-cache

docs: venv
	$(BIN)/mkdocs build --strict --site-dir build/site

test: lint docs venv-django61
	bash scripts/run-tests.sh all -- $(PYTEST_ARGS)

test-unit: venv
	bash scripts/run-tests.sh unit -- $(PYTEST_ARGS)

test-integration: venv
	bash scripts/run-tests.sh integration -- $(PYTEST_ARGS)

test-browser: venv
	bash scripts/run-tests.sh browser -- $(PYTEST_ARGS)

test-e2e: venv
	bash scripts/run-tests.sh e2e -- $(PYTEST_ARGS)

test-django61: venv venv-django61
	bash scripts/run-tests.sh unit-django61 integration-django61 -- $(PYTEST_ARGS)

soak: venv
	SOAK_SECONDS=$(SOAK_SECONDS) bash scripts/run-tests.sh soak -- $(PYTEST_ARGS)

bench: venv
	bash scripts/bench.sh

bench-peers: venv venv-peers
	bash scripts/bench.sh peers

demo: $(if $(wildcard $(VENV_STAMP)),venv,venv-demo)
	$(BIN)/python example_project/demo.py

clean:
	-bash scripts/services.sh stop-all
	rm -rf build site htmlcov .coverage .coverage.* .pytest_cache .mypy_cache .ruff_cache .tox *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(VENV61) $(PEERS_VENV)

FORCE:
