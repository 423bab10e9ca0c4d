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
               "p_value", "evidence", "suspects"]
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
        cells = {k: ("" if r.get(k) is None else r.get(k)) for k in CSV_COLUMNS}
        cells["suspects"] = (r.get("suspects") or {}).get("sentence", "")  # the sentence; the lists: the JSON
        writer.writerow(cells)
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


def suspect_sentences(verdicts: Iterable[Any]) -> list[str]:
    """The sentence that leads each regressed or improved verdict (brokerbench.suspects), prefixed with what it
    measured: ``<workload> <broker> <variant>: publish_latency_p99_ms +38 % [+21, +55]: suspects: ...``."""
    out = []
    for v in verdicts:
        r = v if isinstance(v, dict) else v.to_dict()
        sentence = (r.get("suspects") or {}).get("sentence")
        if sentence:
            side = " (A/B)" if r.get("rule") == "A/B" else ""
            out.append(f"{r.get('workload')} {r.get('broker')} {r.get('variant')}{side}: {sentence}")
    return out
