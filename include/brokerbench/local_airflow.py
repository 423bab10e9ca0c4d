"""The Airflow a person's ``brokerbench bench`` runs on: the project's own, found from the package.

``brokerbench bench`` runs ``airflow dags test``, which needs an Airflow home with a database, the DAGs and
plugins folders, and a few brokerbench settings. ``make`` exports them; a plain shell has none of them, and
Airflow's own default (``~/airflow``, examples loaded, no DAGs of ours) would fail with "Database migration
required". :func:`apply_defaults` fills in what the environment does not set - exactly what the Makefile and
the tests use - and :func:`ensure_database` creates the SQLite database on first use. A variable that is set
is never replaced: ``AIRFLOW_HOME=~/airflow brokerbench bench`` uses that home.

=======================================  ==========================================================
variable                                 default (``<project>``: the checkout holding ``dags/``)
=======================================  ==========================================================
``AIRFLOW_HOME``                         ``<project>/.airflow``
``AIRFLOW__CORE__DAGS_FOLDER``           ``<project>/dags``
``AIRFLOW__CORE__PLUGINS_FOLDER``        ``<project>/plugins``
``AIRFLOW__CORE__LOAD_EXAMPLES``         ``False``
``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``  ``sqlite:///<AIRFLOW_HOME>/airflow.db``
``AIRFLOW__LOGGING__LOGGING_LEVEL``      ``INFO`` (the command line reads the progress lines from it)
``AIRFLOW_CONN_BROKERBENCH_SPARK``       Spark local mode (``local[*]``)
``BROKERBENCH_HOME``                     ``<project>/.brokerbench`` (broker installs, leases)
``BROKERBENCH_RESULTS_ROOT``             ``<project>/results``
``SPARK_LOCAL_IP``                       ``127.0.0.1``
``PATH``                                 the Python environment's ``bin`` first (``spark-submit``)
=======================================  ==========================================================
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, MutableMapping

#: the checkout this package runs from (include/brokerbench/local_airflow.py -> the project)
PROJECT_ROOT = Path(__file__).resolve().parents[2]

SPARK_LOCAL = '{"conn_type": "spark", "host": "local[*]"}'


def defaults(project_root: Path = PROJECT_ROOT, environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """The variables of the table above, for ``project_root`` (AIRFLOW_HOME as set, else the project's)."""
    home = environ.get("AIRFLOW_HOME") or str(project_root / ".airflow")
    return {
        "AIRFLOW_HOME": home,
        "AIRFLOW__CORE__DAGS_FOLDER": str(project_root / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(project_root / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "AIRFLOW_CONN_BROKERBENCH_SPARK": SPARK_LOCAL,
        "BROKERBENCH_HOME": str(project_root / ".brokerbench"),
        "BROKERBENCH_RESULTS_ROOT": str(project_root / "results"),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }


def missing(project_root: Path = PROJECT_ROOT, environ: MutableMapping[str, str] = os.environ) -> str | None:
    """One line saying what is missing for a run, or None."""
    dags = Path(environ.get("AIRFLOW__CORE__DAGS_FOLDER") or project_root / "dags")
    if not (dags / "brokerbench_suites.py").is_file():
        return (f"no brokerbench DAGs in {dags}: run brokerbench from a checkout of the project (its dags/ "
                f"folder), or set AIRFLOW__CORE__DAGS_FOLDER to it")
    return None


def apply_defaults(environ: MutableMapping[str, str] = os.environ, project_root: Path = PROJECT_ROOT) -> list[str]:
    """Set every variable of the table the environment does not set; the names set."""
    chosen = []
    for name, value in defaults(project_root, environ).items():
        if name not in environ:
            environ[name] = value
            chosen.append(name)
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in environ.get("PATH", "").split(os.pathsep):
        environ["PATH"] = bin_dir + os.pathsep + environ.get("PATH", "")
    return chosen


def sqlite_path(environ: MutableMapping[str, str] = os.environ) -> Path | None:
    """The SQLite file of the configured database, None for another database."""
    conn = environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "")
    return Path(conn[len("sqlite:///"):]) if conn.startswith("sqlite:///") else None


def ensure_database(say: Callable[[str], None], environ: MutableMapping[str, str] = os.environ) -> None:
    """Create the SQLite database on first use (``airflow db migrate``, about 20 s once). Another database is
    the deployment's to manage: left as it is."""
    db = sqlite_path(environ)
    if db is None or db.exists():
        return
    say(f"creating the Airflow database {db} (once; about 20 s)")
    db.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True, text=True,
                          env=dict(environ))
    if done.returncode:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"airflow db migrate failed (exit {done.returncode}): " + " | ".join(tail))
