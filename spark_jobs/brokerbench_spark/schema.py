"""The worker file format (docs/results-format.md) as Spark schemas, and the summary's constants."""

from __future__ import annotations

from pyspark.sql import types as T

#: identity of one summary row
COMBO = ["workload", "broker", "driver", "variant"]

#: histogram field in the worker file -> (column prefix, unit suffix, divisor from µs)
METRICS = {
    "publish_latency_us": ("publish_latency", "ms", 1000.0),
    "e2e_latency_us": ("e2e_latency", "ms", 1000.0),
    "publish_delay_us": ("publish_delay", "us", 1.0),
}
#: metric number (the merge's integer key) -> histogram field
METRIC_NAMES = list(METRICS)

#: percentiles of the summary columns and OMB per-interval lists: (column label, percentile)
STANDARD_PERCENTILES = [("p50", 50.0), ("p75", 75.0), ("p95", 95.0), ("p99", 99.0), ("p999", 99.9), ("p9999", 99.99)]

#: percentiles of the OMB quantile maps (100 is the exact maximum)
QUANTILE_MAP_PERCENTILES = [
    1.0, 5.0, 10.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0, 70.0, 75.0, 80.0, 90.0, 95.0, 97.5,
    99.0, 99.5, 99.9, 99.95, 99.99, 99.999, 100.0,
]
#: every percentile the merge reads, ascending (the summary's and the quantile maps')
ALL_PERCENTILES = sorted({p for _, p in STANDARD_PERCENTILES} | set(QUANTILE_MAP_PERCENTILES))

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

#: a histogram without its bucket arrays: what every table but the bucket merge reads
HISTOGRAM_SCALARS = T.StructType([
    T.StructField("count", T.LongType()),
    T.StructField("sum", T.LongType()),
    T.StructField("min", T.LongType()),
    T.StructField("max", T.LongType()),
    T.StructField("overflow", T.LongType()),
    T.StructField("negative", T.LongType()),
    T.StructField("max_value", T.LongType()),
])


def _record(histogram: T.StructType) -> T.StructType:
    """Union of the fields of the three record types; unknown fields are ignored."""
    return T.StructType([
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
        T.StructField("publish_latency_us", histogram),
        T.StructField("publish_delay_us", histogram),
        T.StructField("e2e_latency_us", histogram),
        # interval of a throughput sweep (phase "sweep")
        T.StructField("step", T.LongType()),
        T.StructField("step_target_rate_msg_s", T.DoubleType()),
        # end
        T.StructField("status", T.StringType()),
        T.StructField("error", T.StringType()),
        T.StructField("cpu_percent", T.DoubleType()),
        #: seconds the producers ran (the rates' denominator)
        T.StructField("load_s", T.DoubleType()),
        T.StructField("sweep_steps", T.ArrayType(T.StructType([
            T.StructField("step", T.LongType()),
            T.StructField("target_rate_msg_s", T.DoubleType()),
            T.StructField("achieved_rate_msg_s", T.DoubleType()),
            T.StructField("stable", T.BooleanType()),
            T.StructField("reason", T.StringType()),
            #: the workload's publish latency p99 bound of a stable step, ms (absent in older workers' files)
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


#: every field but the bucket arrays: one small row per line (meta, interval, end)
RECORD_SCALARS = _record(HISTOGRAM_SCALARS)
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
