"""The readers: every worker file of every run is read once, by the executors (workerfiles.py:
the bucket merge and the records without their bucket arrays), the small JSON documents
(provenance, host metrics) by the driver. Local paths and s3:// URIs alike (store.py)."""

from __future__ import annotations

import json
from typing import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .schema import COMBO, FOREIGN_CPU_LIMIT_PERCENT, METRIC_NAMES, PHASE, PROVENANCE, RECORD_SCALARS
from .store import list_files, read_text
from .workerfiles import read_phase_dirs, task_slices

WORKER_PATTERN = "raw/*/*/*/*/*.jsonl"
#: the records without their bucket arrays, as JSON text (workerfiles.py)
SCALAR_LINES = T.StructType([T.StructField("run", T.IntegerType(), False), T.StructField("file", T.StringType()),
                             T.StructField("value", T.StringType())])
#: the merged histograms of workerfiles.py, keyed by run, sweep and COMBO
HISTOGRAM_ROWS = T.StructType([
    T.StructField("run", T.IntegerType(), False),
    T.StructField("sweep", T.BooleanType(), False),
    *[T.StructField(c, T.StringType()) for c in COMBO],
    T.StructField("level", T.IntegerType(), False),
    T.StructField("index", T.LongType()),
    T.StructField("s", T.LongType()),
    T.StructField("metric", T.IntegerType(), False),
    T.StructField("count", T.LongType(), False),
    T.StructField("r", T.ArrayType(T.LongType(), False)),
])
#: the OMB window of every interval index of a measured phase (workerfiles.py, omb.py)
WINDOW_ROWS = T.StructType([
    T.StructField("run", T.IntegerType(), False),
    T.StructField("sweep", T.BooleanType(), False),
    *[T.StructField(c, T.StringType()) for c in COMBO],
    T.StructField("index", T.LongType(), False),
    T.StructField("window", T.LongType(), False),
    T.StructField("timed", T.BooleanType(), False),
])
#: phase directories never read: nothing of a warm-up enters any output (only files whose
#: meta record says measure or sweep do), and a warm-up's files are as large as a measurement's
UNREAD_PHASES = ("warmup",)
#: worker-file tasks per core (smaller tasks balance phases of unequal size)
TASKS_PER_CORE = 3
#: bytes of worker files below which one task more is not worth its fixed cost
MIN_TASK_BYTES = 8 << 20


def worker_files(run_dir: str, client=None) -> list[tuple[str, int]]:
    """(URI, bytes) of the run's worker files: local absolute paths or s3:// URIs, sorted."""
    return list_files(run_dir, WORKER_PATTERN, client)


def worker_pattern(run_dir: str) -> str:
    return f"{run_dir}/{WORKER_PATTERN}"


# -- worker files --------------------------------------------------------------------


def phase_dirs(files: dict[str, tuple[int, int]]) -> list[tuple[tuple[int, list[str]], int]]:
    """The worker files ({URI: (run, bytes)}) as work for workerfiles.py: one item per run and
    phase directory, ((run, its files, sorted), bytes); warm-up directories are not read
    (UNREAD_PHASES)."""
    dirs: dict[tuple[int, str], list[str]] = {}
    for uri, (run, _) in files.items():
        directory = uri.rsplit("/", 1)[0]
        if directory.rsplit("/", 1)[-1] not in UNREAD_PHASES:
            dirs.setdefault((run, directory), []).append(uri)
    return [((run, sorted(uris)), sum(files[u][1] for u in uris)) for (run, _), uris in sorted(dirs.items())]


def read_worker_files(spark: SparkSession, files: dict[str, tuple[int, int]], ranked: Sequence[float]
                      ) -> tuple[DataFrame, DataFrame, DataFrame]:
    """Every worker file of every run read once, by the executors (workerfiles.py).

    ``files``: {URI: (run, bytes)} (local absolute paths or s3:// URIs). Returns
    (scalars, histograms, windows): ``scalars`` has (run, file, every field of every record but the
    histograms' bucket arrays), one row per line (meta, interval and end records; a line
    that is no JSON object is a row of nulls, as Spark's JSON reader makes it);
    ``histograms`` has the merged histograms (HISTOGRAM_ROWS); ``windows`` the OMB window
    of every measured interval index (WINDOW_ROWS, omb.py).
    """
    sc = spark.sparkContext
    work = phase_dirs(files)
    # small inputs (one run: a few MB) in fewer tasks: each task's fixed cost (a Python worker, the package's
    # import) is then paid less often; large ones in TASKS_PER_CORE tasks per core
    by_size = max(1, -(-sum(size for _, size in work) // MIN_TASK_BYTES))
    slices = task_slices(work, min(by_size, sc.defaultParallelism * TASKS_PER_CORE))
    fields, combo, ranked = list(METRIC_NAMES), list(COMBO), list(ranked)
    rows = (sc.parallelize(slices, max(1, len(slices)))
            .flatMap(lambda part: read_phase_dirs(part, fields, combo, ranked))
            .cache())  # read by both frames below: the files are read once
    lines = spark.createDataFrame(rows.filter(lambda r: r[0] == "s").map(lambda r: r[1:]), SCALAR_LINES)
    parsed = F.from_json("value", RECORD_SCALARS, {"mode": "PERMISSIVE"})
    scalars = lines.select("run", "file", parsed.alias("r")).select("run", "file", "r.*")
    histograms = spark.createDataFrame(rows.filter(lambda r: r[0] == "h").map(lambda r: r[1:]), HISTOGRAM_ROWS)
    windows = spark.createDataFrame(rows.filter(lambda r: r[0] == "w").map(lambda r: r[1:]), WINDOW_ROWS)
    if len(slices) > 1:
        return scalars, histograms, windows
    # A small input, read by one task: the queries after it keep to one partition. Each shuffle of a few
    # thousand rows into SHUFFLE_PARTITIONS tasks cost more in tasks than it shared out; on one partition
    # (and one shuffle partition for the session) every shuffle is read by one task.
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    return scalars.coalesce(1), histograms.coalesce(1), windows.coalesce(1)


def _value_end(text: str, i: int) -> int:
    """The index after the JSON value that starts at ``text[i]`` (no validation)."""
    if text[i] == '"':
        i += 1
        while text[i] != '"':
            i += 2 if text[i] == "\\" else 1
        return i + 1
    if text[i] in "{[":
        depth = 0
        while True:
            c = text[i]
            if c == '"':
                i = _value_end(text, i)
                continue
            if c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
    while i < len(text) and text[i] not in ",}] \t\r\n":
        i += 1
    return i


def raw_member(text: str, path: Sequence[str]) -> str | None:
    """The raw text of the object or array at ``path`` (keys of nested objects) in a JSON
    document, as Spark's multi-line JSON reader gives an object read into a string column
    (the input's characters from the opening to the closing bracket); None when the value is
    missing, not an object or array, or the text is no JSON."""

    decoder = json.JSONDecoder()
    try:
        i = 0
        for depth, key in enumerate(path):
            while text[i].isspace():
                i += 1
            if text[i] != "{":
                return None
            i += 1
            found = False
            while True:
                while text[i] in " \t\r\n,":
                    i += 1
                if text[i] == "}":
                    return None
                name, i = decoder.raw_decode(text, i)
                while text[i] in " \t\r\n:":
                    i += 1
                if name == key:
                    found = True
                    break
                i = _value_end(text, i)
            if not found:
                return None
        return text[i:_value_end(text, i)] if text[i] in "{[" else None
    except (IndexError, ValueError):
        return None


def _small_json(spark: SparkSession, run_dirs: dict[int, str], pattern: str, schema: T.StructType,
                client=None, raw: Sequence[str] | None = None) -> DataFrame | None:
    """Small JSON documents (one per file) read on the driver: (run, file, the schema's columns)
    and, with ``raw`` (a path of keys), ``raw`` = the raw text of that object (:func:`raw_member`)."""
    rows = []
    for run, run_dir in sorted(run_dirs.items()):
        for uri, _ in list_files(run_dir, pattern, client):
            text = read_text(uri, client)
            if text is not None:
                rows.append((run, uri, text, raw_member(text, raw) if raw else None))
    if not rows:
        return None
    docs = spark.createDataFrame(rows, "run int, file string, text string, raw string")
    parsed = F.from_json("text", schema, {"mode": "PERMISSIVE"})
    return docs.select("run", "file", "raw", parsed.alias("d")).select("run", "file", "raw", "d.*")


# -- provenance and host metrics ------------------------------------------------------


def read_provenance(spark: SparkSession, run_dirs: dict[int, str], client=None) -> DataFrame | None:
    """provenance/<broker>__<variant>.json of every run as (run, broker, variant, provenance columns);
    None when no run has such a file."""
    docs = _small_json(spark, run_dirs, "provenance/*__*.json", PROVENANCE, client, raw=("durability", "settings"))
    if docs is None:
        return None
    name = r"([^/]+?)__([^/]+)\.json$"
    return docs.select(
        "run",
        F.regexp_extract("file", name, 1).alias("broker"),
        F.regexp_extract("file", name, 2).alias("variant"),
        F.col("implementation").alias("broker_implementation"),
        F.col("version").alias("broker_version"),
        F.col("durability.honoured").alias("durability_honoured"),
        F.col("durability.note").alias("durability_note"),
        # compact the JSON text of the settings object onto one line
        # an object's JSON text as in the file (from_json would re-serialise it compactly)
        F.regexp_replace(F.coalesce(F.col("raw"), F.col("durability.settings")), r"\s*\n\s*", " ")
        .alias("durability_settings"),
    )


def phase_label(*cols: str) -> F.Column:
    """The phase label of pipeline.run_phase: safe_name(workload__driver__variant__measure)."""
    return F.regexp_replace(F.concat_ws("__", *[F.col(c) for c in cols], F.lit("measure")),
                            r"[^A-Za-z0-9._=-]", "_")


def _pct(col: str) -> F.Column:
    return F.format_number(F.col(col), 1)


def read_contention(spark: SparkSession, run_dirs: dict[int, str], client=None) -> DataFrame | None:
    """Contention reasons per run and measured phase: (run, label, contention array<string>,
    host_foreign_cpu_mean_percent), from provenance/phases/*.json (host metrics of every host
    during the phase); None when no run has such files."""
    docs = _small_json(spark, run_dirs, "provenance/phases/*.json", PHASE, client)
    if docs is None:
        return None
    hosts = (
        docs
        .filter((F.col("phase") == "measure") & F.col("hosts").isNotNull())
        .select("run", "label", F.explode("hosts").alias("host", "h"))
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
        hosts.select("run", "label", F.array_compact(F.array(other, foreign)).alias("r"),
                     F.col("h.foreign_cpu_mean_percent").alias("f"))
        .groupBy("run", "label")
        .agg(F.array_sort(F.array_distinct(F.flatten(F.collect_list("r")))).alias("contention"),
             F.max("f").alias("host_foreign_cpu_mean_percent"))
    )
