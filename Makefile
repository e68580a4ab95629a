# Each target bootstraps what it needs: .venv from the pinned requirements, node_modules from
# package-lock.json (the CDK CLI and Node.js 22, put first on PATH so jsii uses a supported Node).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BUILD_VENV := .venv-build
export PATH := $(CURDIR)/node_modules/.bin:$(CURDIR)/$(VENV)/bin:$(PATH)
# jsii prints an end-of-life banner unless this names the major version of the Node.js it runs on
# ("1" silences nothing). Expanded per command, so after `npm ci` it names the pinned Node 22.
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION = $(shell PATH="$(PATH)" node -p 'process.versions.node.split(".")[0]' 2>/dev/null)
DIST ?= dist

.PHONY: synth test test-fast typecheck dist bench bench-shared-quota lint clean prereqs integ integ-update

synth: $(VENV)/.runtime-installed node_modules/.installed
	cdk synth --no-notices --quiet
	@echo "synthesized: $$(ls cdk.out/*.template.json | tr '\n' ' ')"

# The gate (CI runs it): lint, types and every test, the fresh-install ones included, property
# tests on their fixed examples (HYPOTHESIS_PROFILE=ci). The tests run in one pytest-xdist worker per
# core, each with its own jsii process. One worker more did not pay on 2 cores: 5 min 18 s against
# 5 min 00 s for the same commit (a980814, a quiet machine), 594 s of CPU against 498 s (a third jsii
# process, collection and the session fixtures once more), though pytest alone, without mypy beside
# it, was 12 s faster. mypy (about 20 s cold, on one core, mostly reading aws-cdk-lib) runs beside
# them; its report follows pytest's, and the target fails if either does.
PYTEST_WORKERS ?= auto
test: $(VENV)/.dev-installed node_modules/.installed
	$(VENV)/bin/ruff check .
	@types_log=$$(mktemp); $(VENV)/bin/mypy > $$types_log 2>&1 & types=$$!; \
	HYPOTHESIS_PROFILE=ci $(VENV)/bin/python -m pytest -n $(PYTEST_WORKERS); tests_rc=$$?; \
	wait $$types; types_rc=$$?; echo "mypy:"; cat $$types_log; rm -f $$types_log; \
	test $$tests_rc -eq 0 && test $$types_rc -eq 0

# The development loop: lint and every test except those that install into a fresh environment
# (markers consumer and slow) and without the type checker. It never replaces `make test`.
test-fast: $(VENV)/.dev-installed node_modules/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python -m pytest -n $(PYTEST_WORKERS) -m "not consumer and not slow"

typecheck: $(VENV)/.dev-installed
	$(VENV)/bin/mypy

# A wheel and an sdist in $(DIST)/, to install the library into your own app (README: "Use it in your app").
# Built in a venv of its own holding only the build frontend and backend (requirements-build.txt):
# the dev toolchain in $(VENV) takes about a minute to install and building needs none of it.
dist: $(BUILD_VENV)/.installed
	rm -rf $(DIST)
	$(BUILD_VENV)/bin/python -m build --quiet --no-isolation --outdir $(DIST) .
	@echo "built: $$(ls $(DIST)/* | tr '\n' ' ')"

# Benchmarks and experiments against the in-process emulator; reports land in bench/results/.
# Each repeats its trials over several seeds and reports the spread. The quota pacer runs under the
# default (sliding-window) quota model here, about 8 minutes; all six models take about 45:
# .venv/bin/python bench/quota_pacer_experiment.py (bench/results/quota_pacer_experiment.json). The service
# tier experiment (priority / default / flex under contention, 3 seeds) takes about 1.5 minutes.
# The emulated model is the reference stacks' default (stacks/settings.py: Amazon Nova 2 Lite, burndown 1);
# until 0.2.0 it was Claude 3.5 Haiku (burndown 5), past its Bedrock end of life on 2026-06-19
# (genai_pacer.models.DEPRECATED_MODELS), on which bench/README.md's tables were measured.
BENCH_MODEL := us.amazon.nova-2-lite-v1:0
BENCH_BURNDOWN := 1
BENCH_OUT := bench/results
bench: $(VENV)/.dev-installed
	$(VENV)/bin/genai-pacer bench --emulator --model-id $(BENCH_MODEL) \
		--burndown $(BENCH_BURNDOWN) --tpm 300000 --max-tokens 400 --concurrency 8 --requests 200 --warmup 8 \
		--time-scale 5 --ttft-target 1.0 --otps-target 40 --out $(BENCH_OUT) --name stream > /dev/null
	$(VENV)/bin/genai-pacer bench --emulator --model-id $(BENCH_MODEL) \
		--burndown $(BENCH_BURNDOWN) --tpm 300000 --max-tokens 400 --rate 90 --requests 200 --warmup 8 --no-stream \
		--time-scale 5 --e2e-target 8 --out $(BENCH_OUT) --name converse-open-loop > /dev/null
	$(VENV)/bin/genai-pacer experiments --out $(BENCH_OUT) > /dev/null
	$(VENV)/bin/python bench/router_bench.py --out $(BENCH_OUT) > /dev/null
	$(VENV)/bin/python bench/batch_loader_bench.py --out $(BENCH_OUT)/batch_loader_bench.json > /dev/null
	$(VENV)/bin/python bench/quota_pacer_experiment.py --quota-models sliding \
		--out $(BENCH_OUT)/quota_pacer_experiment_sliding.json > /dev/null
	$(VENV)/bin/python bench/retrieval_tuning.py --trials 5 --out $(BENCH_OUT) > /dev/null
	$(VENV)/bin/python bench/service_tier_experiment.py --out $(BENCH_OUT)/service_tier_experiment.json > /dev/null
	$(VENV)/bin/python bench/priority_flex_experiment.py --out $(BENCH_OUT)/priority_flex_experiment.json > /dev/null
	$(VENV)/bin/python bench/load_replay_offline.py --out $(BENCH_OUT) > /dev/null
	$(MAKE) bench-shared-quota
	@echo "reports: $$(ls $(BENCH_OUT) | tr '\n' ' ')"

# One Bedrock quota shared by several processes (issue 25; bench/shared_quota_experiment.py's docstring):
# the ledger at 2x load with 1 and 4 processes (5 seeds) and 16 (3), a BoundedMap beside 4 processes,
# half load against unbounded calls, the strategies without a ledger, and the simulation of 100 and
# 1,000 consumers. Long: about 2 minutes of wall time per run on 2 cores (see docs/quota.md).
SHARED_QUOTA := $(VENV)/bin/python bench/shared_quota_experiment.py
bench-shared-quota: $(VENV)/.dev-installed
	$(SHARED_QUOTA) --seeds 5 --time-scale 3 --configurations 1:whole,4:ledger \
		--out $(BENCH_OUT)/shared_quota_experiment.json > /dev/null
	$(SHARED_QUOTA) --seeds 3 --time-scale 3 --configurations 1:whole,16:ledger \
		--out $(BENCH_OUT)/shared_quota_experiment_16.json > /dev/null
	$(SHARED_QUOTA) --seeds 5 --time-scale 3 --load 0.5 --configurations 4:unbounded,4:ledger,4:static \
		--out $(BENCH_OUT)/shared_quota_experiment_half_load.json > /dev/null
	$(SHARED_QUOTA) --seeds 5 --time-scale 3 --configurations 4:ledger --map-items 60 \
		--out $(BENCH_OUT)/shared_quota_experiment_map.json > /dev/null
	$(SHARED_QUOTA) --seeds 5 --time-scale 10 --configurations 1:whole,2:static,4:static,4:whole,16:static,16:whole \
		--out $(BENCH_OUT)/shared_quota_experiment_baselines.json > /dev/null
	$(SHARED_QUOTA) --simulate --seeds 2 --consumers 100,1000 > /dev/null

# Integration tests (integ/README.md): one app per construct family. Offline, `make test` compares
# each app's synthesis with its committed snapshot (tests/test_integ.py). With AWS credentials and a
# Region (AWS_PROFILE / AWS_REGION), `make integ` deploys every test case, runs its assertions,
# destroys it and writes integ/results/report.md; it stops at once, saying what is missing, when
# credentials, the Region, the CDK bootstrap or model access are not there. Context overrides:
# make integ INTEG_ARGS="-c integ_model_id=us.amazon.nova-lite-v1:0".
INTEG_ARGS ?=
integ: $(VENV)/.dev-installed node_modules/.installed
	$(VENV)/bin/python -m integ.run $(INTEG_ARGS)

# The only command that rewrites the integration snapshots: review `git diff integ/` and commit it.
integ-update: $(VENV)/.dev-installed node_modules/.installed
	$(VENV)/bin/python -m integ.snapshots --update

lint: $(VENV)/.dev-installed
	$(VENV)/bin/ruff check .

prereqs:
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 or newer (or run make PYTHON=/path/to/python3.x)"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "error: $(PYTHON) is $$($(PYTHON) --version 2>&1); genai-pacer needs Python 3.11 or newer (make PYTHON=python3.12)"; exit 1; }
	@command -v npm >/dev/null || { echo "error: npm not found; install Node.js 18+ with npm (https://nodejs.org or your package manager: apt-get install nodejs npm). npm then installs the pinned CDK CLI and Node.js 22 into node_modules."; exit 1; }

# Packages are installed by uv (pinned below, itself installed by the venv's pip): the same pinned
# requirements resolve and install in about 7 s where pip took 53 s on this 2-core machine, most of a
# fresh clone's `make test` budget (each measured once from an empty venv with a warm cache).
UV_VERSION := 0.13.9
UV_INSTALL = $(VENV)/bin/uv pip install --quiet --python $(VENV)/bin/python

$(VENV)/.runtime-installed: requirements.txt pyproject.toml | prereqs
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	test -x $(VENV)/bin/uv || $(VENV)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(UV_INSTALL) -r requirements.txt
	@touch $@

$(VENV)/.dev-installed: $(VENV)/.runtime-installed requirements-dev.txt requirements-build.txt
	$(UV_INSTALL) -r requirements-dev.txt
	@touch $@

$(BUILD_VENV)/.installed: requirements-build.txt
	test -x $(BUILD_VENV)/bin/python || $(PYTHON) -m venv $(BUILD_VENV)
	$(BUILD_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-build.txt
	@touch $@

node_modules/.installed: package.json package-lock.json | prereqs
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

clean:
	rm -rf $(VENV) $(BUILD_VENV) node_modules cdk.out $(DIST) .mypy_cache
