"""The aggregation's command line: every ``--run-dir`` in one query, the run as a key.

Contract (docs/aggregation-and-report.md, "Running the jobs on a cluster"):

- ``--run-dir`` (repeatable; a glob stands for the directories it matches): a local path
  (or ``file://``) or ``s3://bucket/prefix/runs/<dag>/<run>`` (``s3a://`` alike). S3 worker
  files are fetched by the executors with boto3; credentials and endpoint come from the
  driver's ``AWS_*`` environment, handed to the executors as ``spark.executorEnv.*``.
- ``--out-dir`` (repeatable, one per ``--run-dir`` in order): the local directory the driver
  writes the run's outputs into; default ``<run-dir>/summary`` for a local run, required
  for an S3 one. Nothing is written by executors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Sequence

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from . import broker_metrics, pyfiles
from .history_writer import SIDE_B_TRIAL, append_run
from .outputs import csv_text, text_table, write_run_outputs, write_text
from .phase_tables import (
    SUMMARY_SCHEMA,
    TABLES,
    TIMESERIES_COLUMNS,
    contention_rows,
    finish_summary,
    phase_label,
    phase_rows,
    provenance_row,
    sort_key,
    summary_order,
)
from .reading import raw_member, read_tasks, worker_files, worker_pattern
from .schema import ALL_PERCENTILES, COMBO, NoMeasuredData
from .store import executor_env, expand_run_dirs, is_s3, list_files, local_path, read_text, s3_client


def build_session(app_name: str = "brokerbench-aggregate") -> SparkSession:
    """The session; the driver's AWS settings (those set) go to the executors' environment.
    Nothing here chooses the master or an address: spark-submit's ``--master`` and conf do."""
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
    )
    for name, value in executor_env().items():
        builder = builder.config(f"spark.executorEnv.{name}", value)
    return builder.getOrCreate()


def _by_run(rows: list[dict], keys: Sequence[str], order: Callable[[dict], tuple] | None = None
            ) -> dict[int, list[dict]]:
    """Rows split by run, each run's sorted by ``keys`` (nulls first, as Spark sorts) or by ``order``, without
    the ``run`` key."""
    def key(r: dict) -> tuple:
        return (r["run"], order(r)) if order else sort_key([r["run"], *[r[k] for k in keys]])

    out: dict[int, list[dict]] = defaultdict(list)
    for r in sorted(rows, key=key):
        r = dict(r)
        run = r.pop("run")
        out[run].append(r)
    return dict(out)


def ship_package(spark: SparkSession) -> None:
    """The executors import this package (they read the worker files with it): when the driver runs
    it from its source directory, ship a zip of it, unless spark-submit's ``--py-files`` already
    ships the zip of these very sources (the Airflow operators do; adding it again costs the
    driver about a second of re-reading every zip on its path)."""
    if not os.path.isfile(pyfiles.__file__):  # imported from a zip: shipped with it
        return
    submitted = spark.sparkContext.getConf().get("spark.submit.pyFiles", "") or ""
    if any(os.path.basename(f) == pyfiles.zip_name() for f in submitted.split(",")):
        return
    spark.sparkContext.addPyFile(pyfiles.build_zip())


def out_dirs(run_dirs: Sequence[str], given: Sequence[str] | None) -> list[str]:
    """The local output directory of every run: ``given`` in order (one per run), or
    ``<run-dir>/summary`` of local runs; an S3 run needs one."""
    if given:
        if len(given) != len(run_dirs):
            raise SystemExit(f"--out-dir: give one per run directory ({len(run_dirs)} runs: "
                             f"{', '.join(run_dirs)}; {len(given)} --out-dir)")
        return [local_path(d).rstrip("/") for d in given]
    remote = [d for d in run_dirs if is_s3(d)]
    if remote:
        raise SystemExit(f"--out-dir is required for a run directory on S3 ({', '.join(remote)})")
    return [f"{local_path(d)}/summary" for d in run_dirs]


def aggregate_runs(spark: SparkSession, run_dirs: Sequence[str], outs: Sequence[str] | None = None) -> int:
    """Aggregate every run directory in one query; 0 = all written, 2 = a run had nothing measured.
    ``outs``: each run's local output directory (default ``<run-dir>/summary``)."""
    dirs = dict(enumerate(run_dirs))
    outs = list(outs) if outs else out_dirs(run_dirs, None)
    client = s3_client() if any(is_s3(d) for d in run_dirs) else None
    ship_package(spark)  # the executors merge the buckets with this package's code
    files, failures = _find_worker_files(dirs, client)
    tables = _aggregate(spark, files, dirs, client, failures) if files else Tables()
    return _write_outputs(spark, dirs, outs, tables, failures)


@dataclass
class Tables:
    """The aggregated tables, as rows per run (index of the run directory)."""

    summary: dict[int, list[dict]] = field(default_factory=dict)
    timeseries: dict[int, list[dict]] = field(default_factory=dict)
    quantiles: dict[int, list[dict]] = field(default_factory=dict)
    omb_series: dict[int, list[dict]] = field(default_factory=dict)
    sweep: dict[int, list[dict]] = field(default_factory=dict)
    #: the brokers' and hosts' metrics per interval (broker_metrics.INTERVAL_COLUMNS)
    broker_metrics: dict[int, list[dict]] = field(default_factory=dict)
    #: broker -> its catalog's panels and metrics (broker_metrics.panels)
    broker_catalogs: dict[int, dict[str, dict]] = field(default_factory=dict)
    summary_schema: T.StructType = field(default_factory=lambda: T.StructType([]))
    timeseries_columns: list[str] = field(default_factory=list)


def _find_worker_files(dirs: dict[int, str], client) -> tuple[dict[str, tuple[int, int]], dict[int, NoMeasuredData]]:
    """Every run's worker files (path -> (run, bytes)); a run without any fails with NoMeasuredData."""
    failures: dict[int, NoMeasuredData] = {}
    files: dict[str, tuple[int, int]] = {}
    for run, run_dir in dirs.items():
        sized = worker_files(run_dir, client)
        if sized:
            files.update((p, (run, n)) for p, n in sized)
        else:
            failures[run] = NoMeasuredData(f"no worker files match {worker_pattern(run_dir)}")
    return files, failures


def _aggregate(spark: SparkSession, files: dict[str, tuple[int, int]], dirs: dict[int, str], client,
               failures: dict[int, NoMeasuredData]) -> Tables:
    """Every table of every run in one Spark stage and one collect: each task reads its phases' worker files
    and builds their rows (phase_tables.py); the driver sorts them and finishes the summary with each run's
    provenance and host metrics (a run whose files hold no measured interval is added to ``failures``)."""
    tables = Tables(summary_schema=SUMMARY_SCHEMA, timeseries_columns=list(TIMESERIES_COLUMNS))
    slices = read_tasks(files, spark.sparkContext.defaultParallelism)
    rows = (spark.sparkContext.parallelize(slices, len(slices)).flatMap(phase_rows).collect()
            if slices else [])  # no slice: warm-up files alone
    by_table: dict[str, list[dict]] = {table: [] for table in TABLES}
    for table, _, row in rows:
        by_table[table].append(row)

    tables.timeseries = _by_run(by_table["timeseries"], [*COMBO, "interval_index"])
    for run in sorted({run for run, _ in files.values()}):
        if run not in tables.timeseries:
            failures[run] = NoMeasuredData(
                f"no interval records of phase 'measure' under {dirs[run]}/raw")
    tables.sweep = _by_run(by_table["sweep"], [*COMBO, "step"])
    measured = {run: dirs[run] for run in sorted(tables.timeseries)}
    finished = []
    metric_columns: list[str] = []
    for run, run_dir in measured.items():
        provenance = read_provenance(run_dir, client)
        contention = contention_rows(read_text(uri, client) for uri, _ in
                                     list_files(run_dir, "provenance/phases/*.json", client))
        parts = [part for part in by_table["summary"] if part["run"] == run]
        run_rows = [finish_summary(part, side_provenance(provenance, part),
                                   contention.get(phase_label(part["workload"], part["driver"], part["variant"])))
                    for part in parts]
        intervals, columns, catalogs = _broker_metrics(run_dir, client, parts, run_rows)
        tables.broker_metrics[run] = intervals
        tables.broker_catalogs[run] = catalogs
        metric_columns += [c for c in columns if c not in metric_columns]
        finished += run_rows
    # the brokers' and hosts' phase figures: one column per catalog metric of the run (null where a row's broker
    # does not have it), then the notes
    tables.summary_schema = T.StructType(list(SUMMARY_SCHEMA.fields)
                                         + [T.StructField(c, T.DoubleType(), True) for c in metric_columns]
                                         + [T.StructField(broker_metrics.NOTES, T.StringType(), True)])
    for done in finished:
        for c in [*metric_columns, broker_metrics.NOTES]:
            done.setdefault(c, None)
    tables.summary = _by_run(finished, COMBO, summary_order)
    tables.quantiles = _by_run([q for q in by_table["quantiles"] if q["run"] in measured], [*COMBO, "metric"])
    tables.omb_series = _by_run([o for o in by_table["omb"] if o["run"] in measured], [*COMBO, "window"])
    return tables


def _broker_metrics(run_dir: str, client, parts: list[dict], rows: list[dict]
                    ) -> tuple[list[dict], list[str], dict[str, dict]]:
    """The run's brokers' and hosts' metrics (broker_metrics.py): each summary row gets its phase figures and
    notes; returns the per-interval rows, the metric columns and the catalogs' panels the files carry."""
    files = [(uri, read_text(uri, client)) for pattern in ("brokermetrics/*/*/*/*/*.jsonl",
                                                          "hostmetrics/*/*/*/*/*.jsonl")
             for uri, _ in list_files(run_dir, pattern, client)]
    brokers, hosts = broker_metrics.read_files(files)
    phases = {}
    for part in parts:
        start_ns, seconds = part.get("phase_start_ns"), part.get("measured_seconds")
        start = None if start_ns is None else start_ns / 1e9
        phases[(part["workload"], part["driver"], part["variant"])] = {
            "broker": part["broker"], "start": start,
            "end": None if start is None or seconds is None else start + seconds}
    intervals, figures, columns = broker_metrics.tables(brokers, hosts, phases)
    for row in rows:
        got = figures.get(tuple(row[c] for c in COMBO))
        if got is None or not any(k.startswith(row["broker"] + "_") for k in got):
            got = dict(got or {})
            why = (f"no broker metrics: {row.get('broker_implementation') or row['broker']} exposes no endpoint "
                   "brokerbench reads")
            got[broker_metrics.NOTES] = "; ".join(n for n in (why, got.get(broker_metrics.NOTES)) if n)
        row.update(got)
    return intervals, columns, broker_metrics.panels(brokers)


def side_provenance(provenance: dict[tuple[str, str], dict], part: dict) -> dict | None:
    """A summary row's provenance: its broker x variant's, or for side B of an A/B run that deploys its sides afresh
    (another broker version or variant; workload ``<id>.B.trial<k>``) side B's own, filed under side B's variant
    (``provenance/<broker>__<variant>.B.json``) where there is one."""
    if SIDE_B_TRIAL.match(str(part.get("workload") or "")) and (part["broker"], f"{part['variant']}.B") in provenance:
        return provenance[(part["broker"], f"{part['variant']}.B")]
    return provenance.get((part["broker"], part["variant"]))


def read_provenance(run_dir: str, client=None) -> dict[tuple[str, str], dict]:
    """(broker, variant) -> the provenance columns, of the run's provenance/<broker>__<variant>.json."""
    out = {}
    for uri, _ in list_files(run_dir, "provenance/*__*.json", client):
        text = read_text(uri, client)
        if text is not None:
            broker, variant, columns = provenance_row(uri, text, raw_member(text, ("durability", "settings")))
            out[(broker, variant)] = columns
    return out


def _write_outputs(spark: SparkSession, dirs: dict[int, str], outs: list[str], tables: Tables,
                   failures: dict[int, NoMeasuredData]) -> int:
    """Each run's summary, time series, quantiles and sweep files; 2 when a run had nothing measured."""
    rc = 0
    for run in dirs:
        out = outs[run]
        steps = tables.sweep.get(run, [])
        if steps:
            write_text(f"{out}/sweep.csv", csv_text(steps, list(steps[0].keys())))
            print(f"brokerbench aggregate: {len(steps)} sweep step rows -> {out}/sweep.csv")
        if run in failures:
            if steps:
                print(f"brokerbench aggregate: no measured phase (sweep only): {failures[run]}")
                continue
            print(f"brokerbench aggregate: no measured data: {failures[run]}", file=sys.stderr)
            rc = 2
            continue
        rows = tables.summary[run]
        write_run_outputs(out, rows, tables.summary_schema, tables.timeseries[run], tables.timeseries_columns,
                          tables.quantiles.get(run, []), ALL_PERCENTILES, spark.version,
                          tables.omb_series.get(run, []))
        series = tables.broker_metrics.get(run, [])
        write_text(f"{out}/brokermetrics.csv", csv_text(series, broker_metrics.INTERVAL_COLUMNS))
        write_text(f"{out}/brokermetrics-panels.json",
                   json.dumps(tables.broker_catalogs.get(run, {}), indent=1, sort_keys=True) + "\n")
        print(f"brokerbench aggregate: {len(series)} broker and host metric rows -> {out}/brokermetrics.csv")
        print(f"brokerbench aggregate: {len(rows)} summary rows, {len(tables.timeseries[run])} interval rows "
              f"-> {out}")
        print(text_table(rows))
        for r in rows:
            if r["status"] != "ok":
                print(f"WARNING {r['workload']} {r['broker']} {r['variant']}: {r['status']}")
    return rc


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Aggregate brokerbench runs (merge histograms, write summary).")
    parser.add_argument("--run-dir", required=True, action="append",
                        help="a run directory: local path, file:// or s3:// (s3a://) URI, or a glob of run "
                             "directories (repeatable: all runs are aggregated together in one query)")
    parser.add_argument("--out-dir", action="append",
                        help="local directory for a run's outputs, written by the driver (repeatable: one per "
                             "--run-dir, in order; default <run-dir>/summary for a local run, required for S3)")
    parser.add_argument("--history-root",
                        help="also append each run to this history store (local directory) in the same application, "
                             "as spark_jobs/history.py does: one Spark start for both steps (local run "
                             "directories only: an S3 run's summary is read back from S3 by the history job)")
    args = parser.parse_args(argv)
    run_dirs = expand_run_dirs(args.run_dir)  # each run once, in order
    outs = out_dirs(run_dirs, args.out_dir)
    if args.history_root and (is_s3(args.history_root) or any(is_s3(d) for d in run_dirs)):
        parser.error("--history-root: local run directories and a local history store only (for S3, run "
                     "spark_jobs/history.py once the run's summary is uploaded)")

    spark = build_session()
    spark.sparkContext.setLogLevel("WARN")
    try:
        rc = aggregate_runs(spark, run_dirs, outs)
        if rc == 0 and args.history_root:
            appended_at = datetime.now(timezone.utc).isoformat()
            for run_dir in run_dirs:
                out = append_run(args.history_root, local_path(args.history_root), run_dir, appended_at)
                print(f"brokerbench history: {out['rows']} rows of {out['run_key']} -> {args.history_root} "
                      f"({out['partitions']} partitions; {out['replaced_directories']} earlier directories "
                      f"replaced; manifest {out['manifest']})")
        return rc
    finally:
        spark.stop()
