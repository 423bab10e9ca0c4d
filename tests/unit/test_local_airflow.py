"""brokerbench.local_airflow: from a plain shell, the command line finds the project's Airflow, never ~/airflow."""

import os
import sys
from pathlib import Path

from brokerbench import local_airflow

ROOT = Path(__file__).resolve().parents[2]


def test_a_plain_shell_gets_the_projects_airflow_home():
    environ = {"PATH": "/usr/bin:/bin", "HOME": "/home/someone"}
    chosen = local_airflow.apply_defaults(environ)
    assert environ["AIRFLOW_HOME"] == str(ROOT / ".airflow")
    assert "/home/someone/airflow" not in " ".join(environ.values())
    assert environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == f"sqlite:///{ROOT / '.airflow' / 'airflow.db'}"
    assert environ["AIRFLOW__CORE__DAGS_FOLDER"] == str(ROOT / "dags")
    assert environ["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    assert environ["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)  # spark-submit, airflow
    assert set(chosen) == set(local_airflow.defaults(ROOT, environ))
    assert local_airflow.missing(ROOT, environ) is None


def test_what_is_set_is_kept(tmp_path):
    environ = {"AIRFLOW_HOME": str(tmp_path / "mine"), "SPARK_LOCAL_IP": "127.0.0.2", "PATH": "/bin"}
    local_airflow.apply_defaults(environ)
    assert environ["AIRFLOW_HOME"] == str(tmp_path / "mine")
    assert environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == f"sqlite:///{tmp_path / 'mine' / 'airflow.db'}"
    assert environ["SPARK_LOCAL_IP"] == "127.0.0.2"


def test_the_makefile_and_the_tests_use_the_same_settings():
    makefile = (ROOT / "Makefile").read_text()
    for name, value in local_airflow.defaults(ROOT, {}).items():
        if name == "BROKERBENCH_RESULTS_ROOT":
            continue  # the Makefile lets a caller override it (?=)
        assert f"export {name}" in makefile, name
        assert value.replace(str(ROOT), "$(CURDIR)") in makefile, (name, value)


def test_no_dags_folder_is_said_in_one_line(tmp_path):
    problem = local_airflow.missing(tmp_path, {})
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"no brokerbench DAGs in {tmp_path / 'dags'}")


def test_the_database_is_left_alone_when_it_exists_or_is_not_sqlite(tmp_path):
    said = []
    db = tmp_path / "airflow.db"
    db.write_bytes(b"")
    local_airflow.ensure_database(said.append, {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{db}"})
    local_airflow.ensure_database(said.append, {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://x/y"})
    assert said == []
