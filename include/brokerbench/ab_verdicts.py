"""The verdicts of an A/B run: side B against side A, per workload x broker x variant and metric.

An A/B run (param ``compare_with``, spec/plan.py) measures each workload's
trials for side A (the run's own params) and side B alternately. Its summary
has one row per trial and side: ``<workload>.trial<k>`` (A) and
``<workload>.B.trial<k>`` (B). Per metric of :data:`brokerbench.metrics.METRICS`
the valid trials' values of the two sides go to :func:`brokerbench.abtest.compare`
(ratio B/A with an exact rank test's interval) and become a
:class:`~brokerbench.regression.Verdict` with rule ``A/B``, written with the
run's other verdicts, so the report, the outcome and the exit code follow it
like a regression:

* the interval excludes 1 and reaches the metric's threshold (its relative
  term and absolute floor, the same as against history: the interval's end
  farther from 1 is a change of at least both) in the worse direction:
  ``regressed`` (B slower); in the better one: ``improved``;
* otherwise ``unchanged``: "no difference at this power" (the interval holds 1),
  or a difference the interval shows to be smaller than the threshold (all of
  it lies inside the threshold).

Why the interval's far end and not the estimate: a change exactly the size of
the threshold has an estimate below the threshold in about half of all runs, so
a rule on the estimate finds it in about half; the interval's far end rules out
only the changes the trials show to be smaller than the threshold. An A/A run's
false positives stay those of the interval (at most its 1 - confidence).
* fewer usable trials than the rank test needs: ``not judged: too few valid trials``.

A trial is usable when its status is ``ok``, or when the only reasons it is
invalid are the host's load (``foreign load: ...``, ``contended: ...``): such a
trial is never a baseline against history, measured at another time, but the
two sides of an A/B run took turns under that same load, and the ABBA order
weighs a drift over the run on both alike. A trial the load generator limited
(client-bound, a late send schedule, a rate below target), a fault, a partial
phase or consumers that fell behind is never used.

docs/analytics.md, "A/B in one run".
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from brokerbench import abtest, suspects
from brokerbench.metrics import METRICS, Judgement, Metric, number, unit_of
from brokerbench.regression import Verdict
from brokerbench.util import split_side, split_trial

#: the rule name of an A/B verdict (Verdict.rule)
RULE_AB = "A/B"


def side_of(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """(base workload id, "A" or "B") of an A/B run's trial row; None for a row without a trial."""
    base, trial = split_trial(str(row.get("workload") or ""))
    if trial is None:
        return None
    base, is_b = split_side(base)
    return base, "B" if is_b else "A"


def _trial_label(row: Mapping[str, Any]) -> str:
    """"trial <k>" of a trial row."""
    return f"trial {split_trial(str(row.get('workload') or ''))[1]}"


#: how much of an unusable trial's status an A/B verdict's evidence quotes (characters)
WHY_NOT_CHARS = 240


def _why_not(row: Mapping[str, Any]) -> str:
    """Why a trial is not usable: its status without the host's load reasons (those alone would not exclude it)."""
    status = str(row.get("status") or "no status")
    if status.startswith("invalid: ") and row.get("invalid_reasons"):
        status = f"invalid: {row['invalid_reasons']}"
    why = re.sub(r"(; )+", "; ", HOST_LOAD_REASONS.sub("", status)).replace(": ; ", ": ").strip(" ;")
    return why if len(why) <= WHY_NOT_CHARS else why[:WHY_NOT_CHARS - 3] + "..."


def group_sides(rows: Iterable[Mapping[str, Any]], side_b_variants: Mapping[str, str] | None = None
                ) -> dict[tuple[str, str, str], dict[str, list[Mapping[str, Any]]]]:
    """Trial rows by (base workload, broker, side A's variant), then side. ``side_b_variants``: side B's variant ->
    the side A variant it is compared with, in a run whose side B runs other variants (``compare_with.variants``:
    side B's rows carry their own variant)."""
    groups: dict[tuple[str, str, str], dict[str, list[Mapping[str, Any]]]] = {}
    for r in rows:
        s = side_of(r)
        if s is None:
            continue
        variant = str(r.get("variant"))
        if s[1] == "B" and side_b_variants:
            variant = side_b_variants.get(variant, variant)
        key = (s[0], str(r.get("broker")), variant)
        groups.setdefault(key, {"A": [], "B": []})[s[1]].append(r)
    return groups


def judge(metric: Metric, a: list[float], b: list[float]) -> tuple[str, abtest.Comparison | None, str]:
    """(verdict, comparison, evidence) of one metric from the valid trials' values of each side."""
    need = abtest.min_trials_per_side()
    if min(len(a), len(b)) < need:
        return (f"{Judgement.NOT_JUDGED}: too few valid trials", None,
                f"{len(a)} valid trial(s) of A and {len(b)} of B: the rank test needs {need} per side")
    c = abtest.compare(a, b, higher_is_better=metric.better == "higher")
    text = abtest.describe(c, metric.column, unit_of(metric.column))
    if c.verdict not in ("slower", "faster"):
        return Judgement.UNCHANGED, c, text
    assert c.ci_low is not None and c.ci_high is not None  # a slower / faster verdict has an interval
    reach = abs((c.ci_high if c.ci_low > 1 else c.ci_low) - 1)  # the interval's end farther from 1, as a change
    if reach < metric.relative or c.median_a * reach < metric.floor:
        return (Judgement.UNCHANGED, c, f"{text}; the whole interval lies within the threshold ({metric.relative:.0%} "
                                        f"and {metric.floor:g} {unit_of(metric.column)}): smaller than the threshold, "
                                        "not a verdict")
    return (Judgement.REGRESSED if c.verdict == "slower" else Judgement.IMPROVED), c, text


def verdicts(rows: Iterable[Mapping[str, Any]], metrics: Iterable[Metric] = METRICS,
             side_b_variants: Mapping[str, str] | None = None) -> list[Verdict]:
    """The A/B verdicts of a run's summary rows (one per trial and side); [] when the run has no side B.
    ``side_b_variants``: as :func:`group_sides`; a verdict's ``variant`` is side A's."""
    out: list[Verdict] = []
    metrics = tuple(metrics)
    for (workload, broker, variant), sides in sorted(group_sides(rows, side_b_variants).items()):
        if not sides["B"]:
            continue
        valid = {s: [r for r in rs if usable(r)] for s, rs in sides.items()}
        loaded = sum(1 for rs in valid.values() for r in rs if r.get("status") != "ok")
        what = (f"A: {_describe_side(sides['A'])}; B: {_describe_side(sides['B'])}; usable trials "
                f"{len(valid['A'])} of {len(sides['A'])} (A), {len(valid['B'])} of {len(sides['B'])} (B)"
                + (f", {loaded} of them invalid for the host's load only" if loaded else "")
                + "".join(f"; {s} {_trial_label(r)} not usable: {_why_not(r)}"
                          for s, rs in sides.items() for r in rs if not usable(r)))
        version = (valid["B"] or sides["B"])[0].get("broker_version")
        found: suspects.Evidence | None = None  # the candidates' A/B findings, made once if a metric changed
        for m in metrics:
            a = _values(valid["A"], m.column)
            b = _values(valid["B"], m.column)
            if not a and not b:
                continue  # a metric this workload does not measure (e.g. end-to-end without consumers)
            verdict, c, evidence = judge(m, a, b)
            out.append(Verdict(
                workload=workload, broker=broker, variant=variant, broker_version=version, metric=m.column,
                better=m.better, verdict=verdict, value=c.median_b if c else None,
                baseline_median=c.median_a if c else None, baseline_n=len(a),
                change=(c.median_b - c.median_a) if c else None,
                change_percent=round((c.ratio - 1) * 100, 2) if c else None,
                evidence=f"{evidence} ({what})", rule=RULE_AB, p_value=c.p_value if c else None,
                interval={"ratio": c.ratio, "ci_low": c.ci_low, "ci_high": c.ci_high,
                              "confidence": c.achieved_confidence, "n_a": c.n_a, "n_b": c.n_b} if c else None))
            if verdict in (Judgement.REGRESSED, Judgement.IMPROVED):
                found = found or suspects.from_trials(broker, valid["A"], valid["B"])
                out[-1].suspects = found.suspects(suspects.head_of(out[-1]), suspects.change_of(out[-1])).to_dict()
    return out


#: the reasons of a trial's invalidity that are the host's load alone, as the aggregation words them (spark
#: phase_tables.contention_rows; their own text holds "; ", so they are matched whole, not split)
HOST_LOAD_REASONS = re.compile(r"foreign load: .*?\(limit [^)]*\)|contended: .*?\(its processes: [^)]*\)")


def usable(row: Mapping[str, Any]) -> bool:
    """Whether an A/B trial row counts: ok, or invalid for the host's load only (see the module docstring)."""
    status = str(row.get("status") or "")
    if status == "ok":
        return True
    if not status.startswith("invalid: "):
        return False  # partial, failed, or no status
    reasons = str(row.get("invalid_reasons") or "")
    rest = HOST_LOAD_REASONS.sub("", reasons)
    return bool(reasons.strip()) and not rest.replace(";", "").strip()


def _values(rows: list[Mapping[str, Any]], column: str) -> list[float]:
    return [v for v in (number(r.get(column)) for r in rows) if v is not None and v > 0]


def _describe_side(rows: list[Mapping[str, Any]]) -> str:
    """What a side ran: its broker version, client library and driver (from its first row)."""
    if not rows:
        return "no rows"
    r = rows[0]
    return (f"{r.get('broker')} {r.get('broker_version') or '?'}, {r.get('client_library') or '?'}, driver "
            f"{r.get('driver')}, variant {r.get('variant')}")
