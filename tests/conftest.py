"""Test-wide settings: Airflow, Spark and brokerbench state live inside the project.

`make test` exports the same variables; these defaults make a plain `pytest`
behave the same way.
"""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_defaults = {
    "AIRFLOW_HOME": str(ROOT / ".airflow"),
    "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
    "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{ROOT / '.airflow' / 'airflow.db'}",
    "AIRFLOW_CONN_BROKERBENCH_SPARK": '{"conn_type": "spark", "host": "local[*]"}',
    "BROKERBENCH_HOME": str(ROOT / ".brokerbench"),
    "SPARK_LOCAL_IP": "127.0.0.1",
}
for k, v in _defaults.items():
    os.environ.setdefault(k, v)
# the venv's bin (spark-submit, airflow) first on PATH, as `make` arranges
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


#: the marker every test under a directory gets (pytest -m "not integration and not e2e and not deployment"
#: is what `make test-fast` runs: no broker, Spark or Airflow scheduler)
DIRECTORY_MARKERS = {"integration": "integration", "e2e": "e2e", "deploy": "deployment", "faults": "faults"}


#: ``make test`` runs the suite on two pytest-xdist workers (``-n 2 --dist loadscope --no-loadscope-reorder``)
#: with the scheduler below: a group's tests run one after another on one worker, and groups start in this order:
#: - ``airflow-db``: whole DAG runs and crash tests, which share the project's SQLite Airflow database
#:   (``.airflow/airflow.db``: one writer at a time) and start brokers;
#: - ``aws-fleet``: the loopback fleet's 3-node clusters (tests/aws_fixtures.py), which bind the same 127.0.1.x
#:   addresses and ports: the node-kill tests and the cluster DAG run (an Airflow database of its own);
#: - ``deployment``: the Celery deployment (its own PostgreSQL, Airflow home and brokers);
#: - then every other module as a group of its own (its module-scoped brokers and Spark jobs start once).
#: The first three take most of the time, so they start first; the modules fill in after.
SERIAL_GROUPS = {"e2e": "airflow-db", "faults": "airflow-db", "deploy": "deployment"}
#: modules whose group is not their directory's; a DAG run with an Airflow database and a brokerbench home of its
#: own (tests/support/airflow_db.py) is a group of its own, beside the others
SERIAL_MODULES = {"tests/integration/test_aws_clusters.py": "aws-fleet", "tests/e2e/test_aws_cluster_dag.py": "aws-fleet",
                  "tests/e2e/test_sweep_dag.py": "tests/e2e/test_sweep_dag.py"}
GROUP_ORDER = ("airflow-db", "aws-fleet", "deployment")


def group_of(nodeid: str) -> str:
    """The group of a test (``tests/<dir>/<module>.py::<name>``): its directory's, else its module."""
    module = nodeid.split("::", 1)[0]
    if module in SERIAL_MODULES:
        return SERIAL_MODULES[module]
    parts = module.split("/")
    return SERIAL_GROUPS.get(parts[1], module) if len(parts) > 2 and parts[0] == "tests" else module


@pytest.hookimpl(optionalhook=True)  # only when pytest-xdist distributes the run
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        """LoadScopeScheduling (a scope's tests go to one worker, in order) with :func:`group_of` as the scope."""

        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    tests_dir = Path(__file__).resolve().parent
    for item in items:
        try:
            top = Path(str(item.fspath)).resolve().relative_to(tests_dir).parts[0]
        except (ValueError, IndexError):
            continue
        marker = DIRECTORY_MARKERS.get(top)
        if marker:
            item.add_marker(getattr(pytest.mark, marker))
    # the longest groups first (the sort keeps module order); in the controller and in each xdist worker, whose
    # collection order is the one the scheduler hands out
    if getattr(config.option, "dist", "no") != "no" or hasattr(config, "workerinput"):
        rank = {g: i for i, g in enumerate(GROUP_ORDER)}
        items.sort(key=lambda it: rank.get(group_of(it.nodeid), len(rank)))
