# minibase: `make run` serves the service on SQLite, `make test-all` runs every test (`make test`
# all but the slow tier).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# pytest-xdist workers for `make test`: each has its own MariaDB, SQLite files and ports (README,
# Development). TEST_WORKERS=0 runs the suite in one process. Exit status 5 is pytest's "no test
# selected": a PYTEST_ARGS subset may leave one of the two runs empty. On 2 cores 3 workers beat 2
# and 4 (tests/rest and tests/storage: 2:00-2:08, against 2:14 and 2:22-2:30).
TEST_WORKERS ?= 3

.DEFAULT_GOAL := help
.PHONY: help run test test-slow test-all keys lint format bench bench-galera screenshots clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.run-deps: requirements.txt | $(BIN)/python
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

$(VENV)/.dev-deps: requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@ $(VENV)/.run-deps

run: $(VENV)/.run-deps ## serve on HOST:PORT (default 127.0.0.1:8000) over SQLite in instance/, printing the API keys
	$(BIN)/python wsgi.py

test: $(VENV)/.dev-deps ## run the suite but the slow tier in TEST_WORKERS processes (SQLite, and MariaDB when mariadbd is installed or TEST_DATABASE_URL is set)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not alone and not slow" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	@echo "Not run here, the slow tier: tests marked slow (tests/live, tests/dashboard, tests/test_external.py:"
	@echo "Chromium, node, python wsgi.py) and alone (tests/test_serving.py, tests/test_galera.py, timing)."
	@echo "make test-slow runs them; make test-all runs both tiers, as CI does."

test-slow: $(VENV)/.dev-deps ## the slow tier: tests marked slow in TEST_WORKERS processes, then those marked `alone` by themselves
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "slow and not alone" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(BIN)/python -m pytest -m alone $(PYTEST_ARGS) || [ $$? -eq 5 ]

test-all: test test-slow ## every test: make test, then make test-slow (what CI runs)

keys: $(VENV)/.run-deps ## print the anon and service_role API keys (the ones `make run` serves with)
	$(BIN)/flask --app app keys

lint: $(VENV)/.dev-deps ## ruff check, ruff format --check, and the import layers (lint-imports)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: $(VENV)/.dev-deps ## ruff format and ruff check --fix
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

.venv-bench/.deps: requirements-bench.txt
	$(PYTHON) -m venv .venv-bench
	.venv-bench/bin/pip install --quiet --disable-pip-version-check -r requirements-bench.txt
	touch $@

bench: $(VENV)/.dev-deps .venv-bench/.deps ## every figure: reads, sign-in, storage, Realtime, functions, MariaDB, php-crud-api beside it, and the Galera cluster when galera-4 is installed (needs wrk)
	@command -v wrk >/dev/null || { echo "make bench needs wrk: apt-get install wrk"; exit 1; }
	$(BIN)/python tools/bench.py
	$(BIN)/python tools/bench_realtime.py
	$(BIN)/python tools/bench_functions.py
	$(BIN)/python tools/bench_webhooks.py
	@if [ -e /usr/lib/galera/libgalera_smm.so ]; then $(BIN)/python tools/bench_galera.py; \
	else echo "(galera-4 is not installed: no cluster figures; apt-get install galera-4 redis-server)"; fi

bench-galera: $(VENV)/.dev-deps ## sign-ups/s and writes/s: 3 instances on a 3-node Galera cluster vs 1 on MariaDB
	$(BIN)/python tools/bench_galera.py

screenshots: $(VENV)/.dev-deps ## the dashboard's pages as docs/dashboard/*.png, taken in /usr/bin/chromium
	@[ -x /usr/bin/chromium ] || { echo "make screenshots needs chromium: apt-get install chromium"; exit 1; }
	$(BIN)/python tools/screenshots.py

clean: ## remove the virtualenv and caches (instance/ with its database and secret is kept)
	rm -rf $(VENV) .venv-bench .pytest_cache .ruff_cache .hypothesis
