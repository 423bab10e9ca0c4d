"""The summary, time series and sweep tables of every run of the invocation, from the
records' scalars and the merged histograms (merge.py). Each table carries ``run``."""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .merge import widen
from .reading import phase_label
from .schema import COMBO, FIXED_RATE_KINDS, METRICS, RATE_MIN_RATIO, STANDARD_PERCENTILES

KEYS = ["run", *COMBO]
#: a sweep step's interval carries its load when it sent at least this share of the step's busiest interval
LOAD_SHARE = 0.01


def _measured_meta(scalars: DataFrame) -> DataFrame:
    return (
        scalars.filter(F.col("record") == "meta")
        .filter(F.col("phase") == "measure")
        .select(
            "run", "file", *COMBO, "worker", "host", "interval_s", "target_rate_msg_s", "message_size_bytes",
            "topics", "partitions_per_topic", "producers", "consumers", "client_library",
            "client_library_version", "brokerbench_version", F.col("start_ns").alias("phase_start_ns"), "kind",
        )
    )


def measured_intervals(scalars: DataFrame) -> DataFrame:
    """Interval records of the measured phase with their file's identity (one row per record and meta record)."""
    meta = _measured_meta(scalars)
    return (
        scalars.filter(F.col("record") == "interval")
        .select("run", "file", "index", "start_ns", "end_ns", "sent", "acked", "send_errors", "received", "backlog")
        .join(meta.select("run", "file", *COMBO, "worker"), on=["run", "file"], how="inner")
    )


def _with_keys(stats: DataFrame, groups: DataFrame, level: int, sweep: bool) -> DataFrame:
    return (stats.filter((F.col("level") == level))
            .join(F.broadcast(groups.filter(F.col("sweep") == sweep)), on="gid", how="inner"))


def summary_table(scalars: DataFrame, stats: DataFrame, groups: DataFrame,
                  provenance: DataFrame | None, contention: DataFrame | None) -> DataFrame:
    """One row per run x workload x broker x driver x variant, sorted (docs/aggregation-and-report.md)."""
    identity = _identity(_measured_meta(scalars), _worker_ends(scalars))
    counters = _counters(measured_intervals(scalars))
    latency = widen(_with_keys(stats, groups, 1, False), KEYS, STANDARD_PERCENTILES)
    summary = identity.join(counters, on=KEYS, how="left").join(latency, on=KEYS, how="left")
    summary = _with_validity(_with_provenance(summary, provenance), contention)
    return summary.select(*_summary_columns()).orderBy("run", *COMBO)


def _no_strings() -> F.Column:
    """An empty array of strings (a column default); a function, as a column needs a running Spark."""
    return F.array().cast("array<string>")


def _rate(col: str) -> F.Column:
    """Per second of load (see _counters)."""
    return F.when(F.col("measured_seconds") > 0, F.col(col) / F.col("measured_seconds"))


def _worker_ends(scalars: DataFrame) -> DataFrame:
    """Per worker file: how it ended, and its validity as the worker judged it."""
    no_strings = _no_strings()
    return scalars.filter(F.col("record") == "end").select(
        "run", "file", F.col("status").alias("end_status"), F.col("error").alias("end_error"), "cpu_percent",
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


def _identity(meta: DataFrame, ends: DataFrame) -> DataFrame:
    """Per row: what ran (libraries, hosts, sizes, clients) and each worker file's problem or invalid reasons."""
    no_strings = _no_strings()
    files = meta.join(ends, on=["run", "file"], how="left").withColumn(
        "problem",
        F.when(F.col("end_status").isNull(),
               F.concat(F.lit("worker "), F.col("worker"), F.lit(" has no end record")))
        .when(F.col("end_status") != "ok",
              F.concat(F.lit("worker "), F.col("worker"), F.lit(" ended with "), F.col("end_status"),
                       F.lit(": "), F.coalesce(F.col("end_error"), F.lit("no error message")))),
    )
    return files.groupBy(*KEYS).agg(
        F.countDistinct("worker").alias("workers"),
        F.concat_ws(",", F.array_sort(F.collect_set("client_library"))).alias("client_library"),
        F.concat_ws(",", F.array_sort(F.collect_set("client_library_version"))).alias("client_library_version"),
        F.concat_ws(",", F.array_sort(F.collect_set("brokerbench_version"))).alias("brokerbench_version"),
        F.concat_ws(",", F.array_sort(F.collect_set("host"))).alias("client_hosts"),
        F.sum("target_rate_msg_s").alias("target_rate_msg_s"),
        F.max("message_size_bytes").alias("message_size_bytes"),
        F.max("interval_s").alias("interval_s"),
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


def _counters(intervals: DataFrame) -> DataFrame:
    """Messages sent, acknowledged, received, errors, the backlog at the end, and the seconds of load."""
    last_interval = Window.partitionBy("run", "file").orderBy(F.col("index").desc())
    backlog_end = (
        intervals.withColumn("rn", F.row_number().over(last_interval))
        .filter(F.col("rn") == 1)
        .groupBy(*KEYS)
        .agg(F.sum("backlog").alias("backlog_end_msgs"))
    )
    # Rates are per second of load: the span of the intervals in which messages
    # were sent. The short drain interval after the last send still counts its
    # acks and receipts, but not its time (it would understate the rate). A
    # phase that sends nothing (consumer-only) uses its whole span.
    sending = F.col("sent") > 0
    return intervals.groupBy(*KEYS).agg(
        F.countDistinct("index").alias("intervals"),
        F.coalesce(
            (F.max(F.when(sending, F.col("end_ns"))) - F.min(F.when(sending, F.col("start_ns")))) / 1e9,
            (F.max("end_ns") - F.min("start_ns")) / 1e9,
        ).alias("measured_seconds"),
        F.sum("sent").alias("messages_sent"),
        F.sum("acked").alias("messages_acked"),
        F.sum("received").alias("messages_received"),
        F.sum("send_errors").alias("send_errors"),
    ).join(backlog_end, on=KEYS, how="left")


def _with_provenance(summary: DataFrame, provenance: DataFrame | None) -> DataFrame:
    """The broker implementation, version and durability of each row (nulls without a provenance)."""
    if provenance is not None:
        summary = summary.join(provenance, on=["run", "broker", "variant"], how="left")
    else:
        for name, dtype in (("broker_implementation", "string"), ("broker_version", "string"),
                            ("durability_honoured", "boolean"), ("durability_note", "string"),
                            ("durability_settings", "string")):
            summary = summary.withColumn(name, F.lit(None).cast(dtype))
    return summary


def _with_validity(summary: DataFrame, contention: DataFrame | None) -> DataFrame:
    """Which rows may serve as a baseline (docs/results-format.md): invalid_reasons and status."""
    no_strings = _no_strings()
    publish_rate = _rate("messages_acked")
    below_target = F.when(
        F.col("kind").isin(*FIXED_RATE_KINDS) & (F.col("target_rate_msg_s") > 0) & publish_rate.isNotNull()
        & (publish_rate < F.lit(RATE_MIN_RATIO) * F.col("target_rate_msg_s")),
        F.concat(F.lit("publish rate "), F.format_number(publish_rate, 0), F.lit(" msg/s is "),
                 F.format_number(publish_rate / F.col("target_rate_msg_s") * 100, 1),
                 F.lit(" % of the target "), F.format_number(F.col("target_rate_msg_s"), 0),
                 F.lit(f" msg/s (minimum {RATE_MIN_RATIO * 100:g} % for a fixed-rate workload)")),
    )
    summary = summary.withColumn("label", phase_label("workload", "driver", "variant"))
    if contention is not None:
        summary = summary.join(contention, on=["run", "label"], how="left")
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
    return summary


def _summary_columns() -> list[str | F.Column]:
    """The summary's columns, in order."""
    return [
        "run",
        *COMBO,
        "broker_implementation", "broker_version",
        "durability_honoured", "durability_note", "durability_settings",
        "client_library", "client_library_version", "brokerbench_version", "client_hosts",
        "message_size_bytes", "topics", "partitions_per_topic", "producers", "consumers",
        "target_rate_msg_s",
        _rate("messages_acked").alias("publish_rate_msg_s"),
        _rate("messages_sent").alias("send_rate_msg_s"),
        _rate("messages_received").alias("consume_rate_msg_s"),
        _rate("send_errors").alias("publish_error_rate_msg_s"),
        "measured_seconds", "interval_s", "workers", "intervals",
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
    ]


def timeseries_table(scalars: DataFrame, stats: DataFrame, groups: DataFrame) -> DataFrame:
    """One row per run x workload x broker x driver x variant x interval index, sorted."""
    interval_keys = KEYS + ["index"]
    interval_counters = measured_intervals(scalars).groupBy(*interval_keys).agg(
        F.countDistinct("worker").alias("workers"),
        F.min("start_ns").alias("start_ns"),
        ((F.max("end_ns") - F.min("start_ns")) / 1e9).alias("interval_seconds"),
        F.sum("sent").alias("sent"),
        F.sum("acked").alias("acked"),
        F.sum("received").alias("received"),
        F.sum("send_errors").alias("send_errors"),
        F.sum("backlog").alias("backlog_msgs"),
    )
    interval_latency = widen(_with_keys(stats, groups, 0, False), interval_keys, STANDARD_PERCENTILES)

    def interval_rate(col: str) -> F.Column:
        return F.when(F.col("interval_seconds") > 0, F.col(col) / F.col("interval_seconds"))

    latency_cols = [
        f"{prefix}_{stat}_{unit}"
        for prefix, unit, _ in METRICS.values()
        for stat in ["avg", *[label for label, _ in STANDARD_PERCENTILES], "max"]
    ]
    phase = Window.partitionBy(*KEYS)
    return (
        # the phase starts with its earliest interval (workers share one schedule)
        interval_counters.withColumn("phase_start_ns", F.min("start_ns").over(phase))
        .withColumn("phase_sent_max", F.max("sent").over(phase))
        .join(interval_latency, on=interval_keys, how="left")
        .select(
            "run",
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
        .orderBy("run", *COMBO, "interval_index")
    )


def omb_series_table(scalars: DataFrame, stats: DataFrame, groups: DataFrame, windows: DataFrame) -> DataFrame:
    """One row per run x workload x broker x driver x variant x OMB window (10 s, omb.py), sorted:
    the per-interval lists of the OMB documents.

    Counters are summed over the window's intervals and workers; rates are per second of the
    window's timed intervals (the tail after the last full sending interval joins the last
    window; its time counts only when it sent something, as the summary's seconds of load);
    ``backlog_msgs`` is the backlog after the window's last interval; latencies come
    from the level-2 merged histograms (``<prefix>_count`` = their sample count, 0 when the
    window holds no sample of that metric).
    ``windows``: merge.window_ids."""
    window_keys = KEYS + ["window"]
    by_combo = (windows.join(F.broadcast(groups.filter(~F.col("sweep"))), on="gid", how="inner")
                .select(*KEYS, "index", "window", "timed"))
    intervals = measured_intervals(scalars).join(by_combo, on=[*KEYS, "index"], how="inner")
    timed = F.col("timed")
    last_index = Window.partitionBy(*window_keys).orderBy(F.col("index").desc())
    backlog = (intervals.groupBy(*window_keys, "index").agg(F.sum("backlog").alias("backlog_msgs"))
               .withColumn("rn", F.row_number().over(last_index)).filter(F.col("rn") == 1)
               .drop("rn", "index"))
    counters = intervals.groupBy(*window_keys).agg(
        F.countDistinct("index").alias("intervals"),
        ((F.max(F.when(timed, F.col("end_ns"))) - F.min(F.when(timed, F.col("start_ns")))) / 1e9)
        .alias("window_seconds"),
        F.sum("sent").alias("sent"),
        F.sum("acked").alias("acked"),
        F.sum("received").alias("received"),
        F.sum("send_errors").alias("send_errors"),
    )
    latency = widen(_with_keys(stats, groups, 2, False), KEYS + ["index"], STANDARD_PERCENTILES) \
        .withColumnRenamed("index", "window")

    def window_rate(col: str) -> F.Column:
        return F.when(F.col("window_seconds") > 0, F.col(col) / F.col("window_seconds"))

    latency_cols = [
        f"{prefix}_{stat}_{unit}"
        for prefix, unit, _ in METRICS.values()
        for stat in ["avg", *[label for label, _ in STANDARD_PERCENTILES], "max"]
    ]
    return (
        counters.join(backlog, on=window_keys, how="left").join(latency, on=window_keys, how="left")
        .select(
            *KEYS, "window", "intervals", "window_seconds",
            window_rate("acked").alias("publish_rate_msg_s"),
            window_rate("received").alias("consume_rate_msg_s"),
            window_rate("send_errors").alias("publish_error_rate_msg_s"),
            "backlog_msgs",
            *latency_cols,
            *[F.coalesce(F.col(f"{prefix}_count"), F.lit(0)).alias(f"{prefix}_count")
              for prefix, _, _ in METRICS.values()],
        )
        .orderBy(*KEYS, "window")
    )


def quantiles_table(stats: DataFrame, groups: DataFrame) -> DataFrame:
    """The whole phase's merged histograms: run, COMBO, metric (number), count and every ``q<i>``."""
    return _with_keys(stats, groups, 1, False).drop("gid", "level", "index", "s", "sweep")


def sweep_table(scalars: DataFrame, stats: DataFrame, groups: DataFrame) -> DataFrame:
    """One row per run x workload x broker x driver x variant x sweep step (phase ``sweep``), sorted.

    Latencies are merged exactly per step across workers and intervals;
    target rate = sum over workers of the step's target; achieved rates =
    counter / wall-clock span of the step's intervals; ``stable`` = every
    worker's end record calls the step stable (null when none says);
    ``reasons`` = the workers' distinct reasons.
    """
    sweep_meta = (scalars.filter((F.col("record") == "meta") & (F.col("phase") == "sweep"))
                  .select("run", "file", *COMBO, "worker"))
    steps = (scalars.filter((F.col("record") == "interval") & F.col("step").isNotNull())
             .select("run", "file", "index", "step", "step_target_rate_msg_s", "start_ns", "end_ns", "sent",
                     "acked", "received", "send_errors")
             .join(sweep_meta, on=["run", "file"], how="inner"))
    keys = KEYS + ["step"]
    per_worker_target = steps.groupBy(*keys, "file").agg(F.max("step_target_rate_msg_s").alias("t"))
    target = per_worker_target.groupBy(*keys).agg(F.sum("t").alias("target_rate_msg_s"))
    # seconds of load: the span of the step's intervals that carried its load (at least LOAD_SHARE of its busiest
    # interval's sends); the intervals after its last send (a worker waiting for its consumers before the next
    # step, or one message that crossed the interval boundary) count their acknowledgements, not their time
    load = F.col("sent") >= F.greatest(F.lit(1), F.max("sent").over(Window.partitionBy(*keys)) * LOAD_SHARE)
    counters = steps.withColumn("load", load).groupBy(*keys).agg(
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
    latency = widen(_with_keys(stats, groups, 1, True).withColumnRenamed("s", "step"), keys, STANDARD_PERCENTILES)
    verdicts = (scalars.filter((F.col("record") == "end") & F.col("sweep_steps").isNotNull())
                .select("run", "file", "sweep_steps")
                .join(sweep_meta, on=["run", "file"], how="inner")
                .select(*KEYS, F.explode("sweep_steps").alias("s"))
                .select(*KEYS, F.col("s.step").alias("step"), F.col("s.stable").alias("stable"),
                        F.col("s.reason").alias("reason"))
                .groupBy(*keys).agg(
                    F.min(F.col("stable").cast("int")).cast("boolean").alias("stable"),
                    F.concat_ws("; ", F.array_sort(F.collect_set("reason"))).alias("reasons")))

    def rate(col: str) -> F.Column:
        return F.when(F.col("measured_seconds") > 0, F.col(col) / F.col("measured_seconds"))

    latency_cols = [f"{prefix}_{stat}_{unit}" for prefix, unit, _ in METRICS.values()
                    for stat in ["avg", "min", *[label for label, _ in STANDARD_PERCENTILES], "max"]]
    return (counters.join(target, on=keys, how="left").join(latency, on=keys, how="left")
            .join(verdicts, on=keys, how="left")
            .select(*keys, "target_rate_msg_s",
                    rate("messages_acked").alias("publish_rate_msg_s"),
                    rate("messages_sent").alias("send_rate_msg_s"),
                    rate("messages_received").alias("consume_rate_msg_s"),
                    rate("send_errors").alias("publish_error_rate_msg_s"),
                    "measured_seconds", "workers", "intervals", "messages_sent", "messages_acked",
                    "messages_received", "send_errors", *latency_cols, "stable",
                    F.when(F.col("reasons") != "", F.col("reasons")).alias("reasons"))
            .withColumn("highest_stable_rate_msg_s",
                        F.max(F.when(F.col("stable"), F.col("target_rate_msg_s"))).over(Window.partitionBy(*KEYS)))
            .orderBy(*keys))
