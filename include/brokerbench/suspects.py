"""Suspects: which of the brokers' own metrics and the hosts' figures moved when a latency or a rate did.

A verdict that calls a judged metric (:data:`brokerbench.metrics.METRICS`) regressed or improved gets its
suspects: the same statistics run over every candidate of the same rows - each metric of the broker's
catalog (include/metrics/<broker>.yaml: request times, log flush, journal sync, GC, queues) and the host
sampler's figures (CPU, disk, network):

* an A/B verdict (:mod:`brokerbench.ab_verdicts`): the A/B interval over the candidate's per-trial figures
  of the same usable trials (:func:`compare_trials`). On the log scale when every figure is > 0 (B / A, the
  Hodges-Lehmann estimate and the exact rank-sum interval of :mod:`brokerbench.abtest`); with a figure of 0
  (a queue that stayed empty, a counter that never moved) the same interval of the shift B - A;
* a verdict against history (:mod:`brokerbench.regression`): the history rule over the candidate's series
  of the same track and earlier runs (:func:`brokerbench.regression.judge_series`), with the candidate's
  minimum effect as its relative threshold.

A candidate is a **suspect** when it changed significantly by at least its minimum effect
(:data:`MIN_EFFECT`, 10 %): the whole A/B interval lies beyond a 10 % change in one direction (or the shift's
interval excludes 0 and reaches 10 % of side A's median), or the history rule calls it regressed or improved.
A catalog metric with events on one side only (log flushes with fsync on, none with it off: "no events
during the phase" on every trial of the other side) is a suspect that **appeared** (or vanished). Suspects
are ranked the brokers' own metrics first, then the hosts' (a busier disk says where the time went, a broker's
log flush says what spent it: both move with an fsync per message, by changes of a like size), each group by the
size of the change (``|log(B / A)|``, a side at 0 counted as the unit's floor; appeared and vanished first), then
catalog order.
A suspect must have moved the way that explains the change: its worse way (higher, or lower where the catalog
says lower is worse) with a regression, its better way with an improvement. A candidate that moved the other way
went with the change without causing it (behind a slower network Kafka's fetches find data waiting and take
less time), and a figure of the clients' load (the catalog's ``load``: requests, bytes or messages per second)
follows the load and the clients' batching: both are listed as **moved with it**, never as suspects.
A candidate measured on both sides that did not change so is **cleared**; one measured on too few trials or
runs is not compared. Each verdict gets one sentence (:attr:`Suspects.sentence`), e.g. ``publish_latency_p99_ms
+38 % [+21, +55]: suspects: Log flush: p99 +610 % [+420, +790], host disk utilisation +45 % [+20, +71];
cleared: GC time, Request handlers idle``; a change that moved none of the brokers' own metrics says
"nothing on the brokers moved: look at the clients or the network" (and what moved on the hosts, if anything).

Many candidates are tested per verdict (about 20), so some would pass by chance alone. The control
(docs/analytics.md, "Suspects"): suspects are looked for only where the judged metric's own verdict is
a regression or an improvement (a gatekeeping order: the candidates are a second family, examined only
when the first rejected), and each needs the minimum effect besides its interval, which a chance
separation of four trials rarely reaches. bench/false_suspects.py measures what is left in A/A runs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from statistics import median, median_low
from typing import Any, Iterable, Literal, Mapping, Sequence

from brokerbench import abtest
from brokerbench.metrics import Judgement, Metric, number

#: the smallest change (a fraction of the baseline) a suspect has, with confidence
MIN_EFFECT = 0.10
#: at most this many cleared candidates are named in a sentence (all are in regression.json)
CLEARED_NAMED = 4
#: ... and at most this many suspects
SUSPECTS_NAMED = 4

#: the host figures' columns start with it; every other candidate is a broker's own
HOST_PREFIX = "host_"
#: the host sampler's figures (spark_jobs/brokerbench_spark/broker_metrics.py HOST_METRICS): id -> (title, unit)
HOST_CANDIDATES = {
    "host_cpu_percent": ("host CPU", "%"),
    "host_disk_util_percent": ("host disk utilisation", "%"),
    "host_disk_write_mb_per_s": ("host disk written", "MB/s"),
    "host_net_tx_mb_per_s": ("host network sent", "MB/s"),
}

#: the smallest change that is a suspect, per unit as the catalogs write it (include/metrics/*.yaml)
FLOORS = {"ms": 0.05, "ms/s": 1.0, "percent": 1.0, "per_s": 1.0, "mb/s": 0.1, "mb": 1.0, "messages": 1.0,
          "requests": 1.0, "entries": 1.0, "partitions": 1.0, "processes": 1.0}

NOTHING_MOVED = "nothing on the brokers moved: look at the clients or the network"
#: a verdict's change, which says which way of a candidate's move explains it
Change = Literal["regressed", "improved"]

Status = Literal["suspect", "cleared", "not compared"]


@dataclass(frozen=True)
class Candidate:
    """A figure that may explain a change: a catalog metric of the broker or a host figure."""

    column: str  #: the summary column (ends with its unit)
    title: str  #: how a user reads it, e.g. "Kafka Log flush: p50"
    unit: str  #: the unit as shown beside a value ("ms", "%", "per s")
    worse: Literal["higher", "lower"] = "higher"
    #: a metric that counts events (a timer's mean, a quantile): "no events" means it did not happen at all
    events: bool = False
    #: the smallest change in the candidate's unit that is a suspect (:data:`FLOORS`): a remote time of 0.00 ms
    #: against 0.01 ms is no lead, however significant
    floor: float = 0.0
    #: a figure of the clients' load (the catalog's ``load``): never a suspect
    load: bool = False


@dataclass(frozen=True)
class Finding:
    """One candidate's comparison. Ratios are B / A (or this run / the track's level), no unit; the shift and
    the medians are in the candidate's unit."""

    column: str
    title: str
    unit: str
    status: Status
    #: up, down, appeared (events on B or this run only), vanished; None when not a suspect
    direction: str | None = None
    ratio: float | None = None  #: estimate of B / A (log scale), or value / level (history)
    ci_low: float | None = None  #: interval of B / A, or of the shift B - A (``scale`` "shift")
    ci_high: float | None = None
    scale: str = "log"  #: "log" (ratio interval), "shift" (B - A interval, a figure of 0 present), "history"
    median_a: float | None = None  #: side A's lower median, or the track's level (history)
    median_b: float | None = None  #: side B's lower median, or this run's value (history)
    n_a: int = 0  #: trials of A (runs of the baseline) with a figure
    n_b: int = 0
    evidence: str = ""

    floor: float = 0.0  #: the candidate's floor (Candidate.floor), in its unit
    worse: str = "higher"  #: the candidate's worse way (Candidate.worse)
    load: bool = False  #: a figure of the clients' load (Candidate.load)

    def explains(self, change: Change | None) -> bool:
        """Whether the move is one that can cause the verdict's change: its worse way with a regression, its
        better way with an improvement (any way when the change has no direction); never a load figure."""
        if self.load:
            return False
        if change is None or self.direction is None:
            return True
        worse = self.direction in (("up", "appeared") if self.worse == "higher" else ("down", "vanished"))
        return worse == (change == "regressed")

    def with_it_text(self) -> str:
        """``Kafka FetchConsumer: total -53 % [-66, -43] (the other way)``."""
        why = "the clients' load" if self.load else "the other way"
        return f"{self.title} {self.change_text()} ({why})"

    @property
    def effect(self) -> float:
        """|log of the change|: of B / A, where a side at 0 counts as its floor (a disk busy 0 -> 7 % is a
        change of 7 floors of 1 %, not an infinite one); inf for a metric that appeared or vanished."""
        if self.direction in ("appeared", "vanished"):
            return math.inf
        if self.ratio is not None and self.ratio > 0:
            return abs(math.log(self.ratio))
        a, b = abs(self.median_a or 0.0), abs(self.median_b or 0.0)
        if self.floor > 0:
            return abs(math.log(max(b, self.floor) / max(a, self.floor)))
        return math.inf if a != b else 0.0

    def change_text(self) -> str:
        """``+610 % [+420, +790]``, ``0 -> 3.2 ms``, ``appeared (3.2 ms; no events on A)``."""
        u = f" {self.unit}" if self.unit and self.unit != "%" else (" %" if self.unit == "%" else "")
        if self.direction == "appeared":
            return f"appeared ({_num(self.median_b)}{u}; no events before)"
        if self.direction == "vanished":
            return f"vanished ({_num(self.median_a)}{u} before; no events now)"
        if self.scale == "log" and self.ratio is not None:
            text = _pct(self.ratio)
            if self.ci_low is not None and self.ci_high is not None:
                text += f" [{_pct(self.ci_low, False)}, {_pct(self.ci_high, False)}]"
            return text
        if self.scale == "shift":
            if self.median_a:
                text = _pct((self.median_a + _shift(self)) / self.median_a) if self.median_a > 0 else ""
            else:
                text = f"{_num(self.median_a)} -> {_num(self.median_b)}{u}"
            if self.ci_low is not None and self.ci_high is not None:
                text += f" [{_signed(self.ci_low)}, {_signed(self.ci_high)}{u}]"
            return text.strip()
        if self.ratio is not None:  # history
            return _pct(self.ratio)
        return f"{_num(self.median_a)} -> {_num(self.median_b)}{u}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "change": self.change_text() if self.status == "suspect" else None}


@dataclass
class Suspects:
    """What moved with one verdict's change (see the module docstring)."""

    head: str  #: the verdict's own change, e.g. ``publish_latency_p99_ms +38 % [+21, +55]``
    suspects: list[Finding] = field(default_factory=list)  #: ranked, largest change first
    #: moved significantly, but the other way or as the clients' load (:meth:`Finding.explains`); ranked
    with_it: list[Finding] = field(default_factory=list)
    cleared: list[Finding] = field(default_factory=list)
    not_compared: list[Finding] = field(default_factory=list)
    how: str = ""  #: which statistics (the A/B interval over N vs M trials, the history rule)

    @property
    def sentence(self) -> str:
        if not self.suspects and not self.cleared:
            return (f"{self.head}: no broker or host metric has enough history to compare"
                    if self.how.startswith("history") else
                    f"{self.head}: no broker or host metric was measured on both sides to compare")
        cleared = _names([c.title for c in self.cleared], CLEARED_NAMED)
        with_it = _names([f.with_it_text() for f in self.with_it], SUSPECTS_NAMED)
        tail = (f"; moved with it, not as a cause: {with_it}" if with_it else "") + (
            f"; cleared: {cleared}" if cleared else "")
        if not [s for s in self.suspects if not s.column.startswith(HOST_PREFIX)]:
            hosts = ", ".join(f"{s.title} {s.change_text()}" for s in self.suspects)
            return f"{self.head}: {NOTHING_MOVED}" + (f"; on the hosts: {hosts}" if hosts else "") + tail
        named = [f"{s.title} {s.change_text()}" for s in self.suspects[:SUSPECTS_NAMED]]
        more = len(self.suspects) - len(named)
        return f"{self.head}: suspects: " + ", ".join(named) + (f" and {more} more" if more > 0 else "") + tail

    def to_dict(self) -> dict[str, Any]:
        return {"sentence": self.sentence, "how": self.how, "suspects": [s.to_dict() for s in self.suspects],
                "with_it": [f.to_dict() for f in self.with_it],
                "cleared": [c.to_dict() for c in self.cleared],
                "not_compared": [c.column for c in self.not_compared]}


def _names(titles: list[str], most: int) -> str:
    shown = titles[:most]
    rest = len(titles) - len(shown)
    return ", ".join(shown) + (f" and {rest} more" if rest > 0 else "")


def _num(v: float | None) -> str:
    return "?" if v is None else f"{v:.3g}"


def _signed(v: float) -> str:
    return f"{'+' if v >= 0 else ''}{v:.3g}"


def _pct(ratio: float, sign: bool = True) -> str:
    p = 100.0 * (ratio - 1.0)
    digits = 0 if abs(p) >= 10 else 1
    return f"{'+' if p >= 0 else ''}{p:.{digits}f}" + (" %" if sign else "")


def _shift(f: Finding) -> float:
    return (f.median_b or 0.0) - (f.median_a or 0.0)


# -- the candidates --------------------------------------------------------------------------------

def candidates(broker: str) -> list[Candidate]:
    """The broker's catalog metrics (include/metrics/<broker>.yaml, in catalog order), then the host figures."""
    from brokerbench.environments.brokermetrics import CATALOG_BROKERS, catalog

    out: list[Candidate] = []
    if broker in CATALOG_BROKERS:
        cat = catalog(broker)
        name = cat.title.replace("Apache ", "")
        for m in cat.metrics:
            unit = {"percent": "%", "per_s": "per s"}.get(m.unit, m.unit)
            out.append(Candidate(m.id, f"{name} {m.title}", unit, m.worse,
                                 events=m.kind in ("timer", "quantile", "ratio"), floor=FLOORS.get(m.unit, 0.0),
                                 load=m.load))
    out += [Candidate(c, title, unit, floor=FLOORS["percent"] if unit == "%" else FLOORS["mb/s"])
            for c, (title, unit) in HOST_CANDIDATES.items()]
    return out


def _of(cand: Candidate) -> dict[str, Any]:
    """A finding's fields that are its candidate's."""
    return {"column": cand.column, "title": cand.title, "unit": cand.unit, "floor": cand.floor, "worse": cand.worse,
            "load": cand.load}


def _quiet(row: Mapping[str, Any], column: str) -> bool:
    """The row's phase exposed the metric but had no event of it (the aggregation's note)."""
    return f"{column}: no events during the phase" in str(row.get("broker_metrics_notes") or "")


# -- A/B: the interval over the trials --------------------------------------------------------------

def compare_trials(cand: Candidate, rows_a: Sequence[Mapping[str, Any]], rows_b: Sequence[Mapping[str, Any]],
                   confidence: float = 0.95, min_effect: float = MIN_EFFECT) -> Finding:
    """One candidate from the per-trial figures of side A's and side B's trial rows."""
    a = [v for v in (number(r.get(cand.column)) for r in rows_a) if v is not None]
    b = [v for v in (number(r.get(cand.column)) for r in rows_b) if v is not None]
    base: dict[str, Any] = {**_of(cand), "n_a": len(a), "n_b": len(b)}
    need = abtest.min_trials_per_side(confidence)
    if cand.events:
        quiet_a = sum(_quiet(r, cand.column) for r in rows_a)
        quiet_b = sum(_quiet(r, cand.column) for r in rows_b)
        if len(b) >= need and not a and quiet_a >= need and median_low(b) >= cand.floor:
            return Finding(**base, status="suspect", direction="appeared", median_b=median_low(b),
                           evidence=f"no events on {quiet_a} trials of A; {len(b)} trials of B with a figure")
        if len(a) >= need and not b and quiet_b >= need and median_low(a) >= cand.floor:
            return Finding(**base, status="suspect", direction="vanished", median_a=median_low(a),
                           evidence=f"{len(a)} trials of A with a figure; no events on {quiet_b} trials of B")
    if min(len(a), len(b)) < need:
        return Finding(**base, status="not compared",
                       evidence=f"{len(a)} trial(s) of A and {len(b)} of B with a figure; {need} per side needed")
    rank = abtest.interval_rank(len(a), len(b), confidence)
    if rank is None:  # unreachable with need trials per side; kept for a confidence min_trials_per_side misjudges
        return Finding(**base, status="not compared", evidence="too few trials for an interval")
    k, achieved = rank
    ma, mb = float(median_low(a)), float(median_low(b))
    if all(v > 0 for v in a + b):
        c = abtest.compare(a, b, higher_is_better=cand.worse == "lower", confidence=confidence)
        lo, hi = c.ci_low, c.ci_high
        assert lo is not None and hi is not None
        edge = math.log1p(min_effect)
        near = lo if lo > 1 else hi  # the interval's end nearer to no change
        moved = (math.log(lo) > edge or math.log(hi) < -edge) and ma * abs(near - 1) >= cand.floor
        direction = ("up" if lo > 1 else "down") if moved else None
        return Finding(**base, status="suspect" if moved else "cleared", direction=direction, ratio=c.ratio,
                       ci_low=lo, ci_high=hi, scale="log", median_a=ma, median_b=mb,
                       evidence=f"{abtest.describe(c, cand.column, cand.unit)}; a suspect needs the whole interval "
                                f"beyond {min_effect:.0%} and a change of {cand.floor:g} {cand.unit}")
    # a figure of 0: the interval of the shift B - A (the same order statistics of the pairwise differences)
    diffs = sorted(y - x for x in a for y in b)
    lo, hi = diffs[k - 1], diffs[len(diffs) - k]
    shift = median(diffs)
    near = lo if lo > 0 else hi if hi < 0 else 0.0
    moved = near != 0.0 and abs(near) >= max(cand.floor, min_effect * abs(ma))
    direction = ("up" if near > 0 else "down") if moved else None
    ratio = (ma + shift) / ma if ma > 0 and ma + shift > 0 else None
    return Finding(**base, status="suspect" if moved else "cleared", direction=direction, ratio=ratio,
                   ci_low=lo, ci_high=hi, scale="shift", median_a=ma, median_b=mb,
                   evidence=f"{cand.column}: shift B - A {_signed(shift)} {cand.unit}, {100 * achieved:.1f} % "
                            f"interval [{_signed(lo)}, {_signed(hi)}] at {len(a)} vs {len(b)} trials (a figure of "
                            f"0 on a side: no ratio); medians A {ma:.4g}, B {mb:.4g} {cand.unit}")


# -- history: the history rule over each candidate's series ----------------------------------------

def compare_history(cand: Candidate, base_rows: Sequence[Mapping[str, Any]], row: Mapping[str, Any],
                    min_effect: float = MIN_EFFECT) -> Finding:
    """One candidate of a run's row against the earlier ok rows of its track (oldest first)."""
    from brokerbench.regression import Rule, judge_series

    rule = Rule()
    metric = Metric(cand.column, "lower" if cand.worse == "higher" else "higher", min_effect, cand.floor)
    usable = [r for r in base_rows if number(r.get(cand.column)) is not None]
    value = number(row.get(cand.column))
    base: dict[str, Any] = {**_of(cand), "n_a": len(usable), "n_b": 0 if value is None else 1, "scale": "history"}
    recent = list(base_rows)[-rule.baseline_runs:]
    if cand.events and value is not None and value >= cand.floor and not usable and \
            sum(_quiet(r, cand.column) for r in recent) >= rule.min_runs:
        return Finding(**base, status="suspect", direction="appeared", median_b=value,
                       evidence=f"no events in the {len(recent)} earlier runs of the track")
    j = judge_series(usable, row, metric, Rule(metrics=(metric,)))
    if j["verdict"] not in (Judgement.REGRESSED, Judgement.IMPROVED, Judgement.UNCHANGED):
        return Finding(**base, status="not compared", evidence=str(j.get("evidence") or ""))
    level, v = j.get("baseline_median"), j.get("value")
    ratio = v / level if level and v is not None and level > 0 and v > 0 else None
    moved = j["verdict"] != Judgement.UNCHANGED
    direction = ("up" if v > level else "down") if moved and v is not None and level is not None else None
    base["n_a"] = int(j.get("baseline_n") or len(usable))
    return Finding(**base, status="suspect" if moved else "cleared", direction=direction, ratio=ratio,
                   median_a=level, median_b=v, evidence=f"{j.get('rule') or 'history'}: {j.get('evidence')}")


@dataclass(frozen=True)
class Evidence:
    """Every candidate's finding for one measurement (shared by all its verdicts), and how they were made."""

    findings: tuple[Finding, ...]
    how: str

    def suspects(self, head: str, change: Change | None = None) -> Suspects:
        """The suspects of one verdict: ``change``, its direction (None: a change without one, as a version step
        of ``brokerbench compare``), says which moves can explain it (:meth:`Finding.explains`)."""
        order = {f.column: i for i, f in enumerate(self.findings)}
        ranked = sorted((f for f in self.findings if f.status == "suspect"),
                        key=lambda f: (f.column.startswith(HOST_PREFIX), -f.effect, order[f.column]))
        return Suspects(head=head, suspects=[f for f in ranked if f.explains(change)],
                        with_it=[f for f in ranked if not f.explains(change)],
                        cleared=[f for f in self.findings if f.status == "cleared"],
                        not_compared=[f for f in self.findings if f.status == "not compared"], how=self.how)


def from_trials(broker: str, rows_a: Sequence[Mapping[str, Any]], rows_b: Sequence[Mapping[str, Any]],
                confidence: float = 0.95) -> Evidence:
    """The candidates of an A/B measurement from the two sides' usable trial rows."""
    return Evidence(tuple(compare_trials(c, rows_a, rows_b, confidence) for c in candidates(broker)),
                    f"the A/B interval over {len(rows_a)} vs {len(rows_b)} trials")


def from_history(broker: str, base_rows: Sequence[Mapping[str, Any]], row: Mapping[str, Any]) -> Evidence:
    """The candidates of a run's row against the same track's earlier ok rows."""
    return Evidence(tuple(compare_history(c, base_rows, row) for c in candidates(broker)),
                    f"history: the history rule over the track's {len(base_rows)} earlier ok runs")


def from_versions(broker: str, rows: Sequence[Mapping[str, Any]], older: str, newer: str) -> Evidence:
    """The candidates of a version step of one track (brokerbench compare): each candidate's runs of the two
    versions by the statistic the judged metrics' steps get (:func:`brokerbench.changepoint.compare_versions`: the
    t test on log values, alpha, and here the candidates' minimum effect). ``rows``: the track's ok rows."""
    from brokerbench.changepoint import compare_versions

    cands = candidates(broker)
    metrics = [Metric(c.column, "lower" if c.worse == "higher" else "higher", MIN_EFFECT, 0.0) for c in cands]
    two = [r for r in rows if str(r.get("broker_version")) in (older, newer)]
    diffs = {d.metric: d for d in compare_versions(two, metrics) if (d.version_a, d.version_b) == (older, newer)}
    findings = []
    for c in cands:
        d = diffs.get(c.column)
        base: dict[str, Any] = {**_of(c), "scale": "history"}
        if d is None or d.label == "too few runs" or d.median_a is None or d.median_b is None:
            findings.append(Finding(**base, status="not compared",
                                    evidence="no figure on both versions" if d is None else d.label))
            continue
        moved = d.label.startswith("significantly")
        ratio = d.median_b / d.median_a if d.median_a else None
        findings.append(Finding(**base, status="suspect" if moved else "cleared",
                                direction=("up" if d.median_b > d.median_a else "down") if moved else None,
                                ratio=ratio, median_a=d.median_a, median_b=d.median_b, n_a=d.runs_a, n_b=d.runs_b,
                                evidence=f"{d.label}: medians {d.median_a:.4g} -> {d.median_b:.4g} {c.unit} over "
                                         f"{d.runs_a} / {d.runs_b} runs, p {d.p_value}"))
    return Evidence(tuple(findings), f"history: {older} -> {newer}, the t test on log values over each version's runs")


def attach_history(verdicts: Iterable[Any], current: Iterable[Mapping[str, Any]],
                   history: Iterable[Mapping[str, Any]]) -> None:
    """Give every regressed or improved verdict against history (brokerbench.regression.verdicts_for_run's) its
    suspects, from the same track's earlier ok rows (``current``, ``history``: as verdicts_for_run got them)."""
    from brokerbench.regression import earlier_rows

    history = list(history)
    rows = {(str(r.get("workload")), str(r.get("broker")), str(r.get("variant"))): r for r in current}
    found: dict[tuple[str, str, str], Evidence] = {}
    for v in verdicts:
        key = (v.workload, v.broker, v.variant)
        if not is_change(v) or v.rule == "A/B" or key not in rows:
            continue
        if key not in found:
            row = rows[key]
            found[key] = from_history(v.broker, earlier_rows(row, history)[0], row)
        v.suspects = found[key].suspects(head_of(v), change_of(v)).to_dict()


# -- the verdicts' heads -----------------------------------------------------------------------------

def head_of(verdict: Any) -> str:
    """A verdict's own change: ``publish_latency_p99_ms +38 % [+21, +55]`` (A/B: B / A and its interval) or
    ``publish_latency_p99_ms +38 % vs the median of 9 runs`` (history)."""
    interval = getattr(verdict, "interval", None)
    if interval and interval.get("ratio"):
        text = f"{verdict.metric} {_pct(interval['ratio'])}"
        if interval.get("ci_low") and interval.get("ci_high"):
            text += f" [{_pct(interval['ci_low'], False)}, {_pct(interval['ci_high'], False)}]"
        return text
    pct = getattr(verdict, "change_percent", None)
    if pct is None:
        return f"{verdict.metric} {verdict.verdict}"
    return f"{verdict.metric} {_pct(1 + pct / 100)} vs the median of {verdict.baseline_n} runs"


def change_of(verdict: Any) -> Change | None:
    """A regressed or improved verdict's change (None for any other)."""
    v = getattr(verdict, "verdict", None)
    return "regressed" if v == Judgement.REGRESSED else "improved" if v == Judgement.IMPROVED else None


def is_change(verdict: Any) -> bool:
    return getattr(verdict, "verdict", None) in (Judgement.REGRESSED, Judgement.IMPROVED)
