"""Append one or more aggregated brokerbench runs to the history store.

Run with any spark-submit (no Airflow, no brokerbench import needed)::

    SPARK_LOCAL_IP=127.0.0.1 spark-submit --master local[2] spark_jobs/history.py \
        --history-root <results root>/history --run-dir <results root>/runs/<dag_id>/<run_id> [--run-dir ...]

Input per run: ``<run-dir>/summary/summary.parquet`` (spark_jobs/aggregate.py)
and ``<run-dir>/summary/run_meta.json`` (who ran it: dag id, run id, run type,
run timestamp, environment, suite; written by the Airflow task). A run
without ``run_meta.json`` takes dag id and run id from its path
(``.../runs/<dag_id>/<run_id>``) and the summary's modification time.

Output: Parquet files under ``<history-root>/broker=<b>/broker_version=<v>/
workload=<w>/variant=<x>/date=<YYYY-MM-DD>/run_key=<dag_id>__<run_id>/``, one
row per run x workload x broker x driver x variant: every summary column
(metrics and provenance) plus the run's identity.

Idempotent: the runs' rows are first written to ``<history-root>/_staging/``
(all runs in one Spark write), then, run by run, every earlier directory of the
same ``run_key`` is deleted and the new directories are moved into place.
Re-running the same DAG run replaces its rows and never duplicates them; other
runs' rows are never touched.

The job is ``spark_jobs/brokerbench_spark/history.py``; this file is its entry
point (see spark_jobs/aggregate.py about ``--py-files``).
"""

from __future__ import annotations

import os
import sys

try:
    from brokerbench_spark.history import main
except ImportError:  # imported from elsewhere than its directory: the package is beside this file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from brokerbench_spark.history import main

if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
