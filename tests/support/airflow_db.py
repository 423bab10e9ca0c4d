"""An Airflow metadata database of a test's own, for a DAG run that need not queue behind the others.

The DAG runs under ``tests/e2e`` and ``tests/faults`` share the project's SQLite database (one writer at a
time), so they run one after another on one pytest worker. A test that copies that database (already migrated
by ``make setup``) into its own directory can run beside them: SQLite's backup API copies it consistently even
while another process writes to it, in well under a second (``airflow db migrate`` from nothing takes a minute).
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path

PREFIX = "sqlite:///"


def private_airflow_db(directory: Path) -> dict[str, str]:
    """Copy the project's Airflow database into ``directory``; the environment variables that point
    ``airflow`` at the copy."""
    conn = os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    if not conn.startswith(PREFIX):
        raise RuntimeError(f"the project's Airflow database is not SQLite ({conn}); a copy needs one")
    source = Path(conn[len(PREFIX):])
    if not source.exists():
        raise RuntimeError(f"{source} does not exist: `make setup` migrates it")
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "airflow.db"
    with closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)
    return {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"{PREFIX}{target}"}
