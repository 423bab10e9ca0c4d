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
