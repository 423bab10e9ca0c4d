"""Repeated trials: one row per run and track from the rows of its trials.

A run with ``trials`` = N > 1 measures each workload N times back to back
(spec/plan.py); each trial is a summary and history row of its own whose
workload id is ``<workload>.trial<k>`` (``util.trial_id``). The Spark jobs know
nothing of trials. Verdicts, the history series, the comparison and the
report's trends use :func:`combine`: the rows of one run x workload x broker x
driver x variant that differ only by the trial suffix become one row, with

* every figure (rates, latencies, publish delay, CPU percentages, backlog) =
  the **lower median of the valid trials' values** (status ``ok``): the middle
  trial's value for an odd count, the lower of the two middle ones for an even
  count, so always one trial's measured value and never an average (the
  median of the trials' p99 is a median of per-trial p99 values, each read
  from that trial's merged histogram);
* counts (messages, intervals, measured seconds) summed over the valid trials;
* everything else (identity, provenance, durability) from the first valid trial;
* ``trials``, ``trials_valid``, ``trial_statuses`` and, per judged metric,
  ``<metric>_trials_min_<unit>`` / ``<metric>_trials_max_<unit>`` over the trials
  the value came from;
* status ``ok`` when at least one trial is ok; otherwise ``invalid: no valid
  trial of N (trial1: <status>; ...)`` with the trials' invalid reasons, and the
  figures are the median of all trials (shown, never judged nor a baseline).

Rows without a trial suffix (runs with one trial, every run before trials
existed) pass through unchanged. docs/analytics.md, "Trials".
"""

from __future__ import annotations

import re
from statistics import median_low
from typing import Any, Iterable, Mapping

from brokerbench.metrics import METRICS, number
from brokerbench.util import split_trial

#: figures combined by the lower median (rates, latencies, delays, percentages, backlog)
_FIGURE = re.compile(r"^(?!target_rate_).*(_ms|_us|_msg_s|_percent|_msgs)$")
#: counts summed over the trials the figures came from
SUMMED = ("measured_seconds", "intervals", "messages_sent", "messages_acked", "messages_received", "send_errors",
          "publish_latency_count", "e2e_latency_count", "publish_delay_count", "e2e_negative_count",
          "latency_overflow_count")
#: the identity of one measurement apart from its workload's trial suffix
GROUP = ("run_key", "broker", "driver", "variant", "broker_version", "environment")
_UNITS = ("_msg_s", "_ms", "_us")


def is_figure(column: str) -> bool:
    return column not in SUMMED and bool(_FIGURE.match(column))


def spread_columns(metric: str) -> tuple[str, str]:
    """(min, max) column names of a metric: ``publish_latency_p99_ms`` -> ``publish_latency_p99_trials_min_ms``."""
    unit = next(u for u in _UNITS if metric.endswith(u))
    stem = metric[: -len(unit)]
    return f"{stem}_trials_min{unit}", f"{stem}_trials_max{unit}"


def trial_of(row: Mapping[str, Any]) -> int | None:
    return split_trial(str(row.get("workload") or ""))[1]


def _key(row: Mapping[str, Any]) -> tuple:
    return (split_trial(str(row.get("workload") or ""))[0],) + tuple(str(row.get(k)) for k in GROUP)


def combine_group(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One row from the rows of one measurement's trials (see the module docstring)."""
    trials = sorted(rows, key=lambda r: trial_of(r) or 0)
    valid = [r for r in trials if r.get("status") == "ok"]
    used = valid or trials
    out = dict(used[0])
    out["workload"] = split_trial(str(out.get("workload")))[0]
    columns = list(dict.fromkeys(c for r in trials for c in r))
    for c in columns:
        if c in SUMMED:
            values = [v for v in (number(r.get(c)) for r in used) if v is not None]
            total = sum(values) if values else None
            out[c] = int(total) if total is not None and all(isinstance(r.get(c), int) for r in used) else total
        elif is_figure(c):
            values = [v for v in (number(r.get(c)) for r in used) if v is not None]
            out[c] = median_low(values) if values else None
    for m in METRICS:
        values = [v for v in (number(r.get(m.column)) for r in used) if v is not None]
        lo, hi = spread_columns(m.column)
        out[lo], out[hi] = (min(values), max(values)) if values else (None, None)
    out["trials"] = len(trials)
    out["trials_valid"] = len(valid)
    out["trial_statuses"] = "; ".join(f"trial{trial_of(r)}: {r.get('status')}" for r in trials)
    if not valid:
        reasons = list(dict.fromkeys(str(r.get("invalid_reasons")) for r in trials if r.get("invalid_reasons")))
        out["status"] = f"invalid: no valid trial of {len(trials)} ({out['trial_statuses']})"
        out["invalid_reasons"] = "; ".join(reasons) or out["trial_statuses"]
    return out


def combine(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows with every measurement's trials combined into one row (order kept: where its first trial was)."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    order: list[tuple[str, Any]] = []
    for r in rows:
        if trial_of(r) is None:
            order.append(("row", r))
            continue
        k = _key(r)
        if k not in groups:
            groups[k] = []
            order.append(("group", k))
        groups[k].append(r)
    return [dict(x) if kind == "row" else combine_group(groups[x]) for kind, x in order]


def trials_of(combined: Mapping[str, Any], rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The trial rows among ``rows`` that ``combined`` was made of (trial order); [] for a row without trials."""
    if not combined.get("trials"):
        return []
    key = _key(combined)
    return sorted((r for r in rows if trial_of(r) is not None and _key(r) == key), key=lambda r: trial_of(r) or 0)
