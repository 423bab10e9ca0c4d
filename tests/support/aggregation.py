"""Runs as the pipeline leaves them, built in this process with the product's own writers (no Spark, no Airflow).

- :func:`measured_run`: worker files (tests/fixtures_results.build_synthetic_run), the provenance record of each
  broker x variant as the deploy task writes it (``BrokerEndpoint.to_dict()``), then :func:`aggregate`.
- :func:`aggregate`: the aggregation job's own code (``spark_jobs/brokerbench_spark/entry.aggregate_runs``: the
  phase tables, the provenance join, the status rules, the row order and the writers of summary.csv,
  summary.parquet, timeseries.csv and the OMB documents), its one Spark stage run here (parallelize, flatMap,
  collect: :class:`InProcessSpark`) instead of on executors.
- :func:`append_to_history`: ``summary/run_meta.json`` as the history task writes it and the history job's own
  append (``history_writer.append_run``: pyarrow on the driver, no Spark at all).
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[2]
for _path in (ROOT / "spark_jobs", ROOT / "tests"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from fixtures_results import build_synthetic_run  # noqa: E402

from brokerbench.environments.base import BrokerEndpoint  # noqa: E402
from brokerbench.history import history_root, run_meta, write_run_meta  # noqa: E402
from brokerbench_spark import entry, history_writer, pyfiles  # noqa: E402


class _Collected:
    def __init__(self, items: list):
        self.items = items

    def flatMap(self, f: Callable[[Any], Iterable]) -> _Collected:  # noqa: N802 (Spark's name)
        return _Collected([x for item in self.items for x in f(item)])

    def collect(self) -> list:
        return list(self.items)


class _Conf:
    def get(self, key: str, default: str | None = None) -> str | None:
        # the package counts as shipped (spark-submit's --py-files): entry.ship_package builds no zip
        return pyfiles.zip_name() if key == "spark.submit.pyFiles" else default


class _Context:
    defaultParallelism = 2  # noqa: N815 (Spark's name)

    def parallelize(self, items: Sequence, _slices: int | None = None) -> _Collected:
        return _Collected(list(items))

    def getConf(self) -> _Conf:  # noqa: N802 (Spark's name)
        return _Conf()


class InProcessSpark:
    """What entry.aggregate_runs asks of its SparkSession: the context's parallelism, one parallelize / flatMap /
    collect (the executors' work, done here in order) and Spark's version for the Parquet footer."""

    def __init__(self) -> None:
        import pyspark

        self.sparkContext = _Context()  # noqa: N815 (Spark's name)
        self.version = pyspark.__version__


def aggregate(run_dir: str | Path) -> Path:
    """The run's summary directory, written by the aggregation job's code (raises when it measured nothing)."""
    rc = entry.aggregate_runs(InProcessSpark(), [str(run_dir)])  # type: ignore[arg-type]
    assert rc == 0, f"the aggregation of {run_dir} exited {rc}"
    return Path(run_dir) / "summary"


def write_provenance(run_dir: str | Path, broker: str, variant: str, implementation: str, version: str,
                     honoured: bool = True, note: str | None = None) -> Path:
    """``provenance/<broker>__<variant>.json`` as the deploy task writes it (pipeline.benchmark.deploy)."""
    import json

    endpoint = BrokerEndpoint(broker=broker, implementation=implementation, version=version,
                              durability={"variant": variant, "honoured": honoured,
                                          "note": note or f"{variant} applied", "settings": {}})
    path = Path(run_dir) / "provenance" / f"{broker}__{variant}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**endpoint.to_dict(), "variant_description": variant, "drivers": {}}, indent=2))
    return path


def measured_run(run_dir: str | Path, versions: Mapping[tuple[str, str], tuple[str, str]],
                 workload: str = "1-topic-16-partitions-1kb", latency_scale: float = 1.0, seed: int = 7,
                 intervals: int = 3) -> Path:
    """A run of every (broker, variant) of ``versions`` ((broker, variant) -> (implementation, version)),
    aggregated: its run directory (summary/ written). Every broker runs every variant named for any broker."""
    run_dir = Path(run_dir)
    brokers = list(dict.fromkeys(b for b, _ in versions))
    variants = list(dict.fromkeys(v for _, v in versions))
    build_synthetic_run(run_dir, brokers=brokers, variants=variants, workload=workload, write_provenance=False,
                        latency_scale=latency_scale, seed=seed, intervals=intervals, warmup_intervals=1,
                        samples_per_interval=200, workers=1)
    for (broker, variant), (implementation, version) in versions.items():
        write_provenance(run_dir, broker, variant, implementation, version)
    aggregate(run_dir)
    return run_dir


def append_to_history(results_root: str | Path, run_dir: str | Path, run_ts: str, environment: str = "local",
                      suite: str = "smoke") -> dict[str, Any]:
    """Append an aggregated run (``<root>/runs/<dag_id>/<run_id>``) to ``<root>/history`` as the history task
    and job do: its run_meta.json (run time ``run_ts``), then the job's append."""
    run_dir = Path(run_dir)
    meta = run_meta(run_dir.parent.name, run_dir.name, "manual", run_ts, environment, suite)
    write_run_meta(run_dir, meta)
    root = history_root(results_root)
    return history_writer.append_run(root, root, str(run_dir), datetime.now(timezone.utc).isoformat())
