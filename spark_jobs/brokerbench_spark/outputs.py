"""The files of ``<run-dir>/summary/``: summary.parquet (all runs in one Spark write),
summary.csv, timeseries.csv, sweep.csv, omb/*.json (from the collected rows), and the
plain-text table of the task log."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import uuid
from typing import Any, Iterable, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .merge import pct_col
from .reading import hadoop_path, write_text
from .schema import COMBO, METRICS

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
    """The OMB result JSON of one workload x driver x variant (units as OMB: ms, delay µs).

    ``quantiles``: the combination's whole-phase merges, one dict per metric (``metric`` = the
    histogram field, ``count``, ``q<i>`` = value at ``quantile_pcts[i]`` in µs)."""
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
                v = q[pct_col(i)]
                values[repr(float(p))] = None if v is None else v / divisor
        doc[f"aggregated{name}Quantiles"] = values
    return doc


# -- text -------------------------------------------------------------------------------


def csv_text(rows: list[dict], columns: Sequence[str]) -> str:
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


# -- summary.parquet of every run: one write, then each run's file moved into place -------


def write_summary_parquet(spark: SparkSession, summary: DataFrame, run_dirs: dict[int, str]) -> None:
    """``<run-dir>/summary/summary.parquet`` (a Spark parquet dataset: one part file and
    ``_SUCCESS``) of every run in ``run_dirs``, in one Spark job per file system.

    The rows of all runs are written once, partitioned by ``run``, to a staging directory
    beside the first run's summary (same file system), then each run's part file is moved
    to its run (replacing an earlier summary.parquet), as ``mode("overwrite")`` per run
    would leave it. The part file holds the summary's columns without ``run``, in order.
    """
    by_fs: dict[str, list[int]] = {}
    for run, run_dir in sorted(run_dirs.items()):
        _, fs = hadoop_path(spark, run_dir)
        by_fs.setdefault(str(fs.getUri()), []).append(run)
    for runs in by_fs.values():
        staging = f"{run_dirs[runs[0]]}/summary/_summary_staging_{uuid.uuid4().hex}"
        (summary.filter(F.col("run").isin(runs))
         .coalesce(1).sortWithinPartitions("run", *COMBO)
         .write.mode("overwrite").partitionBy("run").parquet(staging))
        staging_path, fs = hadoop_path(spark, staging)
        jvm = spark.sparkContext._jvm
        try:
            for run in runs:
                target, _ = hadoop_path(spark, f"{run_dirs[run]}/summary/summary.parquet")
                fs.delete(target, True)
                fs.mkdirs(target)
                part = jvm.org.apache.hadoop.fs.Path(staging_path, f"run={run}")
                for status in fs.listStatus(part):  # a checksum file (local FS) moves with its file
                    src = status.getPath()
                    # part-00000-<uuid>.c000.snappy.parquet (partitioned write) -> the unpartitioned name
                    name = re.sub(r"^(part-\d+-[0-9a-f-]+)\.(c\d+)", r"\1-\2", src.getName())
                    if not fs.rename(src, jvm.org.apache.hadoop.fs.Path(target, name)):
                        raise RuntimeError(f"could not move {src} to {target}")
                fs.create(jvm.org.apache.hadoop.fs.Path(target, "_SUCCESS"), True).close()
        finally:
            fs.delete(staging_path, True)


def write_run_outputs(spark: SparkSession, run_dir: str, summary: list[dict], summary_columns: Sequence[str],
                      timeseries: list[dict], timeseries_columns: Sequence[str], quantiles: list[dict],
                      quantile_pcts: Sequence[float]) -> str:
    """summary.csv, timeseries.csv and omb/*.json of one run (rows without ``run``)."""
    out = f"{run_dir.rstrip('/')}/summary"
    write_text(spark, f"{out}/summary.csv", csv_text(summary, summary_columns))
    write_text(spark, f"{out}/timeseries.csv", csv_text(timeseries, timeseries_columns))
    for row in summary:
        key = tuple(row[k] for k in COMBO)
        series = [s for s in timeseries if tuple(s[k] for k in COMBO) == key]
        combo_quantiles = [q for q in quantiles if tuple(q[k] for k in COMBO) == key]
        doc = omb_document(row, series, combo_quantiles, quantile_pcts)
        name = f"{row['workload']}__{row['driver']}__{row['variant']}.json"
        write_text(spark, f"{out}/omb/{name}", json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return out
