"""Aggregate brokerbench runs: merge worker histograms, write summary tables.

Run with any spark-submit (no Airflow, no brokerbench import needed)::

    SPARK_LOCAL_IP=127.0.0.1 spark-submit --master local[2] spark_jobs/aggregate.py \
        --run-dir /path/to/results/runs/<dag_id>/<run_id> [--run-dir ...]

``--run-dir`` may also be ``s3://bucket/prefix/runs/<dag>/<run>`` (or ``s3a://``): the
executors fetch the worker files with boto3 (no hadoop-aws), credentials and endpoint from
the driver's ``AWS_*`` environment. Several ``--run-dir`` are aggregated together, in one
query with the run as a key.

Input is ``<run-dir>/raw/<workload>/<driver>/<variant>/<phase>/<worker>.jsonl``
in the format of docs/results-format.md; only phase ``measure`` is summarised
(phase ``sweep`` gives sweep.csv). Histograms are merged exactly (bucket counts
added per bucket key) and every percentile is read from a merged histogram:
percentiles are never averaged.

Outputs, written by the driver into the local ``--out-dir`` (one per ``--run-dir``;
default ``<run-dir>/summary/`` for a local run, required for S3): ``summary.parquet`` (a
one-file parquet dataset), ``summary.csv``, ``timeseries.csv``, ``sweep.csv`` (sweeps only)
and ``omb/<workload>__<driver>__<variant>.json``. docs/aggregation-and-report.md lists every
column and its unit, and the contract on a cluster.

The job is the package ``spark_jobs/brokerbench_spark`` (schema, store, reading,
workerfiles, omb, phase_tables, outputs, entry); this file is its entry point. With
``spark-submit spark_jobs/aggregate.py`` the package is found beside this
file; where the script is shipped alone (cluster deploy mode), ship the package
with ``--py-files`` (``python spark_jobs/brokerbench_spark/pyfiles.py`` builds
the zip).
"""

from __future__ import annotations

import os
import sys

try:
    from brokerbench_spark.entry import main
except ImportError:  # imported from elsewhere than its directory: the package is beside this file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from brokerbench_spark.entry import main

if __name__ == "__main__":
    sys.exit(main())
