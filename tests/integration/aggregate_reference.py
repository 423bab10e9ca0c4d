# The aggregation job as it was before the rework into spark_jobs/brokerbench_spark (commit
# ba99ce782da241d1ceea687a0d4e42eccca471ec, spark_jobs/aggregate.py), kept unchanged as the reference of
# tests/integration/test_aggregate_equality.py: the new job must write the same tables. One change since: the
# summary's columns and rows in the order the job writes them now (what ran first: broker, implementation,
# version, client library; rows by broker, implementation, version, variant, workload, driver; the job sorts
# versions as version numbers, this reference as text: the same order for the versions of the test's runs).
# Not used by the pipeline.
"""Aggregate one brokerbench run: merge worker histograms, write summary tables.

Run with any spark-submit (no Airflow, no brokerbench import needed)::

    SPARK_LOCAL_IP=127.0.0.1 spark-submit --master local[2] spark_jobs/aggregate.py \
        --run-dir /path/to/results/runs/<dag_id>/<run_id>

``--run-dir`` may also be an ``s3a://`` (or ``s3://``) URI: it is handed to the
Spark readers and writers and to the Hadoop FileSystem API unchanged.

Input is ``<run-dir>/raw/<workload>/<driver>/<variant>/<phase>/<worker>.jsonl``
in the format of docs/results-format.md; only phase ``measure`` is summarised.
Histograms are merged exactly (bucket counts added per bucket key) and every
percentile is read from a merged histogram: percentiles are never averaged.

Outputs in ``<run-dir>/summary/``: ``summary.parquet`` (a Spark parquet
dataset), ``summary.csv``, ``timeseries.csv`` and
``omb/<workload>__<driver>__<variant>.json``. docs/aggregation-and-report.md
lists every column and its unit.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import sys
from typing import Any, Iterable, Sequence

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

#: identity of one summary row
COMBO = ["workload", "broker", "driver", "variant"]

#: histogram field in the worker file -> (column prefix, unit suffix, divisor from µs)
METRICS = {
    "publish_latency_us": ("publish_latency", "ms", 1000.0),
    "e2e_latency_us": ("e2e_latency", "ms", 1000.0),
    "publish_delay_us": ("publish_delay", "us", 1.0),
}

#: percentiles of the summary columns and OMB per-interval lists: (column label, percentile)
STANDARD_PERCENTILES = [("p50", 50.0), ("p75", 75.0), ("p95", 95.0), ("p99", 99.0), ("p999", 99.9), ("p9999", 99.99)]

#: percentiles of the OMB quantile maps (100 is the exact maximum)
QUANTILE_MAP_PERCENTILES = [
    1.0, 5.0, 10.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0, 70.0, 75.0, 80.0, 90.0, 95.0, 97.5,
    99.0, 99.5, 99.9, 99.95, 99.99, 99.999, 100.0,
]

# -- validity rules (docs/results-format.md, "Status") -------------------------------

#: workload kinds whose producers follow a fixed target rate (worker/runner.py KINDS);
#: throughput-sweep (its own phase), consumer-only and unthrottled producer-only are not
FIXED_RATE_KINDS = ("latency", "producer-only", "mixed", "backlog")
#: a fixed-rate row whose publish rate is below this fraction of its target is invalid
RATE_MIN_RATIO = 0.95
#: mean CPU of processes that belong neither to this run nor to the kernel, % of all
#: cores of the host (hostmetrics foreign_cpu_percent), above which a row is invalid
FOREIGN_CPU_LIMIT_PERCENT = 25.0

# -- input schema ----------------------------------------------------------------

HISTOGRAM = T.StructType([
    T.StructField("count", T.LongType()),
    T.StructField("sum", T.LongType()),
    T.StructField("min", T.LongType()),
    T.StructField("max", T.LongType()),
    T.StructField("overflow", T.LongType()),
    T.StructField("negative", T.LongType()),
    T.StructField("max_value", T.LongType()),
    T.StructField("buckets", T.ArrayType(T.LongType())),
    T.StructField("counts", T.ArrayType(T.LongType())),
])

#: union of the fields of the three record types; unknown fields are ignored
RECORD = T.StructType([
    T.StructField("record", T.StringType()),
    T.StructField("format_version", T.LongType()),
    # meta
    T.StructField("workload", T.StringType()),
    T.StructField("driver", T.StringType()),
    T.StructField("broker", T.StringType()),
    T.StructField("variant", T.StringType()),
    T.StructField("phase", T.StringType()),
    T.StructField("worker", T.StringType()),
    T.StructField("host", T.StringType()),
    T.StructField("interval_s", T.DoubleType()),
    T.StructField("lead_in_s", T.DoubleType()),
    T.StructField("target_rate_msg_s", T.DoubleType()),
    T.StructField("message_size_bytes", T.LongType()),
    T.StructField("topics", T.LongType()),
    T.StructField("partitions_per_topic", T.LongType()),
    T.StructField("producers", T.LongType()),
    T.StructField("consumers", T.LongType()),
    T.StructField("client_library", T.StringType()),
    T.StructField("client_library_version", T.StringType()),
    T.StructField("brokerbench_version", T.StringType()),
    T.StructField("kind", T.StringType()),
    # meta (phase start), interval (bounds), end (end time)
    T.StructField("start_ns", T.LongType()),
    T.StructField("end_ns", T.LongType()),
    # interval
    T.StructField("index", T.LongType()),
    T.StructField("sent", T.LongType()),
    T.StructField("acked", T.LongType()),
    T.StructField("send_errors", T.LongType()),
    T.StructField("received", T.LongType()),
    T.StructField("backlog", T.LongType()),
    T.StructField("publish_latency_us", HISTOGRAM),
    T.StructField("publish_delay_us", HISTOGRAM),
    T.StructField("e2e_latency_us", HISTOGRAM),
    # interval of a throughput sweep (phase "sweep")
    T.StructField("step", T.LongType()),
    T.StructField("step_target_rate_msg_s", T.DoubleType()),
    # end
    T.StructField("status", T.StringType()),
    T.StructField("error", T.StringType()),
    T.StructField("cpu_percent", T.DoubleType()),
    T.StructField("load_s", T.DoubleType()),
    T.StructField("sweep_steps", T.ArrayType(T.StructType([
        T.StructField("step", T.LongType()),
        T.StructField("target_rate_msg_s", T.DoubleType()),
        T.StructField("achieved_rate_msg_s", T.DoubleType()),
        T.StructField("stable", T.BooleanType()),
        T.StructField("reason", T.StringType()),
        T.StructField("publish_p99_bound_ms", T.DoubleType()),
    ]))),
    T.StructField("highest_stable_rate_msg_s", T.DoubleType()),
    T.StructField("validity", T.StructType([
        T.StructField("target_rate_msg_s", T.DoubleType()),
        T.StructField("achieved_rate_msg_s", T.DoubleType()),
        T.StructField("publish_delay_p99_us", T.DoubleType()),
        T.StructField("cpu_percent", T.DoubleType()),
        T.StructField("clock_offset_ms", T.DoubleType()),
        T.StructField("client_bound", T.BooleanType()),
        T.StructField("reasons", T.ArrayType(T.StringType())),
        T.StructField("invalid_reasons", T.ArrayType(T.StringType())),
    ])),
])

#: provenance/phases/<label>.json: the host metrics summary of every host (hostmetrics.summarise)
PHASE = T.StructType([
    T.StructField("phase", T.StringType()),
    T.StructField("label", T.StringType()),
    T.StructField("hosts", T.MapType(T.StringType(), T.StructType([
        T.StructField("role", T.StringType()),
        T.StructField("samples", T.LongType()),
        T.StructField("foreign_cpu_mean_percent", T.DoubleType()),
        T.StructField("foreign_cpu_max_percent", T.DoubleType()),
        T.StructField("other_runs", T.ArrayType(T.StringType())),
        T.StructField("other_runs_cpu_mean_percent", T.DoubleType()),
    ]))),
])

PROVENANCE = T.StructType([
    T.StructField("implementation", T.StringType()),
    T.StructField("version", T.StringType()),
    T.StructField("durability", T.StructType([
        T.StructField("variant", T.StringType()),
        T.StructField("honoured", T.BooleanType()),
        T.StructField("note", T.StringType()),
        # a JSON object read into a string column keeps its JSON text
        T.StructField("settings", T.StringType()),
    ])),
])


class NoMeasuredData(Exception):
    """The run directory holds no measured interval at all."""


# -- file system helpers (local paths and any Hadoop file system) -------------------


def _is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


def _local_path(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


def _hadoop_path(spark: SparkSession, uri: str):
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return path, path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())


def glob_files(spark: SparkSession, pattern: str) -> list[str]:
    """The files a glob matches (sorted URIs; empty when none)."""
    path, fs = _hadoop_path(spark, pattern)
    statuses = fs.globStatus(path)
    if statuses is None:
        return []
    return sorted(str(s.getPath().toString()) for s in statuses if s.isFile())


def write_text(spark: SparkSession, uri: str, text: str) -> None:
    """Write a small text file: plain Python for local paths, Hadoop FS otherwise."""
    if _is_local(uri):
        local = _local_path(uri)
        os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
        with open(local, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        return
    path, fs = _hadoop_path(spark, uri)
    out = fs.create(path, True)
    try:
        out.write(bytearray(text.encode("utf-8")))
    finally:
        out.close()


# -- reading -------------------------------------------------------------------------


def read_worker_records(spark: SparkSession, run_dir: str) -> DataFrame:
    """All worker records of the run, each with the file it came from."""
    pattern = f"{run_dir}/raw/*/*/*/*/*.jsonl"
    paths = glob_files(spark, pattern)
    if not paths:
        raise NoMeasuredData(f"no worker files match {pattern}")
    return (
        spark.read.schema(RECORD)
        .option("mode", "PERMISSIVE")  # a line cut short by a killed worker is skipped
        .json(paths)
        .withColumn("file", F.input_file_name())
    )


def read_provenance(spark: SparkSession, run_dir: str) -> DataFrame | None:
    """provenance/<broker>__<variant>.json as (broker, variant, provenance columns)."""
    paths = glob_files(spark, f"{run_dir}/provenance/*__*.json")
    if not paths:
        return None
    name = r"([^/]+?)__([^/]+)\.json$"
    return (
        spark.read.schema(PROVENANCE)
        .option("multiLine", True)
        .json(paths)
        .withColumn("file", F.input_file_name())
        .select(
            F.regexp_extract("file", name, 1).alias("broker"),
            F.regexp_extract("file", name, 2).alias("variant"),
            F.col("implementation").alias("broker_implementation"),
            F.col("version").alias("broker_version"),
            F.col("durability.honoured").alias("durability_honoured"),
            F.col("durability.note").alias("durability_note"),
            # compact the JSON text of the settings object onto one line
            F.regexp_replace(F.col("durability.settings"), r"\s*\n\s*", " ").alias("durability_settings"),
        )
    )


def phase_label(*cols: str) -> F.Column:
    """The phase label of pipeline.run_phase: safe_name(workload__driver__variant__measure)."""
    return F.regexp_replace(F.concat_ws("__", *[F.col(c) for c in cols], F.lit("measure")),
                            r"[^A-Za-z0-9._=-]", "_")


def _pct(col: str) -> F.Column:
    return F.format_number(F.col(col), 1)


def read_contention(spark: SparkSession, run_dir: str) -> DataFrame | None:
    """Contention reasons per measured phase: (label, contention array<string>), from
    provenance/phases/*.json (host metrics of every host during the phase); None when
    the run has no such files."""
    paths = glob_files(spark, f"{run_dir}/provenance/phases/*.json")
    if not paths:
        return None
    hosts = (
        spark.read.schema(PHASE).option("multiLine", True).json(paths)
        .filter((F.col("phase") == "measure") & F.col("hosts").isNotNull())
        .select("label", F.explode("hosts").alias("host", "h"))
    )
    other = F.when(
        F.size(F.coalesce(F.col("h.other_runs"), F.array().cast("array<string>"))) > 0,
        F.concat(F.lit("contended: another brokerbench run ("), F.concat_ws(", ", F.col("h.other_runs")),
                 F.lit(") on "), F.col("host"), F.lit(" during the phase (its processes: mean "),
                 F.coalesce(_pct("h.other_runs_cpu_mean_percent"), F.lit("?")), F.lit(" % CPU of all cores)")),
    )
    foreign = F.when(
        F.col("h.foreign_cpu_mean_percent") > FOREIGN_CPU_LIMIT_PERCENT,
        F.concat(F.lit("foreign load: mean "), _pct("h.foreign_cpu_mean_percent"),
                 F.lit(" % CPU (of all cores) of processes not of this run on "), F.col("host"),
                 F.lit(f" during the phase (limit {FOREIGN_CPU_LIMIT_PERCENT:g} %; max "),
                 F.coalesce(_pct("h.foreign_cpu_max_percent"), F.lit("?")), F.lit(" %)")),
    )
    return (
        hosts.select("label", F.array_compact(F.array(other, foreign)).alias("r"),
                     F.col("h.foreign_cpu_mean_percent").alias("f"))
        .groupBy("label")
        .agg(F.array_sort(F.array_distinct(F.flatten(F.collect_list("r")))).alias("contention"),
             F.max("f").alias("host_foreign_cpu_mean_percent"))
    )


# -- histogram merge -----------------------------------------------------------------


def _pct_col(index: int) -> str:
    return f"q{index}"


def histogram_parts(intervals: DataFrame, keys: Sequence[str]) -> tuple[DataFrame, DataFrame]:
    """The three histograms of every interval record, merged per ``keys`` x metric.

    Returns (scalars, buckets): scalars has sum, min, max, overflow and
    negative; buckets has one row per bucket key with its summed count ``n``.
    Coarser merges re-aggregate these two (adding counts is associative).
    """
    keys = list(keys)
    long = None
    for metric in METRICS:
        part = intervals.select(*keys, F.lit(metric).alias("metric"), F.col(metric).alias("h"))
        long = part if long is None else long.unionByName(part)
    group = keys + ["metric"]
    scalars = long.groupBy(*group).agg(
        F.sum("h.sum").alias("sum"),
        F.min("h.min").alias("min"),
        F.max("h.max").alias("max"),
        F.coalesce(F.sum("h.overflow"), F.lit(0)).alias("overflow"),
        F.coalesce(F.sum("h.negative"), F.lit(0)).alias("negative"),
    )
    buckets = (
        long.select(*group, F.col("h.buckets").alias("buckets"), F.col("h.counts").alias("counts"))
        .select(*group, F.explode(F.arrays_zip("buckets", "counts")).alias("b"))
        .select(*group, F.col("b.buckets").alias("bucket"), F.col("b.counts").alias("n"))
        .groupBy(*group, "bucket")
        .agg(F.sum("n").alias("n"))
    )
    return scalars, buckets


def merge_histograms(
    parts: tuple[DataFrame, DataFrame], keys: Sequence[str], percentiles: Sequence[float]
) -> DataFrame:
    """Merge histogram parts per ``keys`` and read percentiles from the merge.

    Returns one row per ``keys`` x metric with columns count, sum, min, max,
    overflow, negative and ``q<i>`` = value at ``percentiles[i]`` (µs). The
    value at percentile p is the smallest bucket key whose cumulative count
    reaches ceil(p/100 x count), capped at the exact maximum; 100 gives the
    exact maximum (HdrHistogram semantics, as brokerbench.histogram).
    """
    group = list(keys) + ["metric"]
    part_scalars, part_buckets = parts
    scalars = part_scalars.groupBy(*group).agg(
        F.sum("sum").alias("sum"),
        F.min("min").alias("min"),
        F.max("max").alias("max"),
        F.sum("overflow").alias("overflow"),
        F.sum("negative").alias("negative"),
    )
    buckets = part_buckets.groupBy(*group, "bucket").agg(F.sum("n").alias("n"))
    cumulative = Window.partitionBy(*group).orderBy("bucket").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    whole = Window.partitionBy(*group)
    ranked = buckets.withColumn("cum", F.sum("n").over(cumulative)).withColumn("total", F.sum("n").over(whole))

    pct_aggs = [F.first("total").alias("count")]
    for i, p in enumerate(percentiles):
        if p >= 100:
            continue  # the exact maximum, below
        rank = F.greatest(F.lit(1), F.ceil(F.lit(p / 100.0) * F.col("total")))
        pct_aggs.append(F.min(F.when(F.col("cum") >= rank, F.col("bucket"))).alias(_pct_col(i)))
    pcts = ranked.groupBy(*group).agg(*pct_aggs)

    merged = scalars.join(pcts, on=group, how="left").withColumn("count", F.coalesce("count", F.lit(0)))
    out = [*group, "count", "sum", "min", "max", "overflow", "negative"]
    for i, p in enumerate(percentiles):
        if p >= 100:
            merged = merged.withColumn(_pct_col(i), F.col("max"))
        else:
            # a bucket's key may exceed the exact maximum: never report more
            merged = merged.withColumn(_pct_col(i), F.least(F.col(_pct_col(i)), F.col("max")))
        out.append(_pct_col(i))
    return merged.select(*out)


def widen(stats: DataFrame, keys: Sequence[str], percentiles: Sequence[tuple[str, float]]) -> DataFrame:
    """One column per metric x statistic, in the metric's reporting unit."""
    wide = None
    for metric, (prefix, unit, divisor) in METRICS.items():
        m = stats.filter(F.col("metric") == metric)
        cols = [
            F.when(F.col("count") > 0, F.col("sum") / F.col("count") / divisor).alias(f"{prefix}_avg_{unit}"),
            (F.col("min") / divisor).alias(f"{prefix}_min_{unit}"),
        ]
        for i, (label, _) in enumerate(percentiles):
            cols.append((F.col(_pct_col(i)) / divisor).alias(f"{prefix}_{label}_{unit}"))
        cols += [
            (F.col("max") / divisor).alias(f"{prefix}_max_{unit}"),
            F.col("count").alias(f"{prefix}_count"),
            F.col("overflow").alias(f"{prefix}_overflow_count"),
            F.col("negative").alias(f"{prefix}_negative_count"),
        ]
        part = m.select(*keys, *cols)
        wide = part if wide is None else wide.join(part, on=list(keys), how="full_outer")
    return wide


# -- the aggregation -----------------------------------------------------------------


def aggregate(spark: SparkSession, run_dir: str, records: DataFrame | None = None) -> dict[str, Any]:
    """Compute summary, timeseries and OMB documents; returns collected rows."""
    if records is None:
        records = read_worker_records(spark, run_dir)

    meta = (
        records.filter(F.col("record") == "meta")
        .filter(F.col("phase") == "measure")
        .select(
            "file", *COMBO, "worker", "host", "interval_s", "lead_in_s", "target_rate_msg_s", "message_size_bytes",
            "topics", "partitions_per_topic", "producers", "consumers", "client_library",
            "client_library_version", "brokerbench_version", F.col("start_ns").alias("phase_start_ns"), "kind",
        )
        .cache()
    )
    no_strings = F.array().cast("array<string>")
    ends = records.filter(F.col("record") == "end").select(
        "file", F.col("status").alias("end_status"), F.col("error").alias("end_error"), "cpu_percent", "load_s",
        F.col("validity.client_bound").alias("client_bound"),
        F.col("validity.reasons").alias("validity_reasons"),
        # the worker's invalidating rules (delay, clock offset, client-bound); files of
        # workers that predate invalid_reasons: client_bound alone, with the worker's reasons
        F.coalesce(
            F.col("validity.invalid_reasons"),
            F.when(F.col("validity.client_bound"),
                   F.array(F.concat(F.lit("client-bound: "),
                                    F.concat_ws("; ", F.coalesce(F.col("validity.reasons"), no_strings))))),
            no_strings,
        ).alias("worker_invalid"),
    )
    intervals = (
        records.filter(F.col("record") == "interval")
        .select("file", "index", "start_ns", "end_ns", "sent", "acked", "send_errors", "received", "backlog",
                *METRICS.keys())
        .join(meta.select("file", *COMBO, "worker"), on="file", how="inner")
        .cache()
    )
    if intervals.limit(1).count() == 0:
        raise NoMeasuredData(f"no interval records of phase 'measure' under {run_dir}/raw")

    # -- per worker file: how it ended ------------------------------------------------
    files = meta.join(ends, on="file", how="left").withColumn(
        "problem",
        F.when(F.col("end_status").isNull(),
               F.concat(F.lit("worker "), F.col("worker"), F.lit(" has no end record")))
        .when(F.col("end_status") != "ok",
              F.concat(F.lit("worker "), F.col("worker"), F.lit(" ended with "), F.col("end_status"),
                       F.lit(": "), F.coalesce(F.col("end_error"), F.lit("no error message")))),
    )
    identity = files.groupBy(*COMBO).agg(
        F.countDistinct("worker").alias("workers"),
        F.concat_ws(",", F.array_sort(F.collect_set("client_library"))).alias("client_library"),
        F.concat_ws(",", F.array_sort(F.collect_set("client_library_version"))).alias("client_library_version"),
        F.concat_ws(",", F.array_sort(F.collect_set("brokerbench_version"))).alias("brokerbench_version"),
        F.concat_ws(",", F.array_sort(F.collect_set("host"))).alias("client_hosts"),
        F.sum("target_rate_msg_s").alias("target_rate_msg_s"),
        F.max("message_size_bytes").alias("message_size_bytes"),
        F.max("interval_s").alias("interval_s"),
        F.max("lead_in_s").alias("lead_in_s"),
        F.max("topics").alias("topics"),
        F.max("partitions_per_topic").alias("partitions_per_topic"),
        F.sum("producers").alias("producers"),
        F.sum("consumers").alias("consumers"),
        F.max("cpu_percent").alias("client_cpu_max_percent"),
        F.min("phase_start_ns").alias("phase_start_ns"),
        F.array_sort(F.collect_list("problem")).alias("problems"),  # collect_list drops nulls
        # validity from the workers' end records (null when no worker reported it)
        F.max(F.col("client_bound").cast("int")).cast("boolean").alias("client_bound"),
        F.concat_ws("; ", F.array_sort(F.array_distinct(F.flatten(F.collect_list(
            F.coalesce(F.col("validity_reasons"), F.array().cast("array<string>"))))))).alias("validity_reasons"),
        F.max("kind").alias("kind"),
        F.array_sort(F.array_distinct(F.flatten(F.collect_list(
            F.coalesce(F.col("worker_invalid"), no_strings))))).alias("worker_invalid_plain"),
        F.array_sort(F.flatten(F.collect_list(F.transform(
            F.coalesce(F.col("worker_invalid"), no_strings),
            lambda r: F.concat(F.lit("worker "), F.col("worker"), F.lit(": "), r))))).alias("worker_invalid_named"),
    ).withColumn(
        "partial",
        F.when(F.size("problems") > 0, F.concat(F.lit("partial: "), F.concat_ws("; ", "problems"))),
    ).withColumn(
        # one worker: its reasons as they are; several: each names its worker
        "worker_invalid", F.when(F.col("workers") > 1, F.col("worker_invalid_named"))
        .otherwise(F.col("worker_invalid_plain")),
    ).drop("problems", "worker_invalid_plain", "worker_invalid_named")

    # -- counters -------------------------------------------------------------------
    last_interval = Window.partitionBy("file").orderBy(F.col("index").desc())
    backlog_end = (
        intervals.withColumn("rn", F.row_number().over(last_interval))
        .filter(F.col("rn") == 1)
        .groupBy(*COMBO)
        .agg(F.sum("backlog").alias("backlog_end_msgs"))
    )
    # Rates are per second of load: the longest load_s of the phase's end records
    # (the seconds the producers ran) when every worker file has one, else the span
    # of the intervals in which messages were sent. The drain (the rest of the last
    # interval, or an interval of its own) counts its acks and receipts, but not its
    # time (it would understate the rate). A phase that sends nothing (consumer-only)
    # uses its whole span.
    loads = files.groupBy(*COMBO).agg(
        F.max("load_s").alias("load_max_s"),
        F.min(F.when(F.col("load_s") > 0, 1).otherwise(0)).alias("every_file_loaded"),
    )
    sending = F.col("sent") > 0
    counters = intervals.groupBy(*COMBO).agg(
        F.countDistinct("index").alias("intervals"),
        ((F.max(F.when(sending, F.col("end_ns"))) - F.min(F.when(sending, F.col("start_ns")))) / 1e9)
        .alias("sending_seconds"),
        ((F.max("end_ns") - F.min("start_ns")) / 1e9).alias("whole_seconds"),
        F.sum("sent").alias("messages_sent"),
        F.sum("acked").alias("messages_acked"),
        F.sum("received").alias("messages_received"),
        F.sum("send_errors").alias("send_errors"),
    ).join(backlog_end, on=COMBO, how="left").join(loads, on=COMBO, how="left").withColumn(
        "measured_seconds",
        F.when(F.col("sending_seconds").isNotNull() & (F.col("every_file_loaded") == 1), F.col("load_max_s"))
        .otherwise(F.coalesce(F.col("sending_seconds"), F.col("whole_seconds"))),
    ).drop("sending_seconds", "whole_seconds", "load_max_s", "every_file_loaded")

    def rate(col: str) -> F.Column:
        return F.when(F.col("measured_seconds") > 0, F.col(col) / F.col("measured_seconds"))

    # -- latency ----------------------------------------------------------------------
    quantile_pcts = sorted({p for _, p in STANDARD_PERCENTILES} | set(QUANTILE_MAP_PERCENTILES))
    interval_keys = COMBO + ["index"]
    scalars, buckets = histogram_parts(intervals, interval_keys)
    parts = (scalars.cache(), buckets.cache())
    combo_stats = merge_histograms(parts, COMBO, quantile_pcts).cache()
    standard_index = {p: quantile_pcts.index(p) for _, p in STANDARD_PERCENTILES}
    combo_std = combo_stats.select(
        *COMBO, "metric", "count", "sum", "min", "max", "overflow", "negative",
        *[F.col(_pct_col(standard_index[p])).alias(_pct_col(i)) for i, (_, p) in enumerate(STANDARD_PERCENTILES)],
    )
    latency = widen(combo_std, COMBO, STANDARD_PERCENTILES)

    provenance = read_provenance(spark, run_dir)
    summary = identity.join(counters, on=COMBO, how="left").join(latency, on=COMBO, how="left")
    if provenance is not None:
        summary = summary.join(provenance, on=["broker", "variant"], how="left")
    else:
        for name, dtype in (("broker_implementation", "string"), ("broker_version", "string"),
                            ("durability_honoured", "boolean"), ("durability_note", "string"),
                            ("durability_settings", "string")):
            summary = summary.withColumn(name, F.lit(None).cast(dtype))

    # -- validity: which rows may serve as a baseline (docs/results-format.md) ------------
    publish_rate = rate("messages_acked")
    below_target = F.when(
        F.col("kind").isin(*FIXED_RATE_KINDS) & (F.col("target_rate_msg_s") > 0) & publish_rate.isNotNull()
        & (publish_rate < F.lit(RATE_MIN_RATIO) * F.col("target_rate_msg_s")),
        F.concat(F.lit("publish rate "), F.format_number(publish_rate, 0), F.lit(" msg/s is "),
                 F.format_number(publish_rate / F.col("target_rate_msg_s") * 100, 1),
                 F.lit(" % of the target "), F.format_number(F.col("target_rate_msg_s"), 0),
                 F.lit(f" msg/s (minimum {RATE_MIN_RATIO * 100:g} % for a fixed-rate workload)")),
    )
    contention = read_contention(spark, run_dir)
    summary = summary.withColumn("label", phase_label("workload", "driver", "variant"))
    if contention is not None:
        summary = summary.join(contention, on="label", how="left")
    else:
        summary = (summary.withColumn("contention", F.lit(None).cast("array<string>"))
                   .withColumn("host_foreign_cpu_mean_percent", F.lit(None).cast("double")))
    invalid = F.concat(
        F.coalesce(F.col("worker_invalid"), no_strings),
        F.array_compact(F.array(below_target)),
        F.coalesce(F.col("contention"), no_strings),
    )
    summary = (
        summary.withColumn("invalid_reasons", F.when(F.size(invalid) > 0, F.concat_ws("; ", invalid)))
        .withColumn("status", F.when(F.col("partial").isNotNull() & F.col("invalid_reasons").isNotNull(),
                                     F.concat(F.col("partial"), F.lit(" | invalid: "), F.col("invalid_reasons")))
                    .when(F.col("partial").isNotNull(), F.col("partial"))
                    .when(F.col("invalid_reasons").isNotNull(),
                          F.concat(F.lit("invalid: "), F.col("invalid_reasons")))
                    .otherwise(F.lit("ok")))
    )

    summary = summary.select(
        "broker", "broker_implementation", "broker_version", "client_library", "client_library_version",
        "variant", "workload", "driver",
        "durability_honoured", "durability_note", "durability_settings",
        "brokerbench_version", "client_hosts",
        "message_size_bytes", "topics", "partitions_per_topic", "producers", "consumers",
        "target_rate_msg_s",
        rate("messages_acked").alias("publish_rate_msg_s"),
        rate("messages_sent").alias("send_rate_msg_s"),
        rate("messages_received").alias("consume_rate_msg_s"),
        rate("send_errors").alias("publish_error_rate_msg_s"),
        "measured_seconds", "interval_s", "lead_in_s", "workers", "intervals",
        "messages_sent", "messages_acked", "messages_received", "send_errors", "backlog_end_msgs",
        *[f"{prefix}_{stat}_{unit}"
          for prefix, unit, _ in METRICS.values()
          for stat in ["avg", "min", *[label for label, _ in STANDARD_PERCENTILES], "max"]],
        *[f"{prefix}_count" for prefix, _, _ in METRICS.values()],
        F.coalesce(F.col("e2e_latency_negative_count"), F.lit(0)).alias("e2e_negative_count"),
        sum((F.coalesce(F.col(f"{prefix}_overflow_count"), F.lit(0)) for prefix, _, _ in METRICS.values()),
            F.lit(0)).alias("latency_overflow_count"),
        "client_cpu_max_percent",
        "client_bound",
        F.when(F.col("validity_reasons") != "", F.col("validity_reasons")).alias("validity_reasons"),
        "kind",
        "host_foreign_cpu_mean_percent",
        "invalid_reasons",
        "status",
    ).orderBy("broker", "broker_implementation", "broker_version", "variant", "workload", "driver")

    # -- per interval -------------------------------------------------------------------
    interval_counters = intervals.groupBy(*interval_keys).agg(
        F.countDistinct("worker").alias("workers"),
        F.min("start_ns").alias("start_ns"),
        ((F.max("end_ns") - F.min("start_ns")) / 1e9).alias("interval_seconds"),
        F.sum("sent").alias("sent"),
        F.sum("acked").alias("acked"),
        F.sum("received").alias("received"),
        F.sum("send_errors").alias("send_errors"),
        F.sum("backlog").alias("backlog_msgs"),
    )
    interval_latency = widen(
        merge_histograms(parts, interval_keys, [p for _, p in STANDARD_PERCENTILES]),
        interval_keys, STANDARD_PERCENTILES,
    )

    def interval_rate(col: str) -> F.Column:
        return F.when(F.col("interval_seconds") > 0, F.col(col) / F.col("interval_seconds"))

    latency_cols = [
        f"{prefix}_{stat}_{unit}"
        for prefix, unit, _ in METRICS.values()
        for stat in ["avg", *[label for label, _ in STANDARD_PERCENTILES], "max"]
    ]
    timeseries = (
        # the phase starts with its earliest interval (workers share one schedule)
        interval_counters.withColumn("phase_start_ns", F.min("start_ns").over(Window.partitionBy(*COMBO)))
        .withColumn("phase_sent_max", F.max("sent").over(Window.partitionBy(*COMBO)))
        .join(interval_latency, on=interval_keys, how="left")
        .select(
            *COMBO,
            F.col("index").alias("interval_index"),
            ((F.col("start_ns") - F.col("phase_start_ns")) / 1e9).alias("interval_start_s"),
            "interval_seconds",
            # the short interval after the last send of a phase that sends: acks and
            # receipts of messages in flight, over a fraction of a second
            ((F.col("sent") == 0) & (F.col("phase_sent_max") > 0)).alias("drain_interval"),
            "workers",
            interval_rate("acked").alias("publish_rate_msg_s"),
            interval_rate("sent").alias("send_rate_msg_s"),
            interval_rate("received").alias("consume_rate_msg_s"),
            interval_rate("send_errors").alias("publish_error_rate_msg_s"),
            "backlog_msgs",
            *latency_cols,
        )
        .orderBy(*COMBO, "interval_index")
    )

    summary = summary.cache()
    return {
        "summary_df": summary,
        "summary": [r.asDict() for r in summary.collect()],
        "timeseries": [r.asDict() for r in timeseries.collect()],
        "quantiles": [r.asDict() for r in combo_stats.collect()],
        "quantile_pcts": quantile_pcts,
    }


# -- throughput sweep --------------------------------------------------------------------


#: as the package's tables.LOAD_SHARE
LOAD_SHARE = 0.01


def sweep_summary(records: DataFrame) -> list[dict[str, Any]]:
    """One row per workload x broker x driver x variant x sweep step (phase ``sweep``); [] when none.

    Latencies are merged exactly per step across workers and intervals;
    target rate = sum over workers of the step's target; achieved rates =
    counter / wall-clock span of the step's intervals; ``stable`` = every
    worker's end record calls the step stable (null when none says);
    ``reasons`` = the workers' distinct reasons.
    """
    sweep_meta = (records.filter((F.col("record") == "meta") & (F.col("phase") == "sweep"))
                  .select("file", *COMBO, "worker", "client_library", "client_library_version"))
    steps = (records.filter((F.col("record") == "interval") & F.col("step").isNotNull())
             .select("file", "index", "step", "step_target_rate_msg_s", "start_ns", "end_ns", "sent", "acked",
                     "received", "send_errors", *METRICS.keys())
             .join(sweep_meta, on="file", how="inner").cache())
    if steps.limit(1).count() == 0:
        return []
    keys = COMBO + ["step"]
    per_worker_target = steps.groupBy(*keys, "file").agg(F.max("step_target_rate_msg_s").alias("t"))
    target = per_worker_target.groupBy(*keys).agg(F.sum("t").alias("target_rate_msg_s"))
    # seconds of load: the span of the step's intervals that carried its load (at least LOAD_SHARE of its busiest
    # interval's sends); the intervals after its last send (a worker waiting for its consumers before the next
    # step, or one message that crossed the interval boundary) count their acknowledgements, not their time
    load = F.col("sent") >= F.greatest(F.lit(1), F.max("sent").over(Window.partitionBy(*keys)) * LOAD_SHARE)
    counters = steps.withColumn("load", load).groupBy(*keys).agg(
        F.concat_ws(",", F.array_sort(F.collect_set("client_library"))).alias("client_library"),
        F.concat_ws(",", F.array_sort(F.collect_set("client_library_version"))).alias("client_library_version"),
        F.countDistinct("worker").alias("workers"),
        F.countDistinct("index").alias("intervals"),
        F.coalesce(
            (F.max(F.when(F.col("load"), F.col("end_ns"))) - F.min(F.when(F.col("load"), F.col("start_ns")))) / 1e9,
            (F.max("end_ns") - F.min("start_ns")) / 1e9,
        ).alias("measured_seconds"),
        F.sum("sent").alias("messages_sent"),
        F.sum("acked").alias("messages_acked"),
        F.sum("received").alias("messages_received"),
        F.sum("send_errors").alias("send_errors"),
    )
    latency = widen(merge_histograms(histogram_parts(steps, keys), keys, [p for _, p in STANDARD_PERCENTILES]),
                    keys, STANDARD_PERCENTILES)
    verdicts = (records.filter((F.col("record") == "end") & F.col("sweep_steps").isNotNull())
                .select("file", "sweep_steps")
                .join(sweep_meta, on="file", how="inner")
                .select(*COMBO, F.explode("sweep_steps").alias("s"))
                .select(*COMBO, F.col("s.step").alias("step"), F.col("s.stable").alias("stable"),
                        F.col("s.reason").alias("reason"), F.col("s.publish_p99_bound_ms").alias("bound"))
                .groupBy(*keys).agg(
                    F.min(F.col("stable").cast("int")).cast("boolean").alias("stable"),
                    F.max("bound").alias("publish_p99_bound_ms"),
                    F.concat_ws("; ", F.array_sort(F.collect_set("reason"))).alias("reasons")))

    def rate(col: str) -> F.Column:
        return F.when(F.col("measured_seconds") > 0, F.col(col) / F.col("measured_seconds"))

    latency_cols = [f"{prefix}_{stat}_{unit}" for prefix, unit, _ in METRICS.values()
                    for stat in ["avg", "min", *[label for label, _ in STANDARD_PERCENTILES], "max"]]
    table = (counters.join(target, on=keys, how="left").join(latency, on=keys, how="left")
             .join(verdicts, on=keys, how="left")
             .select(*keys, "client_library", "client_library_version", "target_rate_msg_s",
                     rate("messages_acked").alias("publish_rate_msg_s"),
                     rate("messages_sent").alias("send_rate_msg_s"),
                     rate("messages_received").alias("consume_rate_msg_s"),
                     rate("send_errors").alias("publish_error_rate_msg_s"),
                     "measured_seconds", "workers", "intervals", "messages_sent", "messages_acked",
                     "messages_received", "send_errors", *latency_cols, "stable", "publish_p99_bound_ms",
                     F.when(F.col("reasons") != "", F.col("reasons")).alias("reasons"))
             .withColumn("highest_stable_rate_msg_s",
                         F.max(F.when(F.col("stable"), F.col("target_rate_msg_s"))).over(Window.partitionBy(*COMBO)))
             .orderBy(*keys))
    return [r.asDict() for r in table.collect()]


# -- OMB result documents ----------------------------------------------------------------

OMB_SUFFIXES = [("avg", "Avg"), ("p50", "50pct"), ("p75", "75pct"), ("p95", "95pct"), ("p99", "99pct"),
                ("p999", "999pct"), ("p9999", "9999pct"), ("max", "Max")]
OMB_METRICS = [("publish_latency", "ms", "publishLatency", "PublishLatency"),
               ("publish_delay", "us", "publishDelayLatency", "PublishDelayLatency"),
               ("e2e_latency", "ms", "endToEndLatency", "EndToEndLatency")]


def _clean(value: Any) -> Any:
    """JSON-safe value: NaN and infinities become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def omb_document(row: dict, series: list[dict], quantiles: list[dict], quantile_pcts: Sequence[float]) -> dict:
    """The OMB result JSON of one workload x driver x variant (units as OMB: ms, delay µs)."""
    topics = row["topics"] or 0
    doc: dict[str, Any] = {
        "workload": row["workload"],
        "driver": row["driver"],
        "broker": row["broker"],
        "variant": row["variant"],
        "brokerImplementation": row["broker_implementation"],
        "brokerVersion": row["broker_version"],
        "durabilityHonoured": row["durability_honoured"],
        "status": row["status"],
        "messageSize": row["message_size_bytes"],
        "topics": topics,
        "partitions": row["partitions_per_topic"],
        "producersPerTopic": (row["producers"] or 0) // topics if topics else 0,
        "consumersPerTopic": (row["consumers"] or 0) // topics if topics else 0,
        "targetRate": row["target_rate_msg_s"],
        "intervalSeconds": row["interval_s"],
        "publishRate": [_clean(s["publish_rate_msg_s"]) for s in series],
        "publishErrorRate": [_clean(s["publish_error_rate_msg_s"]) for s in series],
        "consumeRate": [_clean(s["consume_rate_msg_s"]) for s in series],
        "backlog": [s["backlog_msgs"] for s in series],
    }
    for prefix, unit, name, agg_name in OMB_METRICS:
        for stat, suffix in OMB_SUFFIXES:
            doc[f"{name}{suffix}"] = [_clean(s[f"{prefix}_{stat}_{unit}"]) for s in series]
        for stat, suffix in OMB_SUFFIXES:
            doc[f"aggregated{agg_name}{suffix}"] = _clean(row[f"{prefix}_{stat}_{unit}"])
    for metric, (prefix, unit, divisor) in METRICS.items():
        name = {"publish_latency": "PublishLatency", "e2e_latency": "EndToEndLatency",
                "publish_delay": "PublishDelayLatency"}[prefix]
        q = next((x for x in quantiles if x["metric"] == metric), None)
        values = {}
        if q is not None and q["count"]:
            for i, p in enumerate(quantile_pcts):
                v = q[_pct_col(i)]
                values[repr(float(p))] = None if v is None else v / divisor
        doc[f"aggregated{name}Quantiles"] = values
    return doc


# -- output ------------------------------------------------------------------------------


def _csv_text(rows: list[dict], columns: Sequence[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: ("" if row.get(c) is None else row.get(c)) for c in columns})
    return buf.getvalue()


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "-"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


TEXT_COLUMNS = [
    "workload", "broker", "variant", "target_rate_msg_s", "publish_rate_msg_s", "consume_rate_msg_s",
    "publish_latency_p50_ms", "publish_latency_p99_ms", "e2e_latency_avg_ms", "e2e_latency_p99_ms",
    "publish_delay_p99_us", "durability_honoured", "status",
]


def text_table(rows: Iterable[dict], columns: Sequence[str] = TEXT_COLUMNS) -> str:
    """A plain-text table (for task logs)."""
    body = [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(line[i]) for line in body]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(line, widths)) for line in body]
    return "\n".join(lines)


def write_outputs(spark: SparkSession, run_dir: str, result: dict) -> str:
    out = f"{run_dir.rstrip('/')}/summary"
    summary_df: DataFrame = result["summary_df"]
    summary_df.coalesce(1).write.mode("overwrite").parquet(f"{out}/summary.parquet")
    write_text(spark, f"{out}/summary.csv", _csv_text(result["summary"], summary_df.columns))

    ts_rows = result["timeseries"]
    ts_columns = list(ts_rows[0].keys()) if ts_rows else []
    write_text(spark, f"{out}/timeseries.csv", _csv_text(ts_rows, ts_columns))

    for row in result["summary"]:
        key = tuple(row[k] for k in COMBO)
        series = [s for s in ts_rows if tuple(s[k] for k in COMBO) == key]
        quantiles = [q for q in result["quantiles"] if tuple(q[k] for k in COMBO) == key]
        doc = omb_document(row, series, quantiles, result["quantile_pcts"])
        name = f"{row['workload']}__{row['driver']}__{row['variant']}.json"
        write_text(spark, f"{out}/omb/{name}", json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return out


def build_session(app_name: str = "brokerbench-aggregate") -> SparkSession:
    return (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.showConsoleProgress", "false")
        # many runs in one application: keep the driver's query/job history small
        .config("spark.sql.ui.retainedExecutions", "20")
        .config("spark.ui.retainedJobs", "50")
        .config("spark.ui.retainedStages", "50")
        .getOrCreate()
    )


def aggregate_run(spark: SparkSession, run_dir: str) -> int:
    """Aggregate one run directory; 0 = written, 2 = nothing measured."""
    sweep: list[dict[str, Any]] = []
    try:
        records = read_worker_records(spark, run_dir)
        sweep = sweep_summary(records)
        if sweep:
            write_text(spark, f"{run_dir}/summary/sweep.csv", _csv_text(sweep, list(sweep[0].keys())))
            print(f"brokerbench aggregate: {len(sweep)} sweep step rows -> {run_dir}/summary/sweep.csv")
        result = aggregate(spark, run_dir, records)
    except NoMeasuredData as exc:
        if sweep:
            print(f"brokerbench aggregate: no measured phase (sweep only): {exc}")
            return 0
        print(f"brokerbench aggregate: no measured data: {exc}", file=sys.stderr)
        return 2
    out = write_outputs(spark, run_dir, result)
    print(f"brokerbench aggregate: {len(result['summary'])} summary rows, "
          f"{len(result['timeseries'])} interval rows -> {out}")
    print(text_table(result["summary"]))
    partial = [r for r in result["summary"] if r["status"] != "ok"]
    for r in partial:
        print(f"WARNING {r['workload']} {r['broker']} {r['variant']}: {r['status']}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Aggregate brokerbench runs (merge histograms, write summary).")
    parser.add_argument("--run-dir", required=True, action="append",
                        help="a run directory: local path, file://, s3a:// or s3:// URI (repeatable: several "
                             "runs in one Spark application, one after the other)")
    args = parser.parse_args(argv)

    spark = build_session()
    spark.sparkContext.setLogLevel("WARN")
    try:
        rc = 0
        for run_dir in args.run_dir:
            rc = max(rc, aggregate_run(spark, run_dir.rstrip("/")))
            spark.catalog.clearCache()
        return rc
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
