# Triage — two commands: `make demo` runs the product, `make test` runs the suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/triage
# The suite keeps to its own Redis database and control channel (pub/sub is not per database), so a `make demo`
# on the same Redis (database 0) neither sees the suite's calls and messages nor loses its own to the suite.
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15
TEST_CONTROL_CHANNEL ?= test:triage:control

.PHONY: demo test venv services browser models migrate lint clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip==25.3
	# The CPU wheel first: any looser torch spec pulls gigabytes of CUDA packages.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test,demo]'
	touch $@

venv: $(VENV)/.installed

services:
	bin/ensure-services

browser:
	bin/ensure-chromium

models: venv
	$(PY) manage.py build_models

test: venv services browser
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) TRIAGE_CONTROL_CHANNEL=$(TEST_CONTROL_CHANNEL) \
		$(VENV)/bin/pytest -q

lint: venv
	$(VENV)/bin/ruff check .

# `manage.py demo` makes this checkout's secret key under var/ (kept, mode 0600) and runs over plain http on
# 127.0.0.1 with DEBUG on (triage/local_env.py); production's defaults stay as they are.
demo: venv services
	$(PY) manage.py demo

clean:
	rm -rf $(VENV) var models
