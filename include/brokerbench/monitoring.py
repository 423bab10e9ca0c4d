"""A run's broker metrics for users who run their own Prometheus and Grafana (docs/broker-metrics.md, "Your own
Prometheus and Grafana").

From the run's raw scraper files (``<run>/brokermetrics/<workload>/<driver>/<variant>/<phase>/<host>.jsonl``,
:mod:`brokerbench.environments.brokermetrics`) and the brokers' catalogs (``include/metrics/<broker>.yaml``):

- :func:`prometheus_scrape_config`: a Prometheus configuration that scrapes the same endpoints the scraper read
  (one job per broker and role; labels ``broker``, ``role``, ``node``);
- :func:`grafana_dashboard`: a Grafana dashboard per broker (classic JSON model), one time series panel per
  catalog panel and one PromQL query per catalog metric, written for the labels of that scrape configuration;
- :func:`openmetrics`: the run's series in OpenMetrics text, the raw values as the scraper read them with their
  scrape timestamps (``promtool tsdb create-blocks-from openmetrics`` loads them into a Prometheus);
- :func:`export`: the three into ``<run>/monitoring/`` (the report step and ``brokerbench export-metrics``).

No Airflow: this module reads files and writes files.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator
from urllib.parse import urlsplit

import yaml

from brokerbench.environments.brokermetrics import CATALOG_BROKERS, CatalogMetric, Target, catalog
from brokerbench.util import write_atomic

__all__ = ["CATALOG_BROKERS", "export", "export_command", "grafana_dashboard", "openmetrics", "prometheus_scrape_config",
           "promql", "run_targets"]

#: the directory of a run that the exports go to, and their file names
MONITORING_DIR = "monitoring"
PROMETHEUS_FILE = "prometheus.yml"
OPENMETRICS_FILE = "series.openmetrics.txt"
#: the prefix of every exported family (OpenMetrics) and of every scrape job (Prometheus)
PREFIX = "brokerbench"
#: Grafana's classic dashboard JSON model: the schema version its panels (timeseries, fieldConfig) are written in
GRAFANA_SCHEMA_VERSION = 39
#: the range of the dashboards' rate() (a counter's rate per second, a timer's mean per event)
RATE_RANGE = "1m"

#: catalog unit -> Grafana unit id (packages/grafana-data/src/valueFormats/categories.ts); other units (counts of
#: messages, requests, partitions, entries, processes) are shown as a custom suffix
GRAFANA_UNITS = {"ms": "ms", "s": "s", "per_s": "cps", "percent": "percent", "mb": "decmbytes", "mb/s": "MBs",
                 "ms/s": "suffix: ms/s"}


def grafana_unit(unit: str) -> str:
    return GRAFANA_UNITS.get(unit, f"suffix: {unit}")


def dashboard_file(broker: str) -> str:
    return f"grafana-{broker}.json"


# -- the run's raw files ----------------------------------------------------------------------------------------

def raw_files(run_dir: str | Path) -> list[Path]:
    """The run's raw scraper files, in path order."""
    return sorted(Path(run_dir, "brokermetrics").glob("**/*.jsonl"))


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:  # a line cut short by a killed scraper: the lines before it stand
                continue
            if isinstance(rec, dict):
                yield rec


def file_header(path: Path) -> dict[str, Any] | None:
    """The header of a raw scraper file (its first line), or None."""
    for rec in _lines(path):
        return rec.get("header") if isinstance(rec.get("header"), dict) else None
    return None


def run_targets(run_dir: str | Path) -> list[Target]:
    """Every target the run's scrapers read (from the files' headers), each once, in the order first seen."""
    seen: dict[tuple[str, str, str, str], Target] = {}
    for path in raw_files(run_dir):
        head = file_header(path) or {}
        for d in head.get("targets") or ():
            t = Target.from_dict(d)
            seen.setdefault((t.broker, t.role, t.node, t.url), t)
    return list(seen.values())


def run_interval_s(run_dir: str | Path) -> float | None:
    """The scrapers' interval (the first header's ``interval_s``), or None."""
    for path in raw_files(run_dir):
        head = file_header(path) or {}
        if head.get("interval_s"):
            return float(head["interval_s"])
    return None


# -- Prometheus ---------------------------------------------------------------------------------------------------

def _duration(seconds: float) -> str:
    """A Prometheus duration: ``15s``, ``500ms``."""
    ms = max(1, round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def prometheus_scrape_config(targets: Iterable[Target | dict[str, Any]], interval_s: float | None = None) -> str:
    """A Prometheus configuration (YAML) scraping ``targets``: one job per broker and role
    (``brokerbench_<broker>_<role>``; a second path or scheme of the same broker and role gets a job of its own),
    one static config per target with its ``host:port`` and the labels ``broker``, ``role`` and ``node``. Scraped
    every ``interval_s`` (the run's scrape interval; default 15 s)."""
    jobs: dict[tuple[str, str, str, str], list[Target]] = {}
    for t in targets:
        t = t if isinstance(t, Target) else Target.from_dict(t)
        u = urlsplit(t.url)
        jobs.setdefault((t.broker, t.role, u.scheme or "http", u.path or "/metrics"), []).append(t)
    every = _duration(interval_s or 15.0)
    configs: list[dict[str, Any]] = []
    names: set[str] = set()
    for (broker, role, scheme, path), group in jobs.items():
        name = f"{PREFIX}_{broker}_{role}"
        k = 2
        while name in names:
            name, k = f"{PREFIX}_{broker}_{role}_{k}", k + 1
        names.add(name)
        statics: list[dict[str, Any]] = []
        for t in group:
            address = urlsplit(t.url).netloc.rsplit("@", 1)[-1]  # host:port (never credentials)
            static = {"targets": [address], "labels": {"broker": t.broker, "role": t.role, "node": t.node}}
            if static not in statics:
                statics.append(static)
        configs.append({"job_name": name, "scrape_interval": every, "scrape_timeout": every, "scheme": scheme,
                        "metrics_path": path, "static_configs": statics})
    doc = {"global": {"scrape_interval": every, "scrape_timeout": every}, "scrape_configs": configs}
    head = ("# brokerbench: the brokers' own metrics endpoints of a run (docs/broker-metrics.md, \"Your own Prometheus\n"
            "# and Grafana\"); the Grafana dashboards grafana-<broker>.json query these labels.\n")
    return head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


# -- Grafana ------------------------------------------------------------------------------------------------------

def _selector(name: str, broker: str, role: str, labels: dict[str, str]) -> str:
    matchers = [f'broker="{broker}"', f'role="{role}"', 'node=~"$node"']
    matchers += [f'{k}="{_promql_escape(v)}"' for k, v in labels.items()]
    return f"{name}{{{', '.join(matchers)}}}"


def _promql_escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"')


def _times(expr: str, scale: float) -> str:
    return expr if scale == 1 else f"({expr}) * {scale:g}"


def promql(m: CatalogMetric, broker: str) -> str:
    """The metric's per-node figure as PromQL, as brokerbench computes it per interval: a gauge as read, a counter
    as its rate per second, a timer as its sum's rate over its count's rate (Kafka's JMX timers: the cumulative
    mean attribute as read), a quantile as read, a ratio as its sum over its count; several matching series (GC
    collectors, queues) are added or the highest taken as the catalog says, per node; times the catalog's scale."""
    by = f"{m.combine} by (node)"

    def sel(name: str | None) -> str:
        return _selector(str(name), broker, m.role, m.labels)

    if m.kind == "counter":
        expr = f"{by} (rate({sel(m.series)}[{RATE_RANGE}]))"
    elif m.kind == "timer" and m.sum:
        expr = f"sum by (node) (rate({sel(m.sum)}[{RATE_RANGE}])) / sum by (node) (rate({sel(m.count)}[{RATE_RANGE}]))"
    elif m.kind == "timer":  # Kafka's JMX timer: the mean attribute (since the broker started) as read
        expr = f"max by (node) ({sel(m.mean)})"
    elif m.kind == "ratio":
        expr = f"sum by (node) ({sel(m.sum)}) / sum by (node) ({sel(m.count)})"
    else:  # gauge, quantile
        expr = f"{by} ({sel(m.series)})"
    return _times(expr, m.scale)


def _ref_id(i: int) -> str:
    return "".join(chr(65 + d) for d in ([i] if i < 26 else [i // 26 - 1, i % 26]))


def grafana_dashboard(broker: str) -> dict[str, Any]:
    """A Grafana dashboard (classic JSON model) of the broker's catalog: one ``timeseries`` panel per catalog
    panel, one PromQL target per metric (:func:`promql`), the catalog's units in each panel's field config
    (per query where a panel mixes units), a ``datasource`` variable (any Prometheus data source) and a ``node``
    variable."""
    cat = catalog(broker)
    ds = {"type": "prometheus", "uid": "${datasource}"}
    panels: list[dict[str, Any]] = []
    for n, panel in enumerate(cat.panels):
        metrics = [m for m in cat.metrics if m.panel == panel.id]
        units = [grafana_unit(m.unit) for m in metrics]
        default = max(set(units), key=units.count) if units else "short"
        targets, overrides = [], []
        for i, m in enumerate(metrics):
            ref = _ref_id(i)
            targets.append({"refId": ref, "datasource": ds, "expr": promql(m, broker), "range": True,
                            "legendFormat": f"{{{{node}}}} {m.title}"})
            if units[i] != default:
                overrides.append({"matcher": {"id": "byFrameRefID", "options": ref},
                                  "properties": [{"id": "unit", "value": units[i]}]})
        custom: dict[str, Any] = {"drawStyle": "line", "lineWidth": 1, "showPoints": "never", "spanNulls": False,
                                  "fillOpacity": 30 if panel.stacked else 0,
                                  "stacking": {"mode": "normal" if panel.stacked else "none", "group": "A"}}
        panels.append({
            "id": n + 1, "type": "timeseries", "title": panel.title, "datasource": ds,
            "description": "; ".join(f"{m.title}: {m.means}" + (f" (only with {m.only})" if m.only else "")
                                     for m in metrics),
            "gridPos": {"h": 8, "w": 12, "x": 12 * (n % 2), "y": 8 * (n // 2)},
            "fieldConfig": {"defaults": {"unit": default, "custom": custom}, "overrides": overrides},
            "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "none"}},
            "targets": targets,
        })
    up = f'up{{broker="{broker}"}}'
    return {
        "id": None, "uid": f"{PREFIX}-{broker}", "title": f"brokerbench: {cat.title}",
        "description": f"The catalog include/metrics/{broker}.yaml of brokerbench. {cat.endpoint}",
        "tags": [PREFIX, broker], "timezone": "browser", "editable": True, "graphTooltip": 1,
        "schemaVersion": GRAFANA_SCHEMA_VERSION, "version": 1, "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"}, "timepicker": {}, "links": [],
        "annotations": {"list": []},
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0, "options": [], "refresh": 1, "regex": ""},
            {"name": "node", "label": "node", "type": "query", "datasource": ds,
             "definition": f"label_values({up}, node)",
             "query": {"query": f"label_values({up}, node)", "refId": "node"},
             "includeAll": True, "multi": True, "allValue": ".*", "current": {}, "hide": 0, "options": [],
             "refresh": 2, "regex": "", "sort": 1},
        ]},
        "panels": panels,
    }


# -- OpenMetrics --------------------------------------------------------------------------------------------------

def _om_value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _om_label(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _om_help(v: str) -> str:
    return " ".join(str(v).split()).replace("\\", "\\\\").replace('"', '\\"')


def _unit_suffix(unit: str) -> str:
    return unit.replace("/", "_per_").replace("%", "percent")


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def openmetrics(run_dir: str | Path) -> str:
    """The run's broker metrics in OpenMetrics text, from its raw scraper files: each catalog metric a gauge
    family ``brokerbench_<id>`` with the labels target, node, workload, driver, variant and phase, one sample per
    scrape at its timestamp, the value as the scraper read it (in the catalog's unit; a counter's cumulative
    value, a Kafka JMX timer's sum as mean x count); a timer's or ratio's two families ``brokerbench_<id>_sum``
    and ``brokerbench_<id>_count``; and ``brokerbench_target_up`` (1 a scrape answered, 0 it did not: a gap).
    Ends with ``# EOF``."""
    # family -> (help, unit or None); family -> labels -> {ts: value}
    meta: dict[str, tuple[str, str | None]] = {}
    series: dict[str, dict[tuple[tuple[str, str], ...], dict[float, float]]] = {}
    up = f"{PREFIX}_target_up"
    meta[up] = ("1 when the scrape of the target answered, 0 when it did not (a gap in the other series)", None)

    def add(family: str, labels: tuple[tuple[str, str], ...], ts: float, value: float) -> None:
        series.setdefault(family, {}).setdefault(labels, {})[ts] = value

    for path in raw_files(run_dir):
        rel = path.relative_to(Path(run_dir, "brokermetrics")).parts[:-1]
        where = dict(zip(("workload", "driver", "variant", "phase"), [*rel[:3], "/".join(rel[3:])]))
        targets: dict[str, Target] = {}
        metrics: dict[tuple[Any, str], dict[str, Any]] = {}
        for rec in _lines(path):
            if "header" in rec:  # the file's first line; a retried phase's scraper appends one of its own
                head = rec["header"] if isinstance(rec["header"], dict) else {}
                targets.update({d.get("name") or Target.from_dict(d).name: Target.from_dict(d)
                                for d in head.get("targets") or ()})
                metrics.update({(e.get("broker"), e["id"]): e for e in head.get("catalog") or () if e.get("id")})
                for e in metrics.values():
                    text = f"{e.get('title', e['id'])}: {e.get('means', '')} (kind {e.get('kind')}"
                    if e.get("kind") in ("timer", "ratio"):
                        meta.setdefault(f"{PREFIX}_{e['id']}_sum", (f"{text}, the sum as read)", None))
                        meta.setdefault(f"{PREFIX}_{e['id']}_count", (f"{text}, the count as read)", None))
                    else:
                        read = ", the cumulative value as read: rate() it" if e.get("kind") == "counter" else \
                            ", as read"
                        # UNIT where the value is in the unit: not a counter's cumulative value (a count, not a rate)
                        unit = _unit_suffix(str(e.get("unit") or "")) if e.get("kind") != "counter" else ""
                        meta.setdefault(f"{PREFIX}_{e['id']}",
                                        (f"{text}{read})", unit if unit and e["id"].endswith("_" + unit) else None))
                continue
            ts, name = _number(rec.get("ts")), rec.get("target")
            if ts is None or not isinstance(name, str):
                continue
            t = targets.get(name)
            node = t.node if t else ""
            labels = (("target", name), ("node", node), *where.items())
            add(up, labels, ts, 0.0 if "error" in rec else 1.0)
            for mid, v in (rec.get("values") or {}).items():
                entry = metrics.get((t.broker if t else None, mid)) or next(
                    (x for (_, i), x in metrics.items() if i == mid), None)
                if entry is None:
                    continue
                if isinstance(v, list) and len(v) == 2:
                    s, c = _number(v[0]), _number(v[1])
                    if s is not None:
                        add(f"{PREFIX}_{mid}_sum", labels, ts, s)
                    if c is not None:
                        add(f"{PREFIX}_{mid}_count", labels, ts, c)
                elif (x := _number(v)) is not None:
                    add(f"{PREFIX}_{mid}", labels, ts, x)
    out: list[str] = []
    for family in sorted(series):
        help_text, family_unit = meta.get(family, ("", None))
        out.append(f"# TYPE {family} gauge")
        if family_unit:
            out.append(f"# UNIT {family} {family_unit}")
        if help_text:
            out.append(f"# HELP {family} {_om_help(help_text)}")
        for labels, points in sorted(series[family].items()):
            lab = ",".join(f'{k}="{_om_label(v)}"' for k, v in labels)
            out.extend(f"{family}{{{lab}}} {_om_value(v)} {ts!r}" for ts, v in sorted(points.items()))
    out.append("# EOF")
    return "\n".join(out) + "\n"


# -- the files ----------------------------------------------------------------------------------------------------

def export(run_dir: str | Path, out_dir: str | Path | None = None) -> dict[str, Path]:
    """Write ``prometheus.yml`` (the run's targets), ``grafana-<broker>.json`` (each broker of the run with a
    catalog) and ``series.openmetrics.txt`` into ``out_dir`` (default ``<run>/monitoring``); what was written,
    by name. Nothing when the run has no raw scraper file (no broker metrics: a stand-in implementation, or a
    run from before broker metrics)."""
    run_dir = Path(run_dir)
    if not raw_files(run_dir):
        return {}
    targets = run_targets(run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir / MONITORING_DIR
    out.mkdir(parents=True, exist_ok=True)
    written = {PROMETHEUS_FILE: write_atomic(out / PROMETHEUS_FILE,
                                              prometheus_scrape_config(targets, run_interval_s(run_dir)))}
    for broker in sorted({t.broker for t in targets}):
        try:
            board = grafana_dashboard(broker)
        except (OSError, ValueError):  # no catalog for this broker
            continue
        written[dashboard_file(broker)] = write_atomic(out / dashboard_file(broker), json.dumps(board, indent=2) + "\n")
    written[OPENMETRICS_FILE] = write_atomic(out / OPENMETRICS_FILE, openmetrics(run_dir))
    return written


def export_command(run_dir: str, out_dir: str | None = None) -> int:
    """``brokerbench export-metrics RUN_DIR [--out DIR]``: the files of :func:`export`, each named on a line;
    exit 1 when the run has no broker metrics, 2 when RUN_DIR is not a directory."""
    if not Path(run_dir).is_dir():
        print(f"brokerbench: export-metrics: {run_dir} is not a run directory", file=sys.stderr)
        return 2
    written = export(run_dir, out_dir)
    if not written:
        print(f"brokerbench: export-metrics: no broker metrics in {run_dir} (no brokermetrics/**/*.jsonl)",
              file=sys.stderr)
        return 1
    for name, path in written.items():
        print(f"brokerbench: {name}: {path}", flush=True)
    return 0


def dashboard_command(broker: str) -> int:
    """``brokerbench grafana --broker B``: the broker's dashboard JSON on stdout."""
    print(json.dumps(grafana_dashboard(broker), indent=2))
    return 0
