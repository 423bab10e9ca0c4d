"""The histogram merge: each bucket is merged once per level, every percentile is read from
a merged histogram in one vectorised step per level.

Levels, all runs of the invocation at once, on integer keys (``gid``: one number per run x
phase x workload x broker x driver x variant, see :func:`group_ids`):

- level 0: per interval index (measured phase) or per interval index and step (sweep):
  the workers' bucket counts of the interval summed per bucket key;
- level 1: per phase (measured) or per step (sweep), summed from level 0;
- level 2: per 10 s window of the OMB documents (measured phase; ``index`` = the window),
  summed from level 0 as omb.window_map assigns the intervals.

The buckets: a phase's histograms come from its own worker files only, so each phase is
merged by one executor task (workerfiles.py, numpy: the files read once, pairs sorted by
(group, bucket) and summed, running counts, one ``searchsorted`` for every percentile of
every group): the bucket arrays are never exploded into rows nor shuffled. A percentile p
is the first bucket whose cumulative count reaches ceil(p/100 x count) (at least 1),
capped at the exact maximum; p100 is the exact maximum. These are the semantics of
``brokerbench.histogram.LogHistogram.percentile``.

The scalars (count, sum, min, max, overflow, negative per histogram, and every other
field) come from the same pass without the bucket arrays, are parsed by Spark's
``from_json`` and merged in Spark SQL (:func:`histogram_scalars`).
"""

from __future__ import annotations

from typing import Any, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .schema import ALL_PERCENTILES, COMBO, METRIC_NAMES, METRICS

#: the percentiles read by rank (p100 is the exact maximum)
RANKED = [p for p in ALL_PERCENTILES if p < 100]
#: histogram keys of one merged group
LEVEL_KEYS = ["gid", "level", "index", "s", "metric"]

GROUPS = T.StructType([
    T.StructField("gid", T.IntegerType(), False),
    T.StructField("run", T.IntegerType(), False),
    T.StructField("sweep", T.BooleanType(), False),
    *[T.StructField(c, T.StringType()) for c in COMBO],
])
FILE_GROUPS = T.StructType([
    T.StructField("run", T.IntegerType(), False),
    T.StructField("file", T.StringType()),
    T.StructField("gid", T.IntegerType(), False),
    T.StructField("sweep", T.BooleanType(), False),
    T.StructField("worker", T.StringType()),
])


def pct_col(index: int) -> str:
    """Column of the value at ALL_PERCENTILES[index] (µs)."""
    return f"q{index}"


def group_ids(spark: SparkSession, metas: Sequence[dict[str, Any]]
              ) -> tuple[DataFrame, DataFrame, list[dict]]:
    """Integer keys for the merge, from the meta records of the measured and sweep phases.

    ``metas``: rows with run, file, phase, worker and the COMBO columns (one per meta record).
    Returns (groups, file_groups, group_rows): ``groups`` maps gid to run, sweep and COMBO;
    ``file_groups`` maps (run, file) to gid, sweep and the worker (one row per meta record,
    as the join of intervals to their meta record).
    """
    def sort_key(key):
        return tuple((v is None, v if v is not None else "") if isinstance(v, (str, type(None))) else (False, v)
                     for v in key)

    keys = sorted({(m["run"], m["phase"] == "sweep", *[m[c] for c in COMBO]) for m in metas}, key=sort_key)
    gid = {k: i for i, k in enumerate(keys)}
    group_rows = [dict(gid=i, run=k[0], sweep=k[1], **dict(zip(COMBO, k[2:]))) for k, i in gid.items()]
    file_rows = [(m["run"], m["file"], gid[(m["run"], m["phase"] == "sweep", *[m[c] for c in COMBO])],
                  m["phase"] == "sweep", m["worker"]) for m in metas]
    groups = spark.createDataFrame([tuple(r[f.name] for f in GROUPS.fields) for r in group_rows], GROUPS)
    return groups, spark.createDataFrame(file_rows, FILE_GROUPS), group_rows


def _level_key(df: DataFrame) -> DataFrame:
    """s = the step for sweep files (null for measured ones); sweep intervals without a step are not merged."""
    return df.filter(~F.col("sweep") | F.col("step").isNotNull()).withColumn(
        "s", F.when(F.col("sweep"), F.col("step")))


def ranked_percentiles(histograms: DataFrame, groups: DataFrame) -> DataFrame:
    """Per group of LEVEL_KEYS: count (Σ positive bucket counts) and ``r`` = the bucket key at
    each percentile of RANKED, from the merged histograms of workerfiles.py (reading.HISTOGRAM_ROWS)
    given their ``gid``."""
    keys = ["run", "sweep", *COMBO]
    on = [histograms[c].eqNullSafe(groups[c]) for c in keys]
    return histograms.join(F.broadcast(groups), on=on, how="inner").select(
        groups["gid"], "level", "index", "s", "metric", "count", "r")


def window_ids(windows: DataFrame, groups: DataFrame) -> DataFrame:
    """The OMB window of every measured interval (reading.WINDOW_ROWS) by ``gid``: gid, index,
    window, timed."""
    keys = ["run", "sweep", *COMBO]
    on = [windows[c].eqNullSafe(groups[c]) for c in keys]
    return windows.join(F.broadcast(groups), on=on, how="inner").select(
        groups["gid"], "index", "window", "timed")


def _exprs(*sql: str) -> list[F.Column]:
    """Columns from SQL text: one round trip to the JVM each (built from ``F`` calls, several)."""
    return [F.expr(e) for e in sql]


def histogram_scalars(scalars: DataFrame, file_groups: DataFrame, windows: DataFrame | None = None) -> DataFrame:
    """sum, min, max, overflow and negative per group of LEVEL_KEYS (level 0: every merged
    interval; level 2, with ``windows`` (:func:`window_ids`): every OMB window)."""
    rows = _level_key(
        scalars.filter(F.col("record") == "interval")
        .select("run", "file", "index", "step", *METRIC_NAMES)
        .join(F.broadcast(file_groups.drop("worker")), on=["run", "file"], how="inner"))
    level0 = (
        rows.select("gid", "index", "s", F.posexplode(F.array(*[F.col(m) for m in METRIC_NAMES])).alias("metric", "h"))
        .groupBy("gid", "index", "s", "metric").agg(*_exprs(
            "sum(h.`sum`) AS `sum`", "min(h.`min`) AS `min`", "max(h.`max`) AS `max`",
            "coalesce(sum(h.overflow), 0) AS overflow", "coalesce(sum(h.negative), 0) AS negative"))
    )
    # the merge of merged scalars (levels 1 and 2)
    remerge = _exprs("sum(`sum`) AS `sum`", "min(`min`) AS `min`", "max(`max`) AS `max`",
                     "sum(overflow) AS overflow", "sum(negative) AS negative")
    level1 = level0.groupBy("gid", "s", "metric").agg(*remerge)
    cols = ["sum", "min", "max", "overflow", "negative"]
    out = (
        level0.select("gid", F.lit(0).alias("level"), "index", "s", "metric", *cols)
        .unionByName(level1.select("gid", F.lit(1).alias("level"), F.lit(None).cast("long").alias("index"),
                                   "s", "metric", *cols))
    )
    if windows is not None:
        level2 = (level0.filter(F.col("s").isNull())
                  .join(F.broadcast(windows.select("gid", "index", "window")), on=["gid", "index"], how="inner")
                  .groupBy("gid", "window", "metric").agg(*remerge))
        out = out.unionByName(level2.select("gid", F.lit(2).alias("level"), F.col("window").alias("index"),
                                            F.lit(None).cast("long").alias("s"), "metric", *cols))
    return out


def histogram_stats(scalars: DataFrame, percentiles: DataFrame, file_groups: DataFrame,
                    windows: DataFrame | None = None) -> DataFrame:
    """Every merged histogram: LEVEL_KEYS, count, sum, min, max, overflow, negative and
    ``q<i>`` = value at ALL_PERCENTILES[i] (µs, capped at the exact maximum).
    ``percentiles``: :func:`ranked_percentiles`; ``windows``: :func:`window_ids` (level 2)."""
    stats = histogram_scalars(scalars, file_groups, windows).alias("a")
    pcts = percentiles.alias("b")
    on = [F.col(f"a.{c}").eqNullSafe(F.col(f"b.{c}")) for c in LEVEL_KEYS]
    joined = stats.join(pcts, on=on, how="left")
    # SQL text: one round trip to the JVM instead of several per column
    out = [f"a.`{c}` AS `{c}`" for c in LEVEL_KEYS]
    out += ["coalesce(b.`count`, 0) AS `count`"]
    out += [f"a.`{c}` AS `{c}`" for c in ("sum", "min", "max", "overflow", "negative")]
    ranked = iter(range(len(RANKED)))
    for i, p in enumerate(ALL_PERCENTILES):
        if p >= 100:
            out.append(f"a.`max` AS `{pct_col(i)}`")  # the exact maximum
        else:
            # a bucket's key may exceed the exact maximum: never report more
            out.append(f"least(get(b.r, {next(ranked)}), a.`max`) AS `{pct_col(i)}`")
    return joined.selectExpr(*out)


def widen(stats: DataFrame, keys: Sequence[str], percentiles: Sequence[tuple[str, float]]) -> DataFrame:
    """One row per ``keys``, one column per metric x statistic, in the metric's reporting unit
    (a conditional aggregation over the three metrics' rows).

    Each column is one SQL expression (``F.expr``): the same expression built from ``F`` calls
    takes about 70 round trips to the JVM per column, and a summary widens about 100 columns."""
    cols = []
    for m, metric in enumerate(METRIC_NAMES):
        prefix, unit, divisor = METRICS[metric]
        per_unit = f"CAST({float(divisor)!r} AS DOUBLE)"

        def pick(expr: str, name: str) -> F.Column:
            return F.expr(f"max(CASE WHEN metric = {m} THEN {expr} END) AS `{name}`")

        cols += [
            pick(f"CASE WHEN `count` > 0 THEN `sum` / `count` / {per_unit} END", f"{prefix}_avg_{unit}"),
            pick(f"`min` / {per_unit}", f"{prefix}_min_{unit}"),
        ]
        for label, p in percentiles:
            cols.append(pick(f"`{pct_col(ALL_PERCENTILES.index(p))}` / {per_unit}", f"{prefix}_{label}_{unit}"))
        cols += [
            pick(f"`max` / {per_unit}", f"{prefix}_max_{unit}"),
            pick("`count`", f"{prefix}_count"),
            pick("`overflow`", f"{prefix}_overflow_count"),
            pick("`negative`", f"{prefix}_negative_count"),
        ]
    return stats.groupBy(*keys).agg(*cols)
