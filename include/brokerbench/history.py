"""The history store: reading it (pyarrow) and describing a run for it.

Writing is Spark's job (spark_jobs/history.py); this module reads the store
from plain Python for verdicts, reports and comparisons. Layout::

    <results root>/history/broker=<b>/broker_version=<v>/workload=<w>/variant=<x>/
        date=<YYYY-MM-DD>/run_key=<dag_id>__<run_id>/part-*.parquet

One row per run x workload x broker x driver x variant: the summary columns
(docs/aggregation-and-report.md) plus the run's identity (run_key, dag_id,
run_id, run_type, run_ts, environment, suite, pipeline_brokerbench_version).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable

import brokerbench

PARTITIONS = ("broker", "broker_version", "workload", "variant", "date", "run_key")


def history_root(results_root: str | Path) -> str:
    return f"{str(results_root).rstrip('/')}/history"


def history_run_key(dag_id: str, run_id: str) -> str:
    """As spark_jobs/history.py: the run's partition value."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{dag_id}__{run_id}")


def read_history(root: str | Path, filters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every history row (dicts), optionally only rows whose columns equal ``filters``.

    Files written by different brokerbench versions may differ in columns:
    schemas are unified, a column a file lacks reads as None. An empty or
    missing store gives [].
    """
    import pyarrow as pa  # pyarrow: only where parquet is read or written
    import pyarrow.dataset as ds  # pyarrow: only where parquet is read or written

    root = str(root)
    if "://" not in root and not Path(root).is_dir():
        return []
    partitioning = ds.partitioning(pa.schema([(p, pa.string()) for p in PARTITIONS]), flavor="hive")
    try:
        dataset = ds.dataset(root, format="parquet", partitioning=partitioning)
    except (FileNotFoundError, OSError):
        return []
    if not dataset.files:
        return []
    schemas = [frag.physical_schema for frag in dataset.get_fragments()]
    schema = pa.unify_schemas(schemas + [pa.schema([(p, pa.string()) for p in PARTITIONS])],
                              promote_options="permissive")
    dataset = ds.dataset(root, format="parquet", partitioning=partitioning, schema=schema)
    expr = None
    for k, v in (filters or {}).items():
        e = ds.field(k) == v
        expr = e if expr is None else expr & e
    table = dataset.to_table(filter=expr)
    return table.to_pylist()


def run_meta(dag_id: str, run_id: str, run_type: str | None, run_ts: str, environment: str,
             suite: str | None, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """What summary/run_meta.json holds: the history job's identity of a run."""
    return {
        "dag_id": dag_id, "run_id": run_id, "run_key": history_run_key(dag_id, run_id), "run_type": run_type or "unknown",
        "run_ts": run_ts, "date": run_ts[:10], "environment": environment, "suite": suite,
        "brokerbench_version": brokerbench.__version__, "params": params or {},
    }


def write_run_meta(run_dir: str | Path, meta: dict[str, Any]) -> Path:
    path = Path(run_dir) / "summary" / "run_meta.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(meta, indent=2, sort_keys=True, default=str))
    return path


def latest_per(rows: Iterable[dict[str, Any]], keys: Iterable[str]) -> list[dict[str, Any]]:
    """The most recent row (run_ts) per combination of ``keys``."""
    keys = list(keys)
    best: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        k = tuple(r.get(x) for x in keys)
        if k not in best or str(r.get("run_ts") or "") > str(best[k].get("run_ts") or ""):
            best[k] = r
    return [best[k] for k in sorted(best, key=lambda t: tuple(str(x) for x in t))]
