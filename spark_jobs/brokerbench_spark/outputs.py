"""The files of a run's summary directory (``--out-dir``, by default ``<run-dir>/summary``):
summary.parquet, summary.csv, timeseries.csv, sweep.csv, omb/*.json, all written by the
driver from the collected rows into a local directory (no executor writes anything), and
the plain-text table of the task log."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import uuid
from typing import Any, Iterable, Sequence

from pyspark.sql import types as T

from .omb import OMB_INTERVAL_S
from .phase_tables import pct_col
from .schema import COMBO, METRICS

#: the key under which Spark keeps its schema in a Parquet footer
SPARK_SCHEMA_KEY = "org.apache.spark.sql.parquet.row.metadata"

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


def _number(value: Any) -> Any:
    """A value OMB's readers can compare and plot: a missing value (no sample of the metric,
    no time to divide by) becomes 0, as OMB writes an empty HdrHistogram's values."""
    value = _clean(value)
    return 0 if value is None else value


def omb_label(row: dict) -> str:
    """The ``driver`` of an OMB document, the series label of OMB's charts: unique per broker,
    variant and driver (fsync on and off of one driver are two series). Broker and variant
    come first: the charts' legend cuts long labels short (about 24 characters with 6 series;
    the full label is the point's tooltip)."""
    return f"{row['broker']} {row['variant']} ({row['driver']})"


def omb_document(row: dict, series: list[dict], quantiles: list[dict], quantile_pcts: Sequence[float]) -> dict:
    """The OMB result JSON of one workload x driver x variant (units as OMB: ms, delay µs).

    A valid io.openmessaging.benchmark.TestResult that OMB's bin/create_charts.py draws as is:
    ``driver`` is :func:`omb_label`; ``series``: the combination's 10 s windows
    (phase_tables._omb_rows, omb.py), one entry of every per-interval list each, so entry n
    is at 10 x n s as the script plots it; no null anywhere (:func:`_number`; the
    ``...Count`` lists say where a 0 means "no sample").

    ``quantiles``: the combination's whole-phase merges, one dict per metric (``metric`` = the
    histogram field, ``count``, ``q<i>`` = value at ``quantile_pcts[i]`` in µs)."""
    topics = row["topics"] or 0
    doc: dict[str, Any] = {
        "workload": row["workload"],
        "driver": omb_label(row),
        "driverId": row["driver"],
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
        "intervalSeconds": OMB_INTERVAL_S,
        "workerIntervalSeconds": row["interval_s"],
        "intervalSecondsMeasured": [_number(s["window_seconds"]) for s in series],
        "publishRate": [_number(s["publish_rate_msg_s"]) for s in series],
        "publishErrorRate": [_number(s["publish_error_rate_msg_s"]) for s in series],
        "consumeRate": [_number(s["consume_rate_msg_s"]) for s in series],
        "backlog": [_number(s["backlog_msgs"]) for s in series],
    }
    for prefix, unit, name, agg_name in OMB_METRICS:
        for stat, suffix in OMB_SUFFIXES:
            doc[f"{name}{suffix}"] = [_number(s[f"{prefix}_{stat}_{unit}"]) for s in series]
        doc[f"{name}Count"] = [s[f"{prefix}_count"] or 0 for s in series]
        for stat, suffix in OMB_SUFFIXES:
            doc[f"aggregated{agg_name}{suffix}"] = _number(row[f"{prefix}_{stat}_{unit}"])
        doc[f"aggregated{agg_name}Count"] = row[f"{prefix}_count"] or 0
    for metric, (prefix, unit, divisor) in METRICS.items():
        name = {"publish_latency": "PublishLatency", "e2e_latency": "EndToEndLatency",
                "publish_delay": "PublishDelayLatency"}[prefix]
        q = next((x for x in quantiles if x["metric"] == metric), None)
        values = {}
        if q is not None and q["count"]:
            for i, p in enumerate(quantile_pcts):
                v = q[pct_col(i)]
                if v is not None:
                    values[repr(float(p))] = v / divisor
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


# -- files ------------------------------------------------------------------------------


def write_text(path: str, text: str) -> None:
    """A small text file on the driver's disk (directories made as needed)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)


def arrow_type(dtype: T.DataType):
    import pyarrow as pa  # pyarrow: only where parquet is read or written

    simple = {T.StringType: pa.string(), T.LongType: pa.int64(), T.IntegerType: pa.int32(),
              T.DoubleType: pa.float64(), T.FloatType: pa.float32(), T.BooleanType: pa.bool_(),
              T.ShortType: pa.int16(), T.ByteType: pa.int8(), T.DateType: pa.date32(),
              T.TimestampType: pa.timestamp("us", tz="UTC")}
    for cls, arrow in simple.items():
        if isinstance(dtype, cls):
            return arrow
    if isinstance(dtype, T.ArrayType):
        return pa.list_(arrow_type(dtype.elementType))
    if isinstance(dtype, T.StructType):
        return pa.struct([pa.field(f.name, arrow_type(f.dataType), f.nullable) for f in dtype.fields])
    raise TypeError(f"no Arrow type for {dtype}")


def write_parquet_dataset(out_dir: str, rows: list[dict], schema: T.StructType, spark_version: str) -> str:
    """``out_dir`` as Spark writes a one-file Parquet dataset (``part-00000-<uuid>-c000.snappy.parquet``
    and ``_SUCCESS``), written with pyarrow from the collected rows: the columns of ``schema``
    in order, its types and nullability, and Spark's schema in the footer (so Spark reads the
    file back with the same schema). An earlier ``out_dir`` is replaced."""

    import pyarrow as pa  # pyarrow: only where parquet is read or written
    import pyarrow.parquet as pq  # pyarrow: only where parquet is read or written

    arrow = pa.schema([pa.field(f.name, arrow_type(f.dataType), f.nullable) for f in schema.fields],
                      metadata={"org.apache.spark.version": spark_version, SPARK_SCHEMA_KEY: schema.json()})
    table = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema.fields} for r in rows], schema=arrow)
    tmp = f"{out_dir.rstrip('/')}._tmp_{uuid.uuid4().hex}"
    os.makedirs(tmp)
    try:
        pq.write_table(table, os.path.join(tmp, f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"),
                       compression="snappy")
        open(os.path.join(tmp, "_SUCCESS"), "w").close()
        shutil.rmtree(out_dir, ignore_errors=True)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def write_run_outputs(out: str, summary: list[dict], summary_schema: T.StructType,
                      timeseries: list[dict], timeseries_columns: Sequence[str], quantiles: list[dict],
                      quantile_pcts: Sequence[float], spark_version: str, omb_series: list[dict]) -> str:
    """summary.parquet, summary.csv, timeseries.csv and omb/*.json of one run (rows without
    ``run``; ``omb_series``: phase_tables._omb_rows) into the local directory ``out``."""
    out = out.rstrip("/")
    summary_columns = [f.name for f in summary_schema.fields]
    write_parquet_dataset(f"{out}/summary.parquet", summary, summary_schema, spark_version)
    write_text(f"{out}/summary.csv", csv_text(summary, summary_columns))
    write_text(f"{out}/timeseries.csv", csv_text(timeseries, timeseries_columns))
    for row in summary:
        key = tuple(row[k] for k in COMBO)
        series = [s for s in omb_series if tuple(s[k] for k in COMBO) == key]
        combo_quantiles = [q for q in quantiles if tuple(q[k] for k in COMBO) == key]
        doc = omb_document(row, series, combo_quantiles, quantile_pcts)
        name = f"{row['workload']}__{row['driver']}__{row['variant']}.json"
        write_text(f"{out}/omb/{name}", json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return out
