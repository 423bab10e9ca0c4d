"""A results root read at a terminal: ``brokerbench history`` and ``brokerbench compare`` (no Airflow).

- **history**: the runs in the history store (``<results root>/history``, brokerbench.history), one table per
  broker x workload x variant x environment, oldest first: run time, run id, broker version, status, the headline
  figures and the run's verdicts for that row (its ``summary/regression.json``, as the verdicts task wrote it).
- **compare**: two runs (by run id), or the latest ``ok`` run of each of two versions of one broker, per broker x
  workload x variant x environment: a table of each metric's value on both sides and its change from the older
  broker version to the newer (version order, whatever order they were measured in; two runs of one version: the
  earlier run first), and the comparison page of the rows compared, written by the comparison report's own code
  (brokerbench.report.compare.render_comparison).

Rows are read as the verdicts and the comparison read them: a run's trials combined into one row
(brokerbench.trials.combine). An ``s3://`` results root is read through its local staging copy (what is read is
pulled first; the page is pushed), as the pipeline does.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from brokerbench.changepoint import version_key
from brokerbench.history import history_root, read_history
from brokerbench.metrics import METRICS, Judgement, Metric, number
from brokerbench.outcome import read_outcome
from brokerbench.regression import split_status, validity_rules, verdict_category
from brokerbench.report.verdict_table import read_verdicts
from brokerbench.spec import SUPPORTED_BROKERS, list_suites, list_variants, list_workloads
from brokerbench.storage import staging_root, synced
from brokerbench.trials import combine
from brokerbench.util import run_key, safe_name, text_table, write_atomic

#: what one row of a comparison is about: the same broker, workload, variant and environment on both sides
PAIR = ("broker", "workload", "variant", "environment")
#: what else a history table and a comparison name in their heading (and say when it differs between sides)
SETUP = (("driver", "driver"), ("client_library", "client library"), ("target_rate_msg_s", "target"))
#: history column -> terminal column (units in the names): the headline figures of ``history``
HISTORY_FIGURES = (("publish_rate_msg_s", "publish_msg_s"), ("publish_latency_p99_ms", "publish_p99_ms"),
                   ("e2e_latency_p99_ms", "e2e_p99_ms"))
#: history column -> terminal column: the metrics ``compare`` shows (all judged: docs/analytics.md)
COMPARE_FIGURES = (("publish_rate_msg_s", "publish_msg_s"), ("publish_latency_p50_ms", "publish_p50_ms"),
                   ("publish_latency_p99_ms", "publish_p99_ms"), ("publish_latency_p999_ms", "publish_p999_ms"),
                   ("e2e_latency_p50_ms", "e2e_p50_ms"), ("e2e_latency_p99_ms", "e2e_p99_ms"),
                   ("e2e_latency_p999_ms", "e2e_p999_ms"))
METRIC_OF: dict[str, Metric] = {m.column: m for m in METRICS}
#: the metrics a verdict cell names first (the rest are counted), and how many it names
FIRST_NAMED = ("publish_latency_p99_ms", "e2e_latency_p99_ms", "publish_rate_msg_s", "consume_rate_msg_s")
NAMED = 2
#: runs shown per history table unless --last says otherwise
DEFAULT_LAST = 20


class Refused(ValueError):
    """An argument naming nothing there is (a broker, suite, run, version...): one line naming the argument."""


# -- reading -------------------------------------------------------------------------------------------------


def load_rows(results_root: str, filters: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The history's rows (trials combined), optionally only those whose partition columns equal ``filters``
    (broker, broker_version, variant: read from those partitions only; for ``s3://``, a broker's partitions are
    all that is pulled)."""
    local = staging_root(results_root)
    broker = (filters or {}).get("broker")
    with synced(results_root, [f"history/broker={broker}/" if broker else "history/"], push=[]):
        rows = read_history(history_root(local), dict(filters or {}))
    return combine(rows)


def run_dir(results_root: str, row: Mapping[str, Any]) -> Path:
    """The run directory of a history row, under ``results_root`` (its staging copy for ``s3://``); the row's
    ``results_run_dir`` when that one is not there (a results root that was moved keeps its own first)."""
    local = staging_root(results_root) / "runs" / run_key(str(row.get("dag_id")), str(row.get("run_id")))
    recorded = row.get("results_run_dir")
    if not local.exists() and recorded and "://" not in str(recorded) and Path(str(recorded)).exists():
        return Path(str(recorded))
    return local


def run_files(results_root: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """run_key -> {"verdicts": regression.json's verdicts or None, "outcome": RunOutcome or None} of the rows'
    runs (for ``s3://``, those two files pulled first)."""
    keys = {str(r.get("run_key")): r for r in rows}
    prefixes = [f"runs/{run_key(str(r.get('dag_id')), str(r.get('run_id')))}/summary/{name}" for r in keys.values()
                for name in ("regression.json", "outcome.json")]
    out: dict[str, dict[str, Any]] = {}
    with synced(results_root, prefixes, push=[]):
        for key, r in keys.items():
            d = run_dir(results_root, r)
            data = read_verdicts(d)
            out[key] = {"verdicts": data.get("verdicts") if data else None, "outcome": read_outcome(d)}
    return out


# -- arguments -----------------------------------------------------------------------------------------------


def check_choice(flag: str, value: str | None, known: Iterable[Any], what: str) -> None:
    """Refused naming ``flag`` when ``value`` is not one of ``known`` (with the closest names)."""
    if value is None:
        return
    names = sorted({str(k) for k in known if k not in (None, "")}, key=version_key if what.endswith("version") else None)
    if value in names:
        return
    close = difflib.get_close_matches(value, names, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    shown = ", ".join(names[:15]) + (f" and {len(names) - 15} more" if len(names) > 15 else "")
    raise Refused(f"{flag} {value!r} is not a known {what}{hint} ({what}s: {shown or 'none'})")


def check_filters(rows: Sequence[Mapping[str, Any]], broker: str | None = None, suite: str | None = None,
                  variant: str | None = None, workload: str | None = None) -> None:
    """The filters name a broker brokerbench runs, and a suite, variant and workload that is a file or in the
    history (a run of a suite whose file was removed stays listable)."""
    check_choice("--broker", broker, SUPPORTED_BROKERS, "broker")
    check_choice("--suite", suite, [*list_suites(), *(r.get("suite") for r in rows)], "suite")
    check_choice("--variant", variant, [*list_variants(), *(r.get("variant") for r in rows)], "variant")
    check_choice("--workload", workload, [*list_workloads(), *(r.get("workload") for r in rows)], "workload")


def select(rows: Iterable[Mapping[str, Any]], **equal: str | None) -> list[dict[str, Any]]:
    """The rows whose columns equal every given (not None) value."""
    wanted = {k: v for k, v in equal.items() if v is not None}
    return [dict(r) for r in rows if all(str(r.get(k)) == v for k, v in wanted.items())]


# -- formatting ----------------------------------------------------------------------------------------------


def fmt(value: Any) -> str:
    """A figure for a terminal table: thousands separated from 1,000, else 4 significant digits; ``-`` for none."""
    v = number(value)
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def time_text(row: Mapping[str, Any]) -> str:
    """``run_ts`` (ISO 8601, UTC) to the minute: ``2026-11-27 17:40``."""
    return str(row.get("run_ts") or "")[:16].replace("T", " ")


def status_text(row: Mapping[str, Any]) -> str:
    """``ok``, or the status kind with the validity rules broken: ``invalid: foreign load``."""
    kind, rest = split_status(row.get("status"))
    if kind == "ok":
        return "ok"
    rules = [r.split(" (")[0] for r in validity_rules(str(row.get("invalid_reasons") or rest))]
    return f"{kind}: {', '.join(rules)}" if rules else kind


def verdicts_of(row: Mapping[str, Any], verdicts: Sequence[Mapping[str, Any]] | None) -> list[Mapping[str, Any]]:
    """The run's verdicts of this row (its workload, broker, variant and broker version)."""
    ident = [(k, str(row.get(k))) for k in ("workload", "broker", "variant", "broker_version")]
    return [v for v in verdicts or [] if all(str(v.get(k)) == x for k, x in ident)]


def verdict_text(verdicts: Sequence[Mapping[str, Any]] | None) -> str:
    """A row's verdicts in one cell: the regressed and improved metrics counted, the first two named with their
    change (the p99s first), the rest counted: ``1 regressed: publish_latency_p99_ms +32.0 %; 10 unchanged``,
    ``11 insufficient history``; ``-`` when the run has no verdicts (its verdicts task did not write them)."""
    if verdicts is None:
        return "-"
    parts = []
    for word, judgement in (("regressed", Judgement.REGRESSED), ("improved", Judgement.IMPROVED)):
        chosen = sorted((v for v in verdicts if v.get("verdict") == judgement),
                        key=lambda v: FIRST_NAMED.index(v.get("metric")) if v.get("metric") in FIRST_NAMED
                        else len(FIRST_NAMED))
        named = [f"{v.get('metric')} {number(v.get('change_percent')) or 0:+.1f} %" for v in chosen[:NAMED]]
        if chosen:
            more = f" and {len(chosen) - NAMED} more" if len(chosen) > NAMED else ""
            parts.append(f"{len(chosen)} {word}: {', '.join(named)}{more}")
    counted: dict[str, int] = {}
    for v in verdicts:
        if v.get("verdict") not in (Judgement.REGRESSED, Judgement.IMPROVED):
            category = verdict_category(v.get("verdict"))
            counted[category] = counted.get(category, 0) + 1
    for category, n in counted.items():
        parts.append(category if category.startswith(Judgement.NOT_JUDGED) else f"{n} {category}")
    return "; ".join(parts) or "no verdict"


def _setup_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """What each row ran with: ``kafka-latency, kafka-python, target 1,000 msg/s``; a setting that differs
    between rows as ``a -> b``."""
    bits = []
    for col, label in SETUP:
        values = list(dict.fromkeys(f"{fmt(r.get(col))} msg/s" if col.endswith("_msg_s") else str(r.get(col))
                                    for r in rows))
        bits.append(f"{label} {' -> '.join(values)}" + (" (differs)" if len(values) > 1 else ""))
    return ", ".join(bits)


def _heading(key: tuple) -> str:
    return " / ".join(str(k) for k in key)


# -- history -------------------------------------------------------------------------------------------------


@dataclass
class HistoryView:
    """What ``brokerbench history`` prints, and how many runs it found."""

    text: str
    rows: int
    runs: int


def history_view(results_root: str, broker: str | None = None, suite: str | None = None,
                 variant: str | None = None, workload: str | None = None, version: str | None = None,
                 environment: str | None = None, last: int = DEFAULT_LAST) -> HistoryView:
    """The history's runs, one table per broker x workload x variant x environment (oldest first, the last
    ``last`` of each; 0: all), with each row's status and verdicts. Refused for a filter naming nothing known."""
    if last < 0:
        raise Refused(f"--last must be 0 (all runs) or more (got {last})")
    check_choice("--broker", broker, SUPPORTED_BROKERS, "broker")
    partitions = {k: v for k, v in (("broker", broker), ("variant", variant)) if v is not None}
    everything = load_rows(results_root, partitions)
    check_filters(everything, broker, suite, variant, workload)
    if version is not None:
        check_choice("--version", version, [r.get("broker_version") for r in everything],
                     f"{broker} version" if broker else "broker version")
    rows = select(everything, suite=suite, workload=workload, broker_version=version, environment=environment)
    where = f"{history_root(results_root)}"
    if not rows:
        said = " ".join(f"--{k} {v}" for k, v in (("suite", suite), ("broker", broker), ("variant", variant),
                                                  ("workload", workload), ("version", version),
                                                  ("environment", environment)) if v is not None)
        why = (f"no run in {where} matches {said}" if said else
               f"no runs in {where} yet (every run adds its rows there: brokerbench bench)")
        return HistoryView(f"brokerbench: {why}", 0, 0)
    files = run_files(results_root, rows)
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: (str(r.get("run_ts")), str(r.get("run_key")))):
        groups.setdefault(tuple(str(r.get(k)) for k in PAIR), []).append(r)
    out = [f"history: {where} ({len(rows)} row(s) of {len({r.get('run_key') for r in rows})} run(s); "
           f"oldest first)"]
    columns = ["run_time_utc", "run_id", "broker_version", "status", *(c for _, c in HISTORY_FIGURES), "verdicts"]
    for key, grows in sorted(groups.items()):
        shown = grows[-last:] if last else grows
        suites = ", ".join(sorted({str(r.get("suite")) for r in grows}))
        out += ["", f"{_heading(key)}  (suite {suites}; {_setup_text(grows)}; {len(grows)} run(s)"
                    + (f", the last {len(shown)} shown: --last 0 for all" if len(shown) < len(grows) else "") + ")"]
        table = [[time_text(r), str(r.get("run_id")), str(r.get("broker_version")), status_text(r),
                  *(fmt(r.get(col)) for col, _ in HISTORY_FIGURES),
                  verdict_text(None if files[str(r.get("run_key"))]["verdicts"] is None else
                               verdicts_of(r, files[str(r.get("run_key"))]["verdicts"]))] for r in shown]
        out.append(_indent(text_table(columns, table)))
    outcomes = {}
    for r in rows:
        o = files[str(r.get("run_key"))]["outcome"]
        outcomes[str(r.get("run_key"))] = (str(r.get("run_ts")), str(r.get("run_id")), o)
    last_key = max(outcomes, key=lambda k: outcomes[k][0])
    ts, run_id, o = outcomes[last_key]
    out += ["", f"latest run {run_id}: " + (f"OUTCOME: {o.headline}" if o else "no outcome written")]
    return HistoryView("\n".join(out), len(rows), len(outcomes))


def _indent(text: str, by: str = "  ") -> str:
    return "\n".join(by + line for line in text.splitlines())


# -- compare -------------------------------------------------------------------------------------------------


@dataclass
class Pair:
    """One broker x workload x variant x environment on both sides, older first (see :func:`ordered`)."""

    key: tuple
    older: dict[str, Any]
    newer: dict[str, Any]


@dataclass
class Comparison:
    title: str
    pairs: list[Pair]
    #: the rows the page shows (ok rows of the runs or versions compared) and every row selected (for its count
    #: of rows left out)
    page_rows: list[dict[str, Any]]
    selected: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    text: str = ""
    page: Path | None = None


def ordered(a: dict[str, Any], b: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(older, newer): by broker version (version order) when the versions differ, else by run time."""
    va, vb = version_key(a.get("broker_version")), version_key(b.get("broker_version"))
    if va != vb:
        return (a, b) if va < vb else (b, a)
    return (a, b) if (str(a.get("run_ts")), str(a.get("run_key"))) <= (str(b.get("run_ts")), str(b.get("run_key"))) \
        else (b, a)


def find_run(rows: Sequence[Mapping[str, Any]], given: str, flag: str) -> str:
    """The run key of the run ``given`` names: its run id, ``<dag_id>/<run_id>``, its history run key, or a
    prefix of one of them that names one run only."""
    runs: dict[str, set[str]] = {}
    for r in rows:
        key = str(r.get("run_key"))
        runs.setdefault(key, set()).update({str(r.get("run_id")), f"{r.get('dag_id')}/{r.get('run_id')}", key})
    exact = sorted(k for k, names in runs.items() if given in names)
    found = exact or sorted(k for k, names in runs.items() if any(n.startswith(given) for n in names))
    if len(found) == 1:
        return found[0]
    if found:
        named = [next(f"{r.get('dag_id')}/{r.get('run_id')}" for r in rows if str(r.get("run_key")) == k)
                 for k in found]
        raise Refused(f"{flag} {given!r} names {len(found)} runs: " + ", ".join(named[:6])
                      + (f" and {len(named) - 6} more" if len(named) > 6 else "") + "; give more of one")
    last_ts = {k: max(str(r.get("run_ts")) for r in rows if str(r.get("run_key")) == k) for k in runs}
    recent = [next(str(r.get("run_id")) for r in rows if str(r.get("run_key")) == k)
              for k in sorted(runs, key=lambda k: last_ts[k], reverse=True)[:5]]
    close = difflib.get_close_matches(given, [n for names in runs.values() for n in names], n=2, cutoff=0.7)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise Refused(f"{flag} {given!r} is no run in the history{hint} (latest runs: {', '.join(recent) or 'none'}; "
                  f"brokerbench history lists them)")


def compare_runs(rows: Sequence[Mapping[str, Any]], run_a: str, run_b: str,
                 only: Mapping[str, str | None] | None = None) -> Comparison:
    """Two runs, row by row (broker x workload x variant x environment in both); ``only``: of their rows, those
    whose columns equal these values (e.g. ``{"broker": "kafka"}``)."""
    key_a, key_b = find_run(rows, run_a, "RUN_A"), find_run(rows, run_b, "RUN_B")
    if key_a == key_b:
        raise Refused(f"RUN_A {run_a!r} and RUN_B {run_b!r} are the same run ({key_a})")
    names = {str(r.get("run_key")): f"{r.get('dag_id')}/{r.get('run_id')}" for r in rows}
    rows = select(rows, **(only or {}))
    side = {k: {tuple(str(r.get(c)) for c in PAIR): dict(r) for r in rows if str(r.get("run_key")) == k}
            for k in (key_a, key_b)}
    pairs, notes = [], []
    for key in sorted(set(side[key_a]) | set(side[key_b])):
        a, b = side[key_a].get(key), side[key_b].get(key)
        if a is None or b is None:
            notes.append(f"{_heading(key)}: not compared: only in run {names[key_a if a else key_b]}")
            continue
        older, newer = ordered(a, b)
        pairs.append(Pair(key, older, newer))
    selected = [dict(r) for r in rows if str(r.get("run_key")) in (key_a, key_b)]
    return Comparison(f"brokerbench comparison: runs {names[key_a]} and {names[key_b]}", pairs,
                      [r for r in selected if r.get("status") == "ok"], selected, notes)


def compare_versions(rows: Sequence[Mapping[str, Any]], broker: str, versions: Sequence[str],
                     filters: str = "") -> Comparison:
    """The latest ok run of each of two versions of ``broker``, per workload x variant x environment; the page
    gets every ok run of both versions (its version table and significance use them all). ``filters``: how the
    rows were chosen (``--variant fsync-on``), for the message when none is left."""
    version_a, version_b = sorted(versions, key=version_key)
    if version_a == version_b:
        raise Refused(f"--versions: {version_a!r} twice: give two versions")
    mine = [r for r in rows if r.get("broker") == broker]
    if not mine:
        raise Refused(f"--broker {broker}: no run of {broker} in the history{' with ' + filters if filters else ''} "
                      f"(brokerbench history lists the runs)")
    known = [r.get("broker_version") for r in mine]
    for v in (version_a, version_b):
        check_choice("--versions", v, known, f"{broker} version")
    selected = [dict(r) for r in mine if str(r.get("broker_version")) in (version_a, version_b)]
    by_track: dict[tuple, dict[str, list[dict[str, Any]]]] = {}
    for r in selected:
        by_track.setdefault(tuple(str(r.get(c)) for c in PAIR), {}).setdefault(str(r.get("broker_version")),
                                                                             []).append(r)
    pairs, notes = [], []
    for key, of in sorted(by_track.items()):
        latest: dict[str, dict[str, Any]] = {}
        for v in (version_a, version_b):
            runs = sorted(of.get(v, []), key=lambda r: (str(r.get("run_ts")), str(r.get("run_key"))))
            ok = [r for r in runs if r.get("status") == "ok"]
            if ok:
                latest[v] = ok[-1]
                later = runs[runs.index(ok[-1]) + 1:]
                if later:
                    notes.append(f"{_heading(key)}: {len(later)} later run(s) of {v} left out, not ok "
                                 f"({'; '.join(status_text(r) for r in later)})")
            elif runs:
                notes.append(f"{_heading(key)}: not compared: no ok run of {v} ({len(runs)} run(s): "
                             f"{'; '.join(status_text(r) for r in runs)})")
            else:
                notes.append(f"{_heading(key)}: not compared: no run of {v}")
        if len(latest) == 2:
            pairs.append(Pair(key, latest[version_a], latest[version_b]))
    return Comparison(f"brokerbench comparison: {broker} {version_a} and {version_b}", pairs,
                      [r for r in selected if r.get("status") == "ok"], selected, notes)


def change_text(column: str, older: Any, newer: Any) -> str:
    """The change from ``older`` to ``newer`` in percent; ``better`` / ``worse`` when it is beyond the metric's
    regression threshold (its relative threshold and absolute floor: brokerbench.metrics.METRICS)."""
    a, b = number(older), number(newer)
    if a is None or b is None or a == 0:
        return "-"
    pct = 100.0 * (b - a) / a
    metric = METRIC_OF.get(column)
    text = f"{pct:+.1f} %"
    if metric and abs(pct) / 100.0 >= metric.relative and abs(b - a) >= metric.floor:
        worse = (b > a) if metric.better == "lower" else (b < a)
        text += " worse" if worse else " better"
    return text


def comparison_text(c: Comparison) -> str:
    """The terminal tables: per pair, both sides' figures and the change, older to newer."""
    columns = ["broker_version", "run_time_utc", "status", *(name for _, name in COMPARE_FIGURES)]
    out = [c.title.replace("brokerbench comparison: ", "compare: ")
           + " (older broker version first; two runs of one version: the earlier first)"]
    for p in c.pairs:
        o, n = p.older, p.newer
        rows = [[str(r.get("broker_version")), time_text(r), status_text(r),
                 *(fmt(r.get(col)) for col, _ in COMPARE_FIGURES)] for r in (o, n)]
        label = f"{o.get('broker_version')} -> {n.get('broker_version')}" if o.get("broker_version") != \
            n.get("broker_version") else "earlier -> later"
        rows.append([label, "change", "", *(change_text(col, o.get(col), n.get(col)) for col, _ in COMPARE_FIGURES)])
        out += ["", f"{_heading(p.key)}  ({_setup_text([o, n])})", _indent(text_table(columns, rows)),
                f"  runs: {o.get('dag_id')}/{o.get('run_id')} -> {n.get('dag_id')}/{n.get('run_id')}"]
        moved = _what_moved(c, p)
        if moved:
            out.append(f"  {moved}")
    if c.notes:
        out += ["", "notes:", *(f"  {n}" for n in c.notes)]
    out += ["", "change: the newer side against the older, in % of the older; 'better' / 'worse' where it is beyond "
                "the metric's regression threshold (docs/analytics.md). One run a side is no significance test: the "
                "comparison page labels version differences over all runs of each version"]
    return "\n".join(out)


def _what_moved(c: Comparison, p: Pair) -> str:
    """Two versions: what moved on the brokers and hosts between them, over every ok run of each
    (brokerbench.suspects.from_versions); "" when no candidate has runs enough on both."""
    from brokerbench import suspects

    older, newer = str(p.older.get("broker_version")), str(p.newer.get("broker_version"))
    if older == newer:
        return ""
    track = [r for r in c.page_rows if tuple(str(r.get(k)) for k in PAIR) == p.key]
    s = suspects.from_versions(str(p.older.get("broker")), track, older, newer).suspects(f"{older} -> {newer}")
    if not s.suspects and not s.cleared:
        return ""
    return "the brokers' own metrics and the hosts' figures, every ok run of each version: " + s.sentence


def write_page(results_root: str, c: Comparison, name: str, out_dir: str | None = None) -> Path:
    """The comparison page of the rows compared, by the comparison report's code, in
    ``<results root>/comparisons/<name>/comparison.html`` (or ``out_dir``); pushed for an ``s3://`` root."""
    # the comparison page draws with matplotlib: loaded only when a page is written
    from brokerbench.report.compare import excluded_rows, render_comparison

    html = render_comparison(c.page_rows, title=c.title, excluded=excluded_rows(c.selected))
    if out_dir is not None:
        return write_atomic(Path(out_dir) / "comparison.html", html.encode("utf-8"))
    with synced(results_root, [], push=["comparisons/"]):
        path = write_atomic(staging_root(results_root) / "comparisons" / safe_name(name) / "comparison.html",
                            html.encode("utf-8"))
    return path


def page_name(c: Comparison, broker: str | None, versions: Sequence[str] | None) -> str:
    """``kafka-3.9.1-vs-4.1.1``, or ``runs-<a>-vs-<b>`` (run ids): the same comparison asked again replaces its
    page."""
    if broker and versions:
        a, b = sorted(versions, key=version_key)
        return f"{broker}-{a}-vs-{b}"
    keys = list(dict.fromkeys(str(r.get("run_id")) for r in c.selected))
    return "runs-" + "-vs-".join(keys)[:180]
