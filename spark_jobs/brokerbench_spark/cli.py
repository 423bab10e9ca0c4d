"""The aggregation's command line: every ``--run-dir`` in one query, the run as a key."""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from typing import Sequence

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from .merge import group_ids, histogram_stats
from .outputs import csv_text, text_table, write_run_outputs, write_summary_parquet
from .reading import expand_run_dirs, glob_sized, read_contention, read_provenance, read_worker_records, worker_pattern, write_text
from .schema import ALL_PERCENTILES, COMBO, METRIC_NAMES, NoMeasuredData
from .tables import quantiles_table, summary_table, sweep_table, timeseries_table


#: shuffle partitions: at least this many, one more per BYTES_PER_PARTITION of worker files
SHUFFLE_PARTITIONS = 4
BYTES_PER_PARTITION = 64 * 1024 * 1024
MAX_SHUFFLE_PARTITIONS = 400


def build_session(app_name: str = "brokerbench-aggregate") -> SparkSession:
    return (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.ui.showConsoleProgress", "false")
        # a run's worker files are listed on the driver (no listing job per run)
        .config("spark.sql.sources.parallelPartitionDiscovery.threshold", "1024")
        .getOrCreate()
    )


def _by_run(rows: list[dict]) -> dict[int, list[dict]]:
    """Collected rows split by run, in their order, without the ``run`` key."""
    out: dict[int, list[dict]] = defaultdict(list)
    for r in rows:
        run = r.pop("run")
        out[run].append(r)
    return out


def aggregate_runs(spark: SparkSession, run_dirs: Sequence[str]) -> int:
    """Aggregate every run directory in one query; 0 = all written, 2 = a run had nothing measured."""
    dirs = dict(enumerate(run_dirs))
    failures: dict[int, NoMeasuredData] = {}
    files: dict[int, list[str]] = {}
    input_bytes = 0
    for run, run_dir in dirs.items():
        sized = glob_sized(spark, worker_pattern(run_dir))
        if sized:
            files[run] = [p for p, _ in sized]
            input_bytes += sum(n for _, n in sized)
        else:
            failures[run] = NoMeasuredData(f"no worker files match {worker_pattern(run_dir)}")
    # the bucket merge's shuffle is about 40 % of the input: keep its partitions small
    # (adaptive execution coalesces the small shuffles of the other stages)
    spark.conf.set("spark.sql.shuffle.partitions",
                   str(max(SHUFFLE_PARTITIONS, min(MAX_SHUFFLE_PARTITIONS, math.ceil(input_bytes / BYTES_PER_PARTITION)))))

    summary: dict[int, list[dict]] = {}
    timeseries: dict[int, list[dict]] = {}
    quantiles: dict[int, list[dict]] = {}
    sweep: dict[int, list[dict]] = {}
    summary_columns: list[str] = []
    timeseries_columns: list[str] = []
    if files:
        scalars, buckets = read_worker_records(spark, files)
        scalars = scalars.cache()
        metas = [r.asDict() for r in scalars.filter(
            (F.col("record") == "meta") & F.col("phase").isin("measure", "sweep"))
            .select("run", "file", "phase", "worker", *COMBO).collect()]
        groups, file_groups, group_rows = group_ids(spark, metas)
        stats = histogram_stats(scalars, buckets, file_groups).cache()

        ts_df = timeseries_table(scalars, stats, groups)
        timeseries_columns = [c for c in ts_df.columns if c != "run"]
        timeseries = _by_run([r.asDict() for r in ts_df.collect()])
        for run in files:
            if run not in timeseries:
                failures[run] = NoMeasuredData(
                    f"no interval records of phase 'measure' under {dirs[run]}/raw")
        measured = {run: dirs[run] for run in sorted(timeseries)}

        if any(g["sweep"] for g in group_rows):
            sweep = _by_run([r.asDict() for r in sweep_table(scalars, stats, groups).collect()])
        if measured:
            summary_df = summary_table(scalars, stats, groups, read_provenance(spark, measured),
                                       read_contention(spark, measured)).filter(F.col("run").isin(list(measured)))
            summary_df = summary_df.cache()
            summary_columns = [c for c in summary_df.columns if c != "run"]
            summary = _by_run([r.asDict() for r in summary_df.collect()])
            qrows = [r.asDict() for r in quantiles_table(stats, groups)
                     .filter(F.col("run").isin(list(measured))).collect()]
            for q in qrows:
                q["metric"] = METRIC_NAMES[q["metric"]]
            quantiles = _by_run(qrows)
            write_summary_parquet(spark, summary_df, measured)

    rc = 0
    for run, run_dir in dirs.items():
        steps = sweep.get(run, [])
        if steps:
            write_text(spark, f"{run_dir}/summary/sweep.csv", csv_text(steps, list(steps[0].keys())))
            print(f"brokerbench aggregate: {len(steps)} sweep step rows -> {run_dir}/summary/sweep.csv")
        if run in failures:
            if steps:
                print(f"brokerbench aggregate: no measured phase (sweep only): {failures[run]}")
                continue
            print(f"brokerbench aggregate: no measured data: {failures[run]}", file=sys.stderr)
            rc = 2
            continue
        rows = summary[run]
        out = write_run_outputs(spark, run_dir, rows, summary_columns, timeseries[run], timeseries_columns,
                                quantiles.get(run, []), ALL_PERCENTILES)
        print(f"brokerbench aggregate: {len(rows)} summary rows, {len(timeseries[run])} interval rows -> {out}")
        print(text_table(rows))
        for r in rows:
            if r["status"] != "ok":
                print(f"WARNING {r['workload']} {r['broker']} {r['variant']}: {r['status']}")
    return rc


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Aggregate brokerbench runs (merge histograms, write summary).")
    parser.add_argument("--run-dir", required=True, action="append",
                        help="a run directory: local path, file://, s3a:// or s3:// URI, or a glob of run directories "
                             "(repeatable: all runs are aggregated together in one query, each run's outputs "
                             "in its own directory)")
    args = parser.parse_args(argv)

    spark = build_session()
    spark.sparkContext.setLogLevel("WARN")
    try:
        return aggregate_runs(spark, expand_run_dirs(spark, args.run_dir))  # each run once, in order
    finally:
        spark.stop()
