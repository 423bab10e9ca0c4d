"""Append one or more aggregated brokerbench runs to the history store.

Run with any spark-submit (no Airflow, no brokerbench import needed)::

    SPARK_LOCAL_IP=127.0.0.1 spark-submit --master local[2] spark_jobs/history.py \
        --history-root <results root>/history --run-dir <results root>/runs/<dag_id>/<run_id> \
        [--history-out <local dir>] [--run-dir ...]

Input per run (local or ``s3://``): ``<run-dir>/summary/summary.parquet`` and
``<run-dir>/summary/run_meta.json``, read by the driver (pyarrow, boto3): never the rest of
the history. Output, written by the driver into the local ``--history-out`` (default: the
history root when it is local; required when it is on S3): the run's rows under
``broker=<b>/broker_version=<v>/workload=<w>/variant=<x>/date=<YYYY-MM-DD>/run_key=<key>/``
(earlier local directories of the same run key replaced) and the manifest
``_manifests/<run_key>.json`` listing the files written (see
docs/aggregation-and-report.md, "Running the jobs on a cluster").

The job is ``spark_jobs/brokerbench_spark/history_writer.py``; this file is its entry
point (see spark_jobs/aggregate.py about ``--py-files``).
"""

from __future__ import annotations

import os
import sys

try:
    from brokerbench_spark.history_writer import main
except ImportError:  # imported from elsewhere than its directory: the package is beside this file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from brokerbench_spark.history_writer import main

if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
