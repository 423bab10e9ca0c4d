"""The brokers' own metrics and the hosts' figures of a run, per interval and per measured phase.

Reads ``brokermetrics/<workload>/<driver>/<variant>/<phase>/<host>.jsonl`` (the scraper's files, each led by
a header with its catalog: brokerbench.environments.brokermetrics) and
``hostmetrics/<same path>/<host>.jsonl`` (the host sampler's). Plain Python on the driver: a run's files
are small (one line per target and second).

Per interval (``brokermetrics.csv``): one row per phase, target (``kafka@127.0.0.1``, ``host@localhost``),
metric and scrape, on the time axis of the latency charts: ``t_s`` is seconds since the first interval of the
phase's workers (negative before it).

- gauge: the value read; quantile: the broker's own quantile as read (a quantile that names its count is read
  as ``[quantile, count]``);
- counter: its increase since the previous scrape per second (a value below the previous one is a restart:
  the counter counted from 0 again, so its increase is the value itself, as Prometheus' ``rate`` does);
- timer: the increase of its sum over the increase of its count (a mean per event of the interval; no event:
  no value; below zero, which only Kafka's Count-then-Mean reads can give in an interval of a few events: no
  value);
- ratio: the broker's own window sum over its count, as read (Pulsar's topic stats, kept per minute).

Per phase (columns of the summary row, named by the metric's id, which ends with its unit): over the measured
phase's scrapes (the last one before the phase's first interval is the counters' starting point):

- gauge and ratio: the mean or the highest of the scrapes (the catalog's ``phase``); quantile: the highest (a
  quantile is never averaged), and for one that names its count only when the phase had the catalog's
  ``min_events`` of its events (fewer: ``too few events during the phase``, as the quantile is then of the
  broker's events before the phase);
- counter: its increase over the phase per second; timer: the sum's increase over the count's (the exact mean
  per event over the phase);
- several nodes (one file per broker host on a fleet): the worst node (the highest, or the lowest where lower is
  worse) or their sum (the catalog's ``across``).

``broker_metrics_notes`` says what a row lacks: a catalog metric the broker did not expose (``not exposed by
<broker> <implementation> <version>``), one it exposed with nothing to average in the phase (``no events during
the phase``: no follower fetches on one node, no window of the broker's own yet), a target that did not answer
for part of the phase (a gap), or no endpoint at all.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any, Iterable

#: the host sampler's figures drawn beside the brokers' (hostmetrics.py's fields): id -> (field, unit, phase)
HOST_METRICS = {
    "host_cpu_percent": ("cpu_percent", "percent", "mean"),
    "host_disk_util_percent": ("disk_util_percent", "percent", "mean"),
    "host_disk_write_mb_per_s": ("disk_write_mb_s", "mb/s", "mean"),
    "host_net_tx_mb_per_s": ("net_tx_mb_s", "mb/s", "mean"),
}
#: brokermetrics.csv's columns
INTERVAL_COLUMNS = ["workload", "broker", "driver", "variant", "phase", "target", "node", "metric", "unit",
                    "ts", "t_s", "value"]
NOTES = "broker_metrics_notes"
_PATH = re.compile(r"(?:^|/)(brokermetrics|hostmetrics)/([^/]+)/([^/]+)/([^/]+)/([^/]+)/([^/]+)\.jsonl$")


def _lines(text: str | None) -> list[dict]:
    out = []
    for line in (text or "").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a killed scraper
    return out


class PhaseFile:
    """One scraper file (one host's targets during one phase)."""

    def __init__(self, key: tuple[str, str, str, str], lines: list[dict]):
        self.key = key  # workload, driver, variant, phase
        head: dict[str, Any] = next((l["header"] for l in lines if "header" in l), {})
        self.catalog: list[dict] = head.get("catalog", [])
        self.targets: dict[str, dict] = {t["name"]: t for t in head.get("targets", [])}
        self.interval_s = float(head.get("interval_s") or 1.0)
        self.panels: dict[str, list[dict]] = head.get("panels", {})
        self.scrapes: dict[str, list[dict]] = defaultdict(list)
        for l in lines:
            if "target" in l and "ts" in l:
                self.scrapes[l["target"]].append(l)
        for s in self.scrapes.values():
            s.sort(key=lambda l: l["ts"])


def read_files(files: Iterable[tuple[str, str | None]]) -> tuple[list[PhaseFile], list[tuple[tuple, str, list]]]:
    """(uri, text) of a run's brokermetrics/ and hostmetrics/ files -> (scraper files, host files as
    (key, host, samples))."""
    brokers, hosts = [], []
    for uri, text in files:
        m = _PATH.search(uri)
        if not m:
            continue
        what, workload, driver, variant, phase, host = m.groups()
        key = (workload, driver, variant, phase)
        if what == "brokermetrics":
            brokers.append(PhaseFile(key, _lines(text)))
        else:
            hosts.append((key, host, [s for s in _lines(text) if "ts" in s]))
    return brokers, hosts


def _step(kind: str, prev: Any, cur: Any, dt: float) -> float | None:
    """A counter's or a timer's figure between two readings (a reset: counted from 0 again)."""
    if kind == "counter":
        inc = cur - prev if cur >= prev else cur
        return inc / dt if dt > 0 else None
    (s0, c0), (s1, c1) = prev, cur
    ds, dc = (s1 - s0, c1 - c0) if c1 >= c0 else (s1, c1)
    # a time below zero is impossible: Kafka's exporter reads a timer's Count and Mean one after the other, and
    # in an interval of a few events the events between the two reads can outweigh them: no value there
    return ds / dc if dc > 0 and ds >= 0 else None


def interval_values(kind: str, readings: list[tuple[float, Any]]) -> list[tuple[float, float]]:
    """(ts, figure) per scrape of one metric on one target (counters and timers from their second reading)."""
    if kind == "quantile":
        return [(ts, float(v[0] if isinstance(v, list) else v)) for ts, v in readings]
    if kind == "gauge":
        return [(ts, float(v)) for ts, v in readings]
    if kind == "ratio":
        return [(ts, s / c) for ts, (s, c) in readings if c > 0]
    out = []
    for (t0, v0), (t1, v1) in zip(readings, readings[1:]):
        fig = _step(kind, v0, v1, t1 - t0)
        if fig is not None:
            out.append((t1, fig))
    return out


def phase_value(kind: str, stat: str, readings: list[tuple[float, Any]], start: float | None,
                end: float | None) -> float | None:
    """The phase figure of one metric on one target from its readings (ts, raw value), ``start``/``end`` the
    measured phase's (unix s; None: all readings)."""
    inside = [(t, v) for t, v in readings if (start is None or t >= start) and (end is None or t <= end)]
    if kind == "quantile":
        inside = [(t, v[0] if isinstance(v, list) else v) for t, v in inside]
    if kind == "ratio":
        inside = [(t, s / c) for t, (s, c) in inside if c > 0]
        kind = "gauge"
    if kind in ("gauge", "quantile"):
        vals = [float(v) for _, v in inside]
        if not vals:
            return None
        return max(vals) if kind == "quantile" or stat == "max" else sum(vals) / len(vals)
    # counters and timers: from the last reading at or before the start (the baseline) to the last inside
    before = [(t, v) for t, v in readings if start is not None and t < start]
    span = before[-1:] + inside
    if len(span) < 2:
        return None
    if kind == "counter":
        inc = sum((v1 - v0 if v1 >= v0 else v1) for (_, v0), (_, v1) in zip(span, span[1:]))
        dt = span[-1][0] - span[0][0]
        return inc / dt if dt > 0 else None
    ds = dc = 0.0
    for (_, (s0, c0)), (_, (s1, c1)) in zip(span, span[1:]):
        if c1 >= c0:
            ds, dc = ds + s1 - s0, dc + c1 - c0
        else:
            ds, dc = ds + s1, dc + c1
    return ds / dc if dc > 0 else None


def phase_events(readings: list[tuple[float, Any]], start: float | None, end: float | None) -> float | None:
    """The events a quantile read as ``[quantile, count]`` is of during the phase: the count's increase from the
    last reading before the start to the last inside (a reset counted from 0 again); None when it has no count."""
    counted = [(t, v[1]) for t, v in readings if isinstance(v, list)]
    if not counted:
        return None
    span = [(t, c) for t, c in counted if start is not None and t < start][-1:] + [
        (t, c) for t, c in counted if (start is None or t >= start) and (end is None or t <= end)]
    return float(sum((c1 - c0 if c1 >= c0 else c1) for (_, c0), (_, c1) in zip(span, span[1:])))


def _across(how: str, worse: str, values: list[float]) -> float | None:
    """The nodes' figures as one: their sum, or the worst node's (files before ``worst`` said ``max``)."""
    if not values:
        return None
    if how == "sum":
        return sum(values)
    return min(values) if worse == "lower" else max(values)


def tables(brokers: list[PhaseFile], hosts: list[tuple[tuple, str, list]], phases: dict[tuple, dict]
           ) -> tuple[list[dict], dict[tuple, dict], list[str]]:
    """(per-interval rows, (workload, broker, driver, variant) -> the measured phase's columns, every metric
    column in catalog order).

    ``phases``: (workload, driver, variant) -> {"broker", "start", "end"}: the measured phase's broker and
    its first interval's start and last interval's end (unix s), from the worker files."""
    rows: list[dict] = []
    figures: dict[tuple, dict] = {}
    columns: list[str] = []
    per_node: dict[tuple, dict[str, list[float]]] = {}  # row -> metric -> each node's phase figure
    across: dict[str, tuple[str, str]] = {}  # metric -> (its catalog's across, worse)
    mins: dict[str, int] = {}  # metric -> its catalog's min_events
    silent: dict[tuple, set[str]] = {}
    scarce: dict[tuple, dict[str, float]] = {}  # row -> quantile id -> the most events a node had of it
    for f in brokers:
        workload, driver, variant, phase = f.key
        info = phases.get((workload, driver, variant)) or {}
        start = info.get("start")
        measured = phase in ("measure", "sweep")
        per_metric: dict[str, list[float]] = defaultdict(list)
        notes: list[str] = []
        quiet: list[str] = []
        few: dict[str, float] = {}  # a quantile's id -> its events in the phase, fewer than its min_events
        roles = {(t.get("broker"), t.get("role", "broker")): t for t in f.targets.values()}
        for m in f.catalog:
            if m["id"] not in columns:
                columns.append(m["id"])
            seen = next((t for (b, _), t in roles.items() if b == m.get("broker")), None)
            if seen is not None and (m.get("broker"), m.get("role", "broker")) not in roles:
                only = f" (only with {m['only']})" if m.get("only") else ""
                notes.append(f"{m['id']}: not exposed by {m.get('broker')} {seen.get('implementation', '')} "
                             f"{seen.get('version', '')}: no {m.get('role')} endpoint{only}")
        for name, scrapes in f.scrapes.items():
            target = f.targets.get(name, {})
            broker = target.get("broker", "")
            ok = [s for s in scrapes if "values" in s]
            failed = [s for s in scrapes if "error" in s and (not measured or _within(s["ts"], info))]
            if failed:
                notes.append(f"gap: {name} did not answer {len(failed)} of "
                             f"{len([s for s in scrapes if not measured or _within(s['ts'], info)])} scrapes "
                             f"({failed[0]['error']})")
            for m in f.catalog:
                if m.get("broker") != broker or m.get("role", "broker") != target.get("role", "broker"):
                    continue
                readings = [(s["ts"], s["values"][m["id"]]) for s in ok if m["id"] in s["values"]]
                if not readings:
                    if ok:
                        only = f" (only with {m['only']})" if m.get("only") else ""
                        notes.append(f"{m['id']}: not exposed by {broker} {target.get('implementation', '')} "
                                     f"{target.get('version', '')}".rstrip() + only)
                    continue
                for ts, value in interval_values(m["kind"], readings):
                    rows.append({"workload": workload, "broker": broker, "driver": driver, "variant": variant,
                                 "phase": phase, "target": name, "node": target.get("node", ""), "metric": m["id"],
                                 "unit": m["unit"], "ts": ts, "t_s": None if start is None else round(ts - start, 3),
                                 "value": value})
                if measured and m["kind"] == "quantile":
                    events = phase_events(readings, start, info.get("end"))
                    if events is not None and events < m.get("min_events", 0):
                        few[m["id"]] = max(events, few.get(m["id"], 0.0))
                        continue
                if measured:
                    v = phase_value(m["kind"], m.get("phase", "mean"), readings, start, info.get("end"))
                    if v is not None:
                        per_metric[m["id"]].append(v)
                    else:  # exposed, but a mean of nothing: no request of that kind, or no window yet
                        quiet.append(m["id"])
        if measured and info.get("broker"):
            # every host's file of the phase adds its nodes' figures; the nodes are combined once all are read
            key = (workload, info["broker"], driver, variant)
            nodes = per_node.setdefault(key, defaultdict(list))
            for mid, vals in per_metric.items():
                nodes[mid] += vals
            across.update({m["id"]: (m.get("across", "worst"), m.get("worse", "higher")) for m in f.catalog})
            mins.update({m["id"]: m.get("min_events", 0) for m in f.catalog})
            out = figures.setdefault(key, {NOTES: []})
            out[NOTES] += notes
            silent.setdefault(key, set()).update(quiet)
            thin = scarce.setdefault(key, {})
            thin.update({mid: max(n, thin.get(mid, 0.0)) for mid, n in few.items()})
    for key, nodes in per_node.items():
        figures[key].update({mid: _across(*across[mid], vals) for mid, vals in nodes.items()})
        figures[key][NOTES] += [f"{mid}: no events during the phase" for mid in sorted(silent.get(key, ()))
                                if mid not in nodes and mid not in scarce.get(key, {})]
        figures[key][NOTES] += [f"{mid}: too few events during the phase ({n:.0f}; its quantile needs "
                                f"{mins.get(mid, 0)})" for mid, n in sorted(scarce.get(key, {}).items())
                                if mid not in nodes]
    for key, host, samples in hosts:
        workload, driver, variant, phase = key
        info = phases.get((workload, driver, variant)) or {}
        start = info.get("start")
        measured = phase in ("measure", "sweep")
        for mid, (field, unit, _) in HOST_METRICS.items():
            readings = [(s["ts"], s[field]) for s in samples if isinstance(s.get(field), (int, float))]
            for ts, value in readings:
                rows.append({"workload": workload, "broker": info.get("broker", ""), "driver": driver,
                             "variant": variant, "phase": phase, "target": f"host@{host}", "node": host,
                             "metric": mid, "unit": unit, "ts": ts,
                             "t_s": None if start is None else round(ts - start, 3), "value": float(value)})
            if measured and info.get("broker"):
                v = phase_value("gauge", "mean", readings, start, info.get("end"))
                out = figures.setdefault((workload, info["broker"], driver, variant), {NOTES: []})
                if v is not None:
                    out[mid] = v if out.get(mid) is None else max(out[mid], v)  # the busiest host
            if mid not in columns:
                columns.append(mid)
    for out in figures.values():
        out[NOTES] = "; ".join(sorted(set(out[NOTES]))) or None
    rows.sort(key=lambda r: (r["workload"], r["broker"], r["driver"], r["variant"], r["phase"], r["target"],
                             r["metric"], r["ts"]))
    return rows, figures, columns


def _within(ts: float, info: dict) -> bool:
    start, end = info.get("start"), info.get("end")
    return (start is None or ts >= start) and (end is None or ts <= end)


def panels(brokers: list[PhaseFile]) -> dict[str, dict[str, Any]]:
    """broker -> {"panels": [...], "metrics": {id: catalog entry}}: what the report draws, from the files."""
    out: dict[str, dict[str, Any]] = {}
    for f in brokers:
        for broker, ps in f.panels.items():
            entry = out.setdefault(broker, {"panels": ps, "metrics": {}})
            entry["metrics"].update({m["id"]: m for m in f.catalog if m.get("broker") == broker})
    return out
