"""Append aggregated brokerbench runs to the history store (the job of spark_jobs/history.py).

Input per run: ``<run-dir>/summary/summary.parquet`` (the aggregation) and
``<run-dir>/summary/run_meta.json`` (who ran it: dag id, run id, run type, run timestamp,
environment, suite; written by the Airflow task). A run without ``run_meta.json`` takes dag
id and run id from its path (``.../runs/<dag_id>/<run_id>``) and the summary's modification
time.

Output: Parquet files under ``<history-root>/broker=<b>/broker_version=<v>/
workload=<w>/variant=<x>/date=<YYYY-MM-DD>/run_key=<dag_id>__<run_id>/``, one row per run x
workload x broker x driver x variant: every summary column (metrics and provenance) plus the
run's identity.

All runs of an invocation are written in one Spark job (one per distinct summary schema) to
``<history-root>/_staging/``; then, run by run, every earlier directory of the run's
``run_key`` is deleted and its new directories are moved into place. Re-running the same DAG
run replaces its rows and never duplicates them; other runs' rows are never touched. The
summaries' schemas and row counts come from their Parquet footers, read on the driver (no
Spark job per run).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import uuid
from datetime import datetime, timezone
from typing import Any, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .reading import expand_run_dirs, hadoop_path

#: partition columns, outermost first (run_key is always the innermost)
PARTITIONS = ["broker", "broker_version", "workload", "variant", "date"]
#: run identity columns added to every summary row
RUN_COLUMNS = ["run_key", "dag_id", "run_id", "run_type", "run_ts", "environment", "suite",
               "pipeline_brokerbench_version", "results_run_dir", "appended_at"]
UNKNOWN = "unknown"
#: the staging partition column that carries the run key (not written into the files)
RUN_PARTITION = "_run_key"
SPARK_SCHEMA_KEY = "org.apache.spark.sql.parquet.row.metadata"


def run_key(dag_id: str, run_id: str) -> str:
    """A partition value Spark and every file system keep as is."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{dag_id}__{run_id}")


def read_text(spark: SparkSession, uri: str) -> str | None:
    path, fs = hadoop_path(spark, uri)
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
        path, fs = hadoop_path(spark, f"{run_dir}/summary/summary.parquet")
        ms = fs.getFileStatus(path).getModificationTime()
        meta["run_ts"] = datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()
    meta.setdefault("date", str(meta["run_ts"])[:10])
    meta.setdefault("run_type", UNKNOWN)
    meta.setdefault("environment", UNKNOWN)
    meta.setdefault("suite", None)
    meta.setdefault("brokerbench_version", None)
    return meta


def summary_footers(spark: SparkSession, run_dir: str) -> tuple[T.StructType | None, int]:
    """(Spark schema, rows) of ``<run-dir>/summary/summary.parquet`` from its files' footers.

    The schema is the one Spark stored in the footer (None when a file has none, e.g. a
    summary not written by Spark: then Spark infers it)."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    path, fs = hadoop_path(spark, f"{run_dir}/summary/summary.parquet")
    schema: T.StructType | None = None
    missing = False
    rows = 0
    for status in fs.listStatus(path):
        name = status.getPath().getName()
        if not status.isFile() or name.startswith(("_", ".")):
            continue
        reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(
            jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromStatus(status, conf))
        try:
            rows += reader.getRecordCount()
            stored = reader.getFooter().getFileMetaData().getKeyValueMetaData().get(SPARK_SCHEMA_KEY)
        finally:
            reader.close()
        if stored is None:
            missing = True
        elif schema is None:
            schema = T.StructType.fromJson(json.loads(stored))
    return (None if missing else schema), rows


def history_rows(spark: SparkSession, run_dir: str, appended_at: str) -> tuple[str, DataFrame, int]:
    """(run key, the run's history rows with RUN_PARTITION, number of rows)."""
    meta = run_meta(spark, run_dir)
    key = run_key(str(meta["dag_id"]), str(meta["run_id"]))
    schema, rows = summary_footers(spark, run_dir)
    reader = spark.read if schema is None else spark.read.schema(schema)
    summary = reader.parquet(f"{run_dir}/summary/summary.parquet")
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
    return key, df.withColumn(RUN_PARTITION, F.lit(key)), rows


def _delete_run(spark: SparkSession, history_root: str, key: str) -> int:
    depth = "/".join("*" for _ in PARTITIONS)
    path, fs = hadoop_path(spark, f"{history_root}/{depth}/run_key={key}")
    statuses = fs.globStatus(path) or []
    for status in statuses:
        fs.delete(status.getPath(), True)
    return len(statuses)


def _batches(run_dirs: list[str], keys: list[str]) -> list[list[int]]:
    """Consecutive runs without a repeated run key (a repeated key replaces the earlier rows, in order)."""
    batches: list[list[int]] = [[]]
    seen: set[str] = set()
    for i, key in enumerate(keys):
        if key in seen:
            batches.append([])
            seen = set()
        batches[-1].append(i)
        seen.add(key)
    return [b for b in batches if b]


def append_runs(spark: SparkSession, history_root: str, run_dirs: list[str], appended_at: str) -> list[dict]:
    """Append every run (in order); one dict per run: run_key, rows, replaced_directories, partitions."""
    prepared = [history_rows(spark, d, appended_at) for d in run_dirs]
    results: list[dict] = []
    jvm = spark.sparkContext._jvm
    depth = "/".join("*" for _ in PARTITIONS)
    for batch in _batches(run_dirs, [p[0] for p in prepared]):
        staging = f"{history_root}/_staging/batch-{uuid.uuid4().hex}"
        path, fs = hadoop_path(spark, staging)
        try:
            by_schema: dict[str, list[DataFrame]] = {}
            for i in batch:
                df = prepared[i][1]
                by_schema.setdefault(df.schema.json(), []).append(df)
            for frames in by_schema.values():
                union = frames[0]
                for df in frames[1:]:
                    union = union.union(df)
                (union.coalesce(1).write.mode("append")
                 .partitionBy(RUN_PARTITION, *PARTITIONS).parquet(staging))
            for i in batch:
                key, _, rows = prepared[i]
                replaced = _delete_run(spark, history_root, key)
                run_root = jvm.org.apache.hadoop.fs.Path(path, f"{RUN_PARTITION}={key}")
                leaves = fs.globStatus(jvm.org.apache.hadoop.fs.Path(run_root, depth)) or []
                prefix = str(fs.makeQualified(run_root).toString())
                for leaf in leaves:
                    src = leaf.getPath()
                    rel = str(src.toString())[len(prefix) + 1:]
                    target = jvm.org.apache.hadoop.fs.Path(f"{history_root}/{rel}/run_key={key}")
                    fs.mkdirs(target.getParent())
                    if not fs.rename(src, target):
                        raise RuntimeError(f"could not move {src} to {target}")
                results.append({"run_key": key, "rows": rows, "replaced_directories": replaced,
                                "partitions": len(leaves)})
        finally:
            fs.delete(path, True)
    return results


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
    parser.add_argument("--run-dir", action="append", required=True,
                        help="a run directory, or a glob of run directories (repeatable)")
    args = parser.parse_args(argv)
    history_root = args.history_root.rstrip("/")
    appended_at = datetime.now(timezone.utc).isoformat()

    spark = build_session()
    spark.sparkContext.setLogLevel("WARN")
    try:
        # the runs before the first one without a summary are appended (as one after the other would)
        runs, missing = [], None
        for run_dir in expand_run_dirs(spark, args.run_dir, unique=False):  # a repeated run replaces itself
            if read_text(spark, f"{run_dir}/summary/summary.parquet/_SUCCESS") is None:
                missing = run_dir
                break
            runs.append(run_dir)
        for out in append_runs(spark, history_root, runs, appended_at) if runs else []:
            print(f"brokerbench history: {out['rows']} rows of {out['run_key']} -> {history_root} "
                  f"({out['partitions']} partitions; {out['replaced_directories']} earlier directories replaced)")
        if missing is not None:
            print(f"brokerbench history: no summary in {missing}/summary/summary.parquet", file=sys.stderr)
            return 2
        return 0
    finally:
        spark.stop()
