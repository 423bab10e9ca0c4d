"""A results root as runs leave it, written by brokerbench's own writers (no Spark, no Airflow, no broker):

- ``summary/summary.parquet``: the aggregation's writer (spark_jobs ``outputs.write_parquet_dataset``) with its
  schema (``phase_tables.SUMMARY_SCHEMA``): every summary column, a row per broker x variant;
- ``summary/run_meta.json``: the history task's (``brokerbench.history.run_meta`` / ``write_run_meta``);
- ``history/...``: the history job's (spark_jobs ``history_writer.append_run``), partitions and manifest;
- ``summary/regression.json``: the verdicts task's (``brokerbench.pipeline.analysis.verdicts``) on that history;
- ``summary/outcome.json``: the outcome's (``brokerbench.outcome.outcome_of`` / ``write_outcome``).

So what ``brokerbench history`` and ``brokerbench compare`` read is what a run writes, and follows it when a writer
changes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "spark_jobs") not in sys.path:
    sys.path.insert(0, str(ROOT / "spark_jobs"))

from brokerbench import history  # noqa: E402
from brokerbench.outcome import outcome_of, write_outcome  # noqa: E402
from brokerbench.pipeline import analysis  # noqa: E402
from brokerbench.pipeline.context import RunContext  # noqa: E402
from brokerbench.report.verdict_table import read_verdicts  # noqa: E402
from brokerbench_spark.history_writer import append_run  # noqa: E402
from brokerbench_spark.outputs import write_parquet_dataset  # noqa: E402
from brokerbench_spark.phase_tables import SUMMARY_COLUMNS, SUMMARY_SCHEMA  # noqa: E402

DRIVERS = {"kafka": "kafka-latency", "pulsar": "pulsar-default", "rabbitmq": "rabbitmq-default"}
CLIENTS = {"kafka": ("kafka-python", "2.2.15"), "pulsar": ("pulsar-client", "3.8.0"), "rabbitmq": ("pika", "1.3.2")}
IMPLEMENTATIONS = {"kafka": "apache-kafka", "pulsar": "apache-pulsar", "rabbitmq": "rabbitmq"}


def summary_row(broker: str = "kafka", version: str = "4.1.1", variant: str = "fsync-off",
                workload: str = "smoke-1-topic-1-partition-100b", p99: float = 5.0, rate: float = 1000.0,
                status: str = "ok", invalid_reasons: str | None = None, **columns: Any) -> dict[str, Any]:
    """One summary row with every summary column: latencies scaled from ``p99`` (ms; end-to-end twice publish),
    the achieved rate ``rate`` of a 1,000 msg/s target."""
    library, library_version = CLIENTS[broker]
    row: dict[str, Any] = {c: None for c in SUMMARY_COLUMNS}
    row.update({
        "broker": broker, "broker_implementation": IMPLEMENTATIONS[broker], "broker_version": version,
        "client_library": library, "client_library_version": library_version, "variant": variant,
        "workload": workload, "driver": DRIVERS[broker], "durability_honoured": True,
        "brokerbench_version": "0.1.0", "client_hosts": "localhost", "message_size_bytes": 100, "topics": 1,
        "partitions_per_topic": 1, "producers": 1, "consumers": 1, "target_rate_msg_s": 1000.0,
        "publish_rate_msg_s": rate, "send_rate_msg_s": rate, "consume_rate_msg_s": rate,
        "publish_error_rate_msg_s": 0.0, "measured_seconds": 30.0, "interval_s": 5.0, "workers": 1, "intervals": 6,
        "messages_sent": int(rate * 30), "messages_acked": int(rate * 30), "messages_received": int(rate * 30),
        "send_errors": 0, "backlog_end_msgs": 0, "e2e_negative_count": 0, "latency_overflow_count": 0,
        "kind": "latency", "status": status, "invalid_reasons": invalid_reasons,
        "publish_delay_p99_us": 80.0,
    })
    for prefix, scale in (("publish_latency", 1.0), ("e2e_latency", 2.0)):
        for stat, f in (("avg", 0.4), ("min", 0.1), ("p50", 0.3), ("p75", 0.5), ("p95", 0.8), ("p99", 1.0),
                        ("p999", 1.5), ("p9999", 2.0), ("max", 3.0)):
            row[f"{prefix}_{stat}_ms"] = p99 * scale * f
    unknown = set(columns) - set(row)
    assert not unknown, f"not summary columns: {sorted(unknown)}"
    row.update(columns)
    return row


def write_run(results_root: Path, run_id: str, run_ts: str, rows: Sequence[dict[str, Any]],
              suite: str = "smoke", run_type: str = "manual", min_runs: int = 3) -> Path:
    """One run's files and its history rows, as its aggregate, history, verdicts and run_outcome tasks leave
    them; returns the run directory. Runs are judged against what is already in the history (write them oldest
    first)."""
    dag_id = f"brokerbench_{suite.replace('-', '_')}"
    ctx = RunContext(dag_id=dag_id, run_id=run_id, suite=suite,
                     params={"results_root": str(results_root), "regression_min_runs": min_runs})
    summary = ctx.run_dir / "summary"
    summary.mkdir(parents=True, exist_ok=True)
    write_parquet_dataset(str(summary / "summary.parquet"), list(rows), SUMMARY_SCHEMA, "4.0.1")
    history.write_run_meta(ctx.run_dir, history.run_meta(dag_id, run_id, run_type, run_ts, "local", suite,
                                                         ctx.params))
    root = history.history_root(results_root)
    append_run(root, root, str(ctx.run_dir), run_ts)
    analysis.verdicts(ctx)
    write_outcome(ctx.run_dir, outcome_of(read_verdicts(ctx.run_dir)["verdicts"]))
    return ctx.run_dir
