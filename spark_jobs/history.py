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

Idempotent: the run's rows are first written to ``<history-root>/_staging/``,
then every earlier directory of the same ``run_key`` is deleted and the new
directories are moved into place. Re-running the same DAG run replaces its
rows and never duplicates them; other runs' rows are never touched.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from datetime import datetime, timezone
from typing import Any, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

#: partition columns, outermost first (run_key is always the innermost)
PARTITIONS = ["broker", "broker_version", "workload", "variant", "date"]
#: run identity columns added to every summary row
RUN_COLUMNS = ["run_key", "dag_id", "run_id", "run_type", "run_ts", "environment", "suite",
               "pipeline_brokerbench_version", "results_run_dir", "appended_at"]
UNKNOWN = "unknown"


def run_key(dag_id: str, run_id: str) -> str:
    """A partition value Spark and every file system keep as is."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{dag_id}__{run_id}")


def _hadoop_path(spark: SparkSession, uri: str):
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return path, path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())


def read_text(spark: SparkSession, uri: str) -> str | None:
    path, fs = _hadoop_path(spark, uri)
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        reader = spark.sparkContext._jvm.java.io.BufferedReader(
            spark.sparkContext._jvm.java.io.InputStreamReader(stream, "UTF-8"))
        lines = []
        while True:
            line = reader.readLine()
            if line is None:
                break
            lines.append(line)
        return "\n".join(lines)
    finally:
        stream.close()


def run_meta(spark: SparkSession, run_dir: str) -> dict[str, Any]:
    """summary/run_meta.json, completed from the path where fields are missing."""
    text = read_text(spark, f"{run_dir}/summary/run_meta.json")
    meta = json.loads(text) if text else {}
    parts = run_dir.rstrip("/").split("/")
    meta.setdefault("dag_id", parts[-2] if len(parts) >= 2 else UNKNOWN)
    meta.setdefault("run_id", parts[-1])
    if not meta.get("run_ts"):
        path, fs = _hadoop_path(spark, f"{run_dir}/summary/summary.parquet")
        ms = fs.getFileStatus(path).getModificationTime()
        meta["run_ts"] = datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()
    meta.setdefault("date", str(meta["run_ts"])[:10])
    meta.setdefault("run_type", UNKNOWN)
    meta.setdefault("environment", UNKNOWN)
    meta.setdefault("suite", None)
    meta.setdefault("brokerbench_version", None)
    return meta


def history_rows(spark: SparkSession, run_dir: str, appended_at: str) -> tuple[str, DataFrame]:
    meta = run_meta(spark, run_dir)
    key = run_key(str(meta["dag_id"]), str(meta["run_id"]))
    summary = spark.read.parquet(f"{run_dir}/summary/summary.parquet")
    values = {
        "run_key": key, "dag_id": meta["dag_id"], "run_id": meta["run_id"], "run_type": meta["run_type"],
        "run_ts": meta["run_ts"], "environment": meta["environment"], "suite": meta["suite"],
        "pipeline_brokerbench_version": meta["brokerbench_version"], "results_run_dir": run_dir,
        "appended_at": appended_at,
    }
    df = summary
    for name in RUN_COLUMNS:
        df = df.withColumn(name, F.lit(values[name]).cast("string"))
    df = df.withColumn("date", F.lit(str(meta["date"])))
    for name in PARTITIONS:
        # partition values are never null (Spark would write __HIVE_DEFAULT_PARTITION__)
        df = df.withColumn(name, F.coalesce(F.col(name).cast("string"), F.lit(UNKNOWN)))
    return key, df


def _delete_run(spark: SparkSession, history_root: str, key: str) -> int:
    depth = "/".join("*" for _ in PARTITIONS)
    path, fs = _hadoop_path(spark, f"{history_root}/{depth}/run_key={key}")
    statuses = fs.globStatus(path) or []
    for status in statuses:
        fs.delete(status.getPath(), True)
    return len(statuses)


def append_run(spark: SparkSession, history_root: str, run_dir: str, appended_at: str) -> dict[str, Any]:
    key, df = history_rows(spark, run_dir, appended_at)
    rows = df.count()
    staging = f"{history_root}/_staging/{key}"
    path, fs = _hadoop_path(spark, staging)
    fs.delete(path, True)
    df.coalesce(1).write.mode("overwrite").partitionBy(*PARTITIONS).parquet(staging)
    replaced = _delete_run(spark, history_root, key)
    depth = "/".join("*" for _ in PARTITIONS)
    leaves = fs.globStatus(_hadoop_path(spark, f"{staging}/{depth}")[0]) or []
    jvm = spark.sparkContext._jvm
    for leaf in leaves:
        src = leaf.getPath()
        rel = str(src.toString())[len(str(fs.makeQualified(path).toString())) + 1:]
        target = jvm.org.apache.hadoop.fs.Path(f"{history_root}/{rel}/run_key={key}")
        fs.mkdirs(target.getParent())
        if not fs.rename(src, target):
            raise RuntimeError(f"could not move {src} to {target}")
    fs.delete(path, True)
    return {"run_key": key, "rows": rows, "replaced_directories": replaced, "partitions": len(leaves)}


def build_session(app_name: str = "brokerbench-history") -> SparkSession:
    return (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Append aggregated brokerbench runs to the history store.")
    parser.add_argument("--history-root", required=True, help="history directory (local path or Hadoop URI)")
    parser.add_argument("--run-dir", action="append", required=True, help="a run directory (repeatable)")
    args = parser.parse_args(argv)
    history_root = args.history_root.rstrip("/")
    appended_at = datetime.now(timezone.utc).isoformat()

    spark = build_session()
    spark.sparkContext.setLogLevel("WARN")
    try:
        for run_dir in args.run_dir:
            run_dir = run_dir.rstrip("/")
            if read_text(spark, f"{run_dir}/summary/summary.parquet/_SUCCESS") is None:
                print(f"brokerbench history: no summary in {run_dir}/summary/summary.parquet", file=sys.stderr)
                return 2
            out = append_run(spark, history_root, run_dir, appended_at)
            print(f"brokerbench history: {out['rows']} rows of {out['run_key']} -> {history_root} "
                  f"({out['partitions']} partitions; {out['replaced_directories']} earlier directories replaced)")
        return 0
    finally:
        spark.stop()


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
