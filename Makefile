# brokerbench: the two commands a new user needs.
#   make bench   run the smoke suite on the local environment; prints the report path
#   make test    run the test suite
# Both install what they need first (include/infra/local/bootstrap.sh).

VENV      ?= .venv
SUITE     ?= smoke
CONF      ?=
# FAIL_ON=not-judged: make bench exits 4 when the run was not judged (no baseline yet, nothing valid), as CI gates
# want; by default a run that was not judged exits 0 and says NOT JUDGED in its last line (docs/cli.md)
FAIL_ON   ?=
PYTEST_ARGS ?=

export AIRFLOW_HOME                      := $(CURDIR)/.airflow
export AIRFLOW__CORE__DAGS_FOLDER        := $(CURDIR)/dags
export AIRFLOW__CORE__PLUGINS_FOLDER     := $(CURDIR)/plugins
export AIRFLOW__CORE__LOAD_EXAMPLES      := False
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN := sqlite:///$(CURDIR)/.airflow/airflow.db
export AIRFLOW__LOGGING__LOGGING_LEVEL   := INFO
export AIRFLOW_CONN_BROKERBENCH_SPARK    := {"conn_type": "spark", "host": "local[*]"}
export BROKERBENCH_HOME                  := $(CURDIR)/.brokerbench
export BROKERBENCH_RESULTS_ROOT          ?= $(CURDIR)/results
export SPARK_LOCAL_IP                    := 127.0.0.1
export PATH                              := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup bench fsync-cost compare test test-fast test-unit test-deployment lint bench-harness clean

setup:
	@include/infra/local/bootstrap.sh $(VENV)

## Run the smoke suite DAG (three local brokers x fsync on/off) and print its report.
## make bench SUITE=nightly-latency CONF='{"broker_versions": {"kafka": "3.9.1"}}'  runs another suite / params.
## Exit code: 0 no regression or not judged (a first run: no baseline yet), 3 regression, 1 failed, 2 refused;
## FAIL_ON=not-judged: not judged exits 4.
bench: setup
	@$(VENV)/bin/python -m brokerbench.cli bench --suite $(SUITE) $(if $(CONF),--conf '$(CONF)') \
	  $(if $(FAIL_ON),--fail-on $(FAIL_ON))

## What fsync costs on each broker: one A/B run of the nightly suite, fsync-off (A) against fsync-on (B), an
## interval per percentile and what moved on the brokers (docs/analytics.md, "What fsync costs").
fsync-cost: setup
	@$(VENV)/bin/python -m brokerbench.cli bench --suite nightly-latency --variants fsync-off \
	  --conf '{"compare_with": {"variants": ["fsync-on"]}}'

## The comparison report (versions of each broker, brokers side by side) from the results root's history.
compare: setup
	@$(VENV)/bin/airflow dags test brokerbench_compare -c '{"results_root": "$(BROKERBENCH_RESULTS_ROOT)"}' \
	  > $(BROKERBENCH_RESULTS_ROOT)/compare.log 2>&1 || { tail -40 $(BROKERBENCH_RESULTS_ROOT)/compare.log; exit 1; }
	@ls -1t $(BROKERBENCH_RESULTS_ROOT)/comparisons/*/comparison.html | head -1 | sed "s/^/brokerbench: comparison: /"

## Run the tests (unit, integration with real brokers and Spark, end-to-end DAG runs), on two pytest-xdist
## workers: the DAG runs (one SQLite Airflow database) on one, the deployment test and the other modules beside
## them (tests/conftest.py groups them). TEST_WORKERS="-n 0" runs them one after another.
TEST_WORKERS ?= -n 2 --dist loadscope --no-loadscope-reorder
test: setup
	@$(VENV)/bin/python -m pytest $(TEST_WORKERS) $(PYTEST_ARGS)

## Fast feedback (under 3 minutes): only tests that need no broker, Spark or Airflow scheduler. The markers
## integration, e2e and deployment are set by directory (tests/conftest.py), so this is also
## `pytest -m "not integration and not e2e and not deployment"`.
test-fast test-unit: setup
	@$(VENV)/bin/python -m pytest $(TEST_WORKERS) tests/unit -m "not integration and not e2e and not deployment" $(PYTEST_ARGS)

## Lint and type checks: ruff (pyflakes, pycodestyle with blank-line rules, import order, unused arguments) on
## the tree, mypy on every layer of the package, the Spark jobs, plugins and DAGs; both configured in pyproject.toml.
lint: setup
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/mypy

## The deployment test alone: PostgreSQL, api-server, scheduler, dag-processor, triggerer, REST API, Chromium.
test-deployment: setup
	@$(VENV)/bin/python -m pytest tests/deploy -s $(PYTEST_ARGS)

## Harness ceiling: msg/s of one worker process with full measurement vs each library's bare send loop.
bench-harness: setup
	@cd bench && ../$(VENV)/bin/python harness_ceiling.py

clean:
	rm -rf .airflow .brokerbench results
