"""Append aggregated brokerbench runs to the history store (the job of spark_jobs/history.py).

Input per run: ``<run-dir>/summary/summary.parquet`` (the aggregation) and
``<run-dir>/summary/run_meta.json`` (who ran it: dag id, run id, run type, run timestamp,
environment, suite; written by the Airflow task), a local directory or ``s3://...``. A run
without ``run_meta.json`` takes dag id and run id from its path (``.../runs/<dag_id>/<run_id>``)
and the summary's modification time. Only these small files are read, by the driver (pyarrow;
boto3 for S3): never the rest of the history.

Output, written by the driver into the local ``--history-out`` (default: the history root when
it is local): Parquet files under ``broker=<b>/broker_version=<v>/workload=<w>/variant=<x>/
date=<YYYY-MM-DD>/run_key=<dag_id>__<run_id>/part-00000-<uuid>.c000.snappy.parquet``, one row
per run x workload x broker x driver x variant: every summary column but the partition
columns, plus the run's identity (RUN_COLUMNS), and a manifest
``_manifests/<run_key>.json``:

    {"run_key": ..., "history_root": <--history-root>, "run_dir": ..., "rows": n,
     "appended_at": ..., "partitions": [<relative directories>], "files": [<relative paths>]}

Paths in the manifest are relative to ``--history-out`` and, the same, to ``--history-root``:
whoever uploads the history (the Airflow operator for S3) copies exactly ``files`` and
deletes the run key's other objects. Locally, every earlier directory of the same
``run_key`` under ``--history-out`` is replaced; other runs' rows are never touched.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import re
import shutil
import sys
import uuid
from datetime import datetime, timezone
from typing import Any, Sequence

from .store import check_uri, expand_run_dirs, is_s3, local_path, read_text, s3_client, s3_list, split_s3

#: partition columns, outermost first (run_key is always the innermost)
PARTITIONS = ["broker", "broker_version", "workload", "variant", "date"]
#: run identity columns added to every summary row
RUN_COLUMNS = ["run_key", "dag_id", "run_id", "run_type", "run_ts", "environment", "suite",
               "pipeline_brokerbench_version", "results_run_dir", "appended_at"]
UNKNOWN = "unknown"
MANIFESTS = "_manifests"
#: a trial row of side B of an A/B run: workload ``<id>.B.trial<k>`` (brokerbench.util.side_b_id / trial_id)
SIDE_B_TRIAL = re.compile(r"^.+\.B\.trial[1-9][0-9]*$")
#: characters Spark escapes in a partition directory's value (ExternalCatalogUtils.escapePathName)
_ESCAPED = set('"#%\'*/:=?\\\x7f{[]^') | {chr(c) for c in range(0x20)}


def history_run_key(dag_id: str, run_id: str) -> str:
    """A partition value Spark and every file system keep as is."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{dag_id}__{run_id}")


def escape_partition(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


class Summary:
    """A run's summary.parquet (local or S3), read on the driver."""

    def __init__(self, run_dir: str, client=None):
        self.run_dir = run_dir
        self.dir = f"{run_dir}/summary/summary.parquet"
        self.client = client

    def _objects(self) -> list[tuple[str, int]]:
        bucket, prefix = split_s3(self.dir)
        return [(k, n) for k, n in s3_list(self.dir, self.client) if "/" not in k[len(prefix) + 1:]]

    def complete(self) -> bool:
        if is_s3(self.dir):
            return any(k.endswith("/_SUCCESS") for k, _ in self._objects())
        return os.path.isfile(os.path.join(local_path(self.dir), "_SUCCESS"))

    def modified(self) -> datetime:
        if is_s3(self.dir):
            bucket, prefix = split_s3(self.dir)
            head = self.client.head_object(Bucket=bucket, Key=f"{prefix}/_SUCCESS")
            return head["LastModified"].astimezone(timezone.utc)
        return datetime.fromtimestamp(os.path.getmtime(local_path(self.dir)), tz=timezone.utc)

    def table(self):
        import pyarrow as pa  # pyarrow: only where parquet is read or written
        import pyarrow.parquet as pq  # pyarrow: only where parquet is read or written

        def data_file(name: str) -> bool:
            return not name.startswith(("_", ".")) and not name.endswith(".crc")

        tables = []
        if is_s3(self.dir):
            bucket, _ = split_s3(self.dir)
            for key, _ in self._objects():
                if data_file(key.rsplit("/", 1)[-1]):
                    body = self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
                    tables.append(pq.read_table(io.BytesIO(body)))
        else:
            root = local_path(self.dir)
            for name in sorted(os.listdir(root)):
                if data_file(name) and os.path.isfile(os.path.join(root, name)):
                    tables.append(pq.read_table(os.path.join(root, name)))
        tables = [t.replace_schema_metadata(None) for t in tables]
        return pa.concat_tables(tables, promote_options="permissive") if tables else None


def run_meta(run_dir: str, summary: Summary, client=None) -> dict[str, Any]:
    """summary/run_meta.json, completed from the path where fields are missing."""
    text = read_text(f"{run_dir}/summary/run_meta.json", client)
    meta = json.loads(text) if text else {}
    parts = run_dir.rstrip("/").split("/")
    meta.setdefault("dag_id", parts[-2] if len(parts) >= 2 else UNKNOWN)
    meta.setdefault("run_id", parts[-1])
    if not meta.get("run_ts"):
        meta["run_ts"] = summary.modified().isoformat()
    meta.setdefault("date", str(meta["run_ts"])[:10])
    meta.setdefault("run_type", UNKNOWN)
    meta.setdefault("environment", UNKNOWN)
    meta.setdefault("suite", None)
    meta.setdefault("brokerbench_version", None)
    return meta


def _replace_run(history_out: str, key: str) -> int:
    """Delete every local directory of ``key`` (any partition); how many there were."""
    depth = "/".join("*" for _ in PARTITIONS)
    found = glob.glob(os.path.join(glob.escape(history_out), depth, f"run_key={glob.escape(key)}"))
    for d in found:
        shutil.rmtree(d)
    return len(found)


def append_run(history_root: str, history_out: str, run_dir: str, appended_at: str, client=None) -> dict:
    """Write one run's rows under ``history_out`` and its manifest; a dict: run_key, rows,
    replaced_directories, partitions, files, manifest."""
    import pyarrow as pa  # pyarrow: only where parquet is read or written
    import pyarrow.parquet as pq  # pyarrow: only where parquet is read or written

    summary = Summary(run_dir, client)
    meta = run_meta(run_dir, summary, client)
    key = history_run_key(str(meta["dag_id"]), str(meta["run_id"]))
    table = summary.table()
    values = {
        "run_key": key, "dag_id": meta["dag_id"], "run_id": meta["run_id"], "run_type": meta["run_type"],
        "run_ts": meta["run_ts"], "environment": meta["environment"], "suite": meta["suite"],
        "pipeline_brokerbench_version": meta["brokerbench_version"], "results_run_dir": run_dir,
        "appended_at": appended_at,
    }
    rows = table.to_pylist() if table is not None else []
    if (meta.get("params") or {}).get("compare_with"):
        # an A/B run: side A is the run's own track; side B (``<workload>.B.trial<k>``) is judged against side A
        # in the run (brokerbench.ab_verdicts), never a point of a track's history
        rows = [r for r in rows if not SIDE_B_TRIAL.match(str(r.get("workload") or ""))]
    data_fields = [f for f in (table.schema if table is not None else []) if f.name not in PARTITIONS]
    schema = pa.schema(data_fields + [pa.field(c, pa.string()) for c in RUN_COLUMNS if c not in
                                      {f.name for f in data_fields}])
    by_partition: dict[tuple[str, ...], list[dict]] = {}
    for r in rows:
        r.update({c: None if values[c] is None else str(values[c]) for c in RUN_COLUMNS})
        r["date"] = str(meta["date"])
        # partition values are never null (Spark would write __HIVE_DEFAULT_PARTITION__)
        part = tuple(UNKNOWN if r.get(c) is None else str(r.get(c)) for c in PARTITIONS)
        by_partition.setdefault(part, []).append(r)

    staging = os.path.join(history_out, "_staging", f"run-{uuid.uuid4().hex}")
    files: list[str] = []
    partitions: list[str] = []
    try:
        for part, part_rows in sorted(by_partition.items()):
            rel_dir = "/".join(f"{c}={escape_partition(v)}" for c, v in zip(PARTITIONS, part)) + f"/run_key={key}"
            name = f"part-00000-{uuid.uuid4()}.c000.snappy.parquet"
            os.makedirs(os.path.join(staging, rel_dir))
            pq.write_table(pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in part_rows],
                                                schema=schema),
                           os.path.join(staging, rel_dir, name), compression="snappy")
            partitions.append(rel_dir)
            files.append(f"{rel_dir}/{name}")
        replaced = _replace_run(history_out, key)
        for rel_dir in partitions:
            target = os.path.join(history_out, rel_dir)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(os.path.join(staging, rel_dir), target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        try:
            os.rmdir(os.path.join(history_out, "_staging"))
        except OSError:
            pass
    manifest = {"run_key": key, "history_root": history_root, "run_dir": run_dir, "rows": len(rows),
                "appended_at": appended_at, "partitions": partitions, "files": files}
    manifest_path = os.path.join(history_out, MANIFESTS, f"{key}.json")
    os.makedirs(os.path.dirname(manifest_path), exist_ok=True)
    with open(manifest_path, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=2)
        fh.write("\n")
    return {"run_key": key, "rows": len(rows), "replaced_directories": replaced, "partitions": len(partitions),
            "files": files, "manifest": manifest_path}


def submitted_master() -> str:
    """The ``--master`` spark-submit was given (read from the JVM that started this job; no context)."""
    from pyspark import SparkConf, SparkContext  # pyspark: only in the Spark job

    SparkContext._ensure_initialized()  # the gateway of the spark-submit JVM; creates no SparkContext
    return SparkConf().get("spark.master", "local[*]")


def build_session(app_name: str = "brokerbench-history"):
    """A Spark session, only so that a cluster the job was submitted to lists the application: the job
    runs no Spark job (the rows of a run are a few dozen). None under a ``local`` master, where nothing
    lists it: a context there costs 2 to 3 s of a run's time to answer and does nothing."""
    if submitted_master().startswith("local"):
        return None
    from pyspark.sql import SparkSession  # pyspark: only in the Spark job

    return (SparkSession.builder.appName(app_name)
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Append aggregated brokerbench runs to the history store.")
    parser.add_argument("--history-root", required=True,
                        help="the history store: local directory or s3:// URI (recorded in the manifests)")
    parser.add_argument("--run-dir", action="append", required=True,
                        help="a run directory (local or s3://), or a glob of run directories (repeatable)")
    parser.add_argument("--history-out",
                        help="local directory the driver writes this run's history files and manifest into "
                             "(default: --history-root when it is local; required when it is on S3)")
    args = parser.parse_args(argv)
    history_root = check_uri(args.history_root)
    if args.history_out:
        history_out = local_path(args.history_out)
    elif is_s3(history_root):
        parser.error("--history-out is required when --history-root is on S3")
    else:
        history_out = local_path(history_root)
    appended_at = datetime.now(timezone.utc).isoformat()
    client = s3_client() if is_s3(history_root) or any(is_s3(d) for d in args.run_dir) else None

    spark = build_session()
    try:
        # the runs before the first one without a summary are appended (as one after the other would)
        runs, missing = [], None
        for run_dir in expand_run_dirs(args.run_dir, unique=False, client=client):  # a repeated run replaces itself
            if not Summary(run_dir, client).complete():
                missing = run_dir
                break
            runs.append(run_dir)
        for run_dir in runs:
            out = append_run(history_root, history_out, run_dir, appended_at, client)
            print(f"brokerbench history: {out['rows']} rows of {out['run_key']} -> {history_out} "
                  f"({out['partitions']} partitions; {out['replaced_directories']} earlier directories replaced; "
                  f"manifest {out['manifest']})")
        if missing is not None:
            print(f"brokerbench history: no summary in {missing}/summary/summary.parquet", file=sys.stderr)
            return 2
        return 0
    finally:
        if spark is not None:
            spark.stop()
