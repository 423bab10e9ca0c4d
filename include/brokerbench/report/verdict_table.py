"""Regression verdicts on disk (summary/regression.json and .csv) and as tables."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable, Sequence

from brokerbench import util

CSV_COLUMNS = ["workload", "broker", "variant", "broker_version", "metric", "better", "verdict", "rule", "value",
               "baseline_median", "baseline_spread", "baseline_n", "change", "change_percent", "threshold",
               "p_value", "evidence"]
TEXT_COLUMNS = ["workload", "broker", "variant", "metric", "verdict", "rule", "value", "baseline_median",
                "change_percent", "threshold", "p_value", "baseline_n"]


def write_verdicts(run_dir: str | Path, verdicts: Sequence[Any], rule: Any, run_key: str) -> Path:
    run_dir = Path(run_dir)
    out = run_dir / "summary"
    out.mkdir(parents=True, exist_ok=True)
    rows = [v.to_dict() for v in verdicts]
    rule_doc = asdict(rule)
    doc = {"run_key": run_key, "rule": rule_doc, "verdicts": rows}
    (out / "regression.json").write_text(json.dumps(doc, indent=2, default=str))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in CSV_COLUMNS})
    (out / "regression.csv").write_text(buf.getvalue())
    return out / "regression.json"


def read_verdicts(run_dir: str | Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(run_dir) / "summary" / "regression.json").read_text())
    except (OSError, ValueError):
        return None


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def text_table(verdicts: Iterable[Any], columns: Sequence[str] = TEXT_COLUMNS) -> str:
    """Verdicts (objects or dicts) as a plain-text table for task logs."""
    rows = [v if isinstance(v, dict) else v.to_dict() for v in verdicts]
    return util.text_table(columns, [[_fmt(r.get(c)) for c in columns] for r in rows])
