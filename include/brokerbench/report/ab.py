"""The report's A/B section: side B against side A, measured alternately in one run (brokerbench.ab_verdicts).

Two tables. **Per percentile, across the brokers** (:func:`percentile_table`): one row per workload x broker
(side A's variant -> side B's), one cell per latency percentile, ``B/A [interval]`` coloured by its verdict, and
the suspects of the row's changed percentiles - the answer to "what does fsync cost on each broker" when side B
is fsync-on and side A fsync-off (docs/analytics.md, "What fsync costs"). **Every metric** (:func:`ab_section`'s
rows): medians, ratio, interval, p, trials and verdict, with the suspects' sentence under each changed metric.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from brokerbench.metrics import Judgement
from brokerbench.regression import verdict_category

#: the A/B table's columns (ab_section)
AB_COLUMNS = ["workload", "broker", "variant", "metric", "A median", "B median", "B/A", "interval", "p", "trials A/B",
              "verdict"]
#: the percentile table's columns: (verdict metric, heading)
PERCENTILES = [("publish_latency_p50_ms", "publish p50"), ("publish_latency_p99_ms", "publish p99"),
               ("publish_latency_p999_ms", "publish p99.9"), ("e2e_latency_p50_ms", "end-to-end p50"),
               ("e2e_latency_p99_ms", "end-to-end p99"), ("e2e_latency_p999_ms", "end-to-end p99.9")]
#: the CSS class of each verdict category (regression.verdict_category)
VERDICT_CSS = {Judgement.REGRESSED: "bad", Judgement.IMPROVED: "good", Judgement.UNCHANGED: "",
               Judgement.INSUFFICIENT: "meta", Judgement.NO_DATA: "meta",
               f"{Judgement.NOT_JUDGED}: invalid": "notjudged", f"{Judgement.NOT_JUDGED}: partial": "notjudged"}
_WORDS: dict[str, str] = {Judgement.REGRESSED: "B slower", Judgement.IMPROVED: "B faster",
          Judgement.UNCHANGED: "no difference at this power"}


def _ratio_cell(v: Mapping[str, Any]) -> str:
    iv = v.get("interval") or {}
    if iv.get("ratio") is None:
        return str(v.get("verdict"))
    text = f"\u00d7{iv['ratio']:.3g}"
    if iv.get("ci_low") is not None and iv.get("ci_high") is not None:
        text += f" [{iv['ci_low']:.3g}, {iv['ci_high']:.3g}]"
    return text


def side_b_variants(plan: Mapping[str, Any]) -> dict[str, str]:
    """Side A's variant -> side B's, from the plan's items (``group_variant``: the side A variant a side B item
    runs beside); {} when side B runs side A's variants."""
    out: dict[str, str] = {}
    for item in plan.get("items") or []:
        group = item.get("group_variant")
        if item.get("side") == "B" and group and group != item.get("variant"):
            out.setdefault(str(group), str(item.get("variant")))
    return out


def percentile_table(verdicts: Sequence[Mapping[str, Any]], plan: Mapping[str, Any]) -> dict[str, Any] | None:
    """One row per workload x broker x variant of the A/B verdicts, a ``B/A [interval]`` cell per percentile."""
    rows = [v for v in verdicts if v.get("rule") == "A/B"]
    if not rows:
        return None
    b_of = side_b_variants(plan)
    groups: dict[tuple[str, str, str], dict[str, Mapping[str, Any]]] = {}
    for v in rows:
        groups.setdefault((str(v.get("workload")), str(v.get("broker")), str(v.get("variant"))), {})[
            str(v.get("metric"))] = v
    columns = [(m, label) for m, label in PERCENTILES if any(m in g for g in groups.values())]
    out = []
    for (workload, broker, variant), by_metric in sorted(groups.items()):
        cells = [{"text": _ratio_cell(by_metric[m]) if m in by_metric else "–",
                  "cls": VERDICT_CSS.get(verdict_category(by_metric[m].get("verdict")), "") if m in by_metric else ""}
                 for m, _ in columns]
        changed = [by_metric[m] for m, _ in columns if m in by_metric and (by_metric[m].get("suspects") or {})]
        lead = (changed[0].get("suspects") or {}) if changed else {}
        brokers = [s for s in lead.get("suspects", []) if not s["column"].startswith("host_")]
        named = [f"{s['title']} {s['change']}" for s in brokers[:3]]
        said = ("suspects: " + ", ".join(named)) if named else \
            ("nothing on the brokers moved" if lead.get("cleared") else "")
        out.append({"workload": workload, "broker": broker,
                    "sides": f"{variant} \u2192 {b_of[variant]}" if variant in b_of else variant,
                    "cells": cells, "suspects": said})
    return {"columns": [label for _, label in columns], "rows": out}


def ab_section(verdicts: Sequence[Mapping[str, Any]], plan: Mapping[str, Any]) -> dict[str, Any] | None:
    """An A/B run's verdicts (rule A/B): the percentile table and one row per workload x broker x variant and
    metric, regressed and improved first; None when the run is no A/B run."""
    rows = [v for v in verdicts if v.get("rule") == "A/B"]
    if not rows:
        return None
    order: dict[str, int] = {Judgement.REGRESSED: 0, Judgement.IMPROVED: 1}
    out = []
    for v in sorted(rows, key=lambda v: order.get(str(v.get("verdict")), 2)):
        iv = v.get("interval") or {}
        verdict = _WORDS.get(str(v.get("verdict")), str(v.get("verdict")))
        cells = {"workload": v.get("workload"), "broker": v.get("broker"), "variant": v.get("variant"),
                 "metric": v.get("metric"), "A median": v.get("baseline_median"), "B median": v.get("value"),
                 "B/A": iv.get("ratio"), "p": v.get("p_value"), "verdict": verdict,
                 "interval": (f"{iv['ci_low']:.3f} to {iv['ci_high']:.3f} ({iv['confidence'] * 100:.1f} %)"
                              if iv.get("ci_low") is not None else "–"),
                 "trials A/B": f"{iv.get('n_a', v.get('baseline_n'))} / {iv.get('n_b', '–')}"}
        out.append({"cls": VERDICT_CSS.get(verdict_category(v.get("verdict")), ""), "cells": cells,
                    "suspects": (v.get("suspects") or {}).get("sentence")})
    return {"columns": AB_COLUMNS, "rows": out, "side_b": json.dumps(plan.get("compare_with") or {}),
            "percentiles": percentile_table(verdicts, plan)}
