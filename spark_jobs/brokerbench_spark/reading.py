"""The readers: every run of an invocation is one DataFrame, read in one pass over all runs'
files; records carry their ``file`` (the run's number, ``run``, is joined on by the caller from
the files it listed, see :func:`file_runs`). Local files are read by Spark's JSON reader,
S3 objects fetched by the executors with boto3 (store.py)."""

from __future__ import annotations

from typing import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .schema import FOREIGN_CPU_LIMIT_PERCENT, PHASE, PROVENANCE, RECORD_BUCKETS, RECORD_SCALARS
from .store import is_s3, list_files, read_text, s3_lines, spark_file_path

WORKER_PATTERN = "raw/*/*/*/*/*.jsonl"
LINES = T.StructType([T.StructField("file", T.StringType()), T.StructField("value", T.StringType())])
#: S3 objects per fetch task, at most (more tasks than this many per core: smaller tasks)
OBJECTS_PER_TASK = 8


def worker_files(run_dir: str, client=None) -> list[tuple[str, int]]:
    """(URI, bytes) of the run's worker files: local absolute paths or s3:// URIs, sorted."""
    return list_files(run_dir, WORKER_PATTERN, client)


def worker_pattern(run_dir: str) -> str:
    return f"{run_dir}/{WORKER_PATTERN}"


def file_key(spark_file: str) -> str:
    """The ``file`` of a record (as Spark reports a local file, or the s3:// URI) as listed on the driver."""
    return spark_file if is_s3(spark_file) else spark_file_path(spark_file)


def _s3_records(spark: SparkSession, uris: list[str], schema: T.StructType) -> DataFrame:
    sc = spark.sparkContext
    slices = max(1, min(len(uris), max(sc.defaultParallelism * 4, -(-len(uris) // OBJECTS_PER_TASK))))
    rdd = sc.parallelize(uris, slices).mapPartitions(lambda part: s3_lines(list(part)))
    lines = spark.createDataFrame(rdd, LINES)
    parsed = F.from_json("value", schema, {"mode": "PERMISSIVE"})
    return lines.select("file", parsed.alias("r")).select("file", *[F.col(f"r.{f.name}") for f in schema.fields])


def _records(spark: SparkSession, files: Sequence[str], schema: T.StructType) -> DataFrame:
    """Every line of ``files`` (local paths and s3:// URIs) parsed with ``schema``, plus ``file``.
    A line cut short by a killed worker is an all-null row (PERMISSIVE: its ``record`` is null)."""
    local = [f for f in files if not is_s3(f)]
    remote = [f for f in files if is_s3(f)]
    frames = []
    if local:
        frames.append(spark.read.schema(schema).option("mode", "PERMISSIVE").json(local)
                      .select(*[F.col(f.name) for f in schema.fields], F.col("_metadata.file_path").alias("file")))
    if remote:
        frames.append(_s3_records(spark, remote, schema).select(*[f.name for f in schema.fields], "file"))
    return frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])


# -- worker files --------------------------------------------------------------------


def read_worker_records(spark: SparkSession, files: Sequence[str]) -> tuple[DataFrame, DataFrame]:
    """The worker records of every run, as two scans of the same files (one read for all runs).

    Returns (scalars, buckets): ``scalars`` has every field of every record but the
    histograms' bucket arrays (one small row per line: meta, interval and end records);
    ``buckets`` has the interval records' bucket arrays with their index and step. Both
    carry ``file`` as Spark reports it (map it with :func:`file_key`).
    """
    scalars = _records(spark, files, RECORD_SCALARS)
    buckets = _records(spark, files, RECORD_BUCKETS).filter(F.col("record") == "interval").drop("record")
    return scalars, buckets


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
    import json

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
