"""Loading what the report shows: summary tables, provenance records, the plan.

Everything is optional except ``summary/summary.csv``'s absence being
reported: a missing or unreadable file yields an empty value, never an
exception, so a report can always be written for a run that got partway.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from brokerbench.changepoint import version_key
from brokerbench.history import read_history
from brokerbench.trials import combine

#: column name suffix -> unit shown in headers (longest suffixes first)
UNIT_SUFFIXES = [
    ("_msg_s", "msg/s"),
    ("_percent", "%"),
    ("_seconds", "s"),
    ("_bytes", "bytes"),
    ("_msgs", "msgs"),
    ("_count", "count"),
    ("_ms", "ms"),
    ("_us", "µs"),
    ("_s", "s"),
]
#: columns whose unit is not a suffix of the name
UNIT_BY_NAME = {
    "messages_sent": "msgs",
    "messages_acked": "msgs",
    "messages_received": "msgs",
    "send_errors": "msgs",
    "workers": "count",
    "intervals": "count",
    "topics": "count",
    "partitions_per_topic": "count",
    "producers": "count",
    "consumers": "count",
    "interval_index": "index",
}


def column_unit(name: str) -> str | None:
    """The unit a column carries (from its name), None for text/identity columns."""
    if name in UNIT_BY_NAME:
        return UNIT_BY_NAME[name]
    for suffix, unit in UNIT_SUFFIXES:
        if name.endswith(suffix):
            return unit
    return None


def column_label(name: str) -> str:
    """The column name without its unit suffix, words separated by spaces."""
    base = name
    if name not in UNIT_BY_NAME:
        for suffix, _ in UNIT_SUFFIXES:
            if name.endswith(suffix):
                base = name[: -len(suffix)]
                break
    return base.replace("_", " ")


def parse_cell(text: str | None) -> Any:
    """CSV text -> None, bool, int, float or str."""
    if text is None or text == "":
        return None
    if text in ("True", "true"):
        return True
    if text in ("False", "false"):
        return False
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def read_table(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """Columns and typed rows of a CSV file; ([], []) when it is missing."""
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            rows = [{k: parse_cell(v) for k, v in row.items() if k is not None} for row in reader]
            return list(reader.fieldnames or []), rows
    except (OSError, csv.Error, UnicodeDecodeError):
        return [], []


def read_json(path: Path) -> Any:
    """Parsed JSON, or None when missing or malformed."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def summary_order(row: Mapping[str, Any]) -> tuple:
    """The order of a run's rows wherever the report lists them, as the aggregation writes summary.csv: broker,
    implementation, version in version order (the rows of two versions of a broker adjacent, the older first),
    variant, workload, driver."""
    def text(column: str) -> str:
        return "" if row.get(column) is None else str(row.get(column))
    return (text("broker"), text("broker_implementation"), version_key(row.get("broker_version")), text("variant"),
            text("workload"), text("driver"))


def _joined(*values: Any) -> str | None:
    present = [str(v) for v in values if v is not None and str(v) != ""]
    return " ".join(present) or None


def implementation_text(row: Mapping[str, Any]) -> str | None:
    """What served the row: its broker implementation and version, e.g. "apache-kafka 4.1.1" (None: not
    recorded)."""
    return _joined(row.get("broker_implementation"), row.get("broker_version"))


def client_text(row: Mapping[str, Any]) -> str | None:
    """The client library the row's workers ran and its version, e.g. "confluent-kafka 2.16.1" (several,
    comma-joined, as the summary lists them; None: not recorded), with the load engine that ran it in
    parentheses when the row names one (a ``client_engine`` column: none yet, the library's name says it)."""
    text = _joined(row.get("client_library"), row.get("client_library_version"))
    engine = row.get("client_engine")
    return f"{text} ({engine})" if text and engine not in (None, "") else text


def as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if value.lower() in ("true", "yes", "1"):
            return True
        if value.lower() in ("false", "no", "0"):
            return False
    if isinstance(value, (int, float)):
        return bool(value)
    return None


@dataclass
class RunData:
    run_dir: Path
    dag_id: str | None
    run_id: str
    summary_columns: list[str]
    summary: list[dict[str, Any]]
    timeseries: list[dict[str, Any]]
    plan: dict[str, Any] | None
    #: (broker, variant) -> provenance/<broker>__<variant>.json
    broker_provenance: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    hosts: dict[str, Any] | None = None
    #: any other provenance/*.json, by file name
    other_provenance: dict[str, Any] = field(default_factory=dict)
    #: summary/omb/*.json documents (quantile maps for the quantile curves)
    omb: list[dict[str, Any]] = field(default_factory=list)
    #: summary/regression.json (verdicts of this run), None when absent
    regression: dict[str, Any] | None = None
    #: summary/sweep.csv rows (throughput sweep steps)
    sweep: list[dict[str, Any]] = field(default_factory=list)
    #: history rows of this run's tracks (every version), trials combined (brokerbench.trials), for trend lines
    history: list[dict[str, Any]] = field(default_factory=list)
    #: the summary with each measurement's trials combined into one row (= ``summary`` without trials)
    combined: list[dict[str, Any]] = field(default_factory=list)
    #: summary/brokermetrics.csv: the brokers' own metrics and the hosts' figures per interval
    broker_series: list[dict[str, Any]] = field(default_factory=list)
    #: summary/brokermetrics-panels.json: broker -> {"panels", "metrics"} of its catalog
    broker_catalogs: dict[str, Any] = field(default_factory=dict)

    def durability(self, broker: str, variant: str, row: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """honoured (True/False/None = unknown), note, settings, implementation, version."""
        prov = self.broker_provenance.get((broker, variant), {})
        dur = prov.get("durability")
        if not isinstance(dur, dict):
            dur = {}
        row = row or {}
        honoured = as_bool(row.get("durability_honoured"))
        if honoured is None:
            honoured = as_bool(dur.get("honoured"))
        settings = dur.get("settings")
        if settings is None and row.get("durability_settings"):
            try:
                settings = json.loads(row["durability_settings"])
            except (TypeError, ValueError):
                settings = row["durability_settings"]
        return {
            "honoured": honoured,
            "note": row.get("durability_note") or dur.get("note"),
            "settings": settings,
            "implementation": row.get("broker_implementation") or prov.get("implementation"),
            "version": row.get("broker_version") or prov.get("version"),
        }


def load_run(run_dir: str | Path, history_root: str | Path | None = None) -> RunData:
    run_dir = Path(run_dir)
    summary_columns, summary = read_table(run_dir / "summary" / "summary.csv")
    summary.sort(key=summary_order)  # summaries written before the aggregation sorted them so
    _, timeseries = read_table(run_dir / "summary" / "timeseries.csv")
    plan = read_json(run_dir / "plan.json")
    if not isinstance(plan, dict):
        plan = None
    dag_id = run_dir.parent.name if run_dir.parent.parent.name == "runs" else None
    data = RunData(run_dir=run_dir, dag_id=dag_id, run_id=run_dir.name, summary_columns=summary_columns,
                   summary=summary, timeseries=timeseries, plan=plan, combined=combine(summary))
    omb_dir = run_dir / "summary" / "omb"
    if omb_dir.is_dir():
        data.omb = [d for d in (read_json(p) for p in sorted(omb_dir.glob("*.json"))) if isinstance(d, dict)]
    regression = read_json(run_dir / "summary" / "regression.json")
    data.regression = regression if isinstance(regression, dict) else None
    _, data.sweep = read_table(run_dir / "summary" / "sweep.csv")
    _, data.broker_series = read_table(run_dir / "summary" / "brokermetrics.csv")
    catalogs = read_json(run_dir / "summary" / "brokermetrics-panels.json")
    data.broker_catalogs = catalogs if isinstance(catalogs, dict) else {}
    if history_root is not None and summary:
        data.history = _track_history(history_root, data.combined)
    prov_dir = run_dir / "provenance"
    if prov_dir.is_dir():
        for path in sorted(prov_dir.glob("*.json")):
            record = read_json(path)
            if record is None:
                data.other_provenance[path.name] = {"error": "file could not be read as JSON"}
            elif path.name == "hosts.json":
                data.hosts = record if isinstance(record, dict) else {"hosts": record}
            elif "__" in path.stem and isinstance(record, dict):
                broker, variant = path.stem.split("__", 1)
                data.broker_provenance[(broker, variant)] = record
            else:
                data.other_provenance[path.name] = record
    return data


def _track_history(history_root: str | Path, summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """History rows of the run's brokers x workloads x variants (all versions), one per run and track (trials
    combined); [] if unreadable. ``summary``: the run's combined rows."""
    try:
        wanted = {(r.get("broker"), r.get("workload"), r.get("variant")) for r in summary}
        rows = combine(read_history(history_root))
    except Exception:  # a broken history must never stop the run's own report
        return []
    return [r for r in rows if (r.get("broker"), r.get("workload"), r.get("variant")) in wanted]


def run_environment(data: RunData) -> str | None:
    """The environment the run's plan names (local, aws, external), None without a plan."""
    env = (data.plan or {}).get("environment")
    if isinstance(env, dict):
        env = env.get("name") or env.get("kind")
    return str(env) if env else None
