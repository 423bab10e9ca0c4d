"""File system helpers and the readers: every run of an invocation is one DataFrame
with the run's number (``run``, its position in the command line) as a column."""

from __future__ import annotations

import os
from functools import reduce
from typing import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .schema import FOREIGN_CPU_LIMIT_PERCENT, PHASE, PROVENANCE, RECORD_BUCKETS, RECORD_SCALARS

# -- file system helpers (local paths and any Hadoop file system) -------------------


def _is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


def _local_path(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


def hadoop_path(spark: SparkSession, uri: str):
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return path, path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())


def glob_sized(spark: SparkSession, pattern: str) -> list[tuple[str, int]]:
    """The files a glob matches with their sizes in bytes (sorted by URI; empty when none)."""
    path, fs = hadoop_path(spark, pattern)
    statuses = fs.globStatus(path)
    if statuses is None:
        return []
    return sorted((str(s.getPath().toString()), int(s.getLen())) for s in statuses if s.isFile())


GLOB_CHARS = set("*?[{")


def expand_run_dirs(spark: SparkSession, args: Sequence[str], unique: bool = True) -> list[str]:
    """The run directories of the command line, in order (``unique``: each once): an argument
    with glob characters (``*?[{``) stands for the directories it matches (sorted); one that
    matches nothing is kept as it is (and reported by the job as a run without data)."""
    out: list[str] = []
    for arg in args:
        arg = arg.rstrip("/")
        if GLOB_CHARS & set(arg):
            path, fs = hadoop_path(spark, arg)
            statuses = fs.globStatus(path) or []
            matches = sorted(str(st.getPath().toUri().getPath()) if "://" not in arg  # a plain local path
                             else str(st.getPath().toString())
                             for st in statuses if st.isDirectory())
            out.extend(matches or [arg])
        else:
            out.append(arg)
    return list(dict.fromkeys(out)) if unique else out


def glob_files(spark: SparkSession, pattern: str) -> list[str]:
    """The files a glob matches (sorted URIs; empty when none)."""
    return [p for p, _ in glob_sized(spark, pattern)]


def write_text(spark: SparkSession, uri: str, text: str) -> None:
    """Write a small text file: plain Python for local paths, Hadoop FS otherwise."""
    if _is_local(uri):
        local = _local_path(uri)
        os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
        with open(local, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        return
    path, fs = hadoop_path(spark, uri)
    out = fs.create(path, True)
    try:
        out.write(bytearray(text.encode("utf-8")))
    finally:
        out.close()


def worker_pattern(run_dir: str) -> str:
    return f"{run_dir}/raw/*/*/*/*/*.jsonl"


def _union(frames: list[DataFrame]) -> DataFrame:
    return reduce(DataFrame.union, frames)


def _json(spark: SparkSession, schema, paths: list[str], run: int, multiline: bool = False) -> DataFrame:
    reader = spark.read.schema(schema)
    reader = reader.option("multiLine", True) if multiline else reader.option("mode", "PERMISSIVE")
    return reader.json(paths).withColumn("file", F.input_file_name()).withColumn("run", F.lit(run))


# -- worker files --------------------------------------------------------------------


def read_worker_records(spark: SparkSession, files: dict[int, list[str]]) -> tuple[DataFrame, DataFrame]:
    """The worker records of every run, as two scans of the same files.

    ``files``: run number -> the run's worker files (at least one run). Returns
    (scalars, buckets): ``scalars`` has every field of every record but the
    histograms' bucket arrays (one small row per line: meta, interval and end
    records); ``buckets`` has the interval records' bucket arrays with their
    index and step. Both carry ``file`` (the file the record came from) and
    ``run``. A line cut short by a killed worker is dropped (PERMISSIVE: an
    all-null row, whose ``record`` is null).
    """
    runs = sorted(files)
    scalars = _union([_json(spark, RECORD_SCALARS, files[r], r) for r in runs])
    buckets = _union([
        _json(spark, RECORD_BUCKETS, files[r], r).filter(F.col("record") == "interval").drop("record")
        for r in runs
    ])
    return scalars, buckets


# -- provenance and host metrics ------------------------------------------------------


def read_provenance(spark: SparkSession, run_dirs: dict[int, str]) -> DataFrame | None:
    """provenance/<broker>__<variant>.json of every run as (run, broker, variant, provenance columns);
    None when no run has such a file."""
    frames = []
    for run, run_dir in sorted(run_dirs.items()):
        paths = glob_files(spark, f"{run_dir}/provenance/*__*.json")
        if paths:
            frames.append(_json(spark, PROVENANCE, paths, run, multiline=True))
    if not frames:
        return None
    name = r"([^/]+?)__([^/]+)\.json$"
    return _union(frames).select(
        "run",
        F.regexp_extract("file", name, 1).alias("broker"),
        F.regexp_extract("file", name, 2).alias("variant"),
        F.col("implementation").alias("broker_implementation"),
        F.col("version").alias("broker_version"),
        F.col("durability.honoured").alias("durability_honoured"),
        F.col("durability.note").alias("durability_note"),
        # compact the JSON text of the settings object onto one line
        F.regexp_replace(F.col("durability.settings"), r"\s*\n\s*", " ").alias("durability_settings"),
    )


def phase_label(*cols: str) -> F.Column:
    """The phase label of pipeline.run_phase: safe_name(workload__driver__variant__measure)."""
    return F.regexp_replace(F.concat_ws("__", *[F.col(c) for c in cols], F.lit("measure")),
                            r"[^A-Za-z0-9._=-]", "_")


def _pct(col: str) -> F.Column:
    return F.format_number(F.col(col), 1)


def read_contention(spark: SparkSession, run_dirs: dict[int, str]) -> DataFrame | None:
    """Contention reasons per run and measured phase: (run, label, contention array<string>,
    host_foreign_cpu_mean_percent), from provenance/phases/*.json (host metrics of every host
    during the phase); None when no run has such files."""
    frames = []
    for run, run_dir in sorted(run_dirs.items()):
        paths = glob_files(spark, f"{run_dir}/provenance/phases/*.json")
        if paths:
            frames.append(_json(spark, PHASE, paths, run, multiline=True))
    if not frames:
        return None
    hosts = (
        _union(frames)
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
